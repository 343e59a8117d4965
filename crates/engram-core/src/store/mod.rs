//! The storage contract: what every storage engine does, in async traits with one concern
//! each, and the errors and figures it reports.
//!
//! - [`MemoryStore`]: memories, their history, lexical and dense (vector) search;
//! - [`jobs::JobStore`]: the scheduler's jobs and their runs;
//! - [`tokens::TokenStore`]: API tokens (hashes and the users they may touch);
//! - [`graph::GraphStore`]: the knowledge graph of the MCP graph tools;
//! - [`sessions::SessionLogStore`]: the agent's session logs, when the engine is shared;
//! - [`claims::ClaimStore`]: claims on ranges of a stream (what extraction has done or is
//!   doing), shared by every process of the store;
//! - [`Backend`]: one of each, opened once by the program's composition root and passed down.
//!
//! An engine (SQLite in `engram-store-sqlite`, PostgreSQL in `engram-store-postgres`) implements
//! every trait on one value that owns its connections, and hands it out as `Arc<dyn ...>` per
//! concern, so each caller sees only what it needs. The SQL lives in the engines; the vocabulary
//! here is what they store, not what it means to the scheduler, the server or the agent.
//!
//! Every method is async: an engine whose driver blocks (SQLite) moves the work to the blocking
//! pool at its own edge, so callers simply await.

pub mod backend;
pub mod claims;
pub mod graph;
pub mod jobs;
pub mod sessions;
pub mod tokens;
pub mod transfer;

pub use backend::Backend;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

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

    /// Checks the patch can be applied to any memory: its text as [`validate_text`] says, no
    /// NUL character in its category.
    ///
    /// [`validate_text`]: crate::memory::validate_text
    pub fn validate(&self) -> Result<(), InvalidMemory> {
        if let Some(text) = &self.text {
            crate::memory::validate_text(text)?;
        }
        if let Some(Some(category)) = &self.category {
            crate::memory::validate_no_nul("category", category)?;
        }
        Ok(())
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

/// A user who has memories, and how many (current and closed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserCount {
    /// The user.
    pub user_id: String,
    /// Their memories, current and closed.
    pub memories: u64,
}

/// The memories of a user that carry one session id: how many, the first and the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCount {
    /// The session id.
    pub session_id: String,
    /// How many memories carry it (current and closed).
    pub memories: u64,
    /// The oldest one's creation time.
    pub first_at: Timestamp,
    /// The newest one's.
    pub last_at: Timestamp,
}

/// How many memories of one kind were created on one day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayCount {
    /// The day, in the time zone asked for.
    pub day: jiff::civil::Date,
    /// The kind.
    pub kind: Kind,
    /// How many.
    pub count: u64,
}

/// Counts memories per day (in one time zone) and kind, as [`MemoryStore::count_by_day`]
/// reports them. Engines feed it each matching memory's creation time and kind: no database
/// knows every time zone the way jiff does, so days are cut here, the same for every engine.
#[derive(Debug, Clone)]
pub struct DayCounter {
    zone: jiff::tz::TimeZone,
    counts: BTreeMap<(jiff::civil::Date, Kind), u64>,
}

impl DayCounter {
    /// Counts days in `zone`.
    pub fn new(zone: jiff::tz::TimeZone) -> Self {
        Self {
            zone,
            counts: BTreeMap::new(),
        }
    }

    /// Counts one memory.
    pub fn add(&mut self, created_at: Timestamp, kind: Kind) {
        let day = self.zone.to_datetime(created_at).date();
        *self.counts.entry((day, kind)).or_default() += 1;
    }

    /// The counts, by day then kind.
    pub fn finish(self) -> Vec<DayCount> {
        self.counts
            .into_iter()
            .map(|((day, kind), count)| DayCount { day, kind, count })
            .collect()
    }
}

/// Totals for `engram stats`, from any engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreStats {
    /// The engine: `sqlite`, `postgresql`, ...
    pub engine: String,
    /// Where the data lives, as a person would name it: a file, or a database URL without its
    /// password.
    pub location: String,
    /// Schema version of the database.
    pub schema_version: u32,
    /// How dense (vector) search runs: `hnsw (in-process)`, `pgvector hnsw`, `exact`, ...
    pub dense_search: String,
    /// Size of the data in bytes, when the engine can tell (a file and its write-ahead log; a
    /// database's relations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
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
    /// Anything else the engine wants to show (server version, pool size, ...), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
}

/// Why a store operation failed. Every variant reads as a complete one-line message; none
/// assumes a particular engine: where the data lives is a `location` the engine fills in (a
/// file path, a database URL without its password).
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
    /// The database exists but holds some other program's data.
    #[error(
        "{location} is not an engram database (it holds other data); point engram at another one"
    )]
    NotEngram {
        /// The database.
        location: String,
    },
    /// The database is damaged or is not a database at all.
    #[error(
        "{location} is damaged or not a database ({detail}); restore it from a backup or move it aside"
    )]
    Corrupt {
        /// The database.
        location: String,
        /// What the engine said.
        detail: String,
    },
    /// A newer engram wrote the database.
    #[error(
        "{location} was written by a newer engram (schema version {found}, this build knows up to {supported}); upgrade engram to open it"
    )]
    TooNew {
        /// The database.
        location: String,
        /// Its schema version.
        found: u32,
        /// The newest this build understands.
        supported: u32,
    },
    /// The disk (or a quota) is full; the change was rolled back.
    #[error("the disk is full; nothing was written")]
    DiskFull,
    /// The database cannot be written.
    #[error("cannot write to {location}: {detail}")]
    ReadOnly {
        /// The database, file or directory.
        location: String,
        /// What the system said.
        detail: String,
    },
    /// Another process held the database for longer than the busy timeout.
    #[error("the database is locked by another process and stayed locked for {0} s; try again")]
    Busy(u64),
    /// The database cannot be reached (a server that is down or restarting, a refused
    /// connection, a pool with no free connection in time); nothing was written. A server
    /// answers 503 and tries again later.
    #[error("cannot reach the database at {location}: {detail}")]
    Unavailable {
        /// The database.
        location: String,
        /// What went wrong.
        detail: String,
    },
    /// Anything else the backend reported.
    #[error("storage error: {0}")]
    Backend(String),
}

impl StoreError {
    /// True when the failure is about reaching the database rather than about the request:
    /// trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. } | StoreError::Busy(_))
    }
}

/// Where an export page starts: after the memory created at `created_at` with id `id`. Exports
/// run oldest first, ties broken by id, so any engine pages through the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportCursor {
    /// The last exported memory's creation time.
    pub created_at: Timestamp,
    /// The last exported memory's id.
    pub id: MemoryId,
}

impl ExportCursor {
    /// The cursor just after `memory`.
    pub fn after(memory: &Memory) -> Self {
        Self {
            created_at: memory.created_at,
            id: memory.id,
        }
    }
}

/// Memories handed over per page by [`MemoryStore::export`].
pub const EXPORT_PAGE: usize = 1_000;

/// Figures about an in-process dense index an engine loaded (see
/// [`MemoryStore::warm_dense_index`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseIndexStats {
    /// Vectors in the index (including ones no memory uses any more).
    pub vectors: usize,
    /// Memories attached to them.
    pub memories: usize,
    /// Vector length.
    pub dimension: usize,
    /// Bytes of memory the index holds.
    pub heap_bytes: usize,
    /// Time spent reading vectors and memories from the database.
    pub load_time: Duration,
    /// Time spent building the index.
    pub link_time: Duration,
}

/// How dense search trades speed for recall, from now on (see
/// [`MemoryStore::tune_dense_search`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseTuning {
    /// Scopes in which at most this many memories pass the filter are searched exactly.
    pub exact_max_scope: usize,
    /// Length of the approximate search's candidate list (HNSW `ef_search`).
    pub ef_search: usize,
}

/// How many dense searches took each path (see [`MemoryStore::dense_search_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DenseSearchCounts {
    /// Exact, inside the database.
    pub exact_in_database: u64,
    /// Exact, over an index held in memory.
    pub exact_in_memory: u64,
    /// Approximate, through an index.
    pub approximate: u64,
}

/// A place memories live. Engines must be safe to share between tasks and between processes:
/// two `engram` commands at once, or several servers on one database, lose nothing.
///
/// Times are stored to the microsecond. Every listing and search is confined to one user and
/// applies its [`Filter`] inside the query, before any top-k is chosen.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Stores one memory, or reports the current memory with the same text in that scope.
    async fn add(&self, memory: NewMemory, actor: &str) -> Result<AddOutcome, StoreError>;

    /// Stores many memories in one transaction; each gets its own outcome (an invalid one does
    /// not stop the rest). The outer error means nothing at all was written.
    async fn add_many(
        &self,
        memories: Vec<NewMemory>,
        actor: &str,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, StoreError>;

    /// The memory with this id, closed or not.
    async fn get(&self, id: MemoryId) -> Result<Memory, StoreError>;

    /// Changes a memory and records the change in its history.
    async fn update(
        &self,
        id: MemoryId,
        patch: MemoryPatch,
        actor: &str,
    ) -> Result<Memory, StoreError>;

    /// Closes a memory (valid_to = now); it stays stored and in history.
    async fn invalidate(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError>;

    /// Removes a memory; its history keeps a delete row.
    async fn delete(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError>;

    /// A memory's audit trail, oldest first. Works for deleted memories too.
    async fn history(&self, id: MemoryId) -> Result<Vec<HistoryEvent>, StoreError>;

    /// The user a memory belongs (or, once deleted, belonged) to, from its audit trail; `None`
    /// when the store never held it (or `forget` erased it). Access checks need the owner of
    /// deleted memories too, so that their history is shown only to those who could see them.
    async fn owner(&self, id: MemoryId) -> Result<Option<String>, StoreError>;

    /// Memories matching the filter, newest first (ties: the later stored first).
    async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Memory>, StoreError>;

    /// How many memories match the filter.
    async fn count(&self, filter: &Filter) -> Result<u64, StoreError>;

    /// BM25 search within the filter, best first, ties broken by recency. The text is analysed
    /// by `engram-text` and scored with the user's own statistics, the same on every engine.
    async fn search_lexical(
        &self,
        filter: &Filter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError>;

    /// Erases every memory of a user, with their history and vectors. Returns how many
    /// memories went.
    async fn forget_user(&self, user_id: &str) -> Result<u64, StoreError>;

    /// Up to `limit` memories of a user, current and closed, oldest first (ties by id),
    /// starting after `after`.
    async fn export_page(
        &self,
        user_id: &str,
        after: Option<ExportCursor>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError>;

    /// Every memory of a user, oldest first, handed to `sink` page by page (see
    /// [`MemoryStore::export_page`]). Returns how many there were.
    async fn export(
        &self,
        user_id: &str,
        sink: &mut (dyn FnMut(Memory) -> Result<(), StoreError> + Send),
    ) -> Result<u64, StoreError> {
        let mut after = None;
        let mut count = 0;
        loop {
            let page = self.export_page(user_id, after, EXPORT_PAGE).await?;
            let full = page.len() == EXPORT_PAGE;
            for memory in page {
                after = Some(ExportCursor::after(&memory));
                sink(memory)?;
                count += 1;
            }
            if !full {
                return Ok(count);
            }
        }
    }

    /// Totals.
    async fn stats(&self) -> Result<StoreStats, StoreError>;

    /// Every user who has memories, by user id, with how many they have.
    async fn users(&self) -> Result<Vec<UserCount>, StoreError>;

    /// The session ids a user's memories (current and closed) carry, in byte order, each with
    /// how many memories and their first and last creation times.
    async fn session_counts(&self, user_id: &str) -> Result<Vec<SessionCount>, StoreError>;

    /// How many memories match the filter, per day of creation (in `time_zone`) and kind,
    /// ordered by day then kind; days and kinds without memories are left out. Engines count
    /// with a [`DayCounter`].
    async fn count_by_day(
        &self,
        filter: &Filter,
        time_zone: &jiff::tz::TimeZone,
    ) -> Result<Vec<DayCount>, StoreError>;

    /// Stores vectors made by `model` (whose vectors are `dimension` long), replacing any it
    /// already had for those content hashes. A dimension that disagrees with what is recorded
    /// for the model is an error and nothing is written.
    async fn put_vectors(
        &self,
        model: &str,
        dimension: usize,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError>;

    /// Up to `limit` texts of stored memories (current or closed) that have no vector for
    /// `model`, in content-hash order, starting after `after` (for paging).
    async fn texts_without_vectors(
        &self,
        model: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PendingText>, StoreError>;

    /// How many distinct texts have no vector for `model`.
    async fn count_without_vectors(&self, model: &str) -> Result<u64, StoreError>;

    /// The memories within the filter whose vectors for `model` are most similar to `query`,
    /// best first. The filter is applied before the top `limit` are chosen. Memories without a
    /// vector for that model are not candidates.
    async fn vector_search(
        &self,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<VectorHit>, StoreError>;

    /// Which models have vectors here, and how many (counting them reads every vector's key).
    async fn vector_models(&self) -> Result<Vec<VectorModelStats>, StoreError>;

    /// Whether any vector of `model` is stored: what a search asks before it embeds the
    /// query, answered from the first key of the model's index instead of counting them all.
    async fn has_vectors(&self, model: &str) -> Result<bool, StoreError>;

    /// For each of `ids` (memories of `user_id`), the turn just before it in its conversation:
    /// the latest episode of the same user and session created before it, or at the same time
    /// and stored before it (for turns stored in order, the turn whose words its lexical
    /// document carries). `None` for a memory that is not an episode of a session, has no turn
    /// before it, or is not the user's. Ranking uses it to let adjacent turns share relevance.
    async fn previous_turns(
        &self,
        user_id: &str,
        ids: &[MemoryId],
    ) -> Result<Vec<Option<MemoryId>>, StoreError>;

    /// Prepares dense search over `model`'s vectors now (an engine with an in-process index
    /// loads it, waiting for a load under way), so that the first large search does not wait.
    /// `None` when the engine keeps no such index.
    async fn warm_dense_index(&self, model: &str) -> Result<Option<DenseIndexStats>, StoreError> {
        let _ = model;
        Ok(None)
    }

    /// Changes, from now on, when dense search is exact and how wide the approximate search
    /// looks (benchmarks sweep it). Engines without such settings ignore it.
    fn tune_dense_search(&self, tuning: DenseTuning) {
        let _ = tuning;
    }

    /// How many dense searches took each path since this handle was opened.
    fn dense_search_counts(&self) -> DenseSearchCounts {
        DenseSearchCounts::default()
    }
}
