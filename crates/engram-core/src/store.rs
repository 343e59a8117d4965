//! The storage contract: what any memory backend must do, and the errors it may report.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::filter::Filter;
use crate::memory::{Importance, InvalidMemory, Kind, Memory, MemoryId, NewMemory};

/// What happened to a memory offered to the store.
// Short-lived values; boxing would only make matching clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AddOutcome {
    /// Stored as a new memory.
    Added(Memory),
    /// The same text is already current in that scope; nothing was written.
    Duplicate(MemoryId),
}

/// The kinds of change the audit trail records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryKind {
    /// The memory was stored.
    Add,
    /// Its text or attributes changed.
    Update,
    /// It was closed (superseded or no longer true); it is kept.
    Invalidate,
    /// It was removed.
    Delete,
}

impl HistoryKind {
    /// The lowercase name used in JSON and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryKind::Add => "add",
            HistoryKind::Update => "update",
            HistoryKind::Invalidate => "invalidate",
            HistoryKind::Delete => "delete",
        }
    }
}

impl std::str::FromStr for HistoryKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "add" => Ok(HistoryKind::Add),
            "update" => Ok(HistoryKind::Update),
            "invalidate" => Ok(HistoryKind::Invalidate),
            "delete" => Ok(HistoryKind::Delete),
            other => Err(format!("unknown history event '{other}'")),
        }
    }
}

/// One row of a memory's audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    /// The memory changed.
    pub memory_id: MemoryId,
    /// What was done.
    pub event: HistoryKind,
    /// The text before the change, if there was one.
    pub old_text: Option<String>,
    /// The text after the change, if there is one.
    pub new_text: Option<String>,
    /// Who made the change (`cli`, `import`, `agent`, `api:<token>`, ...).
    pub actor: String,
    /// When.
    pub at: Timestamp,
}

/// A change to an existing memory; `None` fields are left alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPatch {
    /// New text.
    pub text: Option<String>,
    /// New category (`Some(None)` clears it).
    pub category: Option<Option<String>>,
    /// New importance.
    pub importance: Option<Importance>,
    /// New metadata object (replaces the old one).
    pub metadata: Option<Map<String, Value>>,
    /// New expiry (`Some(None)` clears it).
    pub expires_at: Option<Option<Timestamp>>,
}

impl MemoryPatch {
    /// A patch that only changes the text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// True when the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.text.is_none()
            && self.category.is_none()
            && self.importance.is_none()
            && self.metadata.is_none()
            && self.expires_at.is_none()
    }
}

/// A memory found by lexical search.
#[derive(Debug, Clone, PartialEq)]
pub struct LexicalHit {
    /// The memory.
    pub memory: Memory,
    /// Its BM25 relevance (higher is better).
    pub bm25: f64,
}

/// A vector for the text of memories with this content hash, produced by one model.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    /// The content hash of the memories whose text was embedded.
    pub content_hash: String,
    /// The vector (L2-normalised by the embedders that say so).
    pub vector: Vec<f32>,
    /// True when the text was longer than the model's window and was cut.
    pub truncated: bool,
}

/// A text that has no vector yet for some model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingText {
    /// Content hash shared by the memories with this text.
    pub content_hash: String,
    /// The text to embed.
    pub text: String,
}

/// A memory found by vector search.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorHit {
    /// The memory.
    pub memory: Memory,
    /// Dot product of the query and the memory's vector (cosine for unit vectors).
    pub similarity: f32,
    /// The memory's text was cut to fit the model's window when it was embedded.
    pub truncated: bool,
}

/// The vectors a store holds for one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorModelStats {
    /// The embedder's model id.
    pub model: String,
    /// Length of its vectors.
    pub dimension: usize,
    /// How many vectors are stored.
    pub vectors: u64,
}

/// Totals for `engram stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Every stored memory, current or closed.
    pub memories: u64,
    /// Memories that are closed or expired.
    pub closed: u64,
    /// Distinct users.
    pub users: u64,
    /// Memories per kind.
    pub by_kind: BTreeMap<Kind, u64>,
    /// Audit-trail rows.
    pub history_rows: u64,
    /// Size of the database on disk, in bytes (including its write-ahead log).
    pub database_bytes: u64,
    /// Schema version of the database.
    pub schema_version: u32,
    /// Where the database lives.
    pub path: PathBuf,
}

/// Why a store operation failed. Every variant reads as a complete one-line message.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No memory has that id (or the caller may not see it).
    #[error("no memory with id {0}")]
    NotFound(MemoryId),
    /// The memory offered is not acceptable.
    #[error("invalid memory: {0}")]
    Invalid(#[from] InvalidMemory),
    /// A search or listing asked for something impossible.
    #[error("{0}")]
    BadQuery(String),
    /// An update would make the memory a copy of another current one.
    #[error("the same text is already stored in this scope as memory {0}")]
    Duplicate(MemoryId),
    /// The memory is already closed.
    #[error("memory {0} is already invalidated")]
    AlreadyClosed(MemoryId),
    /// The file exists but is some other program's database.
    #[error("{} is not an engram database (it holds other data); choose another --home", path.display())]
    NotEngram {
        /// The database file.
        path: PathBuf,
    },
    /// The file is not a database or is damaged.
    #[error("{} is damaged or not a database ({detail}); restore it from a backup or move it aside", path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// A newer engram wrote the database.
    #[error("{} was written by a newer engram (schema version {found}, this build knows up to {supported}); upgrade engram to open it", path.display())]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its schema version.
        found: u32,
        /// The newest this build understands.
        supported: u32,
    },
    /// The disk (or a quota) is full; the change was rolled back.
    #[error("the disk is full; nothing was written")]
    DiskFull,
    /// The database or its directory cannot be written.
    #[error("cannot write to {}: {detail}", path.display())]
    ReadOnly {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        detail: String,
    },
    /// Another process held the database for longer than the busy timeout.
    #[error("the database is locked by another process and stayed locked for {0} s; try again")]
    Busy(u64),
    /// Anything else the backend reported.
    #[error("storage error: {0}")]
    Backend(String),
}

/// A place memories live. Implementations must be safe to share between threads and between
/// processes (two `engram` commands at once lose nothing).
pub trait MemoryStore: Send + Sync {
    /// Stores one memory, or reports the current memory with the same text in that scope.
    fn add(&self, memory: NewMemory, actor: &str) -> Result<AddOutcome, StoreError>;

    /// Stores many memories in one transaction; each gets its own outcome (an invalid one does not
    /// stop the rest). The outer error means nothing at all was written.
    fn add_many(
        &self,
        memories: Vec<NewMemory>,
        actor: &str,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, StoreError>;

    /// The memory with this id, closed or not.
    fn get(&self, id: MemoryId) -> Result<Memory, StoreError>;

    /// Changes a memory and records the change in its history.
    fn update(&self, id: MemoryId, patch: MemoryPatch, actor: &str) -> Result<Memory, StoreError>;

    /// Closes a memory (valid_to = now); it stays stored and in history.
    fn invalidate(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError>;

    /// Removes a memory; its history keeps a delete row.
    fn delete(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError>;

    /// A memory's audit trail, oldest first. Works for deleted memories too.
    fn history(&self, id: MemoryId) -> Result<Vec<HistoryEvent>, StoreError>;

    /// Memories matching the filter, newest first.
    fn list(&self, filter: &Filter, limit: usize, offset: usize)
    -> Result<Vec<Memory>, StoreError>;

    /// How many memories match the filter.
    fn count(&self, filter: &Filter) -> Result<u64, StoreError>;

    /// BM25 search within the filter, best first, ties broken by recency.
    fn search_lexical(
        &self,
        filter: &Filter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError>;

    /// Erases every memory of a user, and their history. Returns how many memories went.
    fn forget_user(&self, user_id: &str) -> Result<u64, StoreError>;

    /// Every memory of a user, current and closed, oldest first, handed to `sink` one by one.
    fn export(
        &self,
        user_id: &str,
        sink: &mut dyn FnMut(Memory) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError>;

    /// Totals.
    fn stats(&self) -> Result<StoreStats, StoreError>;

    /// Stores vectors made by `model` (whose vectors are `dimension` long), replacing any it
    /// already had for those content hashes. A dimension that disagrees with what is recorded for
    /// the model is an error and nothing is written.
    fn put_vectors(
        &self,
        model: &str,
        dimension: usize,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError>;

    /// Up to `limit` texts of stored memories (current or closed) that have no vector for
    /// `model`, in content-hash order, starting after `after` (for paging).
    fn texts_without_vectors(
        &self,
        model: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PendingText>, StoreError>;

    /// How many distinct texts have no vector for `model`.
    fn count_without_vectors(&self, model: &str) -> Result<u64, StoreError>;

    /// The memories within the filter whose vectors for `model` are most similar to `query`,
    /// best first. The filter is applied before the top `limit` are chosen. Memories without a
    /// vector for that model are not candidates.
    fn vector_search(
        &self,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<VectorHit>, StoreError>;

    /// Which models have vectors here, and how many.
    fn vector_models(&self) -> Result<Vec<VectorModelStats>, StoreError>;
}
