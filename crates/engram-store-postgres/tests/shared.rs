#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Several engram processes on one database, where PostgreSQL differs from one machine: each
//! test opens two stores on the same database (two pools, two listening connections, two
//! runner locks: what two processes or two hosts have).
//!
//! What every engine must do across handles (a memory, a token or a job seen by the other at
//! once, one claim per occurrence, batches of session lines that never interleave) is checked
//! by the conformance suite (tests/conformance.rs), which opens a second handle the same way.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Server, TestDb};
use engram_core::store::Backend;
use engram_core::store::jobs::{RunStatus, RunTrigger};
use engram_store_conformance::jobs::new_job;
use engram_store_postgres::{PgOptions, PgStore};

/// Two processes' views of one database.
async fn two_stores(server: Server) -> (TestDb, Backend, Backend) {
    let db = TestDb::new(server).await;
    let a = PgStore::open(&db.url, PgOptions::default()).await.unwrap();
    let b = PgStore::open(&db.url, PgOptions::default()).await.unwrap();
    (db, Arc::new(a).backend(), Arc::new(b).backend())
}

/// Waits until `probe` holds, for at most `limit`; returns how long it took.
async fn within<F, Fut>(limit: Duration, mut probe: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if probe().await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "not seen within {} ms",
            limit.as_millis()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// On one machine a dead process id is enough (the SQLite engine asks `is_alive`); on a shared
// database the process may run on another host, so only its runner's connection going away
// counts.
async fn a_run_is_interrupted_only_when_its_process_is_gone() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    let job = a.jobs.add(new_job("long", 1_000), 0).await.unwrap();
    let run = a
        .jobs
        .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 4242)
        .await
        .unwrap()
        .unwrap();
    // The other process, on another host (its idea of process ids means nothing here), sees
    // a live run: its runner still holds its lock.
    let stale = b
        .jobs
        .recover_interrupted(2_000, Box::new(|_| false))
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
    assert!(
        b.jobs.due(5_000).await.unwrap().is_empty(),
        "a running job is not due"
    );

    // The runner dies (its connections close).
    drop(a);
    let stale = within(Duration::from_secs(5), || async {
        b.jobs.run(run.id).await.unwrap();
        !b.jobs
            .recover_interrupted(3_000, Box::new(|_| true))
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    eprintln!("the dead runner's run was recovered after {stale:?}");
    let run = b.jobs.run(run.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    let job = b.jobs.get(&job.id).await.unwrap();
    assert_eq!(job.state.running_run_id, None);
    assert_eq!(job.state.next_run_at_ms, Some(1_000), "still due");
    assert_eq!(b.jobs.due(5_000).await.unwrap().len(), 1);
}
