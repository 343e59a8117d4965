#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A whole store copied to another database and back comes out the same: every table's rows,
//! with their ids and times, and the same search answers.

mod common;

use std::sync::Arc;

use common::{Server, TestDb};
use engram_core::store::claims::ClaimOutcome;
use engram_core::store::graph::{Entity, Relation};
use engram_core::store::jobs::{AfterRun, NewJob, RunEnd, RunStatus, RunTrigger, ScheduleRecord};
use engram_core::store::tokens::NewToken;
use engram_core::store::transfer::{Record, Table, Transfer, copy};
use engram_core::store::{Backend, MemoryPatch};
use engram_core::{AddOutcome, Filter, Kind, MemoryId, NewMemory, Scope, StoredVector};
use engram_store_postgres::{PgOptions, PgStore};
use jiff::Timestamp;
use serde_json::json;

async fn open(db: &TestDb) -> Arc<PgStore> {
    Arc::new(PgStore::open(&db.url, PgOptions::default()).await.unwrap())
}

/// A store with something in every table.
async fn fill(store: &Arc<PgStore>) {
    fill_backend(store.clone().backend()).await;
}

async fn fill_backend(backend: Backend) {
    let at = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    for i in 0..60i64 {
        let scope = Scope::user(format!("u{}", i % 3)).with_session(format!("s{}", i % 2));
        let new = NewMemory::new(
            scope,
            format!("turn {i} about tea and the garden {}", i % 7),
        )
        .at(at(i * 10))
        .with_meta("i", json!(i));
        batch.push(new);
    }
    batch.push(
        NewMemory::new(Scope::user("u0"), "Alice likes green tea")
            .with_kind(Kind::Fact)
            .with_category("user_info"),
    );
    for outcome in backend.memories.add_many(batch, "import").await.unwrap() {
        if let AddOutcome::Added(m) = outcome.unwrap() {
            ids.push(m);
        }
    }
    let vectors: Vec<StoredVector> = ids
        .iter()
        .take(20)
        .enumerate()
        .map(|(i, m)| StoredVector {
            content_hash: m.content_hash.clone(),
            vector: vec![i as f32, 1.0, 0.5],
            truncated: i % 5 == 0,
        })
        .collect();
    backend
        .memories
        .put_vectors("toy", 3, vectors)
        .await
        .unwrap();
    backend
        .memories
        .update(
            ids[3].id,
            MemoryPatch::text("turn 3 is now about coffee"),
            "cli",
        )
        .await
        .unwrap();
    backend.memories.invalidate(ids[4].id, "cli").await.unwrap();
    backend.memories.delete(ids[5].id, "cli").await.unwrap();
    for (id, revoked) in [("tok1", false), ("tok2", true)] {
        backend
            .tokens
            .insert(NewToken {
                id: id.into(),
                name: Some(format!("name of {id}")),
                users: vec!["u0".into(), "u1".into()],
                token_hash: format!("hash-{id}"),
                created_at: at(1),
            })
            .await
            .unwrap();
        if revoked {
            backend.tokens.revoke(id, at(2)).await.unwrap();
        }
    }
    backend.tokens.touch("tok1", at(3)).await.unwrap();
    let job = backend
        .jobs
        .add(
            NewJob {
                name: "water the plants".into(),
                schedule: ScheduleRecord::Cron {
                    expr: "0 9 * * *".into(),
                },
                tz: "Europe/Berlin".into(),
                payload: json!({"message": "water", "deliver": true, "channel": "telegram"})
                    .as_object()
                    .unwrap()
                    .clone(),
                session_key: None,
                missed: "skip".into(),
                delete_after_run: false,
                next_run_at_ms: 1_000,
            },
            10,
        )
        .await
        .unwrap();
    let run = backend
        .jobs
        .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 77)
        .await
        .unwrap()
        .unwrap();
    backend
        .jobs
        .finish_run(
            &run,
            &RunEnd {
                status: RunStatus::Ok,
                error: None,
                output: Some("done".into()),
                finished_at_ms: 1_200,
            },
            AfterRun::Reschedule(Some(90_000)),
        )
        .await
        .unwrap();
    backend
        .jobs
        .start_run(&job.id, RunTrigger::Manual, None, 2_000, 78)
        .await
        .unwrap()
        .unwrap();
    backend
        .graph
        .create_entities(
            "u0",
            &[Entity {
                name: "Alice".into(),
                entity_type: "person".into(),
                observations: vec!["likes tea".into(), "lives in Berlin".into()],
            }],
            at(5),
        )
        .await
        .unwrap();
    backend
        .graph
        .create_relations(
            "u0",
            &[Relation {
                from: "Alice".into(),
                to: "Berlin".into(),
                relation_type: "lives_in".into(),
            }],
            at(6),
        )
        .await
        .unwrap();
    let pending = backend.graph.pending_index("u0", 10).await.unwrap();
    let links: Vec<_> = pending
        .iter()
        .map(|p| (p.target, MemoryId::new()))
        .collect();
    backend.graph.set_index(&links[..2]).await.unwrap();
    // Finished claims are copied; one still being worked on is a lease, and stays behind.
    for (stream, range, finish) in [("s0", 0..4, true), ("s0", 0..9, true), ("s1", 0..2, false)] {
        let outcome = backend
            .claims
            .claim("u0", stream, range, std::time::Duration::from_secs(60))
            .await
            .unwrap();
        let ClaimOutcome::Granted(ticket) = outcome else {
            panic!("{outcome:?}")
        };
        if finish {
            backend.claims.finish(&ticket).await.unwrap();
        }
    }
}

/// Every table's records, without their positions (memories are renumbered by a copy).
async fn everything(store: &dyn Transfer) -> Vec<(Table, Vec<Record>)> {
    let mut out = Vec::new();
    for table in Table::ALL {
        let mut records = Vec::new();
        let mut after = 0;
        loop {
            let page = store.dump(table, after, 7).await.unwrap();
            let Some(&(last, _)) = page.last() else { break };
            after = last;
            records.extend(page.into_iter().map(|(_, r)| r));
        }
        out.push((table, records));
    }
    out
}

async fn searches(store: &Arc<PgStore>, users: &[&str]) -> Vec<(MemoryId, f64)> {
    let backend = store.clone().backend();
    let mut out = Vec::new();
    for &user in users {
        for query in ["tea garden", "turn 12", "coffee", "Alice"] {
            let mut filter = Filter::user(user);
            filter.include_closed = true;
            for hit in backend
                .memories
                .search_lexical(&filter, query, 10)
                .await
                .unwrap()
            {
                out.push((hit.memory.id, hit.bm25));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_copied_to_postgresql_15_and_back_is_the_same() {
    let source_db = TestDb::new(Server::Pgvector).await;
    let source = open(&source_db).await;
    fill(&source).await;
    let plain_db = TestDb::new(Server::Plain).await;
    let plain = open(&plain_db).await;
    let back_db = TestDb::new(Server::Pgvector).await;
    let back = open(&back_db).await;

    let mut seen = Vec::new();
    let counts = copy(&*source, &*plain, &mut |table, n| seen.push((table, n)))
        .await
        .unwrap();
    assert!(
        seen.iter().any(|(t, n)| *t == Table::Memories && *n == 60),
        "{seen:?}"
    );
    let count = |table: Table| counts.iter().find(|(t, _)| *t == table).unwrap().1;
    assert_eq!(count(Table::Memories), 60);
    assert_eq!(
        count(Table::Vectors),
        18,
        "the old text's and the deleted one's went"
    );
    assert_eq!(count(Table::JobRuns), 2);
    assert_eq!(count(Table::Claims), 2, "the unfinished claim stays behind");
    copy(&*plain, &*back, &mut |_, _| {}).await.unwrap();

    let original = everything(&*source).await;
    assert!(
        original.iter().all(|(_, records)| !records.is_empty()),
        "every table has rows"
    );
    assert_eq!(everything(&*plain).await, original);
    assert_eq!(everything(&*back).await, original);
    // The lexical index is rebuilt on the target, each turn with the one before it: where no
    // text was edited or deleted that is the source's index...
    let untouched = ["u1"];
    let ranked = searches(&source, &untouched).await;
    assert!(ranked.len() > 10, "{ranked:?}");
    assert_eq!(searches(&plain, &untouched).await, ranked);
    assert_eq!(searches(&back, &untouched).await, ranked);
    // ...and after an edit or a deletion (the turn after it was indexed with the old text), it
    // is what a re-index gives, the same on every copy.
    let all = ["u0", "u1", "u2"];
    assert_eq!(searches(&back, &all).await, searches(&plain, &all).await);

    // Copies go into empty stores only.
    let err = copy(&*source, &*back, &mut |_, _| {}).await.unwrap_err();
    assert!(err.to_string().contains("already holds data"), "{err}");
    // New rows in a copy get fresh ids after the copied ones.
    let backend = back.clone().backend();
    let job = backend.jobs.list(true).await.unwrap().remove(0);
    let run = backend
        .jobs
        .start_run(&job.id, RunTrigger::Manual, None, 3_000, 1)
        .await;
    assert!(run.is_err(), "the copied run is still running: {run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_fails_leaves_the_target_empty() {
    let source_db = TestDb::new(Server::Plain).await;
    let source = open(&source_db).await;
    fill(&source).await;
    let target_db = TestDb::new(Server::Plain).await;
    let target = open(&target_db).await;
    // A token the target refuses (ids are unique there), halfway through the copy.
    let mut loader = target.begin_load().await.unwrap();
    let first = source.dump(Table::Memories, 0, 100).await.unwrap();
    loader
        .load(first.into_iter().map(|(_, r)| r).collect())
        .await
        .unwrap();
    let tokens: Vec<Record> = source
        .dump(Table::Tokens, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let twice: Vec<Record> = tokens.iter().chain(&tokens).cloned().collect();
    assert!(loader.load(twice).await.is_err());
    drop(loader);
    assert!(target.is_empty().await.unwrap());
    // And a new copy then goes through.
    copy(&*source, &*target, &mut |_, _| {}).await.unwrap();
    assert_eq!(everything(&*target).await, everything(&*source).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_copied_to_postgresql_and_back_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = engram_store_sqlite::SqliteStore::open(dir.path().join("engram.db")).unwrap();
    let original = sqlite.clone().into_backend();
    fill_backend(original.clone()).await;
    let db = TestDb::new(Server::Pgvector).await;
    let pg = open(&db).await;
    copy(&*original.transfer, &*pg, &mut |_, _| {})
        .await
        .unwrap();
    let back = engram_store_sqlite::SqliteStore::open(dir.path().join("back.db"))
        .unwrap()
        .into_backend();
    copy(&*pg, &*back.transfer, &mut |_, _| {}).await.unwrap();

    let expected = everything(&*original.transfer).await;
    assert!(expected.iter().all(|(_, records)| !records.is_empty()));
    assert_eq!(everything(&*pg).await, expected);
    assert_eq!(everything(&*back.transfer).await, expected);
    // The copy leaves the planner statistics and a visibility map behind it (a table never
    // analysed has reltuples -1; one never vacuumed has no page marked all-visible).
    let client = db.connect().await;
    let row = client
        .query_one(
            "SELECT c.reltuples, c.relpages, c.relallvisible FROM pg_class c \
             WHERE c.oid = to_regclass('memories')",
            &[],
        )
        .await
        .unwrap();
    let (tuples, pages, visible): (f32, i32, i32) = (row.get(0), row.get(1), row.get(2));
    assert!(tuples > 0.0, "memories not analysed: reltuples {tuples}");
    assert!(
        pages > 0 && visible > 0,
        "{visible} of {pages} pages all-visible"
    );
    // The same answers where the index is what a rebuild gives (see above).
    let pg_backend = pg.clone().backend();
    for (a, b) in [(&original, &pg_backend), (&pg_backend, &back)] {
        let mut filter = Filter::user("u1");
        filter.include_closed = true;
        for query in ["tea garden", "turn 12"] {
            let x = a.memories.search_lexical(&filter, query, 10).await.unwrap();
            let y = b.memories.search_lexical(&filter, query, 10).await.unwrap();
            let x: Vec<_> = x.iter().map(|h| (h.memory.id, h.bm25)).collect();
            let y: Vec<_> = y.iter().map(|h| (h.memory.id, h.bm25)).collect();
            assert!(!x.is_empty());
            assert_eq!(x, y, "{query}");
        }
    }
    // A copy into a store that holds something is refused, and nothing is written.
    let err = copy(&*original.transfer, &*back.transfer, &mut |_, _| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already holds data"), "{err}");
}
