//! A real server on 127.0.0.1 (a random port) over a temporary database, and an HTTP client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use engram_server::config::ServerSettings;
use engram_server::{ServeError, ServeOptions, Server, Stores};
use engram_store_sqlite::SqliteStore;
use jiff::Timestamp;
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running server; stopped when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub dir: TempDir,
    pub stores: Stores,
    stop: Option<oneshot::Sender<()>>,
    pub handle: Option<JoinHandle<Result<(), ServeError>>>,
}

impl TestServer {
    /// Starts a server with default settings.
    pub async fn start() -> Self {
        Self::start_with(ServerSettings::default()).await
    }

    /// Starts a server with these settings on a fresh database.
    pub async fn start_with(settings: ServerSettings) -> Self {
        let dir = TempDir::new().unwrap();
        Self::start_in(dir, settings).await
    }

    /// Starts a server on the database in `dir`.
    pub async fn start_in(dir: TempDir, settings: ServerSettings) -> Self {
        Self::start_on(dir, settings, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Starts a server on the database in `dir`, listening on `listen`.
    pub async fn start_on(dir: TempDir, settings: ServerSettings, listen: SocketAddr) -> Self {
        Self::start_with_options(dir, ServeOptions::new(listen, settings)).await
    }

    /// Starts a server on the database in `dir` with these options.
    pub async fn start_with_options(dir: TempDir, options: ServeOptions) -> Self {
        let backend = SqliteStore::open(dir.path().join("engram.db"))
            .unwrap()
            .into_backend();
        let stores = Stores::lexical(&backend);
        let server = Server::bind(&stores, options).await.unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Self {
            addr,
            dir,
            stores,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("engram.db")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// A token bound to `users`, made as `engram token create` makes it.
    pub async fn token(&self, users: &[&str]) -> (String, String) {
        let tokens = SqliteStore::open(self.db()).unwrap();
        let users: Vec<String> = users.iter().map(|u| u.to_string()).collect();
        let (token, text) =
            engram_server::tokens::create_token(&tokens, Some("test"), &users, Timestamp::now())
                .await
                .unwrap();
        (token.id, text)
    }

    /// Asks the server to stop and waits for it.
    pub async fn stop(&mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.handle.take() {
            Some(handle) => handle.await.unwrap(),
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An HTTP client (no TLS needed, but reqwest wants a crypto provider).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

/// Status and JSON body of a response.
pub async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("status {status}: body is not JSON ({e}): {text}"));
    (status, body)
}

/// The error code of an error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}
