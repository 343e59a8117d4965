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

/// A PostgreSQL server of one test's own (PostgreSQL 16 from the test script's pgserver wheel),
/// for tests that stop and restart it. Listens on a Unix socket in its own folder; stopped and
/// deleted when dropped.
pub struct PrivateServer {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    os_user: String,
}

impl PrivateServer {
    /// Creates a cluster of PostgreSQL 16 and starts it.
    pub fn start() -> Self {
        Self::start_from("ENGRAM_TEST_PG_BIN")
    }

    /// Creates a cluster with the binaries in the folder the environment variable `bin_var`
    /// names, and starts it.
    pub fn start_from(bin_var: &str) -> Self {
        let bin = std::path::PathBuf::from(std::env::var(bin_var).unwrap_or_else(|_| {
            panic!(
                "{bin_var} is not set: run the tests through scripts/test.sh, or first \
                 eval \"$(scripts/setup-postgres.sh start)\""
            )
        }));
        let os_user = std::env::var("ENGRAM_TEST_PG_OS_USER").unwrap_or_default();
        let dir = tempfile::Builder::new()
            .prefix("engram-pg-")
            .tempdir_in("/tmp")
            .unwrap();
        let server = Self { dir, bin, os_user };
        if !server.os_user.is_empty() {
            let status = std::process::Command::new("chown")
                .arg(&server.os_user)
                .arg(server.dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let data = server.data();
        server.run(
            "initdb",
            &[
                &format!("--pgdata={data}"),
                "--username=postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        let conf = format!(
            "listen_addresses = ''\nunix_socket_directories = '{}'\nfsync = off\n\
             max_connections = 50\nshared_buffers = 16MB\n",
            server.dir.path().display()
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{data}/postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(&mut file, conf.as_bytes()).unwrap();
        server.resume();
        server
    }

    /// The folder the server's files are in (readable by the server).
    pub fn folder(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Adds lines to the server's configuration (read at the next start).
    pub fn configure(&self, lines: &str) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{}/postgresql.conf", self.data()))
            .unwrap();
        std::io::Write::write_all(&mut file, format!("\n{lines}\n").as_bytes()).unwrap();
    }

    /// Gives a file in [`PrivateServer::folder`] to the server's system user.
    pub fn give(&self, file: &std::path::Path) {
        if !self.os_user.is_empty() {
            let status = std::process::Command::new("chown")
                .arg(&self.os_user)
                .arg(file)
                .status()
                .unwrap();
            assert!(status.success());
        }
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    fn run(&self, program: &str, args: &[&str]) {
        let binary = self.bin.join(program);
        let mut command = if self.os_user.is_empty() {
            std::process::Command::new(&binary)
        } else {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", &self.os_user, "--"]).arg(&binary);
            c
        };
        let output = command.args(args).output().unwrap();
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        let socket: String = form_urlencoded_path(&self.dir.path().display().to_string());
        format!("postgresql://postgres@{socket}/postgres")
    }

    /// Stops it at once (connections are cut, as when a server goes away).
    pub fn stop(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }

    /// Starts it again.
    pub fn resume(&self) {
        let data = self.data();
        let log = format!("{data}/server.log");
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-t", "60", "start"],
        );
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let data = self.data();
        let _ = std::process::Command::new(if self.os_user.is_empty() {
            self.bin.join("pg_ctl")
        } else {
            std::path::PathBuf::from("runuser")
        })
        .args(if self.os_user.is_empty() {
            vec![]
        } else {
            vec![
                "-u".to_string(),
                self.os_user.clone(),
                "--".to_string(),
                self.bin.join("pg_ctl").display().to_string(),
            ]
        })
        .args(["-D", &data, "-m", "immediate", "-w", "stop"])
        .output();
    }
}

/// A socket folder as the host part of a URL.
fn form_urlencoded_path(path: &str) -> String {
    path.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
