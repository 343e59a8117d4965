//! engram's memories and history as Mem0's clients read them.
//!
//! A memory becomes `{"id", "memory", "hash", "metadata", "categories", "created_at",
//! "updated_at", "expiration_date", "user_id", "agent_id", "app_id", "run_id"}` (the platform
//! also calls the run `session_id`; search hits add `score`). engram's session is Mem0's run;
//! Mem0's app has no engram counterpart and is kept in the memory's metadata as `app_id`.
//! Mem0's `expiration_date` is a day: the memory is visible through it, so it expires at the
//! next midnight (UTC).

use engram_core::{HistoryEvent, HistoryKind, Memory};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

/// The metadata key that holds Mem0's `app_id`.
pub const APP_ID: &str = "app_id";

/// Which of Mem0's two APIs an answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// The open-source REST server (`/memories`, `/search`).
    OpenSource,
    /// The hosted platform (`/v1/...`, `/v3/...`), as `MemoryClient` reads it.
    Platform,
}

/// Reads a date (`2024-05-08`, midnight UTC) or an RFC 3339 time.
pub fn parse_date_or_time(text: &str) -> Result<Timestamp, String> {
    let text = text.trim();
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    text.parse::<Date>()
        .ok()
        .and_then(|d| d.to_zoned(TimeZone::UTC).ok())
        .map(|z| z.timestamp())
        .ok_or_else(|| format!("'{text}' is not a date (YYYY-MM-DD) or an RFC 3339 time"))
}

/// When a memory with this `expiration_date` stops being visible: the midnight after the day
/// (an RFC 3339 time is taken as the moment itself).
pub fn expiry_from(expiration_date: &str) -> Result<Timestamp, String> {
    let text = expiration_date.trim();
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    let day = text
        .parse::<Date>()
        .map_err(|_| format!("expiration_date: '{text}' is not a date (YYYY-MM-DD)"))?;
    day.tomorrow()
        .ok()
        .and_then(|d| d.to_zoned(TimeZone::UTC).ok())
        .map(|z| z.timestamp())
        .ok_or_else(|| format!("expiration_date: '{text}' is out of range"))
}

/// The last day a memory expiring at `expires_at` is visible, as `YYYY-MM-DD`.
pub fn expiration_date(expires_at: Timestamp) -> String {
    let last = expires_at
        .checked_sub(SignedDuration::from_micros(1))
        .unwrap_or(expires_at);
    last.to_zoned(TimeZone::UTC).date().to_string()
}

/// The memory's own metadata, without the keys engram keeps Mem0 fields in.
fn user_metadata(memory: &Memory) -> Map<String, Value> {
    let mut metadata = memory.metadata.clone();
    metadata.remove(APP_ID);
    metadata
}

/// One memory as Mem0 shapes it, with `score` for search hits.
pub fn memory_item(memory: &Memory, flavor: Flavor, score: Option<f64>) -> Value {
    let metadata = user_metadata(memory);
    let metadata = if metadata.is_empty() {
        Value::Null
    } else {
        Value::Object(metadata)
    };
    let mut item = json!({
        "id": memory.id,
        "memory": memory.text,
        "hash": memory.content_hash,
        "metadata": metadata,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "user_id": memory.scope.user_id,
    });
    let Some(object) = item.as_object_mut() else {
        return item;
    };
    let app = memory.metadata.get(APP_ID).cloned();
    let expiration = memory.expires_at.map(expiration_date);
    match flavor {
        Flavor::OpenSource => {
            // The open-source server lifts only the scope ids a memory has.
            if let Some(agent) = &memory.scope.agent_id {
                object.insert("agent_id".into(), json!(agent));
            }
            if let Some(run) = &memory.scope.session_id {
                object.insert("run_id".into(), json!(run));
            }
            if let Some(app) = app {
                object.insert("app_id".into(), app);
            }
            if let Some(date) = expiration {
                object.insert("expiration_date".into(), json!(date));
            }
            if let Some(category) = &memory.category {
                object.insert("categories".into(), json!([category]));
            }
        }
        Flavor::Platform => {
            object.insert("agent_id".into(), json!(memory.scope.agent_id));
            object.insert("app_id".into(), app.unwrap_or(Value::Null));
            object.insert("run_id".into(), json!(memory.scope.session_id));
            object.insert("session_id".into(), json!(memory.scope.session_id));
            object.insert(
                "categories".into(),
                json!(memory.category.iter().collect::<Vec<_>>()),
            );
            object.insert("expiration_date".into(), json!(expiration));
        }
    }
    if let Some(score) = score {
        object.insert("score".into(), json!(score));
    }
    item
}

/// Mem0's word for a history event.
fn event_name(kind: HistoryKind) -> &'static str {
    match kind {
        HistoryKind::Add => "ADD",
        HistoryKind::Update => "UPDATE",
        // Closing a memory is Mem0's soft delete: it is kept, and hidden.
        HistoryKind::Invalidate | HistoryKind::Delete => "DELETE",
    }
}

/// A history row's id: derived from the memory's id and the row's place, so it is stable.
fn row_id(event: &HistoryEvent, index: usize) -> String {
    let base = event.memory_id.as_uuid().as_u128();
    uuid::Uuid::from_u128(base ^ ((index as u128 + 1) << 64 | 0x5eed)).to_string()
}

/// One history event as a Mem0 history row; `memory` is the memory while it still exists.
pub fn history_row(
    event: &HistoryEvent,
    index: usize,
    memory: Option<&Memory>,
    flavor: Flavor,
) -> Value {
    let mut row = json!({
        "id": row_id(event, index),
        "memory_id": event.memory_id,
        "old_memory": event.old_text,
        "new_memory": event.new_text,
        "event": event_name(event.event),
        "created_at": event.at,
        "updated_at": event.at,
        "is_deleted": event.event == HistoryKind::Delete,
        "actor_id": event.actor,
    });
    let Some(object) = row.as_object_mut() else {
        return row;
    };
    match flavor {
        Flavor::OpenSource => {
            object.insert(
                "role".into(),
                memory
                    .and_then(|m| m.metadata.get("role").cloned())
                    .unwrap_or(Value::Null),
            );
        }
        Flavor::Platform => {
            object.insert("input".into(), json!([]));
            object.insert("user_id".into(), json!(memory.map(|m| &m.scope.user_id)));
            object.insert(
                "agent_id".into(),
                json!(memory.and_then(|m| m.scope.agent_id.as_ref())),
            );
            object.insert(
                "app_id".into(),
                memory
                    .and_then(|m| m.metadata.get(APP_ID).cloned())
                    .unwrap_or(Value::Null),
            );
            object.insert(
                "session_id".into(),
                json!(memory.and_then(|m| m.scope.session_id.as_ref())),
            );
            object.insert(
                "categories".into(),
                json!(
                    memory
                        .and_then(|m| m.category.as_ref())
                        .into_iter()
                        .collect::<Vec<_>>()
                ),
            );
            let metadata = memory.map(user_metadata).filter(|m| !m.is_empty());
            object.insert("metadata".into(), json!(metadata));
        }
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiration_dates_round_trip_through_expiry_times() {
        let at = expiry_from("2026-03-01").unwrap();
        assert_eq!(at.to_string(), "2026-03-02T00:00:00Z");
        assert_eq!(expiration_date(at), "2026-03-01");
        assert!(expiry_from("tomorrow").is_err());
        assert!(expiry_from("2026-02-30").is_err());
        assert_eq!(
            expiry_from("2026-03-01T12:00:00Z").unwrap().to_string(),
            "2026-03-01T12:00:00Z"
        );
        assert_eq!(
            parse_date_or_time("2024-05-08").unwrap().to_string(),
            "2024-05-08T00:00:00Z"
        );
    }
}
