//! The composition root: what every command and benchmark gets ([`Context`]), and the one
//! place where the async runtime and the store are made, once per process, from the
//! configuration.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, Result};
use engram_backend::StoreConfig;
use engram_core::{Backend, MemoryStore};
use engram_memory::session::SessionStore;

use crate::home::Home;

/// The sessions directory inside ENGRAM_HOME.
pub const SESSIONS_DIR: &str = "sessions";

/// What every command gets: where state lives, how to print, the async runtime and the
/// store. The runtime and the store are made on first use, once per process: this is the
/// program's composition root for storage.
#[derive(Debug, Clone)]
pub struct Context {
    /// ENGRAM_HOME.
    pub home: Home,
    /// Print JSON instead of text.
    pub json: bool,
    runtime: Arc<OnceLock<tokio::runtime::Runtime>>,
    backend: Arc<OnceLock<Backend>>,
}

impl Context {
    /// A context for `home`, printing JSON when `json`.
    pub fn new(home: Home, json: bool) -> Self {
        Self {
            home,
            json,
            runtime: Arc::default(),
            backend: Arc::default(),
        }
    }

    /// The process's async runtime (multi-threaded, one worker per core), started on first
    /// use.
    pub fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        self.start_runtime(None)
    }

    /// Starts the process's runtime with `workers` worker threads (default: one per core);
    /// a command that wants a number calls this before anything else uses the runtime.
    pub fn start_runtime(&self, workers: Option<usize>) -> Result<&tokio::runtime::Runtime> {
        if let Some(runtime) = self.runtime.get() {
            return Ok(runtime);
        }
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(workers) = workers {
            builder.worker_threads(workers.max(1));
        }
        let runtime = builder
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        Ok(self.runtime.get_or_init(|| runtime))
    }

    /// Runs `future` to completion on the process's runtime. Not for use inside async code.
    pub fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        Ok(self.runtime()?.block_on(future))
    }

    /// Where the store is: the PostgreSQL database of ENGRAM_DATABASE_URL or `[store] url`,
    /// else ENGRAM_HOME/engram.db.
    pub fn store_config(&self) -> Result<StoreConfig> {
        let settings = crate::config::StoreSettings::load(self.home.dir())?;
        let Some(url) = settings.url else {
            return Ok(StoreConfig::in_home(self.home.dir()));
        };
        let mut options = engram_backend::PgOptions {
            ca_file: settings.ca_file,
            ..engram_backend::PgOptions::default()
        };
        if let Some(size) = settings.pool_size {
            options.pool_size = size.max(1);
        }
        Ok(StoreConfig::postgres(url).with_postgres_options(options))
    }

    /// The store, opened (created and migrated if needed) on first use and shared by
    /// everything this process does. Not for use inside async code.
    pub fn backend(&self) -> Result<Backend> {
        if let Some(backend) = self.backend.get() {
            return Ok(backend.clone());
        }
        self.home.ensure()?;
        let config = self.store_config()?;
        let backend = self.block_on(engram_backend::open(&config))??;
        Ok(self.backend.get_or_init(|| backend).clone())
    }

    /// The agent's sessions: in the engine when it is shared by several machines, else files
    /// under ENGRAM_HOME/sessions (without opening the database).
    pub fn sessions(&self) -> Result<SessionStore> {
        let config = self.store_config()?;
        if !config.shares_sessions() {
            return Ok(SessionStore::files(self.home.dir().join(SESSIONS_DIR)));
        }
        let logs = self.backend()?.sessions.ok_or_else(|| {
            anyhow::anyhow!("the store {} keeps no session logs", config.location())
        })?;
        Ok(SessionStore::new(logs))
    }

    /// The memories of [`Context::backend`].
    pub fn memories(&self) -> Result<Arc<dyn MemoryStore>> {
        Ok(self.backend()?.memories)
    }
}
