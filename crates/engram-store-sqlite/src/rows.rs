//! Reading memories out of rows and writing filters into SQL.

use engram_core::{Filter, Kind, Memory, MemoryId, StoreError};
use jiff::Timestamp;
use rusqlite::Row;
use rusqlite::types::Value;

/// The columns of `memories` (aliased `m`) in the order [`memory_from_row`] reads them.
pub(crate) const MEMORY_COLUMNS: &str = "m.id, m.user_id, m.agent_id, m.session_id, m.kind, m.text, \
     m.category, m.importance, m.metadata, m.created_at, m.updated_at, m.valid_from, m.valid_to, \
     m.expires_at, m.source, m.content_hash";

/// Number of columns in [`MEMORY_COLUMNS`]; extra selected columns start at this index.
pub(crate) const MEMORY_COLUMN_COUNT: usize = 16;

/// Microseconds since the epoch, the unit every time column uses.
pub(crate) fn micros(ts: Timestamp) -> i64 {
    ts.as_microsecond()
}

fn conversion_error(column: usize, message: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        column,
        rusqlite::types::Type::Text,
        Box::new(StoreError::Backend(message)),
    )
}

fn timestamp(row: &Row<'_>, column: usize) -> rusqlite::Result<Timestamp> {
    let value: i64 = row.get(column)?;
    Timestamp::from_microsecond(value)
        .map_err(|e| conversion_error(column, format!("bad time {value}: {e}")))
}

fn optional_timestamp(row: &Row<'_>, column: usize) -> rusqlite::Result<Option<Timestamp>> {
    match row.get::<_, Option<i64>>(column)? {
        None => Ok(None),
        Some(_) => timestamp(row, column).map(Some),
    }
}

/// Reads a memory from a row selected with [`MEMORY_COLUMNS`].
pub(crate) fn memory_from_row(row: &Row<'_>) -> rusqlite::Result<Memory> {
    let id: String = row.get(0)?;
    let id: MemoryId = id
        .parse()
        .map_err(|e: engram_core::memory::ParseIdError| conversion_error(0, e.to_string()))?;
    let kind: String = row.get(4)?;
    let kind: Kind = kind
        .parse()
        .map_err(|e: engram_core::memory::ParseKindError| conversion_error(4, e.to_string()))?;
    let importance: i64 = row.get(7)?;
    let importance =
        engram_core::Importance::new(importance).map_err(|e| conversion_error(7, e.to_string()))?;
    let metadata: String = row.get(8)?;
    let metadata = serde_json::from_str(&metadata)
        .map_err(|e| conversion_error(8, format!("metadata is not a JSON object: {e}")))?;
    Ok(Memory {
        id,
        scope: engram_core::Scope {
            user_id: row.get(1)?,
            agent_id: row.get(2)?,
            session_id: row.get(3)?,
        },
        kind,
        text: row.get(5)?,
        category: row.get(6)?,
        importance,
        metadata,
        created_at: timestamp(row, 9)?,
        updated_at: timestamp(row, 10)?,
        valid_from: timestamp(row, 11)?,
        valid_to: optional_timestamp(row, 12)?,
        expires_at: optional_timestamp(row, 13)?,
        source: row.get(14)?,
        content_hash: row.get(15)?,
    })
}

/// The WHERE conditions (joined by AND, on alias `m`) and their parameters for a filter.
pub(crate) fn filter_sql(
    filter: &Filter,
    now: Timestamp,
) -> Result<(String, Vec<Value>), StoreError> {
    if filter.user_id.trim().is_empty() {
        return Err(StoreError::BadQuery(
            "a user is required: every search and listing is confined to one user".to_string(),
        ));
    }
    let mut conditions = vec!["m.user_id = ?".to_string()];
    let mut params = vec![Value::Text(filter.user_id.clone())];
    if let Some(agent) = &filter.agent_id {
        conditions.push("m.agent_id = ?".to_string());
        params.push(Value::Text(agent.clone()));
    }
    if let Some(session) = &filter.session_id {
        conditions.push("m.session_id = ?".to_string());
        params.push(Value::Text(session.clone()));
    }
    if !filter.kinds.is_empty() {
        conditions.push(format!("m.kind IN ({})", placeholders(filter.kinds.len())));
        params.extend(
            filter
                .kinds
                .iter()
                .map(|k| Value::Text(k.as_str().to_string())),
        );
    }
    if !filter.categories.is_empty() {
        conditions.push(format!(
            "m.category IN ({})",
            placeholders(filter.categories.len())
        ));
        params.extend(filter.categories.iter().map(|c| Value::Text(c.clone())));
    }
    if let Some(since) = filter.since {
        conditions.push("m.created_at >= ?".to_string());
        params.push(Value::Integer(micros(since)));
    }
    if let Some(until) = filter.until {
        conditions.push("m.created_at < ?".to_string());
        params.push(Value::Integer(micros(until)));
    }
    if let Some(min) = filter.min_importance {
        conditions.push("m.importance >= ?".to_string());
        params.push(Value::Integer(i64::from(min.get())));
    }
    for condition in &filter.metadata {
        if condition.key.contains('"') || condition.key.contains('\\') {
            return Err(StoreError::BadQuery(format!(
                "metadata key '{}' may not contain quotes or backslashes",
                condition.key
            )));
        }
        let path = format!("$.\"{}\"", condition.key);
        // Strings compare as text, everything else by its JSON spelling (3, true, null).
        conditions.push(
            "(CASE json_type(m.metadata, ?) WHEN 'text' THEN m.metadata ->> ? \
             ELSE m.metadata -> ? END) = ?"
                .to_string(),
        );
        params.extend([
            Value::Text(path.clone()),
            Value::Text(path.clone()),
            Value::Text(path),
            Value::Text(condition.value.clone()),
        ]);
    }
    if !filter.include_closed {
        conditions.push(
            "(m.valid_to IS NULL OR m.valid_to > ?) AND (m.expires_at IS NULL OR m.expires_at > ?)"
                .to_string(),
        );
        params.push(Value::Integer(micros(now)));
        params.push(Value::Integer(micros(now)));
    }
    Ok((conditions.join(" AND "), params))
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}
