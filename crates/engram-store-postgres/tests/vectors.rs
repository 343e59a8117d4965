#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Dense search on PostgreSQL gives the SQLite engine's answers: through pgvector (exact for
//! small scopes, HNSW for large ones) and without it (exact, scored in Rust).

mod common;

use std::sync::Arc;

use common::{Server, TestDb};
use engram_core::{
    AddOutcome, Filter, FixedClock, Kind, MemoryId, MemoryStore, NewMemory, Scope, StoredVector,
    VectorHit,
};
use engram_store_postgres::{PgOptions, PgStore};
use engram_store_sqlite::{Database as SqliteStore, StoreOptions};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit_vector(&mut self, dimension: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dimension)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }
}

const DIMENSION: usize = 16;

fn ids(hits: &[VectorHit]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.memory.id).collect()
}

async fn same_dense_search(server: Server, exact_max_scope: u64) {
    let clock = Arc::new(FixedClock::new("2024-06-01T12:00:00Z".parse().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open_with(
        dir.path().join("engram.db"),
        StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let db = TestDb::new(server).await;
    let pg = PgStore::open(
        &db.url,
        PgOptions {
            clock,
            exact_max_scope,
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();

    let mut rng = Rng(7);
    let mut batch = Vec::new();
    for i in 0..300u64 {
        let user = if i % 3 == 0 { "bob" } else { "alice" };
        let kind = if i % 4 == 0 {
            Kind::Fact
        } else {
            Kind::Episode
        };
        let mut new =
            NewMemory::new(Scope::user(user), format!("memory number {i}")).with_kind(kind);
        new.id = Some(MemoryId::new());
        if i % 10 == 0 {
            new.valid_to = Some("2024-01-01T00:00:00Z".parse().unwrap());
        }
        batch.push(new);
    }
    let a = sqlite.add_many(batch.clone(), "test").unwrap();
    let b = pg.add_many(batch, "test").await.unwrap();
    let memories: Vec<_> = a
        .into_iter()
        .zip(b)
        .map(|(a, b)| {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(a, b);
            match a {
                AddOutcome::Added(m) => m,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(
        sqlite.count_without_vectors("toy").unwrap(),
        pg.count_without_vectors("toy").await.unwrap()
    );
    // Every text but the last ten gets a vector, in pages as the indexer asks for them.
    let mut after: Option<String> = None;
    loop {
        let a = sqlite
            .texts_without_vectors("toy", after.as_deref(), 64)
            .unwrap();
        let b = pg
            .texts_without_vectors("toy", after.as_deref(), 64)
            .await
            .unwrap();
        assert_eq!(a, b);
        let Some(last) = a.last() else { break };
        after = Some(last.content_hash.clone());
    }
    let vectors: Vec<StoredVector> = memories[..290]
        .iter()
        .map(|m| StoredVector {
            content_hash: m.content_hash.clone(),
            vector: rng.unit_vector(DIMENSION),
            truncated: m.text.ends_with('7'),
        })
        .collect();
    sqlite
        .put_vectors("toy", DIMENSION, vectors.clone())
        .unwrap();
    pg.put_vectors("toy", DIMENSION, vectors).await.unwrap();
    assert_eq!(sqlite.count_without_vectors("toy").unwrap(), 10);
    assert_eq!(pg.count_without_vectors("toy").await.unwrap(), 10);
    assert_eq!(
        sqlite.vector_models().unwrap(),
        pg.vector_models().await.unwrap()
    );

    let mut filters = vec![Filter::user("alice"), Filter::user("bob")];
    let mut facts = Filter::user("alice");
    facts.kinds = vec![Kind::Fact];
    filters.push(facts);
    let mut closed = Filter::user("alice");
    closed.include_closed = true;
    filters.push(closed);
    let mut compared = 0;
    for filter in &filters {
        for limit in [1, 5, 20] {
            for _ in 0..5 {
                let query = rng.unit_vector(DIMENSION);
                let a = sqlite.vector_search("toy", filter, &query, limit).unwrap();
                let b = pg
                    .vector_search("toy", filter, &query, limit)
                    .await
                    .unwrap();
                assert_eq!(ids(&a), ids(&b), "{filter:?} limit {limit}");
                for (x, y) in a.iter().zip(&b) {
                    assert!((x.similarity - y.similarity).abs() < 1e-5);
                    assert_eq!(x.truncated, y.truncated);
                    assert_eq!(x.memory, y.memory);
                }
                compared += a.len();
            }
        }
    }
    assert!(compared > 200, "{compared}");
    let counts = pg.dense_search_counts();
    match (server, exact_max_scope) {
        (Server::Plain, _) => assert_eq!((counts.exact_in_database, counts.approximate), (60, 0)),
        (Server::Pgvector, 0) => {
            // The HNSW index answers unless the filter leaves too few of its candidates.
            assert_eq!(counts.approximate, 60, "{counts:?}");
            assert!(counts.exact_in_database <= 30, "{counts:?}");
        }
        (Server::Pgvector, _) => {
            assert_eq!((counts.exact_in_database, counts.approximate), (60, 0))
        }
    }

    // The same refusals.
    for (query, model) in [(vec![1.0; 3], "toy"), (vec![f32::NAN; DIMENSION], "toy")] {
        let a = sqlite
            .vector_search(model, &Filter::user("alice"), &query, 3)
            .unwrap_err();
        let b = pg
            .vector_search(model, &Filter::user("alice"), &query, 3)
            .await
            .unwrap_err();
        assert_eq!(a.to_string(), b.to_string());
    }
    let wrong = vec![StoredVector {
        content_hash: memories[0].content_hash.clone(),
        vector: vec![1.0; 3],
        truncated: false,
    }];
    assert_eq!(
        sqlite
            .put_vectors("toy", 3, wrong.clone())
            .unwrap_err()
            .to_string(),
        pg.put_vectors("toy", 3, wrong)
            .await
            .unwrap_err()
            .to_string()
    );
    assert!(
        pg.vector_search("other", &Filter::user("alice"), &[1.0; 4], 3)
            .await
            .unwrap()
            .is_empty()
    );

    // A deleted memory's vector goes with it.
    for m in &memories[..5] {
        sqlite.delete(m.id, "test").unwrap();
        pg.delete(m.id, "test").await.unwrap();
    }
    assert_eq!(
        sqlite.vector_models().unwrap(),
        pg.vector_models().await.unwrap()
    );
    assert_eq!(pg.vector_models().await.unwrap()[0].vectors, 285);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgvector_exact_search_matches_sqlite() {
    same_dense_search(Server::Pgvector, 1_000_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgvector_hnsw_search_matches_sqlite_on_a_small_store() {
    same_dense_search(Server::Pgvector, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_search_without_pgvector_matches_sqlite() {
    same_dense_search(Server::Plain, 0).await;
}
