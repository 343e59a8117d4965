//! The agent's session logs, as an engine stores them, for when the engine is shared.
//!
//! A session is an append-only log of records, one JSON text per record, named by its key
//! (`channel:chat_id`). engram-memory writes and reads the records (their format, the
//! metadata record first, torn lines); a store only keeps lines in order, appends a batch as
//! one indivisible step (two writers never interleave within a batch), and lists and deletes
//! logs. On a single machine the logs are files under `ENGRAM_HOME/sessions` (engram-memory's
//! file store implements this trait); an engine shared by several machines holds them so that
//! a conversation can continue on any of them.
//!
//! Each session may have an archive next to it: turns that left the working window without
//! being summarised, appended the same way.

use async_trait::async_trait;

use super::StoreError;

/// Why a session log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SessionLogError {
    /// Reading or writing failed.
    #[error("cannot {action} {location}: {detail}")]
    Io {
        /// What was being done ("append to the session file").
        action: &'static str,
        /// The log (a file, or a session in a database).
        location: String,
        /// What the system said.
        detail: String,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which of a session's two logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogKind {
    /// The session itself.
    Session,
    /// Its archive (turns that left the working window unsummarised).
    Archive,
}

/// A session log as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLog {
    /// The log's text: records, one per line, each line ended by a newline (a last line
    /// without one was torn by a crash).
    pub text: String,
    /// Its size in bytes as stored.
    pub bytes: u64,
}

/// What [`SessionLogStore::set_aside`] appends to a key to name the log it set aside.
pub const PREVIOUS_SUFFIX: &str = "~previous";

/// Where session logs live.
#[async_trait]
pub trait SessionLogStore: Send + Sync {
    /// Appends `lines` (records without their newline) to a log in one indivisible step. When
    /// the log does not exist yet, it is created and `first` (if any) becomes its first line,
    /// in the same step; when it exists, `first` is ignored. A log whose last line was torn
    /// gets the new lines on a fresh line.
    async fn append(
        &self,
        key: &str,
        log: LogKind,
        first: Option<String>,
        lines: Vec<String>,
    ) -> Result<(), SessionLogError>;

    /// A log's text; `None` when it does not exist.
    async fn read(&self, key: &str, log: LogKind) -> Result<Option<StoredLog>, SessionLogError>;

    /// The keys of every session (not of archives), in no particular order. A store may list
    /// logs set aside too, under keys ending in [`PREVIOUS_SUFFIX`] (see
    /// [`SessionLogStore::set_aside`]); callers that want live sessions skip those.
    async fn keys(&self) -> Result<Vec<String>, SessionLogError>;

    /// Deletes a session and its archive; `false` when neither existed.
    async fn delete(&self, key: &str) -> Result<bool, SessionLogError>;

    /// Sets a session's log aside so that the session starts afresh (the gateway does this to
    /// a session fed forever), replacing the log set aside before. The default moves the log to
    /// the key `<key>~previous` ([`PREVIOUS_SUFFIX`]; the session's archive goes); a store with
    /// a cheaper way (a file rename) does that instead.
    async fn set_aside(&self, key: &str) -> Result<(), SessionLogError> {
        let previous = format!("{key}{PREVIOUS_SUFFIX}");
        self.delete(&previous).await?;
        if let Some(log) = self.read(key, LogKind::Session).await? {
            let lines = log.text.lines().map(str::to_string).collect();
            self.append(&previous, LogKind::Session, None, lines)
                .await?;
        }
        self.delete(key).await?;
        Ok(())
    }

    /// Where a log lives, as a person would name it (a file path, `postgres: session <key>`),
    /// for messages about its lines.
    fn location(&self, key: &str, log: LogKind) -> String;
}
