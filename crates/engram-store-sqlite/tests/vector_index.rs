#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Vector search through the in-process index, on real database files: the approximate path
//! agrees with exact search, filters hold, and the index follows changes made through other
//! handles on the same file.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use engram_core::store::MemoryPatch;
use engram_core::{
    AddOutcome, Filter, FixedClock, Importance, Kind, MemoryId, MetaCondition, NewMemory, Scope,
    StoredVector, VectorHit,
};
use engram_store_sqlite::{Database as SqliteStore, IndexBuild, StoreOptions, VectorIndexOptions};
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use serde_json::json;
use tempfile::TempDir;

const MODEL: &str = "test-model";
const DIM: usize = 16;

fn now() -> Timestamp {
    "2024-06-01T12:00:00Z".parse().unwrap()
}

fn options(clock: &Arc<FixedClock>, build: IndexBuild, exact_max_scope: usize) -> StoreOptions {
    StoreOptions {
        clock: clock.clone(),
        vector_index: VectorIndexOptions {
            exact_max_scope,
            ef_search: 64,
            build,
            build_threads: 2,
            ..VectorIndexOptions::default()
        },
        ..StoreOptions::default()
    }
}

fn open(path: &Path, clock: &Arc<FixedClock>, build: IndexBuild, exact_max: usize) -> SqliteStore {
    SqliteStore::open_with(path, options(clock, build, exact_max)).unwrap()
}

/// Deterministic clustered unit vectors (SplitMix64 noise around a few centres).
struct Vectors {
    state: u64,
    centres: Vec<Vec<f32>>,
}

impl Vectors {
    fn new(seed: u64) -> Self {
        let mut v = Self {
            state: seed,
            centres: Vec::new(),
        };
        v.centres = (0..8)
            .map(|_| (0..DIM).map(|_| v.noise()).collect())
            .collect();
        v
    }

    fn noise(&mut self) -> f32 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn next(&mut self) -> Vec<f32> {
        let c = (self.noise().abs() * 1000.0) as usize % self.centres.len();
        let centre = self.centres[c].clone();
        let v: Vec<f32> = centre.iter().map(|x| x + 0.6 * self.noise()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }
}

fn added(outcome: AddOutcome) -> engram_core::Memory {
    match outcome {
        AddOutcome::Added(m) => m,
        AddOutcome::Duplicate(id) => panic!("unexpected duplicate of {id}"),
    }
}

/// Adds a memory and its vector.
fn add_with_vector(store: &SqliteStore, new: NewMemory, vector: Vec<f32>) -> MemoryId {
    let memory = added(store.add(new, "test").unwrap());
    store
        .put_vectors(
            MODEL,
            DIM,
            vec![StoredVector {
                content_hash: memory.content_hash.clone(),
                vector,
                truncated: false,
            }],
        )
        .unwrap();
    memory.id
}

/// A varied store: two users, kinds, sessions, importance, categories, metadata, some closed.
fn populate(store: &SqliteStore, n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut source = Vectors::new(seed);
    let mut memories = Vec::new();
    let mut vectors = Vec::new();
    for i in 0..n {
        let user = if i % 5 == 4 { "bob" } else { "alice" };
        let scope = Scope::user(user).with_session(format!("s{}", i % 7));
        let mut new = NewMemory::new(scope, format!("memory number {i}"))
            .with_kind(Kind::ALL[i % 3])
            .with_importance(Importance::new((i % 5) as i64 + 1).unwrap())
            .at(now() - SignedDuration::from_hours(i as i64))
            .with_meta("parity", json!(if i % 2 == 0 { "even" } else { "odd" }));
        if i % 4 == 0 {
            new = new.with_category("work");
        }
        if i % 11 == 0 {
            new.expires_at = Some(now() - SignedDuration::from_secs(1));
        }
        memories.push(new);
        vectors.push(source.next());
    }
    let outcomes = store.add_many(memories, "test").unwrap();
    let stored: Vec<StoredVector> = outcomes
        .into_iter()
        .zip(&vectors)
        .map(|(o, v)| StoredVector {
            content_hash: added(o.unwrap()).content_hash,
            vector: v.clone(),
            truncated: false,
        })
        .collect();
    store.put_vectors(MODEL, DIM, stored).unwrap();
    // Close a few, so the filter has current and closed memories to tell apart.
    for m in store.list(&Filter::user("alice"), 1000, 0).unwrap() {
        if m.text.ends_with('3') {
            store.invalidate(m.id, "test").unwrap();
        }
    }
    (0..40).map(|_| source.next()).collect()
}

fn ids(hits: &[VectorHit]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.memory.id).collect()
}

fn filters() -> Vec<Filter> {
    let alice = Filter::user("alice");
    vec![
        alice.clone(),
        Filter::user("bob"),
        Filter {
            include_closed: true,
            ..alice.clone()
        },
        Filter {
            kinds: vec![Kind::Fact],
            ..alice.clone()
        },
        Filter {
            session_id: Some("s3".into()),
            ..alice.clone()
        },
        Filter {
            min_importance: Some(Importance::new(4).unwrap()),
            since: Some(now() - SignedDuration::from_hours(300)),
            ..alice.clone()
        },
        Filter {
            categories: vec!["work".into()],
            ..alice.clone()
        },
        Filter {
            metadata: vec![MetaCondition {
                key: "parity".into(),
                value: "odd".into(),
            }],
            ..alice.clone()
        },
        Filter {
            agent_id: Some("nobody".into()),
            ..alice
        },
    ]
}

struct Pair {
    _dir: TempDir,
    exact: SqliteStore,
    indexed: SqliteStore,
    queries: Vec<Vec<f32>>,
}

/// One file, two handles: one that only ever searches exactly in SQL, and one whose index is
/// used for every scope above `exact_max`.
fn pair(n: usize, exact_max: usize) -> Pair {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(FixedClock::new(now()));
    let path = dir.path().join("engram.db");
    let exact = open(&path, &clock, IndexBuild::Never, usize::MAX);
    let queries = populate(&exact, n, 7);
    let indexed = open(&path, &clock, IndexBuild::Blocking, exact_max);
    Pair {
        _dir: dir,
        exact,
        indexed,
        queries,
    }
}

#[test]
fn large_scopes_go_through_the_graph_and_agree_with_exact_search() {
    let p = pair(600, 20);
    let mut found = 0usize;
    let mut expected = 0usize;
    for filter in filters() {
        for q in &p.queries {
            let truth = p.exact.vector_search(MODEL, &filter, q, 10).unwrap();
            let hits = p.indexed.vector_search(MODEL, &filter, q, 10).unwrap();
            // Only memories passing the filter, each with its exact similarity.
            let passing: HashMap<MemoryId, f32> = p
                .exact
                .vector_search(MODEL, &filter, q, 1000)
                .unwrap()
                .into_iter()
                .map(|h| (h.memory.id, h.similarity))
                .collect();
            for h in &hits {
                assert_eq!(passing.get(&h.memory.id), Some(&h.similarity), "{filter:?}");
            }
            assert!(hits.windows(2).all(|w| w[0].similarity >= w[1].similarity));
            assert_eq!(hits.len(), truth.len(), "{filter:?}");
            expected += truth.len();
            found += ids(&truth)
                .iter()
                .filter(|id| ids(&hits).contains(id))
                .count();
        }
    }
    let recall = found as f64 / expected as f64;
    assert!(recall >= 0.97, "recall {recall}");
    let counts = p.indexed.vector_search_counts();
    assert!(counts.approximate > 0, "{counts:?}");
    assert_eq!(counts.sql_exact, 0, "{counts:?}");
}

#[test]
fn small_scopes_are_exact_to_the_last_bit() {
    let p = pair(400, usize::MAX);
    p.indexed.warm_vector_index(MODEL).unwrap();
    for filter in filters() {
        for q in &p.queries {
            for limit in [1, 5, 10, 50] {
                let truth = p.exact.vector_search(MODEL, &filter, q, limit).unwrap();
                let hits = p.indexed.vector_search(MODEL, &filter, q, limit).unwrap();
                assert_eq!(hits, truth, "{filter:?}, limit {limit}");
            }
        }
    }
    let counts = p.indexed.vector_search_counts();
    assert!(
        counts.memory_exact > 0 && counts.approximate == 0,
        "{counts:?}"
    );
}

#[test]
fn an_index_follows_changes_made_through_another_handle() {
    let p = pair(300, 10);
    let writer = &p.exact;
    let reader = &p.indexed;
    let alice = Filter::user("alice");
    let q = p.queries[0].clone();
    let search = |limit| reader.vector_search(MODEL, &alice, &q, limit).unwrap();
    let before = search(5);
    assert_eq!(reader.vector_search_counts().approximate, 1);

    // A new memory whose vector is the query itself comes first.
    let fresh = add_with_vector(
        writer,
        NewMemory::new(Scope::user("alice"), "brand new"),
        q.clone(),
    );
    assert_eq!(search(5)[0].memory.id, fresh);

    // Closed by another handle: gone from current-only searches.
    writer.invalidate(fresh, "test").unwrap();
    assert_eq!(search(5), before);

    // The text of a top hit changes: its old vector no longer stands for it, and until the new
    // text is embedded it is no candidate.
    let top = before[0].memory.id;
    let changed = writer
        .update(top, MemoryPatch::text("rewritten text"), "test")
        .unwrap();
    assert!(!ids(&search(10)).contains(&top));
    writer
        .put_vectors(
            MODEL,
            DIM,
            vec![StoredVector {
                content_hash: changed.content_hash,
                vector: q.clone(),
                truncated: true,
            }],
        )
        .unwrap();
    let hits = search(3);
    assert_eq!(hits[0].memory.id, top);
    assert!(hits[0].truncated && hits[0].memory.text == "rewritten text");

    // Its vector replaced in place (re-embedded under the same model id).
    let opposite: Vec<f32> = q.iter().map(|x| -x).collect();
    writer
        .put_vectors(
            MODEL,
            DIM,
            vec![StoredVector {
                content_hash: writer.get(top).unwrap().content_hash,
                vector: opposite,
                truncated: false,
            }],
        )
        .unwrap();
    assert!(!ids(&search(10)).contains(&top));

    // Deleted.
    let second = before[1].memory.id;
    writer.delete(second, "test").unwrap();
    assert!(!ids(&search(10)).contains(&second));

    // An expiry set later applies as soon as it passes.
    let third = before[2].memory.id;
    writer
        .update(
            third,
            MemoryPatch {
                expires_at: Some(Some(now() - SignedDuration::from_secs(5))),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    assert!(!ids(&search(10)).contains(&third));

    // Everything agrees with exact search on the same file afterwards.
    let truth = writer.vector_search(MODEL, &alice, &q, 10).unwrap();
    assert_eq!(ids(&search(10)), ids(&truth));
    assert_eq!(reader.vector_search_counts().sql_exact, 0);
}

#[test]
fn forgetting_a_user_is_noticed_even_when_history_numbers_are_reused() {
    let p = pair(300, 10);
    let writer = &p.exact;
    let reader = &p.indexed;
    let q = p.queries[1].clone();
    // A memory of alice's that is closed: its vector stays, shared with any later memory of the
    // same text.
    let closed = add_with_vector(
        writer,
        NewMemory::new(Scope::user("alice"), "the same text"),
        q.clone(),
    );
    writer.invalidate(closed, "test").unwrap();
    // Carol's memories are the newest history rows.
    for i in 0..30 {
        add_with_vector(
            writer,
            NewMemory::new(Scope::user("carol"), format!("carol {i}")),
            Vectors::new(i).next(),
        );
    }
    let carol = Filter::user("carol");
    assert_eq!(
        reader.vector_search(MODEL, &carol, &q, 50).unwrap().len(),
        30
    );
    assert_eq!(reader.vector_search_counts().approximate, 1);

    writer.forget_user("carol").unwrap();
    // The same text again for alice, before the reader looks: it reuses the existing vector and
    // (carol's history rows being gone) a history number the index has already seen.
    let again = added(
        writer
            .add(
                NewMemory::new(Scope::user("alice"), "the same text"),
                "test",
            )
            .unwrap(),
    );
    let hits = reader
        .vector_search(MODEL, &Filter::user("alice"), &q, 3)
        .unwrap();
    assert_eq!(hits[0].memory.id, again.id);
    assert!(!ids(&hits).contains(&closed));
    assert!(
        reader
            .vector_search(MODEL, &carol, &q, 50)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_background_build_serves_exact_results_until_it_is_ready() {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(FixedClock::new(now()));
    let path = dir.path().join("engram.db");
    let store = open(&path, &clock, IndexBuild::Background, 50);
    let queries = populate(&store, 400, 3);
    let alice = Filter::user("alice");
    let first = store.vector_search(MODEL, &alice, &queries[0], 10).unwrap();
    assert_eq!(store.vector_search_counts().sql_exact, 1);
    // Waits for the build the first search started.
    let stats = store.warm_vector_index(MODEL).unwrap();
    assert_eq!(
        (stats.vectors, stats.memories, stats.dimension),
        (400, 400, DIM)
    );
    let second = store.vector_search(MODEL, &alice, &queries[0], 10).unwrap();
    assert_eq!(store.vector_search_counts().approximate, 1);
    assert_eq!(ids(&first), ids(&second));
    // Small scopes never start a build.
    let other = open(&path, &clock, IndexBuild::Background, 100_000);
    other.vector_search(MODEL, &alice, &queries[0], 10).unwrap();
    assert_eq!(other.vector_search_counts().sql_exact, 1);
}

#[test]
fn bad_queries_are_refused_on_every_path() {
    let p = pair(100, 5);
    let alice = Filter::user("alice");
    for store in [&p.exact, &p.indexed] {
        assert!(store.vector_search(MODEL, &alice, &[1.0; 3], 5).is_err());
        assert!(store.vector_search(MODEL, &alice, &[], 5).is_err());
        assert!(
            store
                .vector_search(MODEL, &alice, &[f32::NAN; DIM], 5)
                .is_err()
        );
        assert!(
            store
                .vector_search(MODEL, &Filter::user(""), &p.queries[0], 5)
                .is_err()
        );
        assert!(
            store
                .vector_search(MODEL, &alice, &p.queries[0], 0)
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .vector_search("unknown-model", &alice, &p.queries[0], 5)
                .unwrap()
                .is_empty()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Exact in-memory search over the loaded index returns the true top k (as SQL computes
    /// it), whatever the data, filter and k.
    #[test]
    fn the_in_memory_exact_path_returns_the_true_top_k(
        seed in 0u64..10_000,
        n in 1usize..120,
        limit in 1usize..30,
        which in 0usize..9,
    ) {
        let dir = TempDir::new().unwrap();
        let clock = Arc::new(FixedClock::new(now()));
        let path = dir.path().join("engram.db");
        let exact = open(&path, &clock, IndexBuild::Never, usize::MAX);
        let queries = populate(&exact, n, seed);
        let indexed = open(&path, &clock, IndexBuild::Blocking, usize::MAX);
        indexed.warm_vector_index(MODEL).unwrap();
        let filter = &filters()[which];
        for q in queries.iter().take(5) {
            let truth = exact.vector_search(MODEL, filter, q, limit).unwrap();
            let hits = indexed.vector_search(MODEL, filter, q, limit).unwrap();
            prop_assert_eq!(hits, truth);
        }
    }
}
