//! What BM25 ranking needs to know about each of a user's memories (its length in terms, its
//! time, kind, importance and when it closes), held in memory per user so that a search can
//! score and filter its candidates without looking each one up in SQLite.
//!
//! An entry belongs to one *generation* of a user's memories: the database counts every update
//! and delete of a user's memories (the triggers of schema migration 10), so an entry is used
//! only while the count it was loaded at still stands, whichever process changed the rows. An
//! insert leaves the count alone: a memory added after the entry was loaded is simply not in it,
//! and the search looks that one up the slow way.
//!
//! Loading an entry reads the user's rows in index order, which costs per row about a quarter
//! of looking one candidate up by its row id (measured at 100k memories of one user: all 100k
//! read in 21 ms, 70k candidates looked up in 53 ms, 25k in 26 ms). So it is done once searches
//! at the same generation have looked up a quarter as many candidates as the user has memories
//! (the classic rent-or-buy rule: never more than twice the cost of the better choice). A
//! search looks up only the candidates that can still make its first k, in chunks (see
//! `Database::rank_lexical`), so a one-shot `engram search` of several common words reads a few
//! thousand rows and no facts; one common word, whose memories all share a bound, loads at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use engram_core::{Filter, Kind};
use rusqlite::Connection;

use crate::topk::Impacts;

/// How many memories' facts the cache holds at most, over all users (about 32 bytes each).
const MAX_CACHED_DOCS: usize = 2_000_000;
/// Bytes of impact lists (see [`crate::topk`]) the cache holds at most, over all users.
const MAX_IMPACT_BYTES: usize = 64 << 20;
/// How many rows loading the facts reads for the cost of looking up one candidate by row id
/// (see the module's documentation).
pub(crate) const ROWS_READ_PER_LOOKUP: usize = 4;
/// Only lists at least this long are kept: shorter ones cost little to read again.
pub(crate) const LONG_LIST: usize = 1024;

/// Tells loads of facts apart, so an impact list is only used with the facts it indexes.
static LOADS: AtomicU64 = AtomicU64::new(1);

/// One memory as BM25 ranking sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DocFacts {
    /// The memory's row.
    pub rowid: i64,
    /// `created_at`, microseconds.
    pub created_at: i64,
    /// The earlier of `valid_to` and `expires_at`, microseconds; `i64::MAX` when neither is set.
    pub closes_at: i64,
    /// Indexed terms (`body_terms`).
    pub length: u32,
    /// Position of its kind in [`Kind::ALL`].
    pub kind: u8,
    /// Importance, 1 to 5.
    pub importance: u8,
}

/// The facts of every memory of one user at one generation, ordered by row.
#[derive(Debug)]
pub(crate) struct UserDocs {
    generation: i64,
    docs: Vec<DocFacts>,
    /// Which load this is (impact lists name documents by their position here).
    load: u64,
}

/// The facts of a user's memories, all of them read from the index that holds them
/// (`memories_user_facts`, schema migration 13) without touching the table's rows.
pub(crate) const FACTS_SQL: &str = "SELECT rowid, created_at, valid_to, expires_at, body_terms, kind, \
     importance FROM memories WHERE user_id = ?1";

impl UserDocs {
    /// Reads every memory of `user_id`, current and closed.
    fn load(conn: &Connection, user_id: &str, generation: i64) -> rusqlite::Result<Self> {
        let mut stmt = conn.prepare_cached(FACTS_SQL)?;
        let mut docs = Vec::new();
        let mut rows = stmt.query([user_id])?;
        while let Some(row) = rows.next()? {
            let valid_to: Option<i64> = row.get(2)?;
            let expires_at: Option<i64> = row.get(3)?;
            // Borrowed, not copied into a String per row: the load reads every row of a user.
            let kind = match row.get_ref(5)? {
                rusqlite::types::ValueRef::Text(text) => std::str::from_utf8(text).ok(),
                _ => None,
            };
            docs.push(DocFacts {
                rowid: row.get(0)?,
                created_at: row.get(1)?,
                closes_at: valid_to
                    .unwrap_or(i64::MAX)
                    .min(expires_at.unwrap_or(i64::MAX)),
                length: u32::try_from(row.get::<_, i64>(4)?).unwrap_or(u32::MAX),
                // A kind this build does not know matches no kind filter.
                kind: kind.and_then(kind_index).unwrap_or(u8::MAX),
                importance: u8::try_from(row.get::<_, i64>(6)?).unwrap_or(0),
            });
        }
        docs.sort_unstable_by_key(|d| d.rowid);
        docs.shrink_to_fit();
        Ok(Self {
            generation,
            docs,
            load: LOADS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// How many memories the facts cover.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Where the memory in `rowid` sits among the facts.
    pub fn position(&self, rowid: i64) -> Option<u32> {
        self.docs
            .binary_search_by_key(&rowid, |d| d.rowid)
            .ok()
            .and_then(|at| u32::try_from(at).ok())
    }

    /// The facts at a position [`Self::position`] gave.
    pub fn at(&self, position: u32) -> &DocFacts {
        &self.docs[position as usize]
    }

    /// The facts of the memory in `rowid`, if it existed when the entry was loaded.
    pub fn get(&self, rowid: i64) -> Option<&DocFacts> {
        self.docs
            .binary_search_by_key(&rowid, |d| d.rowid)
            .ok()
            .and_then(|at| self.docs.get(at))
    }
}

fn kind_index(kind: &str) -> Option<u8> {
    Kind::ALL
        .iter()
        .position(|k| k.as_str() == kind)
        .and_then(|at| u8::try_from(at).ok())
}

/// A search filter in the terms of [`DocFacts`]; only filters that the facts can decide
/// exactly as the SQL conditions of `rows::filter_sql` do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FactFilter {
    since: Option<i64>,
    until: Option<i64>,
    kinds: Vec<u8>,
    min_importance: Option<u8>,
    /// "Now" in microseconds when closed and expired memories are left out.
    open_at: Option<i64>,
}

impl FactFilter {
    /// The filter in facts, or `None` when it names an agent, a session, a category or
    /// metadata (which only SQL can decide). `now` is in microseconds.
    pub fn new(filter: &Filter, now: i64) -> Option<Self> {
        let answerable = filter.agent_id.is_none()
            && filter.session_id.is_none()
            && filter.categories.is_empty()
            && filter.metadata.is_empty();
        answerable.then(|| Self {
            since: filter.since.map(crate::rows::micros),
            until: filter.until.map(crate::rows::micros),
            kinds: filter
                .kinds
                .iter()
                .filter_map(|k| kind_index(k.as_str()))
                .collect(),
            min_importance: filter.min_importance.map(|i| i.get()),
            open_at: (!filter.include_closed).then_some(now),
        })
    }

    /// Whether a memory with these facts passes.
    pub fn admits(&self, doc: &DocFacts) -> bool {
        self.since.is_none_or(|since| doc.created_at >= since)
            && self.until.is_none_or(|until| doc.created_at < until)
            && (self.kinds.is_empty() || self.kinds.contains(&doc.kind))
            && self.min_importance.is_none_or(|min| doc.importance >= min)
            && self.open_at.is_none_or(|now| doc.closes_at > now)
    }
}

#[derive(Debug)]
struct Entry {
    /// Loaded facts, if any (possibly of an older generation).
    docs: Option<Arc<UserDocs>>,
    /// The generation `looked_up` counts for.
    generation: i64,
    /// Candidates looked up in SQLite at `generation` since the entry was last (re)loaded.
    looked_up: usize,
    last_used: u64,
}

/// Per-user [`UserDocs`], shared by every search of one store handle, and the impact lists of
/// the long posting lists searched (keyed by user and term).
#[derive(Debug, Default)]
pub(crate) struct LexicalDocCache {
    state: Mutex<CacheState>,
    impacts: Mutex<ImpactCache>,
    /// Searches ranked by the threshold algorithm / by scoring every candidate.
    pub(crate) by_impacts: AtomicU64,
    pub(crate) exhaustive: AtomicU64,
}

/// How many lexical searches took each path since a store handle was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LexicalSearchCounts {
    /// The best k found by the threshold algorithm over impact lists (cost follows k).
    pub by_impacts: u64,
    /// Every candidate scored (phrases, filters only SQL decides, facts not yet held).
    pub exhaustive: u64,
}

/// What an impact list was computed from: the facts' load, and the user's document count and
/// total length (which its idf and length normalisation depend on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImpactKey {
    /// [`UserDocs`] load.
    pub load: u64,
    /// The user's documents.
    pub documents: i64,
    /// Their summed length.
    pub terms: i64,
}

#[derive(Debug, Default)]
struct ImpactCache {
    lists: HashMap<(String, String), (ImpactKey, Arc<Impacts>, u64)>,
    bytes: usize,
    tick: u64,
}

#[derive(Debug, Default)]
struct CacheState {
    users: HashMap<String, Entry>,
    tick: u64,
    held_docs: usize,
}

impl LexicalDocCache {
    /// The user's facts at `generation` if they are loaded. Otherwise records that a search is
    /// about to look up `candidates` rows one by one, and loads the facts (through `conn`, in
    /// the caller's read transaction) once the lookups have cost as much as loading them would
    /// ([`ROWS_READ_PER_LOOKUP`]): `user_docs` is the user's memory count.
    pub fn facts(
        &self,
        conn: &Connection,
        user_id: &str,
        generation: i64,
        user_docs: usize,
        candidates: usize,
    ) -> rusqlite::Result<Option<Arc<UserDocs>>> {
        {
            let mut state = lock(&self.state);
            state.tick += 1;
            let tick = state.tick;
            let entry = state
                .users
                .entry(user_id.to_string())
                .or_insert_with(|| Entry {
                    docs: None,
                    generation,
                    looked_up: 0,
                    last_used: tick,
                });
            entry.last_used = tick;
            if let Some(docs) = &entry.docs
                && docs.generation == generation
            {
                return Ok(Some(Arc::clone(docs)));
            }
            if entry.generation != generation {
                entry.generation = generation;
                entry.looked_up = 0;
            }
            entry.looked_up = entry.looked_up.saturating_add(candidates);
            if entry.looked_up.saturating_mul(ROWS_READ_PER_LOOKUP) < user_docs
                || user_docs > MAX_CACHED_DOCS
            {
                return Ok(None);
            }
        }
        // Loaded outside the lock: other users' searches go on meanwhile.
        let docs = Arc::new(UserDocs::load(conn, user_id, generation)?);
        let mut state = lock(&self.state);
        let loaded = docs.docs.len();
        let old = state
            .users
            .get_mut(user_id)
            .and_then(|entry| entry.docs.replace(Arc::clone(&docs)))
            .map_or(0, |old| old.docs.len());
        state.held_docs = state.held_docs.saturating_sub(old) + loaded;
        if let Some(entry) = state.users.get_mut(user_id) {
            entry.looked_up = 0;
        }
        state.evict_beyond(MAX_CACHED_DOCS, user_id);
        Ok(Some(docs))
    }
}

impl LexicalDocCache {
    /// How many searches took each path.
    pub fn counts(&self) -> LexicalSearchCounts {
        LexicalSearchCounts {
            by_impacts: self.by_impacts.load(Ordering::Relaxed),
            exhaustive: self.exhaustive.load(Ordering::Relaxed),
        }
    }

    /// The user's facts if they are loaded at `generation`; counts nothing, loads nothing.
    pub fn loaded(&self, user_id: &str, generation: i64) -> Option<Arc<UserDocs>> {
        let state = lock(&self.state);
        state
            .users
            .get(user_id)
            .and_then(|entry| entry.docs.as_ref())
            .filter(|docs| docs.generation == generation)
            .cloned()
    }

    /// The impact list kept for `term` of `user_id`, if it was computed under `key`.
    pub fn impacts(&self, user_id: &str, term: &str, key: ImpactKey) -> Option<Arc<Impacts>> {
        let mut cache = lock(&self.impacts);
        cache.tick += 1;
        let tick = cache.tick;
        let entry = cache
            .lists
            .get_mut(&(user_id.to_string(), term.to_string()))?;
        if entry.0 != key {
            return None;
        }
        entry.2 = tick;
        Some(Arc::clone(&entry.1))
    }

    /// Keeps a long impact list for later searches, dropping the least recently used ones
    /// beyond the budget.
    pub fn keep_impacts(&self, user_id: &str, term: &str, key: ImpactKey, list: Arc<Impacts>) {
        if list.len() < LONG_LIST || list.bytes() > MAX_IMPACT_BYTES / 4 {
            return;
        }
        let mut cache = lock(&self.impacts);
        cache.tick += 1;
        let tick = cache.tick;
        let bytes = list.bytes();
        if let Some(old) = cache
            .lists
            .insert((user_id.to_string(), term.to_string()), (key, list, tick))
        {
            cache.bytes = cache.bytes.saturating_sub(old.1.bytes());
        }
        cache.bytes += bytes;
        while cache.bytes > MAX_IMPACT_BYTES {
            let Some(victim) = cache
                .lists
                .iter()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, list, _)) = cache.lists.remove(&victim) {
                cache.bytes = cache.bytes.saturating_sub(list.bytes());
            }
        }
    }
}

impl UserDocs {
    /// This load's identity, for [`ImpactKey`].
    pub fn load_id(&self) -> u64 {
        self.load
    }
}

impl CacheState {
    /// Drops the least recently used users' facts until at most `budget` are held, never
    /// `keep`'s.
    fn evict_beyond(&mut self, budget: usize, keep: &str) {
        while self.held_docs > budget {
            let Some(victim) = self
                .users
                .iter()
                .filter(|(user, entry)| user.as_str() != keep && entry.docs.is_some())
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(user, _)| user.clone())
            else {
                return;
            };
            if let Some(entry) = self.users.remove(&victim) {
                let freed = entry.docs.map_or(0, |d| d.docs.len());
                self.held_docs = self.held_docs.saturating_sub(freed);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::Importance;
    use proptest::prelude::*;

    fn doc(rowid: i64, created_at: i64, closes_at: i64, kind: Kind, importance: u8) -> DocFacts {
        DocFacts {
            rowid,
            created_at,
            closes_at,
            length: 5,
            kind: kind_index(kind.as_str()).unwrap(),
            importance,
        }
    }

    #[test]
    fn filters_naming_agents_sessions_categories_or_metadata_need_sql() {
        let mut f = Filter::user("u");
        assert!(FactFilter::new(&f, 0).is_some());
        f.agent_id = Some("a".into());
        assert!(FactFilter::new(&f, 0).is_none());
        let mut f = Filter::user("u");
        f.categories = vec!["c".into()];
        assert!(FactFilter::new(&f, 0).is_none());
    }

    #[test]
    fn closed_and_expired_memories_are_left_out_unless_asked_for() {
        let now = 1_000;
        let f = FactFilter::new(&Filter::user("u"), now).unwrap();
        assert!(f.admits(&doc(1, 0, i64::MAX, Kind::Fact, 3)));
        assert!(f.admits(&doc(1, 0, now + 1, Kind::Fact, 3)));
        assert!(!f.admits(&doc(1, 0, now, Kind::Fact, 3)));
        let mut all = Filter::user("u");
        all.include_closed = true;
        let f = FactFilter::new(&all, now).unwrap();
        assert!(f.admits(&doc(1, 0, 5, Kind::Fact, 3)));
    }

    proptest! {
        /// The facts decide a filter as the SQL conditions do (see rows::filter_sql).
        #[test]
        fn facts_decide_like_the_sql_conditions(
            created_at in 0i64..100, valid_to in proptest::option::of(0i64..100),
            expires_at in proptest::option::of(0i64..100), kind in 0usize..5,
            importance in 1u8..=5, since in proptest::option::of(0i64..100),
            until in proptest::option::of(0i64..100), kinds in proptest::collection::vec(0usize..5, 0..3),
            min in proptest::option::of(1u8..=5), include_closed in any::<bool>(), now in 0i64..100,
        ) {
            let ts = |m: i64| jiff::Timestamp::from_microsecond(m).unwrap();
            let mut filter = Filter::user("u");
            filter.since = since.map(ts);
            filter.until = until.map(ts);
            filter.kinds = kinds.iter().map(|&k| Kind::ALL[k]).collect();
            filter.min_importance = min.map(|m| Importance::new(i64::from(m)).unwrap());
            filter.include_closed = include_closed;
            let facts = DocFacts {
                rowid: 1,
                created_at,
                closes_at: valid_to.unwrap_or(i64::MAX).min(expires_at.unwrap_or(i64::MAX)),
                length: 1,
                kind: kind as u8,
                importance,
            };
            let sql_would = since.is_none_or(|s| created_at >= s)
                && until.is_none_or(|u| created_at < u)
                && (kinds.is_empty() || kinds.contains(&kind))
                && min.is_none_or(|m| importance >= m)
                && (include_closed
                    || (valid_to.is_none_or(|v| v > now) && expires_at.is_none_or(|e| e > now)));
            prop_assert_eq!(FactFilter::new(&filter, now).unwrap().admits(&facts), sql_would);
        }
    }

    #[test]
    fn facts_load_once_lookups_have_cost_as_much_and_follow_the_generation() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE memories (user_id TEXT, created_at INTEGER, valid_to INTEGER, \
             expires_at INTEGER, body_terms INTEGER, kind TEXT, importance INTEGER);
             INSERT INTO memories VALUES ('u', 10, NULL, NULL, 4, 'fact', 3);
             INSERT INTO memories VALUES ('u', 20, 30, 25, 7, 'episode', 5);
             INSERT INTO memories VALUES ('v', 20, NULL, NULL, 7, 'episode', 5);",
        )
        .unwrap();
        let cache = LexicalDocCache::default();
        // Counted as a user of eight memories: one candidate looked up is not yet worth a
        // load, two are (two lookups cost what reading eight rows does).
        assert!(cache.facts(&conn, "u", 0, 8, 1).unwrap().is_none());
        let docs = cache.facts(&conn, "u", 0, 8, 1).unwrap().unwrap();
        assert_eq!(docs.docs.len(), 2);
        let second = docs.get(2).unwrap();
        assert_eq!(
            (second.closes_at, second.length, second.importance),
            (25, 7, 5)
        );
        assert_eq!(second.kind, kind_index("episode").unwrap());
        assert!(docs.get(3).is_none(), "another user's memory");
        // Same generation: served without counting; a new one starts counting again.
        assert!(cache.facts(&conn, "u", 0, 8, 0).unwrap().is_some());
        assert!(cache.facts(&conn, "u", 1, 8, 1).unwrap().is_none());
        assert!(cache.facts(&conn, "u", 1, 8, 5).unwrap().is_some());
    }

    #[test]
    fn the_least_recently_used_users_are_evicted_beyond_the_budget() {
        let mut state = CacheState::default();
        for (i, user) in ["a", "b", "c"].into_iter().enumerate() {
            state.users.insert(
                user.to_string(),
                Entry {
                    docs: Some(Arc::new(UserDocs {
                        generation: 0,
                        docs: vec![doc(1, 0, i64::MAX, Kind::Fact, 3); 10],
                        load: 0,
                    })),
                    generation: 0,
                    looked_up: 0,
                    last_used: i as u64,
                },
            );
        }
        state.held_docs = 30;
        state.evict_beyond(15, "a");
        assert!(state.users.contains_key("a"), "the user being loaded stays");
        assert!(!state.users.contains_key("b") && !state.users.contains_key("c"));
        assert_eq!(state.held_docs, 10);
    }
}
