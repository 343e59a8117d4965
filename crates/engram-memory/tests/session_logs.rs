#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The session-log checks of the storage conformance suite (engram-store-conformance) against
//! the files a single machine keeps under ENGRAM_HOME/sessions: the same checks the PostgreSQL
//! engine's shared logs pass. (Torn last lines only happen to files; session.rs tests them.)

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::store::sessions::SessionLogStore;
use engram_memory::session::FileLogs;
use engram_store_conformance::SessionEngine;
use tempfile::TempDir;

/// A fresh sessions folder, removed when dropped; every open is another handle on it.
struct Files {
    dir: TempDir,
}

impl Files {
    async fn new() -> Self {
        Self {
            dir: TempDir::new().unwrap(),
        }
    }
}

#[async_trait]
impl SessionEngine for Files {
    async fn open(&self) -> Arc<dyn SessionLogStore> {
        Arc::new(FileLogs::new(self.dir.path().join("sessions")))
    }
}

engram_store_conformance::session_log_conformance_tests!(Files::new());
