#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The storage conformance suite (engram-store-conformance) against PostgreSQL: every check on
//! a fresh database of its own, on both test servers (PostgreSQL 16 with pgvector, and
//! PostgreSQL 15 without it, where dense search is exact); "another handle" is another pool on
//! the same database, as another process or host would have.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{Server, TestDb};
use engram_core::store::sessions::SessionLogStore;
use engram_core::{Backend, Clock, SystemClock};
use engram_store_conformance::{Engine, SessionEngine};
use engram_store_postgres::{PgOptions, PgStore};

/// A fresh database on one of the test servers, dropped with this value.
struct PgEngine {
    db: TestDb,
}

impl PgEngine {
    async fn new(server: Server) -> Self {
        Self {
            db: TestDb::new(server).await,
        }
    }

    async fn store(&self, clock: Arc<dyn Clock>) -> Arc<PgStore> {
        let options = PgOptions {
            clock,
            pool_size: 4,
            ..PgOptions::default()
        };
        Arc::new(PgStore::open(&self.db.url, options).await.unwrap())
    }
}

#[async_trait]
impl Engine for PgEngine {
    async fn open(&self, clock: Arc<dyn Clock>) -> Backend {
        self.store(clock).await.backend()
    }
}

#[async_trait]
impl SessionEngine for PgEngine {
    async fn open(&self) -> Arc<dyn SessionLogStore> {
        self.store(Arc::new(SystemClock)).await
    }
}

mod pgvector {
    use super::*;

    engram_store_conformance::conformance_tests!(PgEngine::new(Server::Pgvector));
    engram_store_conformance::session_log_conformance_tests!(PgEngine::new(Server::Pgvector));
}

mod plain {
    use super::*;

    engram_store_conformance::conformance_tests!(PgEngine::new(Server::Plain));
}
