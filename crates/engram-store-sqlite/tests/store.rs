#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The SQLite engine through its public API, on real database files: what only this engine does
//! (held ranking facts, files, the integrity check). What every engine does is checked by the
//! conformance suite (tests/conformance.rs).

use std::sync::Arc;

use engram_core::store::MemoryPatch;
use engram_core::{
    AddOutcome, Clock, FixedClock, Importance, Kind, MemoryId, NewMemory, Scope, StoreError,
};
use engram_core::{Filter, MetaCondition};
use engram_store_sqlite::{Database as SqliteStore, StoreOptions};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use tempfile::TempDir;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

struct Fixture {
    _dir: TempDir,
    clock: Arc<FixedClock>,
    store: SqliteStore,
}

fn fixture() -> Fixture {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(FixedClock::new(t("2024-06-01T12:00:00Z")));
    let store = SqliteStore::open_with(
        dir.path().join("engram.db"),
        StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    Fixture {
        _dir: dir,
        clock,
        store,
    }
}

fn add(store: &SqliteStore, user: &str, text: &str) -> MemoryId {
    match store
        .add(NewMemory::new(Scope::user(user), text), "test")
        .unwrap()
    {
        AddOutcome::Added(m) => m.id,
        AddOutcome::Duplicate(id) => panic!("unexpected duplicate of {id}"),
    }
}

fn search(store: &SqliteStore, filter: &Filter, query: &str) -> Vec<String> {
    store
        .search_lexical(filter, query, 10)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.text)
        .collect()
}

/// Memories and their BM25 scores, best first.
type Ranking = Vec<(MemoryId, f64)>;

/// More hits than any test store holds: a search asked for this many scores every candidate,
/// so its first hits are the exhaustive ranking.
const EVERY_HIT: usize = 1_000_000;

/// Searches `filter`, and the same filter plus a metadata condition every memory meets for
/// every hit: the second can only be decided in SQL and scores every candidate read from the
/// table, so the two compare ranking from the facts a store holds in memory (or from the rows
/// that can still make the first 20) with the exhaustive ranking.
fn held_and_table_rankings(
    store: &SqliteStore,
    filter: &Filter,
    query: &str,
) -> (Ranking, Ranking) {
    let mut in_sql = filter.clone();
    in_sql.metadata.push(MetaCondition {
        key: "all".into(),
        value: "yes".into(),
    });
    let ranked = |f: &Filter, limit: usize| -> Ranking {
        let mut hits: Ranking = store
            .search_lexical(f, query, limit)
            .unwrap()
            .into_iter()
            .map(|h| (h.memory.id, h.bm25))
            .collect();
        hits.truncate(20);
        hits
    };
    (ranked(filter, 20), ranked(&in_sql, EVERY_HIT))
}

#[test]
fn ranking_from_held_facts_matches_the_table_and_follows_every_change() {
    let f = fixture();
    let now = f.clock.now();
    let words = ["river", "stone", "bridge", "lantern"];
    let mut batch = Vec::new();
    for i in 0..400i64 {
        let mut text = format!("entry {i} by the river");
        for (j, word) in words.iter().enumerate() {
            if i % (j as i64 + 2) == 0 {
                text.push(' ');
                text.push_str(word);
            }
        }
        let mut memory = NewMemory::new(Scope::user("u"), text)
            .with_kind(Kind::ALL[(i % 5) as usize])
            .with_importance(Importance::new(i % 5 + 1).unwrap())
            .with_meta("all", json!("yes"));
        memory.created_at = Some(now - SignedDuration::from_hours(i));
        if i % 11 == 0 {
            // Some already expired, some expiring later.
            memory.expires_at = Some(now + SignedDuration::from_hours(i % 3 - 1));
        }
        batch.push(memory);
    }
    // Another user's memories share the words but never the results.
    batch.push(
        NewMemory::new(Scope::user("v"), "river stone bridge").with_meta("all", json!("yes")),
    );
    f.store.add_many(batch, "test").unwrap();
    let listed = f.store.list(&Filter::user("u"), 1000, 0).unwrap();
    for memory in listed.iter().filter(|m| m.text.contains("entry 3")) {
        f.store.invalidate(memory.id, "test").unwrap();
    }

    let filters = [
        Filter::user("u"),
        Filter {
            kinds: vec![Kind::Episode, Kind::Fact],
            min_importance: Some(Importance::new(2).unwrap()),
            ..Filter::user("u")
        },
        Filter {
            since: Some(now - SignedDuration::from_hours(200)),
            until: Some(now - SignedDuration::from_hours(20)),
            ..Filter::user("u")
        },
        Filter {
            include_closed: true,
            ..Filter::user("u")
        },
    ];
    let queries = ["river lantern", "bridge stone", "entry river", "lantern"];
    let check = |store: &SqliteStore| {
        let mut compared = 0;
        for filter in &filters {
            for query in queries {
                // Asked a few times, so that the store decides to hold the user's facts.
                for _ in 0..4 {
                    let (held, table) = held_and_table_rankings(store, filter, query);
                    assert_eq!(held, table, "{query} {filter:?}");
                    compared += table.len();
                }
            }
        }
        assert!(compared > 500, "only {compared} hits compared");
    };
    check(&f.store);

    // Changes from another handle on the same file (as another process would make them).
    let other = SqliteStore::open_with(
        f.store.path(),
        StoreOptions {
            clock: f.clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let top = f
        .store
        .search_lexical(&Filter::user("u"), "lantern", 5)
        .unwrap();
    other.invalidate(top[0].memory.id, "test").unwrap();
    other.delete(top[1].memory.id, "test").unwrap();
    other
        .update(
            top[2].memory.id,
            MemoryPatch {
                text: Some("lantern".into()),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    other
        .update(
            top[3].memory.id,
            MemoryPatch {
                importance: Some(Importance::new(1).unwrap()),
                expires_at: Some(Some(now - SignedDuration::from_hours(1))),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    let added = match other
        .add(
            NewMemory::new(Scope::user("u"), "lantern lantern").with_meta("all", json!("yes")),
            "test",
        )
        .unwrap()
    {
        AddOutcome::Added(m) => m.id,
        other => panic!("{other:?}"),
    };
    let after: Vec<MemoryId> = f
        .store
        .search_lexical(&Filter::user("u"), "lantern", 5)
        .unwrap()
        .iter()
        .map(|h| h.memory.id)
        .collect();
    assert!(after.contains(&added) && after.contains(&top[2].memory.id));
    for (which, gone) in [(0, &top[0]), (1, &top[1]), (3, &top[3])] {
        assert!(
            !after.contains(&gone.memory.id),
            "hit {which} is still found"
        );
    }
    check(&f.store);
}

/// What the conformance suite checks of every engine's totals, plus what only a file has.
#[test]
fn stats_name_the_file_and_its_size() {
    let f = fixture();
    add(&f.store, "a", "x1");
    let stats = f.store.stats().unwrap();
    assert_eq!(stats.memories, 1);
    assert!(stats.size_bytes.is_some_and(|n| n > 0));
    assert_eq!(stats.engine, "sqlite");
    assert!(stats.location.ends_with("engram.db"), "{}", stats.location);
}

mod files {
    use super::*;

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        SqliteStore::open(&path).unwrap();
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", 99).unwrap();
        }
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::TooNew { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("newer engram"));
    }

    #[test]
    fn another_programs_database_is_refused_and_left_alone() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("other.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::NotEngram { .. }), "{err}");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
        drop(conn);
        assert!(
            std::fs::read(&path).unwrap() == before,
            "the file was changed"
        );
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let garbage = b"this is a text file, not a database, and it must survive\n".repeat(100);
        std::fs::write(&path, &garbage).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(
            std::fs::read(&path).unwrap() == garbage,
            "the file was changed"
        );
    }

    #[test]
    fn a_full_disk_fails_cleanly_and_keeps_what_was_stored() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let store = SqliteStore::open_with(
            &path,
            StoreOptions {
                max_database_bytes: Some(256 * 1024),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let mut stored = 0;
        let err = loop {
            let batch: Vec<_> = (0..50)
                .map(|i| {
                    NewMemory::new(
                        Scope::user("u"),
                        format!("memory {stored} {i} {}", "words ".repeat(40)),
                    )
                })
                .collect();
            match store.add_many(batch, "test") {
                Ok(_) => stored += 50,
                Err(e) => break e,
            }
            assert!(stored < 100_000, "the quota never bit");
        };
        assert!(matches!(err, StoreError::DiskFull), "{err}");
        assert!(stored > 0);
        // The failed batch left nothing behind; everything before it is intact.
        assert_eq!(store.count(&Filter::user("u")).unwrap(), stored);
        drop(store);
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(reopened.count(&Filter::user("u")).unwrap(), stored);
        assert_eq!(search(&reopened, &Filter::user("u"), "memory").len(), 10);
    }

    #[test]
    fn data_survives_reopening() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let id = {
            let store = SqliteStore::open(&path).unwrap();
            add(&store, "u", "persisted")
        };
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get(id).unwrap().text, "persisted");
        assert_eq!(search(&store, &Filter::user("u"), "persisted").len(), 1);
    }

    #[test]
    fn concurrent_writers_through_separate_connections_lose_nothing() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let threads: Vec<_> = (0..4)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let store = SqliteStore::open(&path).unwrap();
                    for i in 0..50 {
                        add(&store, "u", &format!("writer {w} item {i}"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.count(&Filter::user("u")).unwrap(), 200);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Memories written from eight words, each in about a quarter to a half of them (long posting
    /// lists, kept as impact lists), with lengths, kinds, importances, times and closings that
    /// vary.
    fn common_word_store(seed: u64, docs: usize) -> Fixture {
        let f = fixture();
        let now = f.clock.now();
        let words = [
            "work", "today", "anna", "coffee", "river", "plan", "call", "late",
        ];
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut batch = Vec::with_capacity(docs);
        for i in 0..docs {
            let mut text = format!("entry {i}");
            for (j, word) in words.iter().enumerate() {
                // Word j is in roughly 1 / (2 + j % 3) of the memories, sometimes twice.
                if next() % (2 + j as u64 % 3) == 0 {
                    text.push(' ');
                    text.push_str(word);
                    if next() % 5 == 0 {
                        text.push(' ');
                        text.push_str(word);
                    }
                }
            }
            for _ in 0..next() % 9 {
                text.push_str(" filler");
            }
            let r = next();
            let mut memory = NewMemory::new(Scope::user("u"), text)
                .with_kind(Kind::ALL[(r % 5) as usize])
                .with_importance(Importance::new((r / 5 % 5 + 1) as i64).unwrap())
                .with_meta("all", json!("yes"));
            // Coarse times make ties that the creation time alone cannot break.
            memory.created_at = Some(now - SignedDuration::from_hours((r / 25 % 40) as i64));
            if r % 13 == 0 {
                memory.expires_at = Some(now - SignedDuration::from_hours(1));
            }
            batch.push(memory);
        }
        batch.push(
            NewMemory::new(Scope::user("v"), "work today anna").with_meta("all", json!("yes")),
        );
        f.store.add_many(batch, "test").unwrap();
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]
        /// Long lists ranked by reading only the rows that can still make the first k, and by
        /// the threshold algorithm over held impact lists (after the first searches load the
        /// facts), are exactly the table's exhaustive ranking: same memories, same order, same
        /// scores to the bit, under every filter, for any k, and again after memories change.
        #[test]
        fn common_word_rankings_are_exactly_the_exhaustive_ones(
            seed in any::<u64>(),
            queries in proptest::collection::vec(
                proptest::collection::vec(0usize..9, 1..5), 3),
            k in prop_oneof![Just(1usize), Just(10), Just(100), 1usize..300],
        ) {
            let f = common_word_store(seed, 3_000);
            let vocabulary = ["work", "today", "anna", "coffee", "river", "plan", "call", "late", "filler"];
            let now = f.clock.now();
            let filters = [
                Filter::user("u"),
                Filter {
                    kinds: vec![Kind::Episode, Kind::Fact],
                    min_importance: Some(Importance::new(2).unwrap()),
                    ..Filter::user("u")
                },
                Filter {
                    since: Some(now - SignedDuration::from_hours(30)),
                    until: Some(now - SignedDuration::from_hours(5)),
                    include_closed: true,
                    ..Filter::user("u")
                },
            ];
            let ranked = |filter: &Filter, query: &str, limit: usize| -> Vec<(MemoryId, u64)> {
                let mut hits: Vec<(MemoryId, u64)> = f.store
                    .search_lexical(filter, query, limit)
                    .unwrap()
                    .into_iter()
                    .map(|h| (h.memory.id, h.bm25.to_bits()))
                    .collect();
                hits.truncate(k);
                hits
            };
            let compare = |round: &str| -> Result<(), TestCaseError> {
                for words in &queries {
                    let query: Vec<&str> = words.iter().map(|&w| vocabulary[w]).collect();
                    let query = query.join(" ");
                    for filter in &filters {
                        let mut in_sql = filter.clone();
                        in_sql.metadata.push(MetaCondition { key: "all".into(), value: "yes".into() });
                        // Every candidate scored, against the rows that could still make the
                        // first k (the same filter decided in SQL) ...
                        let table = ranked(&in_sql, &query, EVERY_HIT);
                        prop_assert_eq!(&ranked(&in_sql, &query, k), &table, "{} {} {:?} in SQL", round, query, filter);
                        // ... and against the held facts, asked twice: the first search may
                        // still be the one that loads them.
                        for _ in 0..2 {
                            prop_assert_eq!(&ranked(filter, &query, k), &table, "{} {} {:?}", round, query, filter);
                        }
                    }
                }
                Ok(())
            };
            compare("before changes")?;
            let counts = f.store.lexical_search_counts();
            prop_assert!(counts.by_impacts > 0 && counts.exhaustive > 0, "{:?}", counts);
            let top = f.store.search_lexical(&Filter::user("u"), "work anna", 3).unwrap();
            f.store.invalidate(top[0].memory.id, "test").unwrap();
            f.store
                .update(top[1].memory.id, MemoryPatch { text: Some("anna anna work".into()), ..MemoryPatch::default() }, "test")
                .unwrap();
            compare("after a change")?;
            f.store
                .add(NewMemory::new(Scope::user("u"), "work work anna today").with_meta("all", json!("yes")), "test")
                .unwrap();
            compare("after an insert")?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_query_either_searches_or_is_refused_as_bad(query in "\\PC{0,40}") {
            let f = fixture();
            add(&f.store, "u", "some text to find, with ünïcödé and 中文");
            match f.store.search_lexical(&Filter::user("u"), &query, 5) {
                Ok(_) | Err(StoreError::BadQuery(_)) => {}
                Err(other) => prop_assert!(false, "query {query:?} failed: {other}"),
            }
        }
    }
}

/// A search for no hits finds none, whether the store reads rows or holds the facts.
#[test]
fn a_search_for_no_hits_returns_none() {
    let f = fixture();
    for i in 0..50 {
        add(&f.store, "u", &format!("note {i} about the garden"));
    }
    let mut in_sql = Filter::user("u");
    in_sql.metadata.push(MetaCondition {
        key: "none".into(),
        value: "set".into(),
    });
    for filter in [Filter::user("u"), in_sql] {
        for _ in 0..3 {
            assert!(
                f.store
                    .search_lexical(&filter, "garden", 0)
                    .unwrap()
                    .is_empty()
            );
            assert_eq!(
                f.store
                    .search_lexical(&Filter::user("u"), "garden", 5)
                    .unwrap()
                    .len(),
                5
            );
        }
    }
}

/// The full-text index keeps the larger write buffer a batch sets across reopening (that
/// batches and single adds score alike is the conformance suite's business).
#[test]
fn a_batch_keeps_the_larger_index_buffer_across_reopening() {
    let batched = fixture();
    let outcomes = batched
        .store
        .add_many(
            vec![
                NewMemory::new(Scope::user("u"), "Did you ever make it to Lisbon?"),
                NewMemory::new(Scope::user("u"), "Trams again!"),
            ],
            "t",
        )
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(AddOutcome::Added(_))))
    );
    let path = batched._dir.path().join("engram.db");
    drop(batched.store);
    let _reopened = SqliteStore::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let buffer: i64 = conn
        .query_row(
            "SELECT v FROM memories_fts_config WHERE k = 'hashsize'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(buffer, 8 << 20);
}

#[test]
fn the_integrity_check_passes_a_sound_store_and_names_what_is_out_of_step() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("engram.db");
    let store = SqliteStore::open(&path).unwrap();
    let a = add(&store, "alice", "Alice moved to Berlin in May");
    add(&store, "alice", "prefers tabs over spaces");
    let b = add(&store, "bob", "Bob plays the guitar");
    add(&store, "bob", "!!!");
    store
        .update(
            a,
            MemoryPatch {
                text: Some("Alice moved to Lisbon in June".into()),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    store.invalidate(b, "test").unwrap();
    store.delete(a, "test").unwrap();
    store
        .put_vectors(
            "toy",
            2,
            vec![engram_core::StoredVector {
                content_hash: engram_core::content_hash(
                    &Scope::user("bob"),
                    "Bob plays the guitar",
                ),
                vector: vec![0.6, 0.8],
                truncated: false,
            }],
        )
        .unwrap();
    assert_eq!(store.check_integrity().unwrap(), Vec::<String>::new());

    // Behind the store's back: a memory loses its index row, a user's statistics drift.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "DELETE FROM memories_fts WHERE rowid = (SELECT min(rowid) FROM memories)",
        [],
    )
    .unwrap();
    conn.execute(
        "UPDATE fts_user_stats SET terms = terms + 1 WHERE user_id = 'bob'",
        [],
    )
    .unwrap();
    conn.execute("UPDATE embeddings SET vector = x'00000000'", [])
        .unwrap();
    let problems = store.check_integrity().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p == "1 memories without an index row"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "1 users whose word statistics disagree with their memories"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "1 vectors whose length is not their model's"),
        "{problems:?}"
    );
}
