//! Reading memories out of rows, writing filters into SQL, and the few value types the driver
//! does not bring.

use std::error::Error as StdError;

use bytes::BytesMut;
use engram_core::{Filter, Importance, Kind, Memory, MemoryId, Scope, StoreError};
use jiff::Timestamp;
use tokio_postgres::Row;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// The columns of `memories` (aliased `m`) in the order [`memory_from_row`] reads them, after
/// the row's `doc`.
pub(crate) const MEMORY_COLUMNS: &str = "m.doc, m.id, m.user_id, m.agent_id, m.session_id, \
     m.kind, m.text, m.category, m.importance, m.metadata::text, m.created_at, m.updated_at, \
     m.valid_from, m.valid_to, m.expires_at, m.source, m.content_hash";

/// Microseconds since the epoch, the unit every time column uses.
pub(crate) fn micros(ts: Timestamp) -> i64 {
    ts.as_microsecond()
}

fn timestamp(value: i64) -> Result<Timestamp, StoreError> {
    Timestamp::from_microsecond(value)
        .map_err(|e| StoreError::Backend(format!("a stored time {value} is out of range: {e}")))
}

/// A memory and its `doc`, from a row selected with [`MEMORY_COLUMNS`].
pub(crate) fn memory_from_row(row: &Row) -> Result<(i64, Memory), StoreError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Backend(format!("a stored memory has an unreadable {what}: {e}"))
    };
    let get = |e: tokio_postgres::Error| StoreError::Backend(format!("unexpected row shape: {e}"));
    let id: uuid::Uuid = row.try_get(1).map_err(get)?;
    let kind: &str = row.try_get(5).map_err(get)?;
    let kind: Kind = kind.parse().map_err(|e| bad("kind", &e))?;
    let importance: i16 = row.try_get(8).map_err(get)?;
    let importance = Importance::new(i64::from(importance)).map_err(|e| bad("importance", &e))?;
    let metadata: &str = row.try_get(9).map_err(get)?;
    let metadata =
        serde_json::from_str(metadata).map_err(|e| bad("metadata (not a JSON object)", &e))?;
    let optional = |column: usize| -> Result<Option<Timestamp>, StoreError> {
        row.try_get::<_, Option<i64>>(column)
            .map_err(get)?
            .map(timestamp)
            .transpose()
    };
    let memory = Memory {
        id: MemoryId::from(id),
        scope: Scope {
            user_id: row.try_get(2).map_err(get)?,
            agent_id: row.try_get(3).map_err(get)?,
            session_id: row.try_get(4).map_err(get)?,
        },
        kind,
        text: row.try_get(6).map_err(get)?,
        category: row.try_get(7).map_err(get)?,
        importance,
        metadata,
        created_at: timestamp(row.try_get(10).map_err(get)?)?,
        updated_at: timestamp(row.try_get(11).map_err(get)?)?,
        valid_from: timestamp(row.try_get(12).map_err(get)?)?,
        valid_to: optional(13)?,
        expires_at: optional(14)?,
        source: row.try_get(15).map_err(get)?,
        content_hash: row.try_get(16).map_err(get)?,
    };
    Ok((row.try_get(0).map_err(get)?, memory))
}

/// A boxed query parameter.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// Query parameters collected while SQL is written: [`Params::push`] returns the placeholder.
#[derive(Default)]
pub(crate) struct Params(Vec<Param>);

impl Params {
    /// Adds a value and returns its placeholder (`$n`).
    pub fn push(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.0.push(Box::new(value));
        format!("${}", self.0.len())
    }

    /// Replaces the value behind a placeholder that [`Params::push`] returned.
    pub fn replace(&mut self, placeholder: &str, value: impl ToSql + Sync + Send + 'static) {
        let index = placeholder
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1));
        if let Some(slot) = index.and_then(|i| self.0.get_mut(i)) {
            *slot = Box::new(value);
        }
    }

    /// The values, for `query`.
    pub fn as_refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// The WHERE conditions (joined by AND, on alias `m`) for a filter, with their parameters added
/// to `params`.
pub(crate) fn filter_sql(
    filter: &Filter,
    now: Timestamp,
    params: &mut Params,
) -> Result<String, StoreError> {
    if filter.user_id.trim().is_empty() {
        return Err(StoreError::BadQuery(
            "a user is required: every search and listing is confined to one user".to_string(),
        ));
    }
    let mut conditions = vec![format!(
        "m.user_id = {}",
        params.push(filter.user_id.clone())
    )];
    if let Some(agent) = &filter.agent_id {
        conditions.push(format!("m.agent_id = {}", params.push(agent.clone())));
    }
    if let Some(session) = &filter.session_id {
        conditions.push(format!("m.session_id = {}", params.push(session.clone())));
    }
    if !filter.kinds.is_empty() {
        let kinds: Vec<String> = filter
            .kinds
            .iter()
            .map(|k| k.as_str().to_string())
            .collect();
        conditions.push(format!("m.kind = ANY({})", params.push(kinds)));
    }
    if !filter.categories.is_empty() {
        conditions.push(format!(
            "m.category = ANY({})",
            params.push(filter.categories.clone())
        ));
    }
    if let Some(since) = filter.since {
        conditions.push(format!("m.created_at >= {}", params.push(micros(since))));
    }
    if let Some(until) = filter.until {
        conditions.push(format!("m.created_at < {}", params.push(micros(until))));
    }
    if let Some(min) = filter.min_importance {
        conditions.push(format!(
            "m.importance >= {}",
            params.push(i16::from(min.get()))
        ));
    }
    for condition in &filter.metadata {
        // The same rule as the SQLite engine, so a filter means the same in both.
        if condition.key.contains('"') || condition.key.contains('\\') {
            return Err(StoreError::BadQuery(format!(
                "metadata key '{}' may not contain quotes or backslashes",
                condition.key
            )));
        }
        let key = params.push(condition.key.clone());
        let has_nul = condition.value.contains('\0');
        // Strings compare as text, everything else by its JSON spelling (3, true, null).
        let fast = if has_nul {
            // Metadata without the escape \u0000 holds no NUL (and text cannot carry one to
            // the server).
            "FALSE".to_string()
        } else {
            let value = params.push(condition.value.clone());
            format!(
                "(CASE json_typeof(m.metadata -> {key}::text) WHEN 'string' \
                 THEN m.metadata ->> {key}::text ELSE (m.metadata -> {key}::text)::text END) = {value}"
            )
        };
        // Metadata holding the escape \u0000 (a NUL, which PostgreSQL text cannot hold, so
        // ->> fails on it): the escape is swapped for \u007f (which serde_json never writes,
        // it writes DEL as itself) in the stored text and in the value's JSON spelling, and
        // strings are compared in that spelling (a `json` column keeps the text it was given,
        // as serde_json wrote it).
        let escape = params.push("\\u0000".to_string());
        let swapped = params.push("\\u007f".to_string());
        let spelled = params.push(
            serde_json::Value::String(condition.value.clone())
                .to_string()
                .replace("\\u0000", "\\u007f"),
        );
        let doc = format!("replace(m.metadata::text, {escape}, {swapped})::json");
        let other = if has_nul {
            "FALSE".to_string()
        } else {
            let value = params.push(condition.value.clone());
            format!("({doc} -> {key}::text)::text = {value}")
        };
        conditions.push(format!(
            "(CASE WHEN strpos(m.metadata::text, {escape}) = 0 THEN {fast} \
             ELSE (CASE json_typeof({doc} -> {key}::text) WHEN 'string' \
             THEN ({doc} -> {key}::text)::text = {spelled} ELSE {other} END) END)"
        ));
    }
    if !filter.include_closed {
        let now = params.push(micros(now));
        conditions.push(format!(
            "(m.valid_to IS NULL OR m.valid_to > {now}) \
             AND (m.expires_at IS NULL OR m.expires_at > {now})"
        ));
    }
    Ok(conditions.join(" AND "))
}

/// A JSON document already serialised, sent as PostgreSQL `json` (kept as given).
#[derive(Debug)]
pub(crate) struct RawJson<'a>(pub &'a str);

impl ToSql for RawJson<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }

    to_sql_checked!();
}

/// Refuses text PostgreSQL cannot store: it has no room for the NUL character.
pub(crate) fn check_storable(field: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::BadQuery(format!(
            "{field} contains a NUL character, which PostgreSQL cannot store"
        )));
    }
    Ok(())
}

/// Clamps a count or offset to what `bigint` holds.
pub(crate) fn clamp_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
