//! What several test files of engram-cli share: a PostgreSQL database of a test's own on the
//! test script's PostgreSQL 16 (ENGRAM_TEST_PG_URL). Without that server the tests fail with
//! the fix, never skip.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

/// A database of this test's own, dropped at the end.
pub struct Database {
    admin: String,
    name: String,
    /// The database's URL.
    pub url: String,
}

/// Runs `sql` on the database at `url` with the test server's psql; fails the test if it fails.
pub fn psql(url: &str, sql: &str) {
    let bin = std::env::var("ENGRAM_TEST_PG_BIN").unwrap_or_else(|_| {
        panic!(
            "ENGRAM_TEST_PG_BIN is not set: run the tests through scripts/test.sh, or first \
             eval \"$(scripts/setup-postgres.sh start)\""
        )
    });
    let out = Command::new(Path::new(&bin).join("psql"))
        .args([url, "-qc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Database {
    /// Creates the database `engram_cli_<label>_<pid>` (dropping a leftover of that name).
    pub fn new(label: &str) -> Self {
        let admin = std::env::var("ENGRAM_TEST_PG_URL").unwrap_or_else(|_| {
            panic!(
                "ENGRAM_TEST_PG_URL is not set: run the tests through scripts/test.sh, or first \
                 eval \"$(scripts/setup-postgres.sh start)\""
            )
        });
        let name = format!("engram_cli_{label}_{}", std::process::id());
        psql(&admin, &format!("DROP DATABASE IF EXISTS {name}"));
        psql(&admin, &format!("CREATE DATABASE {name}"));
        let url = format!(
            "{}/{name}",
            admin
                .strip_suffix("/postgres")
                .expect("the test URL ends in /postgres")
        );
        Self { admin, name, url }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = Command::new(
            Path::new(&std::env::var("ENGRAM_TEST_PG_BIN").unwrap_or_default()).join("psql"),
        )
        .args([
            &self.admin,
            "-qc",
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        ])
        .output();
    }
}
