//! Fresh databases on the test servers that scripts/setup-postgres.sh starts.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, Ordering};

use tokio_postgres::NoTls;

/// Which test server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// PostgreSQL 16 with pgvector (ENGRAM_TEST_PG_URL).
    Pgvector,
    /// PostgreSQL 15 without pgvector (ENGRAM_TEST_PG15_URL): the exact dense-search path.
    Plain,
}

impl Server {
    /// Both servers, for tests that must hold on each.
    pub const BOTH: [Server; 2] = [Server::Pgvector, Server::Plain];

    /// The URL of the server's `postgres` database. Panics, naming the fix, when the test
    /// environment does not say: the tests never skip for want of a server.
    pub fn admin_url(self) -> String {
        let var = match self {
            Server::Pgvector => "ENGRAM_TEST_PG_URL",
            Server::Plain => "ENGRAM_TEST_PG15_URL",
        };
        std::env::var(var).unwrap_or_else(|_| {
            panic!(
                "{var} is not set: run the tests through scripts/test.sh, or first \
                 eval \"$(scripts/setup-postgres.sh start)\""
            )
        })
    }
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDb {
    pub url: String,
    pub name: String,
    admin: String,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `url` with its database replaced by `database` (the test servers' URLs end in `/postgres`).
pub fn with_database(url: &str, database: &str) -> String {
    let base = url
        .strip_suffix("/postgres")
        .unwrap_or_else(|| panic!("test server URL {url} does not end in /postgres"));
    format!("{base}/{database}")
}

impl TestDb {
    /// Creates an empty database on `server`.
    pub async fn new(server: Server) -> Self {
        let admin = server.admin_url();
        let name = format!(
            "engram_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let (client, connection) = tokio_postgres::connect(&admin, NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test server {admin}: {e}"));
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = with_database(&admin, &name);
        Self { url, name, admin }
    }

    /// A plain connection to the test database, to look at or damage it behind the engine.
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Dropping happens inside the test's runtime; a thread of its own may block.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if let Ok((client, connection)) = tokio_postgres::connect(&admin, NoTls).await {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}
