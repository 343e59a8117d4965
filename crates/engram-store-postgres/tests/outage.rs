#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The database going away and coming back: calls fail at once with a one-line error naming
//! the database (nothing half-written), and the store recovers by itself.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::PrivateServer;
use engram_core::store::Backend;
use engram_core::{Filter, NewMemory, Scope, StoreError};
use engram_store_postgres::{PgOptions, PgStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_cleanly_while_the_server_is_away_and_recover_when_it_is_back() {
    let server = PrivateServer::start();
    let store = PgStore::open(
        &server.url(),
        PgOptions {
            connect_timeout: Duration::from_secs(2),
            acquire_timeout: Duration::from_secs(3),
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    let backend: Backend = Arc::new(store).backend();
    let memories = backend.memories.clone();
    memories
        .add(
            NewMemory::new(Scope::user("alice"), "before the outage"),
            "test",
        )
        .await
        .unwrap();
    // The listening connection is up: versions are real.
    let version = backend.jobs.change_version().await.unwrap();
    assert!(version >= 0);

    server.stop();
    let started = Instant::now();
    let batch: Vec<NewMemory> = (0..100)
        .map(|i| NewMemory::new(Scope::user("alice"), format!("during the outage {i}")))
        .collect();
    let err = memories.add_many(batch, "test").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("cannot reach the database at postgresql://postgres@/postgres?host=/tmp/"),
        "{text}"
    );
    assert!(!text.contains('\n'));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let err = memories.count(&Filter::user("alice")).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    // While the listener is down, versions move on every call (callers re-read the tables).
    let a = backend.jobs.change_version().await.unwrap();
    let b = backend.jobs.change_version().await.unwrap();
    assert_ne!(a, b);

    server.resume();
    // Pooled connections broken by the outage are replaced by new ones on their own.
    let started = Instant::now();
    loop {
        match memories.count(&Filter::user("alice")).await {
            Ok(n) => {
                assert_eq!(n, 1, "nothing of the failed batch was written");
                break;
            }
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(20), "not back: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!("back after {:?}", started.elapsed());
    memories
        .add(
            NewMemory::new(Scope::user("alice"), "after the outage"),
            "test",
        )
        .await
        .unwrap();
    assert_eq!(memories.count(&Filter::user("alice")).await.unwrap(), 2);
    // And the listening connection too.
    let started = Instant::now();
    loop {
        let a = backend.jobs.change_version().await.unwrap();
        let b = backend.jobs.change_version().await.unwrap();
        if a == b && a >= 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the listener did not come back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
