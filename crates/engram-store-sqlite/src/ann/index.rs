//! One model's in-process index: its graph, the memories behind each vector, and how both
//! follow the database as this and other processes change it.
//!
//! Loading reads every vector of the model and every memory that uses one, in one read
//! transaction, then links the graph (in parallel). Afterwards each search first asks SQLite
//! whether anything was committed since (`PRAGMA data_version`, a few microseconds) and, if so,
//! catches up from where it left off, again in one read transaction:
//! - vectors with `embeddings.id` above the last one loaded are added to the graph;
//! - memories named by `history` rows above the last `seq` seen are read again (added, changed,
//!   closed: their filter attributes and which vector they use);
//! - `vector_index_changes` (filled by triggers) names deleted memories by row id and vectors
//!   replaced in place;
//! - `vector_index_epoch` counts erased history rows (`forget`): history numbers may then be
//!   reused, so every member is read again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use engram_core::{Filter, Kind, StoreError, VectorHit};
use jiff::Timestamp;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};

use super::hnsw::{Hnsw, HnswParams};
use super::members::{MemberFilter, Members, MemoryAttributes};
use super::node_ids::NodeIds;
use super::quant::{QuantQuery, RoundingBound};
use crate::error::from_sqlite;
use crate::rows::filter_sql;
use crate::vectors::{self, Scored, TopK};

/// The columns [`attributes_from_row`] reads, starting at the given offset.
const ATTRIBUTE_COLUMNS: &str = "m.rowid, m.user_id, m.agent_id, m.session_id, m.kind, \
     m.importance, m.created_at, m.valid_to, m.expires_at";

/// More history rows than this since the last look: re-read all members in one pass instead of
/// one memory at a time.
const RESYNC_AFTER_HISTORY_ROWS: i64 = 20_000;

/// Which search a query took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SearchPath {
    /// Every passing vector scored in memory (then the best ones re-scored exactly).
    MemoryExact,
    /// The graph, filtered during the walk.
    Approximate,
}

/// How a search should go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SearchSettings {
    /// Scopes with at most this many passing memories are searched exactly.
    pub exact_max_scope: usize,
    /// Result-list length of the graph search (at least the number of results asked for).
    pub ef_search: usize,
    /// "Now", for the filter's closed/expired test.
    pub now: Timestamp,
}

/// Figures about a loaded index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VectorIndexStats {
    /// Vectors in the graph (including ones no memory uses any more).
    pub vectors: usize,
    /// Memories attached to them.
    pub memories: usize,
    /// Vector length.
    pub dimension: usize,
    /// Bytes of memory the index holds (graph, int8 vectors, members).
    pub heap_bytes: usize,
    /// Time spent reading vectors and memories from the database at load.
    pub load_time: Duration,
    /// Time spent linking the graph at load.
    pub link_time: Duration,
}

/// The graph and what hangs off it.
#[derive(Debug)]
struct IndexState {
    graph: Hnsw,
    members: Members,
    /// `embeddings.id` of each node, ascending (nodes are added in id order).
    embedding_ids: NodeIds,
    params: HnswParams,
}

impl IndexState {
    fn node_of(&self, embedding_id: i64) -> Option<u32> {
        self.embedding_ids.node_of(embedding_id)
    }
}

/// What has been read from the database so far.
#[derive(Debug)]
struct SyncState {
    conn: Connection,
    data_version: i64,
    last_embedding: i64,
    last_history: i64,
    last_change: i64,
    erasures: i64,
}

/// Maps SQLite errors for one database file.
#[derive(Debug, Clone)]
pub(crate) struct ErrorMap {
    path: PathBuf,
    busy_timeout: Duration,
}

impl ErrorMap {
    /// For the database at `path`.
    pub fn new(path: &Path, busy_timeout: Duration) -> Self {
        Self {
            path: path.to_path_buf(),
            busy_timeout,
        }
    }

    /// The store error for a SQLite error.
    pub fn map(&self, e: rusqlite::Error) -> StoreError {
        from_sqlite(e, &self.path, self.busy_timeout)
    }
}

/// One model's index.
#[derive(Debug)]
pub(crate) struct ModelIndex {
    model: String,
    state: RwLock<IndexState>,
    sync: Mutex<SyncState>,
    threads: usize,
    errors: ErrorMap,
    load_time: Duration,
    link_time: Duration,
}

fn read_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

fn attributes_from_row(row: &Row<'_>, at: usize) -> rusqlite::Result<MemoryAttributes> {
    let kind: String = row.get(at + 4)?;
    let kind: Kind = kind
        .parse()
        .map_err(|e: engram_core::memory::ParseKindError| {
            rusqlite::Error::FromSqlConversionFailure(
                at + 4,
                rusqlite::types::Type::Text,
                Box::new(StoreError::Backend(e.to_string())),
            )
        })?;
    Ok(MemoryAttributes {
        rowid: row.get(at)?,
        user_id: row.get(at + 1)?,
        agent_id: row.get(at + 2)?,
        session_id: row.get(at + 3)?,
        kind,
        importance: row.get::<_, i64>(at + 5)?.clamp(0, 255) as u8,
        created_at: row.get(at + 6)?,
        valid_to: row.get(at + 7)?,
        expires_at: row.get(at + 8)?,
    })
}

/// Opens a connection the index reads through. It never writes. Memory-mapped reads are off:
/// streaming every vector at load, and the scattered point reads of searches, would otherwise
/// leave pages of the file mapped into this process (counted in its resident memory) for no
/// gain; reads go through a small page cache instead.
pub(crate) fn open_reader(
    errors: &ErrorMap,
    busy_timeout: Duration,
) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let map = |e| errors.map(e);
    let conn = Connection::open_with_flags(&errors.path, flags).map_err(map)?;
    conn.busy_timeout(busy_timeout).map_err(map)?;
    conn.execute_batch("PRAGMA mmap_size = 0; PRAGMA cache_size = -4000;")
        .map_err(map)?;
    Ok(conn)
}

fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "data_version", |r| r.get(0))
}

/// The newest history row, index change and erasure count, read inside the caller's
/// transaction.
fn markers(conn: &Connection) -> rusqlite::Result<(i64, i64, i64)> {
    let history = conn.query_row("SELECT coalesce(max(seq), 0) FROM history", [], |r| {
        r.get(0)
    })?;
    let change = conn.query_row(
        "SELECT coalesce(max(seq), 0) FROM vector_index_changes",
        [],
        |r| r.get(0),
    )?;
    let erasures = conn
        .query_row(
            "SELECT history_erasures FROM vector_index_epoch WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0);
    Ok((history, change, erasures))
}

impl ModelIndex {
    /// Reads every vector of `model` and the memories using them, and links the graph.
    pub fn load(
        model: &str,
        errors: ErrorMap,
        busy_timeout: Duration,
        params: HnswParams,
        threads: usize,
        cancel: &AtomicBool,
    ) -> Result<Self, StoreError> {
        let started = Instant::now();
        let conn = open_reader(&errors, busy_timeout)?;
        let map = |e| errors.map(e);
        let version = data_version(&conn).map_err(map)?;
        let mut state = IndexState {
            graph: Hnsw::new(0, params),
            members: Members::default(),
            embedding_ids: NodeIds::default(),
            params,
        };
        let (history, change, erasures, last_embedding) = {
            let tx = conn.unchecked_transaction().map_err(map)?;
            let (history, change, erasures) = markers(&tx).map_err(map)?;
            let dimension: Option<i64> = tx
                .query_row(
                    "SELECT dimension FROM embedding_models WHERE model = ?1",
                    [model],
                    |r| r.get(0),
                )
                .optional()
                .map_err(map)?;
            state.graph = Hnsw::new(dimension.unwrap_or(0).max(0) as usize, params);
            let count: i64 = tx
                .query_row(
                    "SELECT count(*) FROM embeddings WHERE model = ?1",
                    [model],
                    |r| r.get(0),
                )
                .map_err(map)?;
            // Exact sizes up front: grown by doubling, the tables would end up to twice as
            // large as needed.
            let count = count.max(0) as usize;
            state.graph.reserve(count);
            state.embedding_ids.reserve_exact(count);
            state.members.reserve(count);
            let last_embedding = append_vectors(&tx, model, 0, &mut state, cancel, &errors)?;
            load_all_members(&tx, model, &mut state, &errors)?;
            (history, change, erasures, last_embedding)
        };
        let load_time = started.elapsed();
        let linking = Instant::now();
        state
            .graph
            .link_from(0, threads, cancel)
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        // The build's own memory: the linking threads' visited lists and the page cache the
        // load filled (later reads through this connection are a few rows at a time).
        state.graph.release_build_memory();
        conn.execute_batch("PRAGMA shrink_memory;").map_err(map)?;
        Ok(Self {
            model: model.to_string(),
            state: RwLock::new(state),
            sync: Mutex::new(SyncState {
                conn,
                data_version: version,
                last_embedding,
                last_history: history,
                last_change: change,
                erasures,
            }),
            threads,
            errors,
            load_time,
            link_time: linking.elapsed(),
        })
    }

    /// Figures about the index as it is now.
    pub fn stats(&self) -> VectorIndexStats {
        let state = read_lock(&self.state);
        VectorIndexStats {
            vectors: state.graph.len(),
            memories: state.members.len(),
            dimension: state.graph.dimension(),
            heap_bytes: state.graph.heap_bytes()
                + state.members.heap_bytes()
                + state.embedding_ids.heap_bytes(),
            load_time: self.load_time,
            link_time: self.link_time,
        }
    }

    /// Catches up with every commit since the last look (cheap when there was none).
    pub fn refresh(&self) -> Result<(), StoreError> {
        let mut sync = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        let map = |e| self.errors.map(e);
        let version = data_version(&sync.conn).map_err(map)?;
        if version == sync.data_version {
            return Ok(());
        }
        let mut state = write_lock(&self.state);
        let first_new = state.graph.len() as u32;
        let (history, change, erasures, last_embedding) = {
            let tx = sync.conn.unchecked_transaction().map_err(map)?;
            let (history, change, erasures) = markers(&tx).map_err(map)?;
            let mut deleted = Vec::new();
            let mut replaced = Vec::new();
            {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT event, ref FROM vector_index_changes WHERE seq > ?1 ORDER BY seq",
                    )
                    .map_err(map)?;
                let mut rows = stmt.query([sync.last_change]).map_err(map)?;
                while let Some(row) = rows.next().map_err(map)? {
                    let event: String = row.get(0).map_err(map)?;
                    let reference: i64 = row.get(1).map_err(map)?;
                    match event.as_str() {
                        "memory_deleted" => deleted.push(reference),
                        _ => replaced.push(reference),
                    }
                }
            }
            let never = AtomicBool::new(false);
            let last_embedding = append_vectors(
                &tx,
                &self.model,
                sync.last_embedding,
                &mut state,
                &never,
                &self.errors,
            )?
            .max(sync.last_embedding);
            let resync = erasures != sync.erasures
                || history - sync.last_history > RESYNC_AFTER_HISTORY_ROWS;
            if resync {
                state.members.clear();
                load_all_members(&tx, &self.model, &mut state, &self.errors)?;
            } else {
                // Deletions first: a new memory may have taken a deleted one's row id.
                for rowid in deleted {
                    state.members.remove(rowid);
                }
                attach_members_of_new_vectors(
                    &tx,
                    &self.model,
                    sync.last_embedding,
                    &mut state,
                    &self.errors,
                )?;
                reread_changed_memories(
                    &tx,
                    &self.model,
                    sync.last_history,
                    &mut state,
                    &self.errors,
                )?;
                state.members.compact_if_needed();
            }
            let mut buffer = Vec::new();
            for embedding_id in replaced {
                let Some(node) = state.node_of(embedding_id) else {
                    continue;
                };
                let blob: Option<Vec<u8>> = tx
                    .query_row(
                        "SELECT vector FROM embeddings WHERE id = ?1",
                        [embedding_id],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(map)?;
                if let Some(blob) = blob
                    && vectors::decode_into(&blob, &mut buffer)
                {
                    state
                        .graph
                        .replace_vector(node, &buffer)
                        .map_err(|e| StoreError::Backend(e.to_string()))?;
                }
            }
            (history, change, erasures, last_embedding)
        };
        state
            .graph
            .link_from(first_new, self.threads, &AtomicBool::new(false))
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        drop(state);
        sync.data_version = version;
        sync.last_embedding = last_embedding;
        sync.last_history = history;
        sync.last_change = change;
        sync.erasures = erasures;
        Ok(())
    }

    /// The best `limit` memories passing `filter`, searched in memory: exactly when at most
    /// `exact_max_scope` memories pass, through the graph otherwise. `conn` is a pooled reader
    /// for the SQL parts (conditions the index cannot evaluate, exact re-scoring, the rows).
    pub fn search(
        &self,
        conn: &Connection,
        filter: &Filter,
        query: &[f32],
        limit: usize,
        settings: SearchSettings,
    ) -> Result<(Vec<VectorHit>, SearchPath), StoreError> {
        self.refresh()?;
        let map = |e| self.errors.map(e);
        let (conditions, filter_values) = filter_sql(filter, settings.now)?;
        let state = read_lock(&self.state);
        if state.graph.len() > 0 && state.graph.dimension() != query.len() {
            return Err(vectors::dimension_mismatch(
                &self.model,
                query.len(),
                state.graph.dimension(),
            ));
        }
        let Some(member_filter) = state.members.compile(filter, settings.now.as_microsecond())
        else {
            return Ok((Vec::new(), SearchPath::MemoryExact));
        };
        if limit == 0 {
            return Ok((Vec::new(), SearchPath::MemoryExact));
        }
        // Category and metadata conditions: SQL names the memories that pass the whole filter.
        let allowed: Option<Vec<i64>> = if filter.categories.is_empty()
            && filter.metadata.is_empty()
        {
            None
        } else {
            let sql = format!("SELECT m.rowid FROM memories m WHERE {conditions} ORDER BY m.rowid");
            let mut stmt = conn.prepare_cached(&sql).map_err(map)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(filter_values.iter()), |r| {
                    r.get(0)
                })
                .map_err(map)?;
            Some(rows.collect::<Result<_, _>>().map_err(map)?)
        };
        let query_q = QuantQuery::new(query);
        let accepts = |slot: u32| -> bool {
            state.members.slot(slot).is_some_and(|m| {
                member_filter.accepts(m)
                    && allowed
                        .as_ref()
                        .is_none_or(|set| set.binary_search(&state.members.rowid(m)).is_ok())
            })
        };
        let scope = exact_scope(
            &state.members,
            member_filter,
            allowed.as_deref(),
            &accepts,
            settings.exact_max_scope,
        );
        let bound = RoundingBound::new(
            &query_q,
            state.graph.max_scale(),
            state.graph.max_norm(),
            state.graph.dimension(),
        );
        let (candidates, path) = match scope {
            Some(slots) => {
                let scored = score_exact_scope(&state, &query_q, &slots, limit, bound);
                (scored, SearchPath::MemoryExact)
            }
            None => {
                let pass = |node: u32| state.members.of_node(node).any(|(slot, _)| accepts(slot));
                let ef = settings.ef_search.max(limit);
                let found = state.graph.search(&query_q, ef, &pass);
                let mut scored = Vec::with_capacity(found.len());
                for n in found {
                    for (slot, _) in state.members.of_node(n.node) {
                        if accepts(slot) {
                            scored.push((n.similarity, slot));
                        }
                    }
                }
                (scored, SearchPath::Approximate)
            }
        };
        let ranked = rescore(conn, &state, candidates, query, limit, bound, &self.errors)?;
        drop(state);
        let hits = vectors::fetch_hits(conn, ranked, Some((&conditions, &filter_values)), &|e| {
            self.errors.map(e)
        })?;
        Ok((hits, path))
    }
}

/// The member slots to score exactly when few enough pass the filter, or `None` when more than
/// `max` do (then the graph is searched). Stops counting as soon as the answer is known.
fn exact_scope(
    members: &Members,
    filter: MemberFilter<'_>,
    allowed: Option<&[i64]>,
    accepts: &impl Fn(u32) -> bool,
    max: usize,
) -> Option<Vec<u32>> {
    let mut passing = Vec::new();
    match allowed {
        Some(rowids) => {
            for &rowid in rowids {
                if let Some(slot) = members.slot_of_rowid(rowid)
                    && accepts(slot)
                {
                    if passing.len() >= max {
                        return None;
                    }
                    passing.push(slot);
                }
            }
        }
        None => {
            for &slot in members.of_user(filter.user) {
                if accepts(slot) {
                    if passing.len() >= max {
                        return None;
                    }
                    passing.push(slot);
                }
            }
        }
    }
    Some(passing)
}

/// Scores every member slot of an exact scope over the int8 vectors and keeps only the
/// candidates that may still be among the best `limit` once scored exactly. A candidate whose
/// approximate score plus the rounding bound is below the `limit`-th best approximate score
/// minus the bound has `limit` memories certainly ahead of it, whatever the exact scores are; so
/// a scope of a million memories leaves a few hundred candidates, not a table of a million.
fn score_exact_scope(
    state: &IndexState,
    query: &QuantQuery,
    slots: &[u32],
    limit: usize,
    bound: RoundingBound,
) -> Vec<(f32, u32)> {
    const CHUNK: usize = 4096;
    let margin = 2.0 * bound.0;
    let mut kept: Vec<(f32, u32)> = Vec::new();
    let mut threshold = f32::NEG_INFINITY;
    let mut nodes = Vec::with_capacity(CHUNK.min(slots.len()));
    let mut similarities = Vec::with_capacity(nodes.capacity());
    let mut scratch: Vec<f32> = Vec::new();
    for chunk in slots.chunks(CHUNK) {
        nodes.clear();
        nodes.extend(
            chunk
                .iter()
                .map(|&slot| state.members.slot(slot).map_or(0, |m| m.node)),
        );
        similarities.clear();
        state.graph.similarities(query, &nodes, &mut similarities);
        kept.extend(
            similarities
                .iter()
                .zip(chunk)
                .filter(|(s, _)| **s + margin >= threshold)
                .map(|(s, slot)| (*s, *slot)),
        );
        if kept.len() >= limit && limit > 0 {
            scratch.clear();
            scratch.extend(kept.iter().map(|c| c.0));
            let (_, kth, _) = scratch.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
            threshold = threshold.max(*kth);
            kept.retain(|c| c.0 + margin >= threshold);
        }
    }
    kept
}

/// Orders candidates by their exact similarity: candidates are taken in order of approximate
/// similarity and scored with the stored `f32` vectors until no remaining one can reach the
/// best `limit` (its approximate score plus the rounding bound falls below the weakest kept).
/// Within the candidates, the result is therefore exactly what scoring all of them would give.
fn rescore(
    conn: &Connection,
    state: &IndexState,
    mut candidates: Vec<(f32, u32)>,
    query: &[f32],
    limit: usize,
    bound: RoundingBound,
    errors: &ErrorMap,
) -> Result<Vec<Scored>, StoreError> {
    let map = |e| errors.map(e);
    let mut top = TopK::new(limit);
    let mut fetch = conn
        .prepare_cached("SELECT vector, truncated FROM embeddings WHERE id = ?1")
        .map_err(map)?;
    // Members of one node share its vector: score it once.
    let mut scored_nodes: HashMap<u32, Option<(f32, bool)>> = HashMap::new();
    let mut ordered = BestFirst::new(&mut candidates, (4 * limit).max(64));
    while let Some((approximate, slot)) = ordered.next() {
        if top.is_full()
            && let Some(worst) = top.worst()
            && approximate + bound.0 < worst.similarity
        {
            break;
        }
        let Some(member) = state.members.slot(slot) else {
            continue;
        };
        let exact = match scored_nodes.get(&member.node) {
            Some(known) => *known,
            None => {
                let Some(embedding_id) = state.embedding_ids.get(member.node) else {
                    continue;
                };
                let mut rows = fetch.query([embedding_id]).map_err(map)?;
                let known = match rows.next().map_err(map)? {
                    Some(row) => {
                        let blob = row.get_ref(0).and_then(|v| Ok(v.as_blob()?)).map_err(map)?;
                        let truncated: bool = row.get(1).map_err(map)?;
                        vectors::dot_blob_dispatched(query, blob).map(|s| (s, truncated))
                    }
                    // Dropped a moment ago by another process.
                    None => None,
                };
                scored_nodes.insert(member.node, known);
                known
            }
        };
        if let Some((similarity, truncated)) = exact {
            top.offer(Scored {
                similarity,
                rowid: state.members.rowid(member),
                truncated,
            });
        }
    }
    Ok(top.into_sorted())
}

/// Hands out `(score, slot)` pairs best first, ordering a block at a time (the best few first,
/// then four times as many): usually only the first block is needed, while an exact scan may
/// offer a whole scope.
struct BestFirst<'a> {
    items: &'a mut [(f32, u32)],
    next: usize,
    sorted_until: usize,
    block: usize,
}

impl<'a> BestFirst<'a> {
    fn new(items: &'a mut [(f32, u32)], first_block: usize) -> Self {
        Self {
            items,
            next: 0,
            sorted_until: 0,
            block: first_block.max(1),
        }
    }

    fn next(&mut self) -> Option<(f32, u32)> {
        let order = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if self.next == self.sorted_until {
            let rest = &mut self.items[self.sorted_until..];
            if rest.is_empty() {
                return None;
            }
            let take = self.block.min(rest.len());
            if take < rest.len() {
                rest.select_nth_unstable_by(take - 1, order);
            }
            rest[..take].sort_by(order);
            self.sorted_until += take;
            self.block = self.block.saturating_mul(4);
        }
        let item = self.items.get(self.next).copied();
        self.next += 1;
        item
    }
}

/// Adds the vectors of `model` with ids above `after` as new (unlinked) nodes; returns the
/// highest id added (or `after`).
fn append_vectors(
    conn: &Connection,
    model: &str,
    after: i64,
    state: &mut IndexState,
    cancel: &AtomicBool,
    errors: &ErrorMap,
) -> Result<i64, StoreError> {
    let map = |e| errors.map(e);
    // `+model` keeps SQLite off the (model, content_hash) index, whose order is not `id`'s:
    // through it, ORDER BY needed a temporary B-tree of every vector (1.5 GB on disk for a
    // million 384-d vectors). The rowid range walks the table in order instead.
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, vector FROM embeddings WHERE +model = ?1 AND id > ?2 ORDER BY id",
        )
        .map_err(map)?;
    let mut rows = stmt.query(params![model, after]).map_err(map)?;
    let mut last = after;
    let mut buffer = Vec::new();
    while let Some(row) = rows.next().map_err(map)? {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Backend(
                "the vector index build was cancelled".to_string(),
            ));
        }
        let id: i64 = row.get(0).map_err(map)?;
        let blob = row.get_ref(1).and_then(|v| Ok(v.as_blob()?)).map_err(map)?;
        if !vectors::decode_into(blob, &mut buffer) {
            return Err(StoreError::Backend(format!(
                "the stored vector {id} of {model} is not a whole number of floats"
            )));
        }
        if state.graph.len() == 0 && state.graph.dimension() != buffer.len() {
            // The model had no vectors when the index was made: now its dimension is known.
            state.graph = Hnsw::new(buffer.len(), state.params);
        }
        state
            .graph
            .append(&buffer)
            .map_err(|e| StoreError::Backend(format!("{e} ({model}, vector {id})")))?;
        state.embedding_ids.push(id);
        last = id;
    }
    state.members.set_node_count(state.graph.len());
    Ok(last)
}

/// Attaches every memory that uses one of the index's vectors (after `Members::clear`).
fn load_all_members(
    conn: &Connection,
    model: &str,
    state: &mut IndexState,
    errors: &ErrorMap,
) -> Result<(), StoreError> {
    let map = |e| errors.map(e);
    let sql = format!(
        "SELECT e.id, {ATTRIBUTE_COLUMNS} FROM embeddings e \
         JOIN memories m ON m.content_hash = e.content_hash WHERE e.model = ?1"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(map)?;
    let mut rows = stmt.query([model]).map_err(map)?;
    while let Some(row) = rows.next().map_err(map)? {
        let embedding_id: i64 = row.get(0).map_err(map)?;
        let attributes = attributes_from_row(row, 1).map_err(map)?;
        if let Some(node) = state.node_of(embedding_id) {
            state.members.push_bulk(&attributes, node);
        }
    }
    state.members.finish_bulk();
    Ok(())
}

/// Attaches the memories that use vectors added since `after`.
fn attach_members_of_new_vectors(
    conn: &Connection,
    model: &str,
    after: i64,
    state: &mut IndexState,
    errors: &ErrorMap,
) -> Result<(), StoreError> {
    let map = |e| errors.map(e);
    let sql = format!(
        "SELECT e.id, {ATTRIBUTE_COLUMNS} FROM embeddings e \
         JOIN memories m ON m.content_hash = e.content_hash WHERE e.model = ?1 AND e.id > ?2"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(map)?;
    let mut rows = stmt.query(params![model, after]).map_err(map)?;
    while let Some(row) = rows.next().map_err(map)? {
        let embedding_id: i64 = row.get(0).map_err(map)?;
        let attributes = attributes_from_row(row, 1).map_err(map)?;
        let node = state.node_of(embedding_id);
        state.members.upsert(&attributes, node);
    }
    Ok(())
}

/// Reads again every memory with history rows after `after` and records its current state.
/// Memories that are gone were deleted; their removal comes from `vector_index_changes`.
fn reread_changed_memories(
    conn: &Connection,
    model: &str,
    after: i64,
    state: &mut IndexState,
    errors: &ErrorMap,
) -> Result<(), StoreError> {
    let map = |e| errors.map(e);
    let ids: Vec<String> = conn
        .prepare_cached("SELECT DISTINCT memory_id FROM history WHERE seq > ?1")
        .and_then(|mut s| s.query_map([after], |r| r.get(0))?.collect())
        .map_err(map)?;
    let sql = format!(
        "SELECT e.id, {ATTRIBUTE_COLUMNS} FROM memories m \
         LEFT JOIN embeddings e ON e.model = ?1 AND e.content_hash = m.content_hash \
         WHERE m.id = ?2"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(map)?;
    for id in ids {
        let mut rows = stmt.query(params![model, id]).map_err(map)?;
        if let Some(row) = rows.next().map_err(map)? {
            let embedding_id: Option<i64> = row.get(0).map_err(map)?;
            let attributes = attributes_from_row(row, 1).map_err(map)?;
            let node = embedding_id.and_then(|e| state.node_of(e));
            state.members.upsert(&attributes, node);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Random unit vectors in `dim` dimensions.
    fn unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..dim).map(|_| next()).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]
        /// The candidates kept from a scope spanning several chunks include the exact top
        /// `limit`, and far fewer than the whole scope.
        #[test]
        fn exact_scope_scoring_keeps_every_true_top_candidate(
            seed in 0u64..1000,
            limit in 1usize..40,
        ) {
            let (n, dim) = (10_000, 24);
            let data = unit_vectors(n, dim, seed);
            let params = HnswParams { m: 8, ef_construction: 16, seed: 1 };
            let mut state = IndexState {
                graph: Hnsw::new(dim, params),
                members: Members::default(),
                embedding_ids: NodeIds::default(),
                params,
            };
            state.members.set_node_count(n);
            for (i, v) in data.iter().enumerate() {
                state.graph.append(v).unwrap();
                state.members.push_bulk(
                    &MemoryAttributes {
                        rowid: i as i64,
                        user_id: "u".into(),
                        agent_id: None,
                        session_id: None,
                        kind: Kind::Fact,
                        importance: 3,
                        created_at: 0,
                        valid_to: None,
                        expires_at: None,
                    },
                    i as u32,
                );
            }
            state.members.finish_bulk();
            let query = &unit_vectors(1, dim, seed + 7)[0];
            let quantised = QuantQuery::new(query);
            let bound = RoundingBound::new(
                &quantised,
                state.graph.max_scale(),
                state.graph.max_norm(),
                dim,
            );
            // Slot i holds node i here.
            let slots: Vec<u32> = (0..n as u32).collect();
            let kept = score_exact_scope(&state, &quantised, &slots, limit, bound);
            let mut exact: Vec<(f32, u32)> = data
                .iter()
                .enumerate()
                .map(|(i, v)| (v.iter().zip(query).map(|(a, b)| a * b).sum(), i as u32))
                .collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0));
            for (_, slot) in &exact[..limit] {
                prop_assert!(kept.iter().any(|c| c.1 == *slot), "slot {slot} was dropped");
            }
            prop_assert!(kept.len() < n / 4, "{} of {n} kept", kept.len());
        }
    }

    proptest! {
        #[test]
        fn best_first_hands_out_everything_in_order(
            scores in proptest::collection::vec(-1.0f32..1.0, 0..300),
            block in 1usize..20,
        ) {
            let mut items: Vec<(f32, u32)> =
                scores.iter().enumerate().map(|(i, s)| (*s, i as u32)).collect();
            let mut expected = items.clone();
            expected.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut ordered = BestFirst::new(&mut items, block);
            let mut got = Vec::new();
            while let Some(item) = ordered.next() {
                got.push(item);
            }
            prop_assert_eq!(got, expected);
        }
    }
}
