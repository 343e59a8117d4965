#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The storage conformance suite (engram-store-conformance) against SQLite: every check on a
//! fresh database file of its own; "another handle" is another open of the same file.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::{Backend, Clock};
use engram_store_conformance::Engine;
use engram_store_sqlite::{SqliteStore, StoreOptions};
use tempfile::TempDir;

/// A fresh database file in a folder of its own, removed when dropped.
struct SqliteEngine {
    dir: TempDir,
}

impl SqliteEngine {
    async fn new() -> Self {
        Self {
            dir: TempDir::new().unwrap(),
        }
    }
}

#[async_trait]
impl Engine for SqliteEngine {
    async fn open(&self, clock: Arc<dyn Clock>) -> Backend {
        SqliteStore::open_with(
            self.dir.path().join("engram.db"),
            StoreOptions {
                clock,
                ..StoreOptions::default()
            },
        )
        .unwrap()
        .into_backend()
    }
}

engram_store_conformance::conformance_tests!(SqliteEngine::new());
