#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Large batches (an import's): the writer stores them with a larger page cache, and they keep
//! every promise a small batch makes.

use engram_core::{AddOutcome, Filter, NewMemory, Scope, StoreError};
use engram_store_sqlite::{Database as SqliteStore, StoreOptions};
use tempfile::TempDir;

/// Larger than the store's threshold for a bulk batch.
const BULK: usize = 6_000;

fn text(i: usize) -> String {
    format!("memory number {i} about tea and gardens")
}

#[test]
fn a_bulk_batch_reports_each_memory_and_keeps_the_good_ones() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path().join("engram.db")).unwrap();
    let batch: Vec<NewMemory> = (0..BULK)
        .map(|i| match i % 1000 {
            7 => NewMemory::new(Scope::user("u"), "   "),
            500 => NewMemory::new(Scope::user("u"), text(0)),
            _ => NewMemory::new(Scope::user("u"), text(i)),
        })
        .collect();
    let outcomes = store.add_many(batch, "import").unwrap();
    assert_eq!(outcomes.len(), BULK);
    let first = match &outcomes[0] {
        Ok(AddOutcome::Added(memory)) => memory.id,
        other => panic!("expected the first memory stored, got {other:?}"),
    };
    for (i, outcome) in outcomes.iter().enumerate() {
        match (i % 1000, outcome) {
            (7, Err(StoreError::Invalid(_))) => {}
            (500, Ok(AddOutcome::Duplicate(id))) => assert_eq!(*id, first),
            (7 | 500, other) => panic!("memory {i}: unexpected {other:?}"),
            (_, Ok(AddOutcome::Added(_))) => {}
            (_, other) => panic!("memory {i}: unexpected {other:?}"),
        }
    }
    let stored = (BULK - 2 * BULK / 1000) as u64;
    assert_eq!(store.count(&Filter::user("u")).unwrap(), stored);
    let hits = store
        .search_lexical(&Filter::user("u"), "number 4321", 3)
        .unwrap();
    assert_eq!(hits[0].memory.text, text(4321));
    // A small write after it goes through as usual.
    assert!(matches!(
        store
            .add(NewMemory::new(Scope::user("u"), "one more"), "test")
            .unwrap(),
        AddOutcome::Added(_)
    ));
}

#[test]
fn a_bulk_batch_that_fails_leaves_nothing_and_the_store_goes_on() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("engram.db");
    let store = SqliteStore::open_with(
        &path,
        StoreOptions {
            max_database_bytes: Some(1024 * 1024),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let small: Vec<NewMemory> = (0..10)
        .map(|i| NewMemory::new(Scope::user("u"), text(i)))
        .collect();
    store.add_many(small, "import").unwrap();
    // Far more than the quota allows, in one batch.
    let big: Vec<NewMemory> = (10..10 + BULK)
        .map(|i| {
            NewMemory::new(
                Scope::user("u"),
                format!("{} {}", text(i), "word ".repeat(40)),
            )
        })
        .collect();
    let err = store.add_many(big, "import").unwrap_err();
    assert!(matches!(err, StoreError::DiskFull), "{err}");
    assert_eq!(store.count(&Filter::user("u")).unwrap(), 10);
    assert!(matches!(
        store
            .add(
                NewMemory::new(Scope::user("u"), "after the failure"),
                "test"
            )
            .unwrap(),
        AddOutcome::Added(_)
    ));
    drop(store);
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.count(&Filter::user("u")).unwrap(), 11);
}
