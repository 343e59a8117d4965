//! Copying a whole store from one engine to another, losslessly: every memory with its id,
//! times and validity, the audit trail, vectors, tokens (their hashes), jobs with their runs,
//! the knowledge graph, and finished claims (so that work done before the copy is not done
//! again after it; unfinished claims are transient leases and stay behind), each with the ids
//! and times it had.
//!
//! An engine reads its tables page by page as plain [`Record`]s ([`Transfer::dump`]) and writes
//! records it is given exactly as they are, inside one transaction that is committed only at
//! the end ([`Transfer::begin_load`]), so a copy that fails leaves the target as it was. Derived
//! data is not copied but rebuilt on the target: the lexical index (as after a change of text
//! analyser: each turn of a conversation indexed with the one before it), per-user statistics,
//! id counters. [`copy`] drives the two.

use async_trait::async_trait;
use jiff::Timestamp;

use super::claims::DoneClaim;
use super::graph::Relation;
use super::jobs::{Job, JobRun};
use super::tokens::TokenWithHash;
use super::{HistoryEvent, StoreError, StoredVector};
use crate::memory::{Memory, MemoryId};

/// The tables a copy moves, in the order they are loaded (each refers only to earlier ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// Memories, in the order they were stored.
    Memories,
    /// The audit trail, oldest first.
    History,
    /// Embedding models with their dimension.
    VectorModels,
    /// Vectors.
    Vectors,
    /// API tokens.
    Tokens,
    /// Scheduled jobs.
    Jobs,
    /// Their runs.
    JobRuns,
    /// Graph entities.
    Entities,
    /// Their observations.
    Observations,
    /// Graph relations.
    Relations,
    /// Finished claims.
    Claims,
}

impl Table {
    /// Every table, in load order.
    pub const ALL: [Table; 11] = [
        Table::Memories,
        Table::History,
        Table::VectorModels,
        Table::Vectors,
        Table::Tokens,
        Table::Jobs,
        Table::JobRuns,
        Table::Entities,
        Table::Observations,
        Table::Relations,
        Table::Claims,
    ];

    /// A name for progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Table::Memories => "memories",
            Table::History => "history",
            Table::VectorModels => "vector models",
            Table::Vectors => "vectors",
            Table::Tokens => "tokens",
            Table::Jobs => "jobs",
            Table::JobRuns => "job runs",
            Table::Entities => "graph entities",
            Table::Observations => "graph observations",
            Table::Relations => "graph relations",
            Table::Claims => "finished claims",
        }
    }
}

/// One row of the audit trail, with the user it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRecord {
    /// The memory's user (kept when the memory is deleted, so that `forget` finds it).
    pub user_id: String,
    /// The change.
    pub event: HistoryEvent,
}

/// An embedding model as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRecord {
    /// The model id.
    pub model: String,
    /// Its vectors' length.
    pub dimension: usize,
    /// When its first vector was stored.
    pub created_at: Timestamp,
}

/// A graph entity row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityRecord {
    /// Its id (observations and search links refer to it).
    pub id: i64,
    /// Whose graph.
    pub user_id: String,
    /// Its name.
    pub name: String,
    /// Its type.
    pub entity_type: String,
    /// The memory that makes it findable, once written.
    pub memory_id: Option<MemoryId>,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A graph observation row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationRecord {
    /// Its id.
    pub id: i64,
    /// Its entity.
    pub entity_id: i64,
    /// The observation.
    pub content: String,
    /// The memory that makes it findable, once written.
    pub memory_id: Option<MemoryId>,
    /// When it was added.
    pub created_at: Timestamp,
}

/// A graph relation row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationRecord {
    /// Its id (relations are listed in id order).
    pub id: i64,
    /// Whose graph.
    pub user_id: String,
    /// The relation.
    pub relation: Relation,
    /// When it was created.
    pub created_at: Timestamp,
}

/// One row of one table, as every engine reads and writes it.
// Short-lived values, moved in pages; boxing would only make matching clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A memory.
    Memory(Memory),
    /// A row of the audit trail.
    History(HistoryRecord),
    /// An embedding model.
    VectorModel(ModelRecord),
    /// A vector of a model.
    Vector {
        /// The model.
        model: String,
        /// The vector and the content hash it is for.
        vector: StoredVector,
    },
    /// An API token with its hash.
    Token(TokenWithHash),
    /// A job with its state.
    Job(Job),
    /// A run of a job.
    JobRun(JobRun),
    /// A graph entity.
    Entity(EntityRecord),
    /// A graph observation.
    Observation(ObservationRecord),
    /// A graph relation.
    Relation(RelationRecord),
    /// A finished claim.
    Claim(DoneClaim),
}

/// Writing a copy into a store: records go in with [`Loader::load`], in table order, and become
/// visible only with [`Loader::commit`]. Dropping a loader without committing leaves the store
/// as it was.
#[async_trait]
pub trait Loader: Send {
    /// Writes these records exactly as they are (ids, times, states).
    async fn load(&mut self, records: Vec<Record>) -> Result<(), StoreError>;

    /// Rebuilds what is derived (lexical index, statistics, id counters) and commits.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// A store that can be copied from and into.
#[async_trait]
pub trait Transfer: Send + Sync {
    /// Up to `limit` records of `table` in the order they were stored, each with its position,
    /// starting after position `after` (0 for the first page).
    async fn dump(
        &self,
        table: Table,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Record)>, StoreError>;

    /// True when the store holds no memories, history, vectors, tokens, jobs, graph or claims:
    /// a copy goes only into an empty store, so that nothing is overwritten.
    async fn is_empty(&self) -> Result<bool, StoreError>;

    /// Starts writing a copy (see [`Loader`]).
    async fn begin_load(&self) -> Result<Box<dyn Loader>, StoreError>;
}

/// Records moved per page.
pub const COPY_PAGE: usize = 5_000;

/// Copies everything from `from` into the empty store `to`, in one transaction on `to`;
/// `progress` hears of each table's count as pages go by. Returns the count per table.
pub async fn copy(
    from: &dyn Transfer,
    to: &dyn Transfer,
    progress: &mut (dyn FnMut(Table, u64) + Send),
) -> Result<Vec<(Table, u64)>, StoreError> {
    if !to.is_empty().await? {
        return Err(StoreError::BadQuery(
            "the target already holds data; copy into an empty store only".to_string(),
        ));
    }
    let mut loader = to.begin_load().await?;
    let mut counts = Vec::with_capacity(Table::ALL.len());
    for table in Table::ALL {
        let mut after = 0;
        let mut count = 0u64;
        loop {
            let page = from.dump(table, after, COPY_PAGE).await?;
            let Some(&(last, _)) = page.last() else { break };
            after = last;
            count += page.len() as u64;
            let full = page.len() == COPY_PAGE;
            loader
                .load(page.into_iter().map(|(_, record)| record).collect())
                .await?;
            progress(table, count);
            if !full {
                break;
            }
        }
        counts.push((table, count));
    }
    loader.commit().await?;
    Ok(counts)
}
