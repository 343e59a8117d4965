//! Sessions: one conversation's full record, as an append-only log of JSON lines.
//!
//! A session is named by a key `channel:chat_id` (`cli:direct` by default). Where its log
//! lives is a [`SessionLogStore`]: on one machine, [`FileLogs`] keeps it in
//! `ENGRAM_HOME/sessions/<encoded key>.jsonl`; an engine shared by several machines (PostgreSQL)
//! holds it so that a conversation goes on on any of them. The first line is the metadata record
//! (`{"_type":"metadata","created_at","updated_at","metadata":{...}}`); every later line is one
//! record, appended as it happens:
//!
//! - `message`: one [`Message`] (user, assistant with its tool calls, tool result, system) with
//!   its `timestamp`: `{"_type":"message","timestamp":"...","role":"user","content":"..."}`;
//! - `summary`: the running summary of the working memory and how many messages it covers
//!   (see [`crate::working`]);
//! - `extracted`: how many messages the memory manager has extracted from so far;
//! - `ended`: the session was ended (end of `engram run`, `/new`, leaving the REPL).
//!
//! **Append-only.** Nothing is ever rewritten: the first line's `updated_at` is the creation time
//! and stays so; the session's real last update is the timestamp of its last record, which
//! [`SessionLog::updated_at`] derives on reading.
//!
//! **Concurrent writers.** An append is one indivisible step of the store: [`FileLogs`] takes an
//! exclusive advisory lock on the file ([`std::fs::File::lock`]), then writes all its lines in
//! one `write` on a file opened with `O_APPEND`, so two processes appending to one session never
//! interleave bytes.
//!
//! **Crashes.** A process killed in the middle of a write can leave a torn last line. The reader
//! reports it ([`SessionWarning`]: file, line, why) and skips it; every line before it
//! survives. The next append notices the missing newline and starts on a fresh line, so the
//! torn fragment stays isolated on its own line (reported, never merged into a good record).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use engram_core::llm::Message;
use engram_core::store::sessions::{
    LogKind, PREVIOUS_SUFFIX, SessionLogError, SessionLogStore, StoredLog,
};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The session used when none is named.
pub const DEFAULT_SESSION_KEY: &str = "cli:direct";

/// The channel given to a key written without one (`work` means `cli:work`).
pub const DEFAULT_CHANNEL: &str = "cli";

/// The longest key, in bytes (so the encoded file name stays under 255 bytes everywhere).
pub const MAX_KEY_BYTES: usize = 80;

/// The file extension of session files.
const SESSION_EXTENSION: &str = "jsonl";

/// The suffix of the archive file next to a session (turns that left the working window
/// without being summarised).
const ARCHIVE_SUFFIX: &str = ".archive.jsonl";

/// Why a session could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The key is not a usable session key.
    #[error("'{key}' is not a valid session key: {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The session store failed (a file that cannot be written, a database away).
    #[error(transparent)]
    Store(#[from] SessionLogError),
    /// A record could not be turned into JSON (should not happen with engram's own types).
    #[error("cannot encode a session record as JSON: {0}")]
    Encode(#[from] serde_json::Error),
}

/// A session's name: `channel:chat_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionKey(String);

impl SessionKey {
    /// Reads a key. `channel:chat_id` is taken as is; a key without a colon gets the `cli`
    /// channel (`work` is `cli:work`). The channel is letters, digits, `-` and `_`; the chat
    /// id is any text without control characters; the whole key at most [`MAX_KEY_BYTES`].
    pub fn parse(text: &str) -> Result<Self, SessionError> {
        let text = text.trim();
        let invalid = |reason: &str| SessionError::InvalidKey {
            key: text.to_string(),
            reason: reason.to_string(),
        };
        let key = if text.contains(':') {
            text.to_string()
        } else {
            format!("{DEFAULT_CHANNEL}:{text}")
        };
        let Some((channel, chat)) = key.split_once(':') else {
            return Err(invalid("it needs the form channel:chat_id"));
        };
        if channel.is_empty() {
            return Err(invalid("the channel (before ':') is empty"));
        }
        if !channel
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                "the channel (before ':') may only hold letters, digits, '-' and '_'",
            ));
        }
        if chat.trim().is_empty() {
            return Err(invalid("the chat id (after ':') is empty"));
        }
        if chat.chars().any(char::is_control) {
            return Err(invalid("the chat id holds control characters"));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(invalid(&format!("it is longer than {MAX_KEY_BYTES} bytes")));
        }
        Ok(Self(key))
    }

    /// `cli:direct`.
    pub fn default_cli() -> Self {
        Self(DEFAULT_SESSION_KEY.to_string())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The file name of this session: every byte but ASCII letters, digits, `-` and `_`
    /// written as `%XX`, then `.jsonl` (`cli:direct` is `cli%3Adirect.jsonl`). Reversible, and
    /// safe on every file system (no separators, no dots, no reserved characters).
    pub fn file_name(&self) -> String {
        format!("{}.{SESSION_EXTENSION}", encode_key(&self.0))
    }

    /// The key a session file name stands for (the reverse of [`SessionKey::file_name`]);
    /// `None` for names engram did not write.
    pub fn from_file_name(name: &str) -> Option<Self> {
        let stem = name.strip_suffix(&format!(".{SESSION_EXTENSION}"))?;
        if stem.ends_with(".archive") || stem.contains('.') {
            return None;
        }
        let bytes = stem.as_bytes();
        let mut decoded = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = stem.get(i + 1..i + 3)?;
                decoded.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
        let text = String::from_utf8(decoded).ok()?;
        Self::parse(&text).ok().filter(|key| key.0 == text)
    }
}

impl Default for SessionKey {
    fn default() -> Self {
        Self::default_cli()
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SessionKey {
    type Error = SessionError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<SessionKey> for String {
    fn from(key: SessionKey) -> Self {
        key.0
    }
}

/// The first line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMetadata {
    /// When the session was created.
    pub created_at: Timestamp,
    /// When the first line was written (the file is append-only, so this is never updated; see
    /// [`SessionLog::updated_at`] for the last change).
    pub updated_at: Timestamp,
    /// Free-form details: `key`, `user`, ...
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

/// One message of the conversation with the time it was said.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedMessage {
    /// When it was appended.
    pub timestamp: Timestamp,
    /// The message.
    pub message: Message,
}

/// The working memory's running summary at some point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRecord {
    /// When it was written.
    pub timestamp: Timestamp,
    /// The summary of everything before message number `through`.
    pub summary: String,
    /// How many of the session's messages (counted from the first, 0-based end exclusive) the
    /// summary covers; the working window starts at this message.
    pub through: usize,
    /// Set when the model could not summarise: the turns were archived (this names the archive
    /// file) and the summary holds a plain digest of them instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<String>,
}

/// One line of a session file.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionRecord {
    /// The first line.
    Metadata(SessionMetadata),
    /// A message.
    Message(TimedMessage),
    /// The working memory's summary.
    Summary(SummaryRecord),
    /// The memory manager has extracted from the messages before number `through`.
    Extracted {
        /// When extraction finished.
        timestamp: Timestamp,
        /// Messages covered.
        through: usize,
    },
    /// The session was ended (its final extraction is due).
    Ended {
        /// When.
        timestamp: Timestamp,
    },
}

impl SessionRecord {
    /// A message record.
    pub fn message(message: Message, timestamp: Timestamp) -> Self {
        SessionRecord::Message(TimedMessage { timestamp, message })
    }

    /// The record's `_type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            SessionRecord::Metadata(_) => "metadata",
            SessionRecord::Message(_) => "message",
            SessionRecord::Summary(_) => "summary",
            SessionRecord::Extracted { .. } => "extracted",
            SessionRecord::Ended { .. } => "ended",
        }
    }

    /// When the record was written.
    pub fn timestamp(&self) -> Timestamp {
        match self {
            SessionRecord::Metadata(m) => m.updated_at,
            SessionRecord::Message(m) => m.timestamp,
            SessionRecord::Summary(s) => s.timestamp,
            SessionRecord::Extracted { timestamp, .. } | SessionRecord::Ended { timestamp } => {
                *timestamp
            }
        }
    }

    /// The record as one JSON line (without the newline), `_type` first.
    pub fn to_line(&self) -> Result<String, SessionError> {
        let mut object = Map::new();
        object.insert("_type".into(), Value::from(self.type_name()));
        let body = match self {
            SessionRecord::Metadata(m) => serde_json::to_value(m)?,
            SessionRecord::Message(m) => {
                object.insert("timestamp".into(), serde_json::to_value(m.timestamp)?);
                serde_json::to_value(&m.message)?
            }
            SessionRecord::Summary(s) => serde_json::to_value(s)?,
            SessionRecord::Extracted { timestamp, through } => {
                serde_json::json!({"timestamp": timestamp, "through": through})
            }
            SessionRecord::Ended { timestamp } => serde_json::json!({"timestamp": timestamp}),
        };
        if let Value::Object(fields) = body {
            object.extend(fields);
        }
        Ok(serde_json::to_string(&Value::Object(object))?)
    }

    /// Reads one line; the error says why it is not a record.
    pub fn from_line(line: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("not valid JSON ({e})"))?;
        let Value::Object(mut object) = value else {
            return Err("not a JSON object".to_string());
        };
        let Some(Value::String(kind)) = object.remove("_type") else {
            return Err("no \"_type\" field".to_string());
        };
        let bad = |e: serde_json::Error| format!("not a valid {kind} record ({e})");
        match kind.as_str() {
            "metadata" => serde_json::from_value(Value::Object(object))
                .map(SessionRecord::Metadata)
                .map_err(bad),
            "message" => {
                let timestamp = object
                    .remove("timestamp")
                    .ok_or_else(|| "a message record without a timestamp".to_string())
                    .and_then(|t| serde_json::from_value(t).map_err(bad))?;
                let message = serde_json::from_value(Value::Object(object)).map_err(bad)?;
                Ok(SessionRecord::Message(TimedMessage { timestamp, message }))
            }
            "summary" => serde_json::from_value(Value::Object(object))
                .map(SessionRecord::Summary)
                .map_err(bad),
            "extracted" => {
                #[derive(Deserialize)]
                struct Extracted {
                    timestamp: Timestamp,
                    through: usize,
                }
                let e: Extracted = serde_json::from_value(Value::Object(object)).map_err(bad)?;
                Ok(SessionRecord::Extracted {
                    timestamp: e.timestamp,
                    through: e.through,
                })
            }
            "ended" => {
                #[derive(Deserialize)]
                struct Ended {
                    timestamp: Timestamp,
                }
                let e: Ended = serde_json::from_value(Value::Object(object)).map_err(bad)?;
                Ok(SessionRecord::Ended {
                    timestamp: e.timestamp,
                })
            }
            other => Err(format!("unknown record type \"{other}\"")),
        }
    }
}

/// A line of a session log that was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionWarning {
    /// Where the log lives (its file, or the session in a database).
    pub location: String,
    /// The line's number, from 1.
    pub line: usize,
    /// Why it was skipped.
    pub reason: String,
}

impl fmt::Display for SessionWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "session {} line {}: {}; the line was skipped, everything else is kept",
            self.location, self.line, self.reason
        )
    }
}

/// What [`parse_records`] read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedLines {
    /// The records, each with its line number (from 1).
    pub records: Vec<(usize, SessionRecord)>,
    /// The lines skipped, each with its number and why.
    pub skipped: Vec<(usize, String)>,
}

/// The records read from a session file's text, with the lines that were skipped (line
/// number from 1, reason). A last line without its newline that does not parse is reported as
/// torn by a crash; a complete last line without a newline is kept.
pub fn parse_records(text: &str) -> ParsedLines {
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let ends_cleanly = text.is_empty() || text.ends_with('\n');
    let lines: Vec<&str> = text.split('\n').collect();
    // `split` yields an empty piece after a final newline: not a line.
    let count = if ends_cleanly {
        lines.len().saturating_sub(1)
    } else {
        lines.len()
    };
    for (index, line) in lines.iter().take(count).enumerate() {
        let number = index + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        match SessionRecord::from_line(line) {
            Ok(record) => records.push((number, record)),
            Err(reason) => {
                let torn = !ends_cleanly && number == count;
                let reason = if torn {
                    format!("the last line is incomplete, probably cut by a crash ({reason})")
                } else if line.trim_end().ends_with('}') {
                    reason
                } else {
                    format!("the line is incomplete, probably cut by a crash ({reason})")
                };
                skipped.push((number, reason));
            }
        }
    }
    ParsedLines { records, skipped }
}

/// A session log, read.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionLog {
    /// The session's key.
    pub key: SessionKey,
    /// Where it lives (its file, or the session in a database).
    pub location: String,
    /// The first line (`None` if it was lost, e.g. torn by a crash at creation).
    pub metadata: Option<SessionMetadata>,
    /// Every other record, in file order.
    pub records: Vec<SessionRecord>,
    /// Lines that were skipped.
    pub warnings: Vec<SessionWarning>,
    /// The log's size in bytes.
    pub bytes: u64,
}

impl SessionLog {
    /// The conversation's messages, oldest first.
    pub fn messages(&self) -> Vec<&TimedMessage> {
        self.records
            .iter()
            .filter_map(|r| match r {
                SessionRecord::Message(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    /// The messages without their timestamps.
    pub fn plain_messages(&self) -> Vec<Message> {
        self.messages()
            .into_iter()
            .map(|m| m.message.clone())
            .collect()
    }

    /// How many user messages the session holds.
    pub fn user_messages(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| matches!(m.message, Message::User { .. }))
            .count()
    }

    /// When the session was created.
    pub fn created_at(&self) -> Option<Timestamp> {
        self.metadata
            .as_ref()
            .map(|m| m.created_at)
            .or_else(|| self.records.first().map(SessionRecord::timestamp))
    }

    /// When the session last changed: the timestamp of its last record.
    pub fn updated_at(&self) -> Option<Timestamp> {
        self.records
            .iter()
            .map(SessionRecord::timestamp)
            .chain(self.metadata.as_ref().map(|m| m.updated_at))
            .max()
    }

    /// The latest summary record, if the working memory ever summarised.
    pub fn last_summary(&self) -> Option<&SummaryRecord> {
        self.records.iter().rev().find_map(|r| match r {
            SessionRecord::Summary(s) => Some(s),
            _ => None,
        })
    }

    /// How many messages the memory manager has extracted from (0 if none yet).
    pub fn extracted_through(&self) -> usize {
        self.records
            .iter()
            .filter_map(|r| match r {
                SessionRecord::Extracted { through, .. } => Some(*through),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The user named in the metadata, if any.
    pub fn user(&self) -> Option<&str> {
        self.metadata
            .as_ref()
            .and_then(|m| m.metadata.get("user"))
            .and_then(Value::as_str)
    }
}

/// A summary of one session for listings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    /// The key.
    pub key: SessionKey,
    /// Where it lives.
    pub location: String,
    /// When it was created.
    pub created_at: Option<Timestamp>,
    /// When it last changed.
    pub updated_at: Option<Timestamp>,
    /// Messages of every role.
    pub messages: usize,
    /// User messages.
    pub user_messages: usize,
    /// The user in the metadata.
    pub user: Option<String>,
    /// The file's size in bytes.
    pub bytes: u64,
    /// Lines skipped when reading it.
    pub skipped_lines: usize,
}

impl From<&SessionLog> for SessionInfo {
    fn from(log: &SessionLog) -> Self {
        Self {
            key: log.key.clone(),
            location: log.location.clone(),
            created_at: log.created_at(),
            updated_at: log.updated_at(),
            messages: log.messages().len(),
            user_messages: log.user_messages(),
            user: log.user().map(str::to_string),
            bytes: log.bytes,
            skipped_lines: log.warnings.len(),
        }
    }
}

/// The agent's sessions, in a [`SessionLogStore`]. Cheap to clone.
#[derive(Clone)]
pub struct SessionStore {
    logs: Arc<dyn SessionLogStore>,
}

impl fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionStore").finish_non_exhaustive()
    }
}

impl SessionStore {
    /// Sessions in `logs` (a shared engine's, or [`FileLogs`]).
    pub fn new(logs: Arc<dyn SessionLogStore>) -> Self {
        Self { logs }
    }

    /// Sessions as files in `dir` (created on the first append): the default on one machine.
    pub fn files(dir: impl Into<PathBuf>) -> Self {
        Self::new(Arc::new(FileLogs::new(dir)))
    }

    /// Where a session's log lives, as a person would name it.
    pub fn location(&self, key: &SessionKey) -> String {
        self.logs.location(key.as_str(), LogKind::Session)
    }

    /// A handle to append to (and read) a session. The log is created, with its metadata
    /// line holding `metadata` and the key, the first time anything is appended (or by
    /// [`Session::create`]).
    pub fn session(&self, key: SessionKey, metadata: Map<String, Value>) -> Session {
        Session {
            logs: self.logs.clone(),
            key,
            metadata,
        }
    }

    /// Reads a session; `None` if it does not exist.
    pub async fn load(&self, key: &SessionKey) -> Result<Option<SessionLog>, SessionError> {
        read_log(self.logs.as_ref(), key.clone()).await
    }

    /// Every session, most recently updated first. Logs whose key is not a session key (a log
    /// set aside, files of other programs) are left out.
    pub async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let mut sessions = Vec::new();
        for key in self.logs.keys().await? {
            if key.ends_with(PREVIOUS_SUFFIX) {
                continue;
            }
            let Ok(key) = SessionKey::parse(&key) else {
                continue;
            };
            if let Some(log) = read_log(self.logs.as_ref(), key).await? {
                sessions.push(SessionInfo::from(&log));
            }
        }
        sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.key.cmp(&b.key)));
        Ok(sessions)
    }

    /// Deletes a session and its archive; `false` if neither existed.
    pub async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        Ok(self.logs.delete(key.as_str()).await?)
    }

    /// Sets a session's log aside, replacing the one set aside before: the session starts
    /// afresh, and a session fed forever keeps at most two logs' worth.
    pub async fn set_aside(&self, key: &SessionKey) -> Result<(), SessionError> {
        Ok(self.logs.set_aside(key.as_str()).await?)
    }
}

async fn read_log(
    logs: &dyn SessionLogStore,
    key: SessionKey,
) -> Result<Option<SessionLog>, SessionError> {
    let Some(stored) = logs.read(key.as_str(), LogKind::Session).await? else {
        return Ok(None);
    };
    let location = logs.location(key.as_str(), LogKind::Session);
    let ParsedLines { records, skipped } = parse_records(&stored.text);
    let mut metadata = None;
    let mut rest = Vec::with_capacity(records.len());
    for (line, record) in records {
        match record {
            SessionRecord::Metadata(m) if line == 1 => metadata = Some(m),
            SessionRecord::Metadata(_) => {}
            other => rest.push(other),
        }
    }
    let warnings = skipped
        .into_iter()
        .map(|(line, reason)| SessionWarning {
            location: location.clone(),
            line,
            reason,
        })
        .collect();
    Ok(Some(SessionLog {
        key,
        location,
        metadata,
        records: rest,
        warnings,
        bytes: stored.bytes,
    }))
}

/// A handle on one session: appends records and reads them back.
#[derive(Clone)]
pub struct Session {
    logs: Arc<dyn SessionLogStore>,
    key: SessionKey,
    metadata: Map<String, Value>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// Where its log lives.
    pub fn location(&self) -> String {
        self.logs.location(self.key.as_str(), LogKind::Session)
    }

    /// Where its archive lives (turns that left the working window unsummarised).
    pub fn archive_location(&self) -> String {
        self.logs.location(self.key.as_str(), LogKind::Archive)
    }

    /// Creates the log with its metadata line if it does not exist yet.
    pub async fn create(&self, now: Timestamp) -> Result<(), SessionError> {
        self.append_lines(LogKind::Session, Vec::new(), now).await
    }

    /// Appends one message.
    pub async fn append_message(
        &self,
        message: &Message,
        now: Timestamp,
    ) -> Result<(), SessionError> {
        self.append(&[SessionRecord::message(message.clone(), now)], now)
            .await
    }

    /// Appends records, all in one step (a batch is never split by another writer).
    pub async fn append(
        &self,
        records: &[SessionRecord],
        now: Timestamp,
    ) -> Result<(), SessionError> {
        let lines = records
            .iter()
            .map(SessionRecord::to_line)
            .collect::<Result<Vec<_>, _>>()?;
        self.append_lines(LogKind::Session, lines, now).await
    }

    /// Appends messages to the session's archive (no metadata line there); returns where the
    /// archive lives.
    pub async fn archive(
        &self,
        messages: &[Message],
        now: Timestamp,
    ) -> Result<String, SessionError> {
        let lines = messages
            .iter()
            .map(|m| SessionRecord::message(m.clone(), now).to_line())
            .collect::<Result<Vec<_>, _>>()?;
        self.append_lines(LogKind::Archive, lines, now).await?;
        Ok(self.archive_location())
    }

    /// Reads the session back (an empty log if nothing was written yet).
    pub async fn load(&self) -> Result<SessionLog, SessionError> {
        Ok(read_log(self.logs.as_ref(), self.key.clone())
            .await?
            .unwrap_or_else(|| SessionLog {
                key: self.key.clone(),
                location: self.location(),
                metadata: None,
                records: Vec::new(),
                warnings: Vec::new(),
                bytes: 0,
            }))
    }

    fn metadata_line(&self, now: Timestamp) -> Result<String, SessionError> {
        let mut metadata = self.metadata.clone();
        metadata.insert("key".into(), Value::from(self.key.as_str()));
        SessionRecord::Metadata(SessionMetadata {
            created_at: now,
            updated_at: now,
            metadata,
        })
        .to_line()
    }

    async fn append_lines(
        &self,
        log: LogKind,
        lines: Vec<String>,
        now: Timestamp,
    ) -> Result<(), SessionError> {
        let first = match log {
            LogKind::Session => Some(self.metadata_line(now)?),
            LogKind::Archive => None,
        };
        Ok(self
            .logs
            .append(self.key.as_str(), log, first, lines)
            .await?)
    }
}

/// Session logs as files in one directory (`ENGRAM_HOME/sessions`): the session
/// `<encoded key>.jsonl` (see [`SessionKey::file_name`]) and its archive
/// `<encoded key>.archive.jsonl`. File work runs on the blocking pool.
#[derive(Debug, Clone)]
pub struct FileLogs {
    dir: PathBuf,
}

impl FileLogs {
    /// Logs in `dir` (created on the first append).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of a log (whether or not it exists).
    pub fn path(&self, key: &str, log: LogKind) -> PathBuf {
        let stem = encode_key(key);
        match log {
            LogKind::Session => self.dir.join(format!("{stem}.{SESSION_EXTENSION}")),
            LogKind::Archive => self.dir.join(format!("{stem}{ARCHIVE_SUFFIX}")),
        }
    }

    fn previous_path(&self, key: &str) -> PathBuf {
        self.dir
            .join(format!("{}.previous.{SESSION_EXTENSION}", encode_key(key)))
    }
}

/// A key as a file name stem: every byte but ASCII letters, digits, `-` and `_` as `%XX`.
fn encode_key(key: &str) -> String {
    let mut name = String::with_capacity(key.len() + 8);
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

fn io_error(action: &'static str, path: &Path, e: std::io::Error) -> SessionLogError {
    SessionLogError::Io {
        action,
        location: path.display().to_string(),
        detail: e.to_string(),
    }
}

/// Runs file work on the blocking pool (in place outside a runtime).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SessionLogError> + Send + 'static,
) -> Result<T, SessionLogError> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime
            .spawn_blocking(work)
            .await
            .map_err(|e| SessionLogError::Io {
                action: "finish work on",
                location: "the session files".to_string(),
                detail: e.to_string(),
            })?,
        Err(_) => work(),
    }
}

#[async_trait]
impl SessionLogStore for FileLogs {
    async fn append(
        &self,
        key: &str,
        log: LogKind,
        first: Option<String>,
        lines: Vec<String>,
    ) -> Result<(), SessionLogError> {
        let path = self.path(key, log);
        blocking(move || append_file(&path, first.as_deref(), &lines)).await
    }

    async fn read(&self, key: &str, log: LogKind) -> Result<Option<StoredLog>, SessionLogError> {
        let path = self.path(key, log);
        blocking(move || match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(StoredLog {
                bytes: bytes.len() as u64,
                // A write torn inside a multi-byte character leaves invalid UTF-8 only on the
                // torn line.
                text: String::from_utf8_lossy(&bytes).into_owned(),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("read the session file", &path, e)),
        })
        .await
    }

    async fn keys(&self) -> Result<Vec<String>, SessionLogError> {
        let dir = self.dir.clone();
        blocking(move || {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(io_error("list the sessions in", &dir, e)),
            };
            Ok(entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name();
                    SessionKey::from_file_name(name.to_str()?).map(String::from)
                })
                .collect())
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<bool, SessionLogError> {
        let paths = [
            self.path(key, LogKind::Session),
            self.path(key, LogKind::Archive),
        ];
        blocking(move || {
            let mut existed = false;
            for path in paths {
                match std::fs::remove_file(&path) {
                    Ok(()) => existed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error("delete the session file", &path, e)),
                }
            }
            Ok(existed)
        })
        .await
    }

    /// Renames the session's file to `<encoded key>.previous.jsonl` (the archive stays).
    async fn set_aside(&self, key: &str) -> Result<(), SessionLogError> {
        let (path, previous) = (self.path(key, LogKind::Session), self.previous_path(key));
        blocking(move || match std::fs::rename(&path, &previous) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("set aside the session file", &path, e)),
        })
        .await
    }

    fn location(&self, key: &str, log: LogKind) -> String {
        self.path(key, log).display().to_string()
    }
}

/// Appends `lines` to the file at `path` in one write under an exclusive lock, with `first`
/// before them when the file is new (or empty); a torn last line gets the new ones on a fresh
/// line.
fn append_file(path: &Path, first: Option<&str>, lines: &[String]) -> Result<(), SessionLogError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| io_error("create the sessions directory for", path, e))?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| io_error("open the session file", path, e))?;
    // Held until the file is closed at the end of this function.
    file.lock()
        .map_err(|e| io_error("lock the session file", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| io_error("read the size of the session file", path, e))?
        .len();
    let mut buffer = String::new();
    if len == 0 {
        if let Some(first) = first {
            buffer.push_str(first);
            buffer.push('\n');
        }
    } else if !ends_with_newline(&mut file, len)
        .map_err(|e| io_error("read the session file", path, e))?
    {
        // A torn line from a crash: start on a fresh line so it stays alone (and skipped).
        buffer.push('\n');
    }
    for line in lines {
        buffer.push_str(line);
        buffer.push('\n');
    }
    if buffer.is_empty() {
        return Ok(());
    }
    file.write_all(buffer.as_bytes())
        .map_err(|e| io_error("append to the session file", path, e))
}

fn ends_with_newline(file: &mut File, len: u64) -> std::io::Result<bool> {
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::llm::{AssistantMessage, ToolCall};
    use proptest::prelude::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn store() -> (tempfile::TempDir, SessionStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::files(dir.path().join("sessions"));
        (dir, store)
    }

    fn conversation() -> Vec<Message> {
        vec![
            Message::user("read a.txt"),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                tool_calls: vec![ToolCall::new("c1", "read_file", r#"{"path":"a.txt"}"#)],
                ..AssistantMessage::default()
            }),
            Message::tool_result("c1", "1\thello"),
            Message::assistant("It says hello."),
        ]
    }

    #[test]
    fn keys_are_checked_and_encoded_reversibly() {
        assert_eq!(SessionKey::default().as_str(), "cli:direct");
        assert_eq!(SessionKey::parse("work").unwrap().as_str(), "cli:work");
        assert_eq!(
            SessionKey::parse("telegram:12345").unwrap().as_str(),
            "telegram:12345"
        );
        assert_eq!(
            SessionKey::parse("cli:direct").unwrap().file_name(),
            "cli%3Adirect.jsonl"
        );
        for bad in ["", ":x", "cli:", "a b:c", "cli:a\nb", &"x".repeat(100)] {
            assert!(SessionKey::parse(bad).is_err(), "{bad:?} was accepted");
        }
        for good in [
            "cli:direct",
            "slack:C01/../../etc",
            "web:ünïcode id",
            "x:a.b%c",
        ] {
            let key = SessionKey::parse(good).unwrap();
            let name = key.file_name();
            assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
            assert_eq!(name.matches('.').count(), 1, "{name}");
            assert_eq!(SessionKey::from_file_name(&name), Some(key));
        }
        assert_eq!(SessionKey::from_file_name("notes.txt"), None);
        assert_eq!(SessionKey::from_file_name("cli%3Ax.archive.jsonl"), None);
    }

    #[tokio::test]
    async fn every_message_is_appended_with_the_metadata_first() {
        let (_dir, store) = store();
        let mut meta = Map::new();
        meta.insert("user".into(), "ada".into());
        let session = store.session(SessionKey::default(), meta);
        for (i, m) in conversation().iter().enumerate() {
            session.append_message(m, at(i as i64)).await.unwrap();
        }
        let text = std::fs::read_to_string(session.location()).unwrap();
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(r#"{"_type":"metadata","created_at":"#),
            "{first}"
        );
        assert!(first.contains(r#""metadata":{"user":"ada","key":"cli:direct"}"#));
        let second = text.lines().nth(1).unwrap();
        assert!(
            second.starts_with(r#"{"_type":"message","timestamp":"#)
                && second.contains(r#""role":"user","content":"read a.txt""#),
            "{second}"
        );
        let log = session.load().await.unwrap();
        assert!(log.warnings.is_empty(), "{:?}", log.warnings);
        assert_eq!(log.plain_messages(), conversation());
        assert_eq!(log.user(), Some("ada"));
        assert_eq!(log.created_at(), Some(at(0)));
        assert_eq!(log.updated_at(), Some(at(3)));
        assert_eq!(log.user_messages(), 1);
    }

    #[tokio::test]
    async fn a_torn_last_line_is_reported_and_skipped_and_the_next_append_starts_fresh() {
        let (_dir, store) = store();
        let session = store.session(SessionKey::default(), Map::new());
        for (i, m) in conversation().iter().enumerate() {
            session.append_message(m, at(i as i64)).await.unwrap();
        }
        let full = std::fs::read_to_string(session.location()).unwrap();
        let mut torn = full.clone();
        torn.push_str(r#"{"_type":"message","timestamp":"2024-01-01T00:00:00Z","role":"us"#);
        std::fs::write(session.location(), &torn).unwrap();

        let log = session.load().await.unwrap();
        assert_eq!(log.plain_messages(), conversation());
        assert_eq!(log.warnings.len(), 1);
        assert_eq!(log.warnings[0].line, 6);
        let shown = log.warnings[0].to_string();
        assert!(shown.contains("line 6") && shown.contains("cli%3Adirect.jsonl"));
        assert!(shown.contains("incomplete"), "{shown}");

        session
            .append_message(&Message::user("again"), at(9))
            .await
            .unwrap();
        let log = session.load().await.unwrap();
        let mut expected = conversation();
        expected.push(Message::user("again"));
        assert_eq!(log.plain_messages(), expected);
        assert_eq!(log.warnings.len(), 1, "{:?}", log.warnings);
        assert_eq!(log.warnings[0].line, 6);
    }

    #[tokio::test]
    async fn list_show_and_delete() {
        let (dir, store) = store();
        assert!(store.list().await.unwrap().is_empty());
        let a = store.session(SessionKey::parse("cli:a").unwrap(), Map::new());
        let b = store.session(SessionKey::parse("telegram:7").unwrap(), Map::new());
        a.append_message(&Message::user("hi"), at(1)).await.unwrap();
        b.append_message(&Message::user("yo"), at(5)).await.unwrap();
        std::fs::write(dir.path().join("sessions/stray.txt"), "x").unwrap();
        a.archive(&[Message::user("old")], at(2)).await.unwrap();
        let list = store.list().await.unwrap();
        let keys: Vec<_> = list.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["telegram:7", "cli:a"]);
        assert_eq!(list[1].messages, 1);
        assert!(store.delete(a.key()).await.unwrap());
        assert!(!std::path::Path::new(&a.archive_location()).exists());
        assert!(!store.delete(a.key()).await.unwrap());
        assert!(store.load(a.key()).await.unwrap().is_none());
        assert_eq!(store.list().await.unwrap().len(), 1);
    }

    #[test]
    fn summaries_and_marks_round_trip() {
        let records = vec![
            SessionRecord::Summary(SummaryRecord {
                timestamp: at(1),
                summary: "The user wants X.".into(),
                through: 4,
                archived: None,
            }),
            SessionRecord::Extracted {
                timestamp: at(2),
                through: 6,
            },
            SessionRecord::Ended { timestamp: at(3) },
        ];
        for record in records {
            let line = record.to_line().unwrap();
            assert_eq!(SessionRecord::from_line(&line), Ok(record));
        }
        assert!(
            SessionRecord::from_line(r#"{"_type":"mystery"}"#)
                .unwrap_err()
                .contains("unknown record type")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_appenders_never_interleave() {
        let (_dir, store) = store();
        let key = SessionKey::default();
        let tasks: Vec<_> = (0..4)
            .map(|t| {
                let session = store.session(key.clone(), Map::new());
                tokio::spawn(async move {
                    for i in 0..50 {
                        let text = format!("writer {t} message {i} {}", "x".repeat(3000));
                        session
                            .append_message(&Message::user(text), at(i))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let log = store.load(&key).await.unwrap().unwrap();
        assert!(log.warnings.is_empty(), "{:?}", log.warnings);
        assert!(log.metadata.is_some());
        assert_eq!(log.messages().len(), 200);
    }

    fn arbitrary_message() -> impl Strategy<Value = Message> {
        let text = "[a-zA-Z0-9 {}\":,\\\\\n\té€😀]{0,40}";
        prop_oneof![
            text.prop_map(Message::user),
            text.prop_map(Message::assistant),
            (text, text).prop_map(|(id, content)| Message::tool_result(id, content)),
            (text, text).prop_map(|(content, args)| Message::Assistant(AssistantMessage {
                content,
                tool_calls: vec![ToolCall::new("c", "bash", args)],
                ..AssistantMessage::default()
            })),
        ]
    }

    proptest! {
        #[test]
        fn any_truncation_loses_at_most_the_last_line(
            messages in proptest::collection::vec(arbitrary_message(), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut text = String::new();
            for (i, m) in messages.iter().enumerate() {
                text.push_str(&SessionRecord::message(m.clone(), at(i as i64)).to_line().unwrap());
                text.push('\n');
            }
            let bytes = text.as_bytes();
            let cut = cut.index(bytes.len() + 1);
            let truncated = String::from_utf8_lossy(&bytes[..cut]);
            let complete_lines = bytes[..cut].iter().filter(|b| **b == b'\n').count();
            let ParsedLines { records, skipped } = parse_records(&truncated);
            let read: Vec<Message> = records.into_iter().filter_map(|(_, r)| match r {
                SessionRecord::Message(m) => Some(m.message),
                _ => None,
            }).collect();
            // A prefix of what was written, missing at most the line being written.
            prop_assert!(read.len() >= complete_lines);
            prop_assert!(read.len() <= complete_lines + 1);
            prop_assert_eq!(&read[..], &messages[..read.len()]);
            prop_assert!(skipped.len() <= 1);
            if let Some((line, _)) = skipped.first() {
                prop_assert_eq!(*line, complete_lines + 1);
            }
        }
    }
}
