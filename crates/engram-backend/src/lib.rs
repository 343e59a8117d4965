//! Opening the storage engine the configuration names, once, as one [`Backend`].
//!
//! This is the only code outside the engine crates that knows the engines: the `engram` binary
//! calls [`open`] once per process (its composition root) and passes the [`Backend`] down; the
//! other crates' tests call it too, so they run on whatever engine a [`StoreConfig`] names.
//! Adding an engine means a variant of [`StoreConfig`] and an arm in [`open`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_core::{Backend, Clock, StoreError};
use engram_store_sqlite::SqliteStore;

pub use engram_store_sqlite::{
    DATABASE_FILE, IndexBuild, StoreOptions as SqliteOptions, VectorIndexOptions,
};

/// Which engine holds engram's data, and how to open it.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// One SQLite file (the default: `ENGRAM_HOME/engram.db`).
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// How it is opened.
        options: SqliteOptions,
    },
}

impl StoreConfig {
    /// The SQLite file at `path`, with default options.
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        Self::Sqlite {
            path: path.into(),
            options: SqliteOptions::default(),
        }
    }

    /// The default store of an engram home: `home/engram.db`.
    pub fn in_home(home: &Path) -> Self {
        Self::sqlite(home.join(DATABASE_FILE))
    }

    /// The same store, stamping changes with `clock` (tests travel in time).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        match &mut self {
            Self::Sqlite { options, .. } => options.clock = clock,
        }
        self
    }

    /// The same store with SQLite `options` (ignored by other engines).
    pub fn with_sqlite_options(mut self, new: SqliteOptions) -> Self {
        match &mut self {
            Self::Sqlite { options, .. } => *options = new,
        }
        self
    }

    /// Where the data lives, as a person would name it.
    pub fn location(&self) -> String {
        match self {
            Self::Sqlite { path, .. } => path.display().to_string(),
        }
    }
}

/// Opens the store `config` names (creating and migrating it if needed), off the async
/// runtime's worker threads.
pub async fn open(config: &StoreConfig) -> Result<Backend, StoreError> {
    let config = config.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime
            .spawn_blocking(move || open_blocking(&config))
            .await
            .map_err(|e| StoreError::Backend(format!("opening the store stopped: {e}")))?,
        Err(_) => open_blocking(&config),
    }
}

/// [`open`] for code that is not async (a test fixture, a plain thread). Must not be called
/// from async code.
pub fn open_blocking(config: &StoreConfig) -> Result<Backend, StoreError> {
    match config {
        StoreConfig::Sqlite { path, options } => {
            Ok(SqliteStore::open_with(path, options.clone())?.into_backend())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_home_opens_as_one_sqlite_backend() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig::in_home(dir.path());
        let backend = open(&config).await.unwrap();
        assert_eq!(backend.engine, "sqlite");
        assert_eq!(backend.location, config.location());
        assert!(dir.path().join(DATABASE_FILE).is_file());
        assert!(
            backend.sessions.is_none(),
            "sessions stay in files on SQLite"
        );
        let stats = backend.memories.stats().await.unwrap();
        assert_eq!((stats.engine.as_str(), stats.memories), ("sqlite", 0));
    }
}
