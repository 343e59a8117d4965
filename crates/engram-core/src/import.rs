//! One line of an import file (JSONL, as `engram export` writes it) read into a memory to add.
//! `engram import` and the REST API's `POST /v1/import` read lines with the same function, so
//! a file one accepts the other accepts too.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::memory::{Importance, Kind, MemoryId, NewMemory, Scope};

/// One line of an import file. Field names match what `engram export` writes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportRecord {
    id: Option<String>,
    user_id: Option<String>,
    agent_id: Option<String>,
    session_id: Option<String>,
    kind: Option<String>,
    text: String,
    category: Option<String>,
    importance: Option<i64>,
    metadata: Option<Value>,
    created_at: Option<String>,
    updated_at: Option<String>,
    valid_from: Option<String>,
    valid_to: Option<String>,
    expires_at: Option<String>,
    source: Option<String>,
    /// Written by export; recomputed on import.
    #[allow(dead_code)]
    content_hash: Option<String>,
}

fn time_field(name: &str, value: Option<String>) -> Result<Option<Timestamp>, String> {
    value
        .map(|v| {
            crate::time::parse_time(&v, Timestamp::now(), &TimeZone::UTC)
                .map_err(|e| format!("{name}: {e}"))
        })
        .transpose()
}

impl ImportRecord {
    fn into_new_memory(self, default_user: Option<&str>) -> Result<NewMemory, String> {
        let user_id = match (self.user_id, default_user) {
            (Some(user), _) => user,
            (None, Some(user)) => user.to_string(),
            (None, None) => return Err("missing field `user_id`".to_string()),
        };
        let metadata = match self.metadata {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err("metadata must be a JSON object".to_string()),
        };
        let memory = NewMemory {
            id: self
                .id
                .map(|id| id.parse::<MemoryId>().map_err(|e| e.to_string()))
                .transpose()?,
            scope: Scope {
                user_id,
                agent_id: self.agent_id,
                session_id: self.session_id,
            },
            kind: self
                .kind
                .map(|k| k.parse::<Kind>().map_err(|e| e.to_string()))
                .transpose()?
                .unwrap_or(Kind::Episode),
            text: self.text,
            category: self.category,
            importance: self
                .importance
                .map(|i| Importance::new(i).map_err(|e| e.to_string()))
                .transpose()?
                .unwrap_or_default(),
            metadata,
            created_at: time_field("created_at", self.created_at)?,
            updated_at: time_field("updated_at", self.updated_at)?,
            valid_from: time_field("valid_from", self.valid_from)?,
            valid_to: time_field("valid_to", self.valid_to)?,
            expires_at: time_field("expires_at", self.expires_at)?,
            source: self.source.unwrap_or_else(|| "import".to_string()),
        };
        memory.validate().map_err(|e| e.to_string())?;
        Ok(memory)
    }
}

/// serde_json's message without its " at line 1 column 7" (the file's line is reported instead).
fn json_error(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

/// Reads one line of an import file into a memory to add, or says in one line why it cannot
/// be used. A line without `user_id` belongs to `default_user` when one is given.
pub fn parse_import_line(bytes: &[u8], default_user: Option<&str>) -> Result<NewMemory, String> {
    read_line(bytes, default_user).map_err(|reason| on_one_line(&reason))
}

/// The reason with its control characters written as escapes (`\n`, `\u{1b}`): reasons quote
/// field names and values from the line, and are shown as `line N: <reason>` on a terminal.
fn on_one_line(reason: &str) -> String {
    let mut shown = String::with_capacity(reason.len());
    for c in reason.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

fn read_line(bytes: &[u8], default_user: Option<&str>) -> Result<NewMemory, String> {
    let line = std::str::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())?;
    let record: ImportRecord = serde_json::from_str(line).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            format!("not valid JSON ({})", json_error(&e))
        } else {
            json_error(&e)
        }
    })?;
    record.into_new_memory(default_user)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_exported_line_reads_back_with_every_field() {
        let line = br#"{"id":"0190f5c2-8f3a-7d4e-9b1a-2c3d4e5f6a7b","user_id":"alice","agent_id":"bot","session_id":"s1","kind":"fact","text":"Alice lives in Lisbon","category":"user_info","importance":4,"metadata":{"key":"home"},"created_at":"2024-05-08T13:56:00Z","updated_at":"2024-05-09T00:00:00Z","valid_from":"2024-05-08T13:56:00Z","valid_to":"2024-06-01T00:00:00Z","expires_at":null,"source":"extraction","content_hash":"ignored"}"#;
        let memory = parse_import_line(line, None).unwrap();
        assert_eq!(memory.scope.user_id, "alice");
        assert_eq!(memory.kind, Kind::Fact);
        assert_eq!(memory.importance.get(), 4);
        assert_eq!(memory.metadata["key"], "home");
        assert!(memory.valid_to.is_some() && memory.expires_at.is_none());
        assert_eq!(memory.source, "extraction");
    }

    #[test]
    fn bad_lines_say_why_in_one_line() {
        let cases: [(&[u8], &str); 6] = [
            (b"{not json", "not valid JSON"),
            (
                br#"{"user_id":"u","text":"x","colour":"red"}"#,
                "unknown field `colour`",
            ),
            (br#"{"text":"x"}"#, "missing field `user_id`"),
            (br#"{"user_id":"u","text":"x","kind":"dream"}"#, "dream"),
            (
                br#"{"user_id":"u","text":"x","created_at":"soon"}"#,
                "created_at:",
            ),
            (b"\xff\xfe", "not valid UTF-8"),
        ];
        for (line, expected) in cases {
            let error = parse_import_line(line, None).unwrap_err();
            assert!(
                error.contains(expected),
                "{error} should mention {expected}"
            );
            assert!(
                !error.contains('\n') && !error.contains(" at line "),
                "{error}"
            );
        }
    }

    /// Found by the fuzz target `import_line`: a field name holding a newline made the reason
    /// two lines (and could carry terminal escapes to the screen).
    #[test]
    fn reasons_quoting_the_line_stay_on_one_line() {
        let cases: [&[u8]; 4] = [
            b"{\"user_id\":\"u\",\"text\":\"x\",\"ag\\nt_id\":1}",
            b"{\"user_id\":\"u\",\"text\":\"x\",\"kind\":\"dr\\u001b[2Jeam\"}",
            b"{\"user_id\":\"u\",\"text\":\"x\",\"created_at\":\"so\\non\"}",
            b"{\"user_id\":\"u\",\"text\":\"x\",\"id\":\"\\r\\n\"}",
        ];
        for line in cases {
            let error = parse_import_line(line, None).unwrap_err();
            assert!(!error.chars().any(char::is_control), "{error:?}");
        }
        let error = parse_import_line(b"{\"user_id\":\"u\",\"text\":\"x\",\"ag\\nt_id\":1}", None)
            .unwrap_err();
        assert!(error.starts_with("unknown field `ag\\nt_id`"), "{error}");
    }

    #[test]
    fn a_line_without_a_user_takes_the_default_one() {
        let memory = parse_import_line(br#"{"text":"x"}"#, Some("bob")).unwrap();
        assert_eq!(memory.scope.user_id, "bob");
        let memory = parse_import_line(br#"{"user_id":"eve","text":"x"}"#, Some("bob")).unwrap();
        assert_eq!(memory.scope.user_id, "eve");
    }
}
