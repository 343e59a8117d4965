#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The integrity check: a sound store passes on both test servers, and each kind of damage done
//! behind the engine's back is named.

mod common;

use common::{Server, TestDb};
use engram_core::{AddOutcome, MemoryId, MemoryPatch, MemoryStore, NewMemory, Scope, StoredVector};
use engram_store_postgres::{PgOptions, PgStore};

async fn add(store: &PgStore, scope: Scope, text: &str) -> engram_core::Memory {
    match store
        .add(NewMemory::new(scope, text), "test")
        .await
        .unwrap()
    {
        AddOutcome::Added(m) => m,
        other => panic!("{other:?}"),
    }
}

/// A store with a bit of everything: memories of two users, a conversation (bodies with
/// context), an update, an invalidation, a delete, a word too long to post as it is, vectors.
async fn sound_store(db: &TestDb) -> (PgStore, MemoryId) {
    let store = PgStore::open(&db.url, PgOptions::default()).await.unwrap();
    let talk = Scope::user("alice").with_session("s1");
    let a = add(&store, talk.clone(), "Alice moved to Berlin in May").await;
    add(&store, talk, "She found a flat near the river").await;
    let tabs = add(&store, Scope::user("alice"), "prefers tabs over spaces").await;
    let b = add(&store, Scope::user("bob"), "Bob plays the guitar").await;
    add(&store, Scope::user("bob"), "!!!").await;
    add(
        &store,
        Scope::user("bob"),
        &format!("a long word: {} and a short one", "x".repeat(300)),
    )
    .await;
    store
        .update(
            a.id,
            MemoryPatch {
                text: Some("Alice moved to Lisbon in June".into()),
                ..MemoryPatch::default()
            },
            "test",
        )
        .await
        .unwrap();
    store.invalidate(b.id, "test").await.unwrap();
    store.delete(tabs.id, "test").await.unwrap();
    store
        .put_vectors(
            "toy",
            2,
            vec![StoredVector {
                content_hash: b.content_hash.clone(),
                vector: vec![0.6, 0.8],
                truncated: false,
            }],
        )
        .await
        .unwrap();
    (store, b.id)
}

#[tokio::test]
async fn the_integrity_check_passes_a_sound_store_and_names_what_is_out_of_step() {
    for server in Server::BOTH {
        let db = TestDb::new(server).await;
        let (store, bob) = sound_store(&db).await;
        let found = store.check_integrity().await.unwrap();
        assert_eq!(found.problems, Vec::<String>::new(), "{server:?}");
        // amcheck: PostgreSQL 15 from Debian has it; the pgserver wheel's 16 does not, and
        // the check says so instead of passing in silence.
        match server {
            Server::Plain => assert_eq!(found.skipped, Vec::<String>::new()),
            Server::Pgvector => assert_eq!(
                found.skipped,
                ["B-tree indexes not verified: this server has no amcheck extension"]
            ),
        }

        // Behind the store's back: a memory loses its indexed body, another a posting, a
        // user's statistics drift, a vector is cut short, history goes missing.
        let raw = db.connect().await;
        raw.batch_execute(
            "DELETE FROM lexical_bodies WHERE doc = (SELECT min(doc) FROM memories); \
             DELETE FROM postings WHERE (doc, term) = \
                 (SELECT doc, min(term) FROM postings WHERE term LIKE 'guitar%' GROUP BY doc); \
             UPDATE lexical_users SET terms = terms + 1 WHERE user_id = 'bob'; \
             DELETE FROM history WHERE event = 'delete';",
        )
        .await
        .unwrap();
        match server {
            Server::Plain => raw
                .batch_execute("UPDATE embeddings SET vector = '\\x00000000'::bytea")
                .await
                .unwrap(),
            Server::Pgvector => {
                // The model's HNSW index would refuse a vector of another length: it goes
                // first (and is missed).
                let index: String = raw
                    .query_one(
                        "SELECT indexname::text FROM pg_indexes \
                         WHERE indexname LIKE 'embeddings_hnsw_%'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                raw.batch_execute(&format!(
                    "DROP INDEX {index}; UPDATE embeddings SET vector = '[1,0,0]'"
                ))
                .await
                .unwrap();
            }
        }
        raw.execute("DELETE FROM history WHERE memory_id = $1", &[bob.as_uuid()])
            .await
            .unwrap();
        let problems = store.check_integrity().await.unwrap().problems;
        for expected in [
            "1 memories without an indexed body",
            // The one without a body, and the one that lost a posting.
            "2 memories whose postings are not their indexed body's terms",
            "1 users whose word statistics disagree with their memories",
            "1 vectors whose length is not their model's",
            "1 memories without history",
            "1 memories gone without a delete in their history",
        ]
        .into_iter()
        .chain(
            (server == Server::Pgvector).then_some("model toy has no HNSW index over its vectors"),
        ) {
            assert!(
                problems.iter().any(|p| p == expected),
                "{server:?}: {expected} not in {problems:?}"
            );
        }
    }
}

#[tokio::test]
async fn postings_counters_and_stray_rows_are_each_named() {
    let db = TestDb::new(Server::Plain).await;
    let (store, _) = sound_store(&db).await;
    let raw = db.connect().await;
    // A posting's frequency and length drift, a body without a memory, a vector no memory's
    // text has: each is a problem of its own.
    raw.batch_execute(
        "UPDATE postings SET tf = tf + 1 WHERE term LIKE 'river%'; \
         INSERT INTO lexical_bodies (doc, terms) VALUES (999999, 'ghost'); \
         INSERT INTO embeddings (model, content_hash, vector) \
             VALUES ('toy', 'no-such-text', '\\x0000803f00000000'::bytea);",
    )
    .await
    .unwrap();
    let problems = store.check_integrity().await.unwrap().problems;
    assert_eq!(
        problems,
        [
            "1 indexed bodies without a memory",
            "1 vectors of a text no memory has",
            "1 memories whose postings are not their indexed body's terms",
        ],
    );
    // The long word's posting is a hash: losing it is seen too.
    raw.batch_execute(
        "UPDATE postings SET tf = tf - 1 WHERE term LIKE 'river%'; \
         DELETE FROM lexical_bodies WHERE doc = 999999; \
         DELETE FROM embeddings WHERE content_hash = 'no-such-text'; \
         DELETE FROM postings WHERE term LIKE '~%';",
    )
    .await
    .unwrap();
    assert_eq!(
        store.check_integrity().await.unwrap().problems,
        ["1 memories whose postings are not their indexed body's terms"]
    );
}
