//! Vector search that picks its own method: exact for small scopes, an approximate in-process
//! index (HNSW over int8 vectors) for large ones.
//!
//! - A scope of at most [`VectorIndexOptions::exact_max_scope`] passing memories is searched
//!   exactly: in SQL while no index is loaded, in memory once one is (int8 scores for all, then
//!   the best re-scored with the stored `f32` vectors until the rounding bound proves no other
//!   can enter the top `k`).
//! - A larger scope loads the model's index (on first use; see [`IndexBuild`]) and walks its
//!   graph with the filter evaluated at every node, so only passing memories enter the results.
//!   Filters the index cannot evaluate (category, metadata) are first turned into a set of row
//!   ids by SQL.
//!
//! The index lives as long as the store handle and follows the database through the change
//! records described in `index.rs`.

pub(crate) mod hnsw;
pub(crate) mod index;
pub(crate) mod members;
pub(crate) mod node_ids;
pub(crate) mod quant;
pub(crate) mod visited;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use engram_core::{Filter, StoreError, VectorHit};
use jiff::Timestamp;
use rusqlite::Connection;

use crate::vectors::{self, Exact};
use hnsw::HnswParams;
pub use index::VectorIndexStats;
use index::{ErrorMap, ModelIndex, SearchPath, SearchSettings};

/// When a model's in-process index is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexBuild {
    /// On a thread of its own when a large scope is first searched; until it is ready, searches
    /// are exact (slower, never wrong). Right for long-running processes.
    Background,
    /// Right away, inside the first search of a large scope, which waits for it.
    Blocking,
    /// Never: every search is exact, in SQL. Right for one-shot commands on small stores.
    Never,
}

/// How `vector_search` chooses between exact and approximate search, and how the index is
/// shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorIndexOptions {
    /// Scopes in which at most this many memories pass the filter are searched exactly; larger
    /// ones use the approximate index.
    pub exact_max_scope: usize,
    /// Length of the approximate search's result list (at least the number of results asked
    /// for): higher finds more of the true nearest neighbours, more slowly.
    pub ef_search: usize,
    /// Links per node on the upper layers of the graph (twice as many on layer 0).
    pub m: usize,
    /// Length of the candidate list while linking a node: higher builds a better graph, more
    /// slowly.
    pub ef_construction: usize,
    /// When the index is built.
    pub build: IndexBuild,
    /// Threads that link the graph at load (0: one per core).
    pub build_threads: usize,
}

impl Default for VectorIndexOptions {
    /// Chosen with `engram bench vectors` (see BENCHMARKS.md, "Vector search"): at a million
    /// vectors, a search list of 64 found only 69% of the true top 10 without a filter, 256
    /// finds 93% in under a millisecond (median), far inside the 20 ms budget.
    fn default() -> Self {
        Self {
            exact_max_scope: 20_000,
            ef_search: 256,
            m: 12,
            ef_construction: 100,
            build: IndexBuild::Background,
            build_threads: 0,
        }
    }
}

/// How many vector searches took each path since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VectorSearchCounts {
    /// Exact, in SQL (no index loaded, or a small scope).
    pub sql_exact: u64,
    /// Exact, over the loaded index's vectors.
    pub memory_exact: u64,
    /// Approximate, through the graph.
    pub approximate: u64,
}

#[derive(Debug)]
enum SlotState {
    Empty,
    Building,
    Ready(Arc<ModelIndex>),
}

#[derive(Debug)]
struct Slot {
    state: Mutex<SlotState>,
    /// Held while loading, so a blocking caller waits for a build already under way.
    build: Mutex<()>,
}

/// Idle index readers kept for reuse.
const MAX_IDLE_READERS: usize = 4;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The indexes of one store handle, one per model, and the choice of search path.
#[derive(Debug)]
pub(crate) struct VectorIndexes {
    options: VectorIndexOptions,
    exact_max_scope: AtomicUsize,
    ef_search: AtomicUsize,
    errors: ErrorMap,
    busy_timeout: Duration,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    cancel: Arc<AtomicBool>,
    counts: [AtomicU64; 3],
    /// Idle connections for the SQL parts of index searches (see `index::open_reader`).
    readers: Mutex<Vec<Connection>>,
}

impl Drop for VectorIndexes {
    fn drop(&mut self) {
        // Background builds for a closed store are wasted work.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl VectorIndexes {
    /// No index loaded yet, for the database at `path`.
    pub fn new(path: &Path, busy_timeout: Duration, options: VectorIndexOptions) -> Self {
        Self {
            options,
            exact_max_scope: AtomicUsize::new(options.exact_max_scope),
            ef_search: AtomicUsize::new(options.ef_search),
            errors: ErrorMap::new(path, busy_timeout),
            busy_timeout,
            slots: Mutex::new(HashMap::new()),
            cancel: Arc::new(AtomicBool::new(false)),
            counts: Default::default(),
            readers: Mutex::new(Vec::new()),
        }
    }

    /// How dense search runs, for `engram stats`: through the in-process HNSW for scopes
    /// beyond the exact threshold, unless this handle never builds one.
    pub fn mode(&self) -> String {
        match self.options.build {
            IndexBuild::Never => "exact".to_string(),
            _ => format!(
                "hnsw (in-process) beyond {} memories in scope, exact below",
                self.exact_max_scope.load(Ordering::Relaxed)
            ),
        }
    }

    /// Changes the exact/approximate threshold and the search list length from now on.
    pub fn tune(&self, exact_max_scope: usize, ef_search: usize) {
        self.exact_max_scope
            .store(exact_max_scope, Ordering::Relaxed);
        self.ef_search.store(ef_search.max(1), Ordering::Relaxed);
    }

    /// Searches taken per path so far.
    pub fn counts(&self) -> VectorSearchCounts {
        let get = |i: usize| self.counts[i].load(Ordering::Relaxed);
        VectorSearchCounts {
            sql_exact: get(0),
            memory_exact: get(1),
            approximate: get(2),
        }
    }

    fn record(&self, path: Option<SearchPath>) {
        let i = match path {
            None => 0,
            Some(SearchPath::MemoryExact) => 1,
            Some(SearchPath::Approximate) => 2,
        };
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Runs an index search's SQL on one of the index's own readers.
    fn with_reader<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = lock(&self.readers).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => index::open_reader(&self.errors, self.busy_timeout)?,
        };
        let result = f(&conn);
        let mut idle = lock(&self.readers);
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }

    fn params(&self) -> HnswParams {
        HnswParams {
            m: self.options.m,
            ef_construction: self.options.ef_construction,
            seed: 0x656E_6772,
        }
    }

    fn threads(&self) -> usize {
        match self.options.build_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    fn slot(&self, model: &str) -> Arc<Slot> {
        lock(&self.slots)
            .entry(model.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    state: Mutex::new(SlotState::Empty),
                    build: Mutex::new(()),
                })
            })
            .clone()
    }

    fn ready(&self, model: &str) -> Option<Arc<ModelIndex>> {
        let slot = lock(&self.slots).get(model).cloned()?;
        match &*lock(&slot.state) {
            SlotState::Ready(index) => Some(index.clone()),
            _ => None,
        }
    }

    /// Loads the model's index now unless it is loaded (waiting for a build under way), and
    /// brings it up to date.
    pub fn warm(&self, model: &str) -> Result<VectorIndexStats, StoreError> {
        let index = self.build_now(model)?;
        index.refresh()?;
        Ok(index.stats())
    }

    fn build_now(&self, model: &str) -> Result<Arc<ModelIndex>, StoreError> {
        let slot = self.slot(model);
        let _building = lock(&slot.build);
        if let SlotState::Ready(index) = &*lock(&slot.state) {
            return Ok(index.clone());
        }
        *lock(&slot.state) = SlotState::Building;
        let loaded = ModelIndex::load(
            model,
            self.errors.clone(),
            self.busy_timeout,
            self.params(),
            self.threads(),
            &self.cancel,
        );
        let mut state = lock(&slot.state);
        match loaded {
            Ok(index) => {
                let index = Arc::new(index);
                *state = SlotState::Ready(index.clone());
                Ok(index)
            }
            Err(e) => {
                *state = SlotState::Empty;
                Err(e)
            }
        }
    }

    fn build_in_background(&self, model: &str) {
        let slot = self.slot(model);
        {
            let mut state = lock(&slot.state);
            if !matches!(*state, SlotState::Empty) {
                return;
            }
            *state = SlotState::Building;
        }
        let model = model.to_string();
        let errors = self.errors.clone();
        let busy_timeout = self.busy_timeout;
        let params = self.params();
        let threads = self.threads();
        let cancel = self.cancel.clone();
        let job_slot = slot.clone();
        let spawned = std::thread::Builder::new()
            .name("engram-vector-index".to_string())
            .spawn(move || {
                let _building = lock(&job_slot.build);
                let loaded = ModelIndex::load(&model, errors, busy_timeout, params, threads, &cancel);
                let mut state = lock(&job_slot.state);
                match loaded {
                    Ok(index) => {
                        tracing::info!(model, vectors = index.stats().vectors, "vector index ready");
                        *state = SlotState::Ready(Arc::new(index));
                    }
                    Err(e) => {
                        if !cancel.load(Ordering::Relaxed) {
                            tracing::warn!(model, error = %e, "building the vector index failed; searches stay exact");
                        }
                        *state = SlotState::Empty;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a thread to build the vector index; searches stay exact");
            *lock(&slot.state) = SlotState::Empty;
        }
    }

    /// The best `limit` memories within `filter` for `query` (already checked to be finite and
    /// non-empty), by the cheapest method that gives the right answer for the scope's size.
    #[allow(clippy::too_many_arguments)]
    pub fn search(
        &self,
        conn: &Connection,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<VectorHit>, StoreError> {
        let settings = SearchSettings {
            exact_max_scope: self.exact_max_scope.load(Ordering::Relaxed),
            ef_search: self.ef_search.load(Ordering::Relaxed),
            now,
        };
        if let Some(index) = self.ready(model) {
            let (hits, path) =
                self.with_reader(|own| index.search(own, filter, query, limit, settings))?;
            self.record(Some(path));
            return Ok(hits);
        }
        let err = |e| self.errors.map(e);
        let blocking = self.options.build == IndexBuild::Blocking;
        let stop_after = blocking.then_some(settings.exact_max_scope);
        match vectors::exact_search(conn, model, filter, query, limit, now, stop_after, &err)? {
            Exact::Hits { hits, scanned } => {
                if scanned > settings.exact_max_scope
                    && self.options.build == IndexBuild::Background
                {
                    self.build_in_background(model);
                }
                self.record(None);
                Ok(hits)
            }
            Exact::Stopped => {
                let index = self.build_now(model)?;
                let (hits, path) =
                    self.with_reader(|own| index.search(own, filter, query, limit, settings))?;
                self.record(Some(path));
                Ok(hits)
            }
        }
    }
}
