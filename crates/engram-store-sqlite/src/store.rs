//! [`SqliteStore`]: the [`MemoryStore`] on one SQLite file.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use engram_core::store::{ExportCursor, LexicalHit, MemoryPatch};
use engram_core::{
    AddOutcome, Clock, DayCount, DayCounter, Filter, HistoryEvent, HistoryKind, InvalidMemory,
    Kind, Memory, MemoryId, NewMemory, SessionCount, StoreError, StoreStats, SystemClock,
    UserCount, content_hash,
};
use engram_core::{PendingText, StoredVector, VectorHit, VectorModelStats};
use jiff::Timestamp;
use rusqlite::types::Value;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use crate::ann::{VectorIndexOptions, VectorIndexStats, VectorIndexes, VectorSearchCounts};
use crate::error::from_sqlite;
use crate::fts;
use crate::lexical;
use crate::lexical_docs::{
    FactFilter, ImpactKey, LexicalDocCache, LexicalSearchCounts, ROWS_READ_PER_LOOKUP,
};
use crate::rows::{MEMORY_COLUMN_COUNT, MEMORY_COLUMNS, filter_sql, memory_from_row, micros};
use crate::schema::{APPLICATION_ID, MIGRATIONS, latest_version};
use crate::topk::{self, Impacts};
use crate::vectors;

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long a write waits for another process's transaction before giving up.
    pub busy_timeout: Duration,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// Refuse to grow the database beyond this many bytes (a quota); writes past it fail as a
    /// full disk does, and change nothing.
    pub max_database_bytes: Option<u64>,
    /// How vector search chooses between exact search and the in-process approximate index.
    pub vector_index: VectorIndexOptions,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(15),
            clock: Arc::new(SystemClock),
            max_database_bytes: None,
            vector_index: VectorIndexOptions::default(),
        }
    }
}

/// One SQLite database file: memories, jobs, tokens and the graph, synchronously.
///
/// One connection writes; reads take a connection from a small pool so searches run in parallel
/// with each other and with writes (WAL mode). A connection of its own, opened when first asked,
/// watches the file's data version, which moves whenever anyone (another process, or this
/// handle's writer) commits.
#[derive(Debug)]
pub struct Database {
    path: PathBuf,
    options: StoreOptions,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    /// Opened on first use: only the token cache and the scheduler ask.
    watcher: Mutex<Option<Connection>>,
    /// In-process approximate vector indexes, one per model, loaded on demand (see `ann`).
    vector_indexes: VectorIndexes,
    /// Per-user facts that BM25 ranking scores and filters by (see `lexical_docs`).
    lexical_docs: LexicalDocCache,
}

/// The engine's name in [`StoreStats`].
pub const ENGINE: &str = "sqlite";

/// Upper bound on idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 8;

/// The length and creation time of the rows in a JSON list of row ids that pass `conditions`.
/// By row: left to itself, the planner walks the user's index (all 100k entries of a large
/// user: 14 ms of a rare word's one-shot search) and tests each entry against the list.
/// The turn before memory `?1` of user `?2` in its session. The bound `p.created_at <=
/// m.created_at` lets the planner seek in the session's index: without it, it walked every
/// episode of the user for each turn (a user of 100k memories: 180-320 ms a context block).
pub(crate) const PREVIOUS_TURN_SQL: &str = "SELECT (SELECT p.id FROM memories p \
     WHERE p.user_id = m.user_id AND p.session_id = m.session_id \
     AND p.created_at <= m.created_at AND p.kind = 'episode' AND p.rowid <> m.rowid \
     AND (p.created_at < m.created_at OR p.rowid < m.rowid) \
     ORDER BY p.created_at DESC, p.rowid DESC LIMIT 1) \
     FROM memories m WHERE m.id = ?1 AND m.user_id = ?2 \
     AND m.kind = 'episode' AND m.session_id IS NOT NULL";

pub(crate) fn facts_by_row_sql(conditions: &str) -> String {
    format!(
        "SELECT m.rowid, m.body_terms, m.created_at FROM memories m NOT INDEXED \
         WHERE m.rowid IN (SELECT value FROM json_each(?)) AND {conditions}"
    )
}

/// Keeps the best `limit` of `scored` (score, created_at, rowid), best first; ties go to the
/// newest.
fn keep_best(scored: &mut Vec<(f64, i64, i64)>, limit: usize) {
    let order = |a: &(f64, i64, i64), b: &(f64, i64, i64)| {
        b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2))
    };
    if limit == 0 {
        scored.clear();
        return;
    }
    if scored.len() > limit {
        scored.select_nth_unstable_by(limit - 1, order);
        scored.truncate(limit);
    }
    scored.sort_unstable_by(order);
}

/// Reads `rowids` with [`facts_by_row_sql`] (the filter's values after the ids), calling
/// `found(rowid, length, created_at)` for each row that passes the filter.
fn read_by_row(
    stmt: &mut rusqlite::CachedStatement<'_>,
    rowids: &[i64],
    filter_values: &[Value],
    mut found: impl FnMut(i64, f64, i64),
) -> rusqlite::Result<()> {
    if rowids.is_empty() {
        return Ok(());
    }
    let ids = serde_json::to_string(rowids).unwrap_or_else(|_| "[]".to_string());
    let values = std::iter::once(Value::Text(ids)).chain(filter_values.iter().cloned());
    let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
    while let Some(row) = rows.next()? {
        found(row.get(0)?, row.get::<_, i64>(1)? as f64, row.get(2)?);
    }
    Ok(())
}

impl Database {
    /// Opens (creating if needed) the database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens (creating if needed) the database at `path`, migrating it to the current schema.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if path.is_dir() {
            return Err(StoreError::Backend(format!(
                "{} is a directory, not a database file",
                path.display()
            )));
        }
        let mut writer = open_connection(&path, &options, true)?;
        migrate(&mut writer, &path, &options)?;
        let vector_indexes = VectorIndexes::new(&path, options.busy_timeout, options.vector_index);
        Ok(Self {
            path,
            options,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            watcher: Mutex::new(None),
            vector_indexes,
            lexical_docs: LexicalDocCache::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The clock this store stamps changes with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.options.clock
    }

    /// A connection of its own to this database (a copy's long transaction; see transfer.rs).
    pub(crate) fn new_connection(&self) -> Result<Connection, StoreError> {
        open_connection(&self.path, &self.options, false)
    }

    /// Checks the database for damage and for an index out of step with the memories: SQLite's
    /// own `integrity_check` and the full-text index's `integrity-check`, then that every memory
    /// has exactly its index row with the number of words it was indexed with, that each user's
    /// document and word counts (BM25's statistics) equal what their memories hold, and that
    /// every vector has its model's length. Returns the problems found, one line each; none
    /// means sound. Reads the whole database: seconds per million memories.
    pub fn check_integrity(&self) -> Result<Vec<String>, StoreError> {
        self.write(|tx| {
            let mut problems = Vec::new();
            let sqlite: Vec<String> = tx
                .prepare("PRAGMA integrity_check")
                .and_then(|mut s| {
                    s.query_map([], |r| r.get::<_, String>(0))?
                        .collect::<Result<_, _>>()
                })
                .map_err(|e| self.err(e))?;
            if sqlite != ["ok"] {
                problems.extend(sqlite.into_iter().map(|p| format!("sqlite: {p}")));
            }
            if let Err(e) = tx.execute(
                "INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')",
                [],
            ) {
                problems.push(format!("full-text index: {e}"));
            }
            let checks: [(&str, &str); 5] = [
                (
                    "memories without an index row",
                    "SELECT count(*) FROM memories m \
                     WHERE NOT EXISTS (SELECT 1 FROM memories_fts f WHERE f.rowid = m.rowid)",
                ),
                (
                    "index rows without a memory",
                    "SELECT count(*) FROM memories_fts f \
                     WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.rowid = f.rowid)",
                ),
                (
                    "memories whose index row holds another number of words",
                    "SELECT count(*) FROM memories m LEFT JOIN \
                     (SELECT doc, count(*) AS n FROM memories_fts_instance GROUP BY doc) i \
                     ON i.doc = m.rowid WHERE coalesce(i.n, 0) <> m.body_terms",
                ),
                (
                    "users whose word statistics disagree with their memories",
                    "SELECT count(*) FROM \
                     (SELECT user_id, count(*) AS docs, sum(body_terms) AS terms \
                      FROM memories GROUP BY user_id) m \
                     FULL JOIN fts_user_stats s ON s.user_id = m.user_id \
                     WHERE coalesce(m.docs, 0) <> coalesce(s.docs, 0) \
                        OR coalesce(m.terms, 0) <> coalesce(s.terms, 0)",
                ),
                (
                    "vectors whose length is not their model's",
                    "SELECT count(*) FROM embeddings e JOIN embedding_models m \
                     ON m.model = e.model WHERE length(e.vector) <> 4 * m.dimension",
                ),
            ];
            for (what, sql) in checks {
                let count: i64 = tx
                    .query_row(sql, [], |r| r.get(0))
                    .map_err(|e| self.err(e))?;
                if count > 0 {
                    problems.push(format!("{count} {what}"));
                }
            }
            Ok(problems)
        })
    }

    /// The store error for a SQLite error on this database.
    pub(crate) fn err(&self, e: rusqlite::Error) -> StoreError {
        from_sqlite(e, &self.path, self.options.busy_timeout)
    }

    /// Now by the store's clock, to the microsecond.
    pub(crate) fn now(&self) -> Timestamp {
        engram_core::time::truncate_to_micros(self.options.clock.now())
    }

    /// Runs `f` in an immediate write transaction, committing when it returns Ok.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.transaction(f)
    }

    /// [`Database::write`] for work with errors of its own (jobs, tokens, the graph).
    pub(crate) fn transaction<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let value = f(&tx)?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(value)
    }

    /// Runs `f` on the writer connection outside any transaction of ours (a single statement
    /// is its own transaction).
    pub(crate) fn write_one<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        f(&lock(&self.writer))
    }

    /// A number that moves whenever anyone commits to the file (another process, or this
    /// handle's writer); waits for the watching connection if it is in use.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        self.watched_version(&mut lock(&self.watcher))
    }

    /// [`Database::data_version`] if the watching connection is free right now; never waits.
    pub fn try_data_version(&self) -> Option<i64> {
        let mut watcher = self.watcher.try_lock().ok()?;
        self.watched_version(&mut watcher).ok()
    }

    /// The data version seen by the watching connection, opening it the first time.
    fn watched_version(&self, watcher: &mut Option<Connection>) -> Result<i64, StoreError> {
        let conn = match watcher {
            Some(conn) => conn,
            None => watcher.insert(open_connection(&self.path, &self.options, false)?),
        };
        conn.pragma_query_value(None, "data_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Runs `f` as [`Self::write`] does, with the writer's page cache at `cache_kib` for the
    /// transaction and back to its usual size after it (which also frees the pages).
    fn write_with_cache<T>(
        &self,
        cache_kib: i64,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = lock(&self.writer);
        set_cache_kib(&conn, cache_kib).map_err(|e| self.err(e))?;
        let written = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))
            .and_then(|tx| {
                let value = f(&tx)?;
                tx.commit().map_err(|e| self.err(e))?;
                Ok(value)
            });
        let restored = set_cache_kib(&conn, CACHE_KIB).map_err(|e| self.err(e));
        let value = written?;
        restored?;
        Ok(value)
    }

    /// Runs `f` on a pooled read connection.
    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.reading(f)
    }

    /// [`Database::read`] for work with errors of its own (jobs, tokens, the graph).
    pub(crate) fn reading<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        let pooled = lock(&self.readers).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open_connection(&self.path, &self.options, false)?,
        };
        let result = f(&conn);
        let mut idle = lock(&self.readers);
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }

    fn insert(
        &self,
        tx: &Transaction<'_>,
        new: NewMemory,
        actor: &str,
        now: Timestamp,
        stats: &mut UserStatsDelta,
    ) -> Result<AddOutcome, StoreError> {
        new.validate()?;
        let truncate = engram_core::time::truncate_to_micros;
        let id = new.id.unwrap_or_default();
        let created_at = truncate(new.created_at.unwrap_or(now));
        let memory = Memory {
            id,
            content_hash: new.content_hash(),
            kind: new.kind,
            text: new.text,
            category: new.category,
            importance: new.importance,
            created_at,
            updated_at: truncate(new.updated_at.unwrap_or(now)),
            valid_from: truncate(new.valid_from.unwrap_or(created_at)),
            valid_to: new.valid_to.map(truncate),
            expires_at: new.expires_at.map(truncate),
            source: new.source,
            scope: new.scope,
            metadata: new.metadata,
        };
        let metadata = serde_json::Value::Object(memory.metadata.clone()).to_string();
        // Analysed before the row exists (every stored row precedes it), so the row is written
        // once, term count included.
        let body = index_body(tx, None, &memory).map_err(|e| self.err(e))?;
        let inserted = tx
            .prepare_cached(
                "INSERT OR IGNORE INTO memories (id, user_id, agent_id, session_id, kind, text, \
                 category, importance, metadata, created_at, updated_at, valid_from, valid_to, \
                 expires_at, source, content_hash, body_terms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
                 ?17)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    memory.id.to_string(),
                    memory.scope.user_id,
                    memory.scope.agent_id,
                    memory.scope.session_id,
                    memory.kind.as_str(),
                    memory.text,
                    memory.category,
                    memory.importance.get(),
                    metadata,
                    micros(memory.created_at),
                    micros(memory.updated_at),
                    micros(memory.valid_from),
                    memory.valid_to.map(micros),
                    memory.expires_at.map(micros),
                    memory.source,
                    memory.content_hash,
                    body.terms,
                ])
            })
            .map_err(|e| self.err(e))?;
        if inserted == 0 {
            // The id first: a memory that names its id (an import) and finds it taken by another
            // user's memory is refused, not counted as a copy of it.
            let by_id: Option<String> = tx
                .prepare_cached("SELECT user_id FROM memories WHERE id = ?1")
                .and_then(|mut stmt| {
                    stmt.query_row(params![memory.id.to_string()], |r| r.get(0))
                        .optional()
                })
                .map_err(|e| self.err(e))?;
            let existing: String = match by_id {
                Some(owner) if owner != memory.scope.user_id => {
                    return Err(StoreError::Invalid(InvalidMemory::IdOfAnotherUser(
                        memory.id,
                    )));
                }
                Some(_) => memory.id.to_string(),
                None => tx
                    .prepare_cached(
                        "SELECT id FROM memories WHERE content_hash = ?1 AND valid_to IS NULL \
                         LIMIT 1",
                    )
                    .and_then(|mut stmt| stmt.query_row(params![memory.content_hash], |r| r.get(0)))
                    .map_err(|e| self.err(e))?,
            };
            let existing = existing.parse().map_err(|_| {
                StoreError::Backend(format!("stored id '{existing}' is not a UUID"))
            })?;
            return Ok(AddOutcome::Duplicate(existing));
        }
        let rowid = tx.last_insert_rowid();
        write_index_body(tx, rowid, &body).map_err(|e| self.err(e))?;
        stats.count(&memory.scope.user_id, body.terms);
        record(
            tx,
            &memory.id,
            &memory.scope.user_id,
            HistoryKind::Add,
            None,
            Some(&memory.text),
            actor,
            now,
        )
        .map_err(|e| self.err(e))?;
        Ok(AddOutcome::Added(memory))
    }

    /// The best `limit` memories (row id, BM25) for the query terms among those passing the
    /// filter, scored with the user's own statistics.
    fn rank_lexical(
        &self,
        conn: &Connection,
        filter: &Filter,
        alternatives: &[Vec<String>],
        (conditions, filter_values, now): (&str, Vec<Value>, Timestamp),
        limit: usize,
    ) -> rusqlite::Result<Vec<(i64, f64)>> {
        let (documents, total_terms, generation): (f64, f64, i64) = conn
            .prepare_cached(
                "SELECT docs, terms, \
                 (SELECT generation FROM memory_generations WHERE user_id = ?1) \
                 FROM fts_user_stats WHERE user_id = ?1",
            )?
            .query_row([&filter.user_id], |r| {
                Ok((
                    r.get::<_, i64>(0)? as f64,
                    r.get::<_, i64>(1)? as f64,
                    r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                ))
            })
            .optional()?
            .unwrap_or((0.0, 0.0, 0));
        if documents <= 0.0 {
            return Ok(Vec::new());
        }
        let average_length = total_terms / documents;

        // Words only (no phrase), a filter the facts decide, facts loaded: the best `limit` by
        // the threshold algorithm over impact lists, whatever the lists' lengths.
        if let Some(fact_filter) = FactFilter::new(filter, micros(now))
            && alternatives.iter().all(|terms| terms.len() == 1)
            && let Some(found) = self.rank_by_impacts(
                conn,
                &filter.user_id,
                &fact_filter,
                alternatives,
                (documents, total_terms, generation),
                limit,
            )?
        {
            self.lexical_docs
                .by_impacts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(found);
        }
        self.lexical_docs
            .exhaustive
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);

        // Each alternative's documents with their term frequency, sorted by document. A single
        // word needs only its per-document counts; positions are read only for the terms of a
        // phrase (a run of unspaced-script characters).
        let phrase_terms: HashSet<&String> = alternatives
            .iter()
            .filter(|terms| terms.len() > 1)
            .flatten()
            .collect();
        let mut postings = lexical::Postings::new();
        let mut instances = conn
            .prepare_cached("SELECT doc, \"offset\" FROM memories_fts_instance WHERE term = ?1")?;
        for term in phrase_terms {
            let mut docs: HashMap<i64, Vec<u32>> = HashMap::new();
            let mut rows = instances.query([term])?;
            while let Some(row) = rows.next()? {
                let offset: i64 = row.get(1)?;
                docs.entry(row.get(0)?)
                    .or_default()
                    .push(u32::try_from(offset).unwrap_or(u32::MAX));
            }
            docs.values_mut().for_each(|o| o.sort_unstable());
            postings.insert(term.clone(), docs);
        }
        let mut occurrences =
            conn.prepare_cached("SELECT doc FROM memories_fts_instance WHERE term = ?1")?;
        let mut weighted: Vec<(f64, Vec<(i64, u32)>)> = Vec::with_capacity(alternatives.len());
        for terms in alternatives {
            let frequencies = match terms.as_slice() {
                [single] => {
                    lexical::count_runs(occurrences.query_map([single], |row| row.get(0))?)?
                }
                phrase => {
                    let mut counts: Vec<(i64, u32)> =
                        lexical::phrase_frequencies(&postings, phrase)
                            .into_iter()
                            .collect();
                    counts.sort_unstable();
                    counts
                }
            };
            let idf = lexical::idf(documents, frequencies.len() as f64);
            weighted.push((idf, frequencies));
        }
        let mut candidates: Vec<i64> = weighted
            .iter()
            .flat_map(|(_, f)| f.iter().map(|&(doc, _)| doc))
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        if candidates.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        // Term frequencies as a table: one row per candidate, one column per alternative.
        let columns = weighted.len();
        let mut frequency_table = vec![0u32; candidates.len() * columns];
        for (column, (_, frequencies)) in weighted.iter().enumerate() {
            for &(doc, tf) in frequencies {
                if let Ok(at) = candidates.binary_search(&doc) {
                    frequency_table[at * columns + column] = tf;
                }
            }
        }

        let score = |at: usize, length: f64| -> f64 {
            weighted
                .iter()
                .zip(&frequency_table[at * columns..(at + 1) * columns])
                .filter(|(_, tf)| **tf > 0)
                .map(|((idf, _), &tf)| {
                    lexical::term_score(*idf, f64::from(tf), length, average_length)
                })
                .sum()
        };
        // The most a candidate can score, whatever its length: its score at the fewest terms a
        // memory holding its matches can have (distinct words sit at distinct positions; each
        // occurrence of any one alternative starts at its own). A term's score falls as the
        // length grows, by the same arithmetic in the same order, so no score exceeds its bound.
        let distinct_words: Vec<bool> = alternatives
            .iter()
            .enumerate()
            .map(|(column, terms)| {
                terms.len() == 1 && !alternatives[..column].iter().any(|other| other == terms)
            })
            .collect();
        let bounded = weighted.iter().all(|(idf, _)| *idf > 0.0);
        let bound = |at: usize| -> f64 {
            if !bounded {
                return f64::INFINITY;
            }
            let row = &frequency_table[at * columns..(at + 1) * columns];
            let words: u32 = row
                .iter()
                .zip(&distinct_words)
                .filter(|(_, distinct)| **distinct)
                .map(|(tf, _)| *tf)
                .sum();
            let fewest = words.max(row.iter().copied().max().unwrap_or(0)).max(1);
            score(at, f64::from(fewest))
        };
        let mut pending: Vec<(f64, usize)> =
            (0..candidates.len()).map(|at| (bound(at), at)).collect();

        // The candidates are read in chunks, best bound first, until the `limit`-th best score
        // found beats every bound left: the rows read follow `limit` and how far the best stand
        // out, not how many memories hold a query word. Once that reading costs more than the
        // user's facts would, the facts are loaded (and kept, see `lexical_docs`) instead.
        let fact_filter = FactFilter::new(filter, micros(now));
        let sql = facts_by_row_sql(conditions);
        let mut by_row = conn.prepare_cached(&sql)?;
        let mut scored: Vec<(f64, i64, i64)> = Vec::new();
        let mut chunk = limit.saturating_mul(4).max(256);
        // The `limit`-th best score is at most the `limit`-th best bound, so every candidate
        // whose bound reaches that one has to be read. The first chunk holds them all: when
        // they are too many (one common word: all its memories share a bound), the facts are
        // loaded at once rather than after reading rows that cost as much.
        if limit > 0 && limit < pending.len() {
            let mut bounds: Vec<f64> = pending.iter().map(|&(bound, _)| bound).collect();
            let (_, kth, _) = bounds.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
            let kth = *kth;
            chunk = chunk.max(pending.iter().filter(|&&(bound, _)| bound >= kth).count());
        }
        let mut first = true;
        while !pending.is_empty() {
            // After the first chunk, when the rows that may still have to be read would cost as
            // much as loading the facts, they are loaded (one common word read together with
            // memories that hold it more than once: its many single occurrences keep one bound).
            let take = if !first
                && fact_filter.is_some()
                && pending.len().saturating_mul(ROWS_READ_PER_LOOKUP) >= documents as usize
            {
                pending.len()
            } else {
                chunk.min(pending.len())
            };
            first = false;
            let from_facts = match &fact_filter {
                Some(fact_filter) => self
                    .lexical_docs
                    .facts(conn, &filter.user_id, generation, documents as usize, take)?
                    .map(|docs| (fact_filter, docs)),
                None => None,
            };
            let mut rowids: Vec<i64> = Vec::new();
            match &from_facts {
                // Every candidate left, from the facts; rows added since they were read, by row.
                Some((fact_filter, docs)) => {
                    for (_, at) in pending.drain(..) {
                        let rowid = candidates[at];
                        match docs.get(rowid) {
                            Some(doc) if fact_filter.admits(doc) => {
                                let score = score(at, f64::from(doc.length));
                                scored.push((score, doc.created_at, rowid));
                            }
                            Some(_) => {}
                            None => rowids.push(rowid),
                        }
                    }
                }
                None => {
                    if take < pending.len() {
                        pending.select_nth_unstable_by(take - 1, |a, b| b.0.total_cmp(&a.0));
                    }
                    rowids.extend(pending.drain(..take).map(|(_, at)| candidates[at]));
                    rowids.sort_unstable();
                }
            }
            read_by_row(
                &mut by_row,
                &rowids,
                &filter_values,
                |rowid, length, created_at| {
                    if let Ok(at) = candidates.binary_search(&rowid) {
                        scored.push((score(at, length), created_at, rowid));
                    }
                },
            )?;
            keep_best(&mut scored, limit);
            if scored.len() >= limit {
                // A bound equal to the `limit`-th score may still win its tie on age.
                let kth = scored[limit - 1].0;
                pending.retain(|&(bound, _)| bound >= kth);
            }
            chunk = chunk.saturating_mul(2);
        }
        keep_best(&mut scored, limit);
        Ok(scored.into_iter().map(|(s, _, rowid)| (rowid, s)).collect())
    }

    /// [`Self::rank_lexical`] for single words when the user's facts are loaded and cover every
    /// document: each word's contributions as an impact list (kept for long lists, see
    /// `lexical_docs`), then the threshold algorithm (`topk`). Same hits and scores as scoring
    /// every candidate; `None` when it cannot run (the caller then scores every candidate).
    fn rank_by_impacts(
        &self,
        conn: &Connection,
        user_id: &str,
        fact_filter: &FactFilter,
        alternatives: &[Vec<String>],
        (documents, total_terms, generation): (f64, f64, i64),
        limit: usize,
    ) -> rusqlite::Result<Option<Vec<(i64, f64)>>> {
        let Some(docs) = self.lexical_docs.loaded(user_id, generation) else {
            return Ok(None);
        };
        if docs.len() as f64 != documents {
            // Memories added since the facts were read: the exhaustive path looks them up.
            return Ok(None);
        }
        let average_length = total_terms / documents;
        let key = ImpactKey {
            load: docs.load_id(),
            documents: documents as i64,
            terms: total_terms as i64,
        };
        let mut occurrences =
            conn.prepare_cached("SELECT doc FROM memories_fts_instance WHERE term = ?1")?;
        let mut lists: Vec<Arc<Impacts>> = Vec::with_capacity(alternatives.len());
        for term in alternatives.iter().flatten() {
            if let Some(list) = self.lexical_docs.impacts(user_id, term, key) {
                lists.push(list);
                continue;
            }
            let frequencies =
                lexical::count_runs(occurrences.query_map([term], |row| row.get(0))?)?;
            let idf = lexical::idf(documents, frequencies.len() as f64);
            let mut entries = Vec::with_capacity(frequencies.len());
            for (rowid, tf) in frequencies {
                let Some(position) = docs.position(rowid) else {
                    return Ok(None);
                };
                let length = f64::from(docs.at(position).length);
                entries.push((
                    position,
                    lexical::term_score(idf, f64::from(tf), length, average_length),
                ));
            }
            let list = Arc::new(Impacts::new(entries));
            self.lexical_docs
                .keep_impacts(user_id, term, key, Arc::clone(&list));
            lists.push(list);
        }
        let lists: Vec<&Impacts> = lists.iter().map(|l| l.as_ref()).collect();
        let found = topk::top_k(
            &lists,
            limit,
            |position| fact_filter.admits(docs.at(position)),
            |position| {
                let doc = docs.at(position);
                (doc.created_at, doc.rowid)
            },
        );
        Ok(Some(
            found
                .into_iter()
                .map(|(position, score)| (docs.at(position).rowid, score))
                .collect(),
        ))
    }

    fn get_in(&self, conn: &Connection, id: MemoryId) -> Result<(i64, Memory), StoreError> {
        let sql = format!("SELECT {MEMORY_COLUMNS}, m.rowid FROM memories m WHERE m.id = ?1");
        conn.prepare_cached(&sql)
            .and_then(|mut stmt| {
                stmt.query_row([id.to_string()], |row| {
                    Ok((row.get(MEMORY_COLUMN_COUNT)?, memory_from_row(row)?))
                })
                .optional()
            })
            .map_err(|e| self.err(e))?
            .ok_or(StoreError::NotFound(id))
    }
}

// ---- The approximate vector index (ann/): loading, tuning and counting. ----
impl Database {
    /// Loads `model`'s in-process vector index now (unless it is loaded; waits for a build
    /// under way) and brings it up to date; a server calls this at start so that the first large
    /// search does not wait, and benchmarks to time the build.
    pub fn warm_vector_index(&self, model: &str) -> Result<VectorIndexStats, StoreError> {
        self.vector_indexes.warm(model)
    }

    /// Changes, from now on, the scope size up to which vector search is exact and the
    /// approximate search's list length (see [`VectorIndexOptions`]).
    pub fn tune_vector_search(&self, exact_max_scope: usize, ef_search: usize) {
        self.vector_indexes.tune(exact_max_scope, ef_search);
    }

    /// How many vector searches took each path since this handle was opened.
    pub fn vector_search_counts(&self) -> VectorSearchCounts {
        self.vector_indexes.counts()
    }

    /// How many lexical searches took each path since this handle was opened.
    pub fn lexical_search_counts(&self) -> LexicalSearchCounts {
        self.lexical_docs.counts()
    }
}
// ---- end of the approximate vector index ----

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a connection half-used: SQLite rolls back.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_connection(
    path: &Path,
    options: &StoreOptions,
    create: bool,
) -> Result<Connection, StoreError> {
    let map = |e| from_sqlite(e, path, options.busy_timeout);
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(map)?;
    if create {
        // The writer checkpoints every ~16 MB of log instead of every 4 MB: fewer fsyncs during
        // bulk imports, at the cost of a somewhat longer log for readers to consult.
        conn.pragma_update(None, "wal_autocheckpoint", 4000)
            .map_err(map)?;
    }
    conn.busy_timeout(options.busy_timeout).map_err(map)?;
    conn.set_prepared_statement_cache_capacity(64);
    // Reading the header is the first moment SQLite notices a file that is not a database.
    conn.pragma_query_value(None, "schema_version", |r| r.get::<_, i64>(0))
        .map_err(map)?;
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY; \
         PRAGMA mmap_size = 268435456;",
    )
    .map_err(map)?;
    set_cache_kib(&conn, CACHE_KIB).map_err(map)?;
    if let Some(max) = options.max_database_bytes {
        let page_size: u64 = conn
            .pragma_query_value(None, "page_size", |r| r.get::<_, i64>(0))
            .map_err(map)?
            .max(512) as u64;
        conn.pragma_update(None, "max_page_count", (max / page_size).max(1) as i64)
            .map_err(map)?;
    }
    Ok(conn)
}

/// Page cache of every connection, in KiB.
const CACHE_KIB: i64 = 32_000;

/// Page cache of the writer while it stores a large batch, in KiB. A batch of 20,000 memories
/// dirties tens of MB of pages of the content-hash index (its keys are random); when they do not
/// fit, SQLite spills them to the log mid-transaction and writes many of them again later.
const BULK_CACHE_KIB: i64 = 128_000;

/// Batches at least this large get [`BULK_CACHE_KIB`] (an import, not an agent's few memories).
const BULK_BATCH: usize = 5_000;

fn set_cache_kib(conn: &Connection, kib: i64) -> rusqlite::Result<()> {
    // A negative cache_size is a size in KiB rather than a page count.
    conn.pragma_update(None, "cache_size", -kib)
}

/// What a database file says about itself.
struct Identity {
    app_id: i32,
    version: u32,
    tables: i64,
}

/// Reads the three in one go; call it inside a transaction, or they may see different states.
fn identity(conn: &Connection) -> rusqlite::Result<Identity> {
    Ok(Identity {
        app_id: conn.pragma_query_value(None, "application_id", |r| r.get(0))?,
        version: conn.pragma_query_value(None, "user_version", |r| r.get(0))?,
        tables: conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?,
    })
}

/// Refuses files that are not engram's, or are newer than this build.
fn check_identity(identity: &Identity, path: &Path) -> Result<(), StoreError> {
    if identity.app_id != APPLICATION_ID && (identity.app_id != 0 || identity.tables > 0) {
        return Err(StoreError::NotEngram {
            location: crate::error::location(path),
        });
    }
    let latest = latest_version();
    if identity.version > latest {
        return Err(StoreError::TooNew {
            location: crate::error::location(path),
            found: identity.version,
            supported: latest,
        });
    }
    Ok(())
}

/// Brings the database to the current schema, or explains why it cannot. Nothing is written to
/// a file that turns out not to be engram's.
fn migrate(conn: &mut Connection, path: &Path, options: &StoreOptions) -> Result<(), StoreError> {
    let map = |e| from_sqlite(e, path, options.busy_timeout);
    // One read transaction, so the three reads see one state of the file: read one by one,
    // another process's first migration could commit between them, and a file that has tables
    // but (as read a moment earlier) no application id looks like someone else's.
    let first = {
        let tx = conn.transaction().map_err(map)?;
        let first = identity(&tx).map_err(map)?;
        tx.commit().map_err(map)?;
        first
    };
    check_identity(&first, path)?;
    set_wal(conn, path, options)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map)?;
    // Read again inside the write lock: another process may have migrated while we waited.
    let found = identity(&tx).map_err(map)?;
    check_identity(&found, path)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found.version as usize) {
        tx.execute_batch(sql).map_err(map)?;
        tx.pragma_update(None, "user_version", index as u32 + 1)
            .map_err(map)?;
    }
    if found.app_id == 0 {
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(map)?;
    }
    let analyzer: Option<String> = tx
        .query_row(
            "SELECT value FROM engram_meta WHERE key = 'text_analyzer'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(map)?;
    if analyzer.as_deref() != Some(fts::ANALYZER_VERSION) {
        rebuild_text_index(&tx).map_err(map)?;
    }
    set_fts_buffer(&tx).map_err(map)?;
    tx.commit().map_err(map)
}

/// Bytes of new postings the full-text index buffers before writing a segment.
const FTS_BUFFER_BYTES: i64 = 8 << 20;

/// Gives the full-text index a larger write buffer than FTS5's default of 1 MiB (a setting
/// stored in the index itself, written once). Terms carry their user's prefix, so a batch of
/// 2,000 imported memories overflowed the default several times and wrote several small
/// segments that then had to be merged again; with 8 MiB a batch becomes one segment.
fn set_fts_buffer(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let current: Option<i64> = tx
        .query_row(
            "SELECT v FROM memories_fts_config WHERE k = 'hashsize'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if current != Some(FTS_BUFFER_BYTES) {
        tx.execute(
            "INSERT INTO memories_fts (memories_fts, rank) VALUES ('hashsize', ?1)",
            [FTS_BUFFER_BYTES],
        )?;
    }
    Ok(())
}

/// Switches to write-ahead logging, which lets readers and one writer work at once. The switch
/// needs a moment alone with the file, so it is retried while another process holds it.
fn set_wal(conn: &Connection, path: &Path, options: &StoreOptions) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + options.busy_timeout;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(rusqlite::Error::SqliteFailure(f, _))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(from_sqlite(e, path, options.busy_timeout)),
        }
    }
}

/// The text of the episode just before `memory` in its conversation (same user and session,
/// earlier in time, or stored earlier at the same time), if it has one.
///
/// A turn of a conversation is often only understandable with the turn it answers ("Yes, twice
/// last year!"), so its words are indexed with it: a search for what was asked finds the answer.
/// Only the full-text index sees the context; the memory's text and its vector are its own.
fn conversation_context(
    tx: &Connection,
    rowid: Option<i64>,
    memory: &Memory,
) -> rusqlite::Result<Option<String>> {
    let Some(session) = &memory.scope.session_id else {
        return Ok(None);
    };
    if memory.kind != engram_core::Kind::Episode {
        return Ok(None);
    }
    // A row not stored yet comes after every stored one (rowids only grow).
    let rowid = rowid.unwrap_or(i64::MAX);
    tx.prepare_cached(
        "SELECT text FROM memories WHERE user_id = ?1 AND session_id = ?2 \
         AND kind = 'episode' AND rowid <> ?3 \
         AND (created_at < ?4 OR (created_at = ?4 AND rowid < ?3)) \
         ORDER BY created_at DESC, rowid DESC LIMIT 1",
    )?
    .query_row(
        params![
            memory.scope.user_id,
            session,
            rowid,
            micros(memory.created_at)
        ],
        |r| r.get(0),
    )
    .optional()
}

/// What the full-text index holds for one memory: its analysed words with those of its
/// conversation context, and how many there are.
struct IndexBody {
    text: String,
    terms: i64,
}

/// Analyses a memory for the full-text index: its words, then those of the turn before it in
/// its conversation. `rowid` is `None` for a memory about to be stored.
fn index_body(tx: &Connection, rowid: Option<i64>, memory: &Memory) -> rusqlite::Result<IndexBody> {
    let user = &memory.scope.user_id;
    let mut text = fts::index_text(user, &memory.text);
    if let Some(context) = conversation_context(tx, rowid, memory)? {
        let context = fts::index_text(user, &context);
        if !context.is_empty() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&context);
        }
    }
    let terms = if text.is_empty() {
        0
    } else {
        text.split(' ').count() as i64
    };
    Ok(IndexBody { text, terms })
}

/// Adds an analysed body to the full-text index under `rowid`.
fn write_index_body(tx: &Connection, rowid: i64, body: &IndexBody) -> rusqlite::Result<()> {
    tx.prepare_cached("INSERT INTO memories_fts (rowid, body) VALUES (?1, ?2)")?
        .execute(params![rowid, body.text])?;
    Ok(())
}

/// Documents and terms added to each user's full-text statistics within one transaction,
/// written once at its end rather than row by row.
#[derive(Debug, Default)]
struct UserStatsDelta(HashMap<String, (i64, i64)>);

impl UserStatsDelta {
    fn count(&mut self, user_id: &str, terms: i64) {
        match self.0.get_mut(user_id) {
            Some((docs, total)) => {
                *docs += 1;
                *total += terms;
            }
            None => {
                self.0.insert(user_id.to_string(), (1, terms));
            }
        }
    }

    fn write(self, tx: &Connection) -> rusqlite::Result<()> {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO fts_user_stats (user_id, docs, terms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (user_id) DO UPDATE SET docs = docs + excluded.docs, \
             terms = terms + excluded.terms",
        )?;
        for (user, (docs, terms)) in self.0 {
            upsert.execute(params![user, docs, terms])?;
        }
        Ok(())
    }
}

/// Indexes a stored memory's words, with those of the turn before it in its conversation, and
/// counts them into the user's statistics.
fn index_row(
    tx: &Connection,
    rowid: i64,
    memory: &Memory,
    stats: &mut UserStatsDelta,
) -> rusqlite::Result<()> {
    let body = index_body(tx, Some(rowid), memory)?;
    write_index_body(tx, rowid, &body)?;
    tx.prepare_cached("UPDATE memories SET body_terms = ?2 WHERE rowid = ?1")?
        .execute(params![rowid, body.terms])?;
    stats.count(&memory.scope.user_id, body.terms);
    Ok(())
}

/// Re-indexes every memory (after the text analyser changed), in the order they were stored.
pub(crate) fn rebuild_text_index(tx: &Connection) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO memories_fts (memories_fts) VALUES ('delete-all')",
        [],
    )?;
    tx.execute("DELETE FROM fts_user_stats", [])?;
    let rows: Vec<(i64, Memory)> = tx
        .prepare(&format!(
            "SELECT {MEMORY_COLUMNS}, m.rowid FROM memories m ORDER BY m.rowid"
        ))?
        .query_map([], |row| {
            Ok((row.get(MEMORY_COLUMN_COUNT)?, memory_from_row(row)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut stats = UserStatsDelta::default();
    for (rowid, memory) in &rows {
        index_row(tx, *rowid, memory, &mut stats)?;
    }
    stats.write(tx)?;
    tx.execute(
        "INSERT INTO engram_meta (key, value) VALUES ('text_analyzer', ?1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [fts::ANALYZER_VERSION],
    )?;
    Ok(())
}

/// Drops the vectors of a content hash no memory uses any more.
fn drop_orphan_vectors(tx: &Transaction<'_>, content_hash: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "DELETE FROM embeddings WHERE content_hash = ?1 \
         AND NOT EXISTS (SELECT 1 FROM memories WHERE content_hash = ?1)",
    )?
    .execute([content_hash])?;
    Ok(())
}

fn unindex_row(tx: &Transaction<'_>, rowid: i64) -> rusqlite::Result<()> {
    let counted: Option<(String, i64)> = tx
        .prepare_cached("SELECT user_id, body_terms FROM memories WHERE rowid = ?1")?
        .query_row([rowid], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    tx.prepare_cached("DELETE FROM memories_fts WHERE rowid = ?1")?
        .execute([rowid])?;
    if let Some((user, terms)) = counted {
        tx.prepare_cached(
            "UPDATE fts_user_stats SET docs = max(docs - 1, 0), terms = max(terms - ?2, 0) \
             WHERE user_id = ?1",
        )?
        .execute(params![user, terms])?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn record(
    tx: &Transaction<'_>,
    id: &MemoryId,
    user_id: &str,
    event: HistoryKind,
    old_text: Option<&str>,
    new_text: Option<&str>,
    actor: &str,
    at: Timestamp,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO history (memory_id, user_id, event, old_text, new_text, actor, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        id.to_string(),
        user_id,
        event.as_str(),
        old_text,
        new_text,
        actor,
        micros(at)
    ])?;
    Ok(())
}

/// The memory operations, one per method of [`engram_core::MemoryStore`].
impl Database {
    /// See [`engram_core::MemoryStore::add`].
    pub fn add(&self, memory: NewMemory, actor: &str) -> Result<AddOutcome, StoreError> {
        let now = self.now();
        self.write(|tx| {
            let mut stats = UserStatsDelta::default();
            let outcome = self.insert(tx, memory, actor, now, &mut stats)?;
            stats.write(tx).map_err(|e| self.err(e))?;
            Ok(outcome)
        })
    }

    /// See [`engram_core::MemoryStore::add_many`].
    pub fn add_many(
        &self,
        memories: Vec<NewMemory>,
        actor: &str,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, StoreError> {
        let now = self.now();
        let cache_kib = if memories.len() >= BULK_BATCH {
            BULK_CACHE_KIB
        } else {
            CACHE_KIB
        };
        self.write_with_cache(cache_kib, |tx| {
            let mut outcomes = Vec::with_capacity(memories.len());
            let mut stats = UserStatsDelta::default();
            for memory in memories {
                match self.insert(tx, memory, actor, now, &mut stats) {
                    Err(StoreError::Invalid(e)) => outcomes.push(Err(StoreError::Invalid(e))),
                    // Anything else (disk full, corruption) aborts the whole batch.
                    Err(e) => return Err(e),
                    Ok(outcome) => outcomes.push(Ok(outcome)),
                }
            }
            stats.write(tx).map_err(|e| self.err(e))?;
            Ok(outcomes)
        })
    }

    /// See [`engram_core::MemoryStore::get`].
    pub fn get(&self, id: MemoryId) -> Result<Memory, StoreError> {
        self.read(|conn| self.get_in(conn, id).map(|(_, m)| m))
    }

    /// See [`engram_core::MemoryStore::update`].
    pub fn update(
        &self,
        id: MemoryId,
        patch: MemoryPatch,
        actor: &str,
    ) -> Result<Memory, StoreError> {
        patch.validate()?;
        let now = self.now();
        self.write(|tx| {
            let (rowid, mut memory) = self.get_in(tx, id)?;
            let old_text = memory.text.clone();
            let old_hash = memory.content_hash.clone();
            if let Some(text) = patch.text {
                let hash = content_hash(&memory.scope, &text);
                if hash != memory.content_hash && memory.valid_to.is_none() {
                    let clash: Option<String> = tx
                        .prepare_cached(
                            "SELECT id FROM memories WHERE content_hash = ?1 \
                             AND valid_to IS NULL AND id <> ?2",
                        )
                        .and_then(|mut s| {
                            s.query_row(params![hash, id.to_string()], |r| r.get(0))
                                .optional()
                        })
                        .map_err(|e| self.err(e))?;
                    if let Some(other) = clash.and_then(|o| o.parse().ok()) {
                        return Err(StoreError::Duplicate(other));
                    }
                }
                memory.text = text;
                memory.content_hash = hash;
            }
            if let Some(category) = patch.category {
                memory.category = category;
            }
            if let Some(importance) = patch.importance {
                memory.importance = importance;
            }
            if let Some(metadata) = patch.metadata {
                memory.metadata = metadata;
            }
            if let Some(expires_at) = patch.expires_at {
                memory.expires_at = expires_at.map(engram_core::time::truncate_to_micros);
            }
            memory.updated_at = now;
            let metadata = serde_json::Value::Object(memory.metadata.clone()).to_string();
            tx.prepare_cached(
                "UPDATE memories SET text = ?1, content_hash = ?2, category = ?3, importance = ?4, \
                 metadata = ?5, expires_at = ?6, updated_at = ?7 WHERE rowid = ?8",
            )
            .and_then(|mut s| {
                s.execute(params![
                    memory.text,
                    memory.content_hash,
                    memory.category,
                    memory.importance.get(),
                    metadata,
                    memory.expires_at.map(micros),
                    micros(now),
                    rowid
                ])
            })
            .map_err(|e| self.err(e))?;
            if memory.text != old_text {
                let mut stats = UserStatsDelta::default();
                unindex_row(tx, rowid)
                    .and_then(|_| index_row(tx, rowid, &memory, &mut stats))
                    .and_then(|_| stats.write(tx))
                    .and_then(|_| drop_orphan_vectors(tx, &old_hash))
                    .map_err(|e| self.err(e))?;
            }
            record(
                tx,
                &id,
                &memory.scope.user_id,
                HistoryKind::Update,
                Some(&old_text),
                Some(&memory.text),
                actor,
                now,
            )
            .map_err(|e| self.err(e))?;
            Ok(memory)
        })
    }

    /// See [`engram_core::MemoryStore::invalidate`].
    pub fn invalidate(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        let now = self.now();
        self.write(|tx| {
            let (rowid, mut memory) = self.get_in(tx, id)?;
            if memory.valid_to.is_some() {
                return Err(StoreError::AlreadyClosed(id));
            }
            memory.valid_to = Some(now);
            memory.updated_at = now;
            tx.prepare_cached(
                "UPDATE memories SET valid_to = ?1, updated_at = ?1 WHERE rowid = ?2",
            )
            .and_then(|mut s| s.execute(params![micros(now), rowid]))
            .map_err(|e| self.err(e))?;
            record(
                tx,
                &id,
                &memory.scope.user_id,
                HistoryKind::Invalidate,
                Some(&memory.text),
                None,
                actor,
                now,
            )
            .map_err(|e| self.err(e))?;
            Ok(memory)
        })
    }

    /// See [`engram_core::MemoryStore::delete`].
    pub fn delete(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        let now = self.now();
        self.write(|tx| {
            let (rowid, memory) = self.get_in(tx, id)?;
            unindex_row(tx, rowid).map_err(|e| self.err(e))?;
            tx.prepare_cached("DELETE FROM memories WHERE rowid = ?1")
                .and_then(|mut s| s.execute([rowid]))
                .and_then(|_| drop_orphan_vectors(tx, &memory.content_hash))
                .map_err(|e| self.err(e))?;
            record(
                tx,
                &id,
                &memory.scope.user_id,
                HistoryKind::Delete,
                Some(&memory.text),
                None,
                actor,
                now,
            )
            .map_err(|e| self.err(e))?;
            Ok(memory)
        })
    }

    /// See [`engram_core::MemoryStore::history`].
    pub fn history(&self, id: MemoryId) -> Result<Vec<HistoryEvent>, StoreError> {
        let rows = self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT event, old_text, new_text, actor, at FROM history \
                     WHERE memory_id = ?1 ORDER BY seq",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([id.to_string()], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, Option<String>>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, i64>(4)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })?;
        if rows.is_empty() {
            return Err(StoreError::NotFound(id));
        }
        rows.into_iter()
            .map(|(event, old_text, new_text, actor, at)| {
                Ok(HistoryEvent {
                    memory_id: id,
                    event: event.parse().map_err(StoreError::Backend)?,
                    old_text,
                    new_text,
                    actor,
                    at: Timestamp::from_microsecond(at)
                        .map_err(|e| StoreError::Backend(e.to_string()))?,
                })
            })
            .collect()
    }

    /// See [`engram_core::MemoryStore::list`].
    pub fn list(
        &self,
        filter: &Filter,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let (conditions, mut values) = filter_sql(filter, self.now())?;
        let sql = format!(
            "SELECT {MEMORY_COLUMNS} FROM memories m WHERE {conditions} \
             ORDER BY m.created_at DESC, m.rowid DESC LIMIT ? OFFSET ?"
        );
        values.push(Value::Integer(clamp_i64(limit)));
        values.push(Value::Integer(clamp_i64(offset)));
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
            stmt.query_map(rusqlite::params_from_iter(values), memory_from_row)
                .and_then(|rows| rows.collect())
                .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::count`].
    pub fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        let (conditions, values) = filter_sql(filter, self.now())?;
        let sql = format!("SELECT count(*) FROM memories m WHERE {conditions}");
        self.read(|conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_row(rusqlite::params_from_iter(values), |r| r.get::<_, i64>(0))
                })
                .map(|n| n.max(0) as u64)
                .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::search_lexical`].
    pub fn search_lexical(
        &self,
        filter: &Filter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError> {
        if query.trim().is_empty() {
            return Err(StoreError::BadQuery(
                "the search query is empty".to_string(),
            ));
        }
        let now = self.now();
        let (conditions, filter_values) = filter_sql(filter, now)?;
        let alternatives = fts::query_terms(&filter.user_id, query);
        if alternatives.is_empty() {
            return Err(StoreError::BadQuery(format!(
                "the query '{query}' has no words to search for"
            )));
        }
        self.read(|conn| {
            // One snapshot for the statistics, the postings, the facts and the hits.
            let snapshot = conn.unchecked_transaction().map_err(|e| self.err(e))?;
            let conn: &Connection = &snapshot;
            let ranked = self
                .rank_lexical(
                    conn,
                    filter,
                    &alternatives,
                    (&conditions, filter_values, now),
                    limit,
                )
                .map_err(|e| self.err(e))?;
            let fetch_sql = format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.rowid = ?1");
            let mut fetch = conn.prepare_cached(&fetch_sql).map_err(|e| self.err(e))?;
            ranked
                .into_iter()
                .map(|(rowid, bm25)| {
                    let memory = fetch
                        .query_row([rowid], memory_from_row)
                        .map_err(|e| self.err(e))?;
                    Ok(LexicalHit { memory, bm25 })
                })
                .collect()
        })
    }

    /// See [`engram_core::MemoryStore::forget_user`].
    pub fn forget_user(&self, user_id: &str) -> Result<u64, StoreError> {
        self.write(|tx| {
            tx.execute(
                "DELETE FROM memories_fts WHERE rowid IN \
                 (SELECT rowid FROM memories WHERE user_id = ?1)",
                [user_id],
            )
            .map_err(|e| self.err(e))?;
            // Content hashes include the user, so these vectors are this user's alone.
            tx.execute(
                "DELETE FROM embeddings WHERE content_hash IN \
                 (SELECT content_hash FROM memories WHERE user_id = ?1)",
                [user_id],
            )
            .map_err(|e| self.err(e))?;
            let removed = tx
                .execute("DELETE FROM memories WHERE user_id = ?1", [user_id])
                .map_err(|e| self.err(e))?;
            tx.execute("DELETE FROM history WHERE user_id = ?1", [user_id])
                .and_then(|_| {
                    tx.execute("DELETE FROM fts_user_stats WHERE user_id = ?1", [user_id])
                })
                .map_err(|e| self.err(e))?;
            Ok(removed as u64)
        })
    }

    /// See [`engram_core::MemoryStore::export_page`].
    pub fn export_page(
        &self,
        user_id: &str,
        after: Option<ExportCursor>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let (since, after_id) = match after {
            Some(cursor) => (micros(cursor.created_at), cursor.id.to_string()),
            None => (i64::MIN, String::new()),
        };
        self.read(|conn| {
            let sql = format!(
                "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.user_id = ?1 \
                 AND m.created_at >= ?2 AND (m.created_at > ?2 OR m.id > ?3) \
                 ORDER BY m.created_at, m.id LIMIT ?4"
            );
            conn.prepare_cached(&sql)
                .and_then(|mut stmt| {
                    stmt.query_map(
                        params![user_id, since, after_id, clamp_i64(limit)],
                        memory_from_row,
                    )?
                    .collect()
                })
                .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::owner`].
    pub fn owner(&self, id: MemoryId) -> Result<Option<String>, StoreError> {
        self.read(|conn| {
            conn.prepare_cached("SELECT user_id FROM history WHERE memory_id = ?1 LIMIT 1")
                .and_then(|mut stmt| stmt.query_row([id.to_string()], |r| r.get(0)).optional())
                .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::stats`].
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let now = micros(self.now());
        let mut stats = self.read(|conn| {
            let q = |sql: &str| -> Result<u64, StoreError> {
                conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                    .map(|n| n.max(0) as u64)
                    .map_err(|e| self.err(e))
            };
            let mut stats = StoreStats {
                memories: q("SELECT count(*) FROM memories")?,
                users: q("SELECT count(DISTINCT user_id) FROM memories")?,
                history_rows: q("SELECT count(*) FROM history")?,
                engine: ENGINE.to_string(),
                location: crate::error::location(&self.path),
                schema_version: latest_version(),
                dense_search: self.vector_indexes.mode().to_string(),
                ..StoreStats::default()
            };
            stats.closed = conn
                .query_row(
                    "SELECT count(*) FROM memories WHERE valid_to <= ?1 OR expires_at <= ?1",
                    [now],
                    |r| r.get::<_, i64>(0),
                )
                .map(|n| n.max(0) as u64)
                .map_err(|e| self.err(e))?;
            let mut stmt = conn
                .prepare("SELECT kind, count(*) FROM memories GROUP BY kind")
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            for (kind, n) in rows {
                if let Ok(kind) = kind.parse::<Kind>() {
                    stats.by_kind.insert(kind, n.max(0) as u64);
                }
            }
            Ok(stats)
        })?;
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        stats.size_bytes = Some(size(&self.path) + size(Path::new(&wal)));
        Ok(stats)
    }

    /// See [`engram_core::MemoryStore::users`].
    pub fn users(&self) -> Result<Vec<UserCount>, StoreError> {
        // One walk of the (user_id, created_at) index; no row is read.
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT user_id, count(*) FROM memories GROUP BY user_id ORDER BY user_id",
            )
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok(UserCount {
                        user_id: r.get(0)?,
                        memories: r.get::<_, i64>(1)?.max(0) as u64,
                    })
                })
                .and_then(|rows| rows.collect())
            })
            .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::session_counts`].
    pub fn session_counts(&self, user_id: &str) -> Result<Vec<SessionCount>, StoreError> {
        // The partial (user_id, session_id, created_at) index holds every column needed.
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT session_id, count(*), min(created_at), max(created_at) FROM memories \
                     WHERE user_id = ?1 AND session_id IS NOT NULL \
                     GROUP BY session_id ORDER BY session_id",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([user_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            rows.into_iter()
                .map(|(session_id, memories, first, last)| {
                    let time = |t: i64| {
                        Timestamp::from_microsecond(t)
                            .map_err(|e| StoreError::Backend(format!("bad time {t}: {e}")))
                    };
                    Ok(SessionCount {
                        session_id,
                        memories: memories.max(0) as u64,
                        first_at: time(first)?,
                        last_at: time(last)?,
                    })
                })
                .collect()
        })
    }

    /// See [`engram_core::MemoryStore::count_by_day`].
    pub fn count_by_day(
        &self,
        filter: &Filter,
        time_zone: &jiff::tz::TimeZone,
    ) -> Result<Vec<DayCount>, StoreError> {
        let (conditions, values) = filter_sql(filter, self.now())?;
        // Two small columns per memory; days are cut in Rust (see DayCounter).
        let sql = format!("SELECT m.created_at, m.kind FROM memories m WHERE {conditions}");
        let mut counter = DayCounter::new(time_zone.clone());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
            let mut rows = stmt
                .query(rusqlite::params_from_iter(values))
                .map_err(|e| self.err(e))?;
            while let Some(row) = rows.next().map_err(|e| self.err(e))? {
                let created: i64 = row.get(0).map_err(|e| self.err(e))?;
                let kind: String = row.get(1).map_err(|e| self.err(e))?;
                let created = Timestamp::from_microsecond(created)
                    .map_err(|e| StoreError::Backend(format!("bad time {created}: {e}")))?;
                let kind = kind
                    .parse::<Kind>()
                    .map_err(|e| StoreError::Backend(e.to_string()))?;
                counter.add(created, kind);
            }
            Ok(())
        })?;
        Ok(counter.finish())
    }

    /// See [`engram_core::MemoryStore::put_vectors`].
    pub fn put_vectors(
        &self,
        model: &str,
        dimension: usize,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError> {
        vectors::validate(model, dimension, &vectors)?;
        let now = micros(self.now());
        self.write(|tx| {
            let recorded: Option<i64> = tx
                .prepare_cached("SELECT dimension FROM embedding_models WHERE model = ?1")
                .and_then(|mut s| s.query_row([model], |r| r.get(0)).optional())
                .map_err(|e| self.err(e))?;
            match recorded {
                Some(d) if d != dimension as i64 => {
                    return Err(StoreError::BadQuery(format!(
                        "model {model} was recorded with {d} dimensions, not {dimension}; \
                         its vectors cannot be mixed"
                    )));
                }
                Some(_) => {}
                None => {
                    tx.prepare_cached(
                        "INSERT INTO embedding_models (model, dimension, created_at) \
                         VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut s| s.execute(params![model, dimension as i64, now]))
                    .map_err(|e| self.err(e))?;
                }
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO embeddings (model, content_hash, vector, truncated) \
                     VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (model, content_hash) DO UPDATE \
                     SET vector = excluded.vector, truncated = excluded.truncated",
                )
                .map_err(|e| self.err(e))?;
            for v in &vectors {
                insert
                    .execute(params![
                        model,
                        v.content_hash,
                        vectors::encode(&v.vector),
                        v.truncated
                    ])
                    .map_err(|e| self.err(e))?;
            }
            Ok(())
        })
    }

    /// See [`engram_core::MemoryStore::texts_without_vectors`].
    pub fn texts_without_vectors(
        &self,
        model: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PendingText>, StoreError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT m.content_hash, min(m.text) FROM memories m \
                 WHERE m.content_hash > ?2 AND NOT EXISTS \
                 (SELECT 1 FROM embeddings e WHERE e.model = ?1 AND e.content_hash = m.content_hash) \
                 GROUP BY m.content_hash ORDER BY m.content_hash LIMIT ?3",
            )
            .and_then(|mut s| {
                s.query_map(params![model, after.unwrap_or(""), clamp_i64(limit)], |r| {
                    Ok(PendingText {
                        content_hash: r.get(0)?,
                        text: r.get(1)?,
                    })
                })?
                .collect()
            })
            .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::count_without_vectors`].
    pub fn count_without_vectors(&self, model: &str) -> Result<u64, StoreError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT count(DISTINCT m.content_hash) FROM memories m WHERE NOT EXISTS \
                 (SELECT 1 FROM embeddings e WHERE e.model = ?1 AND e.content_hash = m.content_hash)",
            )
            .and_then(|mut s| s.query_row([model], |r| r.get::<_, i64>(0)))
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::vector_search`].
    pub fn vector_search(
        &self,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<VectorHit>, StoreError> {
        vectors::check_query(query)?;
        let now = self.now();
        // Exact in SQL for small scopes, the in-process index for large ones (see `ann`).
        self.read(|conn| {
            self.vector_indexes
                .search(conn, model, filter, query, limit, now)
        })
    }

    /// See [`engram_core::MemoryStore::previous_turns`].
    pub fn previous_turns(
        &self,
        user_id: &str,
        ids: &[MemoryId],
    ) -> Result<Vec<Option<MemoryId>>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.read(|conn| {
            // The same rule as `conversation_context`, which picks the words indexed with a turn.
            let mut stmt = conn
                .prepare_cached(PREVIOUS_TURN_SQL)
                .map_err(|e| self.err(e))?;
            ids.iter()
                .map(|id| {
                    let previous: Option<Option<String>> = stmt
                        .query_row(params![id.to_string(), user_id], |r| r.get(0))
                        .optional()
                        .map_err(|e| self.err(e))?;
                    previous
                        .flatten()
                        .map(|text| {
                            text.parse().map_err(|_| {
                                StoreError::Backend(format!("stored id '{text}' is not a UUID"))
                            })
                        })
                        .transpose()
                })
                .collect()
        })
    }

    /// Whether any vector of `model` is stored (one probe of the (model, hash) index).
    pub fn has_vectors(&self, model: &str) -> Result<bool, StoreError> {
        self.read(|conn| {
            conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM embeddings WHERE model = ?1)")
                .and_then(|mut s| s.query_row([model], |r| r.get(0)))
                .map_err(|e| self.err(e))
        })
    }

    /// See [`engram_core::MemoryStore::vector_models`].
    pub fn vector_models(&self) -> Result<Vec<VectorModelStats>, StoreError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT em.model, em.dimension, \
                 (SELECT count(*) FROM embeddings e WHERE e.model = em.model) \
                 FROM embedding_models em ORDER BY em.created_at",
            )
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok(VectorModelStats {
                        model: r.get(0)?,
                        dimension: r.get::<_, i64>(1)?.max(0) as usize,
                        vectors: r.get::<_, i64>(2)?.max(0) as u64,
                    })
                })?
                .collect()
            })
            .map_err(|e| self.err(e))
        })
    }
}

fn clamp_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
