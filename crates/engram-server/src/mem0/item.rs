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
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
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

/// A memory's own metadata as JSON (`null` when it has none), written without copying it.
struct UserMetadata<'a>(&'a Map<String, Value>);

impl UserMetadata<'_> {
    fn is_empty(&self) -> bool {
        self.0.keys().all(|k| k == APP_ID)
    }
}

impl Serialize for UserMetadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_empty() {
            return serializer.serialize_none();
        }
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.0.iter().filter(|(k, _)| *k != APP_ID) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// One memory as Mem0 shapes it (with `score` for search hits), serialized straight from the
/// memory: search answers are the hot path, and a detour through `serde_json::Value` would cost
/// as much as the writing.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// The memory.
    pub memory: &'a Memory,
    /// Which API's shape.
    pub flavor: Flavor,
    /// The search score, for hits.
    pub score: Option<f64>,
}

impl Serialize for Item<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let m = self.memory;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &m.id)?;
        map.serialize_entry("memory", &m.text)?;
        map.serialize_entry("hash", &m.content_hash)?;
        map.serialize_entry("metadata", &UserMetadata(&m.metadata))?;
        map.serialize_entry("created_at", &m.created_at)?;
        map.serialize_entry("updated_at", &m.updated_at)?;
        map.serialize_entry("user_id", &m.scope.user_id)?;
        let app = m.metadata.get(APP_ID);
        let expiration = m.expires_at.map(expiration_date);
        let categories: &[String] = m.category.as_slice();
        match self.flavor {
            Flavor::OpenSource => {
                // The open-source server lifts only the scope ids a memory has.
                if let Some(agent) = &m.scope.agent_id {
                    map.serialize_entry("agent_id", agent)?;
                }
                if let Some(run) = &m.scope.session_id {
                    map.serialize_entry("run_id", run)?;
                }
                if let Some(app) = app {
                    map.serialize_entry("app_id", app)?;
                }
                if let Some(date) = &expiration {
                    map.serialize_entry("expiration_date", date)?;
                }
                if !categories.is_empty() {
                    map.serialize_entry("categories", categories)?;
                }
            }
            Flavor::Platform => {
                map.serialize_entry("agent_id", &m.scope.agent_id)?;
                map.serialize_entry("app_id", &app)?;
                map.serialize_entry("run_id", &m.scope.session_id)?;
                map.serialize_entry("session_id", &m.scope.session_id)?;
                map.serialize_entry("categories", categories)?;
                map.serialize_entry("expiration_date", &expiration)?;
            }
        }
        if let Some(score) = self.score {
            map.serialize_entry("score", &score)?;
        }
        map.end()
    }
}

/// One memory as Mem0 shapes it, as a JSON value (for answers that are edited further).
pub fn memory_item(memory: &Memory, flavor: Flavor, score: Option<f64>) -> Value {
    serde_json::to_value(Item {
        memory,
        flavor,
        score,
    })
    .unwrap_or(Value::Null)
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
    use engram_core::{Importance, Kind, MemoryId, Scope};

    fn memory() -> Memory {
        let at: Timestamp = "2024-05-08T13:56:00Z".parse().unwrap();
        let mut metadata = Map::new();
        metadata.insert("source".into(), json!("chat"));
        metadata.insert(APP_ID.into(), json!("garden"));
        Memory {
            id: "01900000-0000-7000-8000-000000000001"
                .parse::<MemoryId>()
                .unwrap(),
            scope: Scope::user("alice").with_session("run-1"),
            kind: Kind::Episode,
            text: "Alice grows tomatoes".into(),
            category: Some("hobbies".into()),
            importance: Importance::default(),
            metadata,
            created_at: at,
            updated_at: at,
            valid_from: at,
            valid_to: None,
            expires_at: Some("2024-06-01T00:00:00Z".parse().unwrap()),
            source: "api".into(),
            content_hash: "h1".into(),
        }
    }

    /// The shapes Mem0's clients read: a change here is a change to the wire format.
    #[test]
    fn wire_formats() {
        let m = memory();
        insta::assert_json_snapshot!(
            "platform_item",
            memory_item(&m, Flavor::Platform, Some(0.5))
        );
        insta::assert_json_snapshot!(
            "open_source_item",
            memory_item(&m, Flavor::OpenSource, None)
        );
        let event = HistoryEvent {
            memory_id: m.id,
            event: HistoryKind::Update,
            old_text: Some("Alice grows basil".into()),
            new_text: Some(m.text.clone()),
            actor: "api:t1".into(),
            at: m.updated_at,
        };
        insta::assert_json_snapshot!(
            "platform_history_row",
            history_row(&event, 1, Some(&m), Flavor::Platform)
        );
        insta::assert_json_snapshot!(
            "open_source_history_row",
            history_row(&event, 1, Some(&m), Flavor::OpenSource)
        );
    }

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
