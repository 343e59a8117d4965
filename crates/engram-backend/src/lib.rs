//! Opening the storage engine the configuration names (SQLite or PostgreSQL), once, as one
//! [`Backend`].
//!
//! This is the only code outside the engine crates that knows the engines: the `engram` binary
//! calls [`open`] once per process (its composition root) and passes the [`Backend`] down; the
//! other crates' tests call it too, so they run on whatever engine a [`StoreConfig`] names.
//! Adding an engine means a variant of [`StoreConfig`] and an arm in [`open`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_core::{Backend, Clock, StoreError};
use engram_store_postgres::PgStore;
use engram_store_sqlite::SqliteStore;

pub use engram_store_postgres::{PgOptions, describe_url, fresh_schema};

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
    /// A PostgreSQL database, shared by any number of engram processes on any hosts.
    Postgres {
        /// `postgres://user:password@host:port/database` (libpq's URL form).
        url: String,
        /// How it is opened.
        options: PgOptions,
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

    /// The PostgreSQL database at `url`, with default options.
    pub fn postgres(url: impl Into<String>) -> Self {
        Self::Postgres {
            url: url.into(),
            options: PgOptions::default(),
        }
    }

    /// A PostgreSQL URL (`postgres://` or `postgresql://`) or else a SQLite file (a folder
    /// means the `engram.db` in it): how a command line names a store.
    pub fn parse(text: &str) -> Self {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Self::postgres(text);
        }
        let path = PathBuf::from(text);
        if path.is_dir() {
            Self::sqlite(path.join(DATABASE_FILE))
        } else {
            Self::sqlite(path)
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
            Self::Postgres { options, .. } => options.clock = clock,
        }
        self
    }

    /// The same store with SQLite `options` (ignored by other engines).
    pub fn with_sqlite_options(mut self, new: SqliteOptions) -> Self {
        if let Self::Sqlite { options, .. } = &mut self {
            *options = new;
        }
        self
    }

    /// The same store with PostgreSQL `options` (ignored by other engines).
    pub fn with_postgres_options(mut self, new: PgOptions) -> Self {
        if let Self::Postgres { options, .. } = &mut self {
            *options = new;
        }
        self
    }

    /// True when the engine holds the agent's session logs (a database shared by several
    /// machines); on SQLite they stay files under ENGRAM_HOME/sessions.
    pub fn shares_sessions(&self) -> bool {
        match self {
            Self::Sqlite { .. } => false,
            Self::Postgres { .. } => true,
        }
    }

    /// Where the data lives, as a person would name it.
    pub fn location(&self) -> String {
        match self {
            Self::Sqlite { path, .. } => path.display().to_string(),
            Self::Postgres { url, .. } => describe_url(url),
        }
    }
}

/// Opens the store `config` names (creating and migrating it if needed), off the async
/// runtime's worker threads.
pub async fn open(config: &StoreConfig) -> Result<Backend, StoreError> {
    if let StoreConfig::Postgres { url, options } = config {
        // Async all the way: nothing to move off the runtime.
        let store = PgStore::open(url, options.clone()).await?;
        return Ok(Arc::new(store).backend());
    }
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
        // Its connections live on the async runtime that opens it.
        StoreConfig::Postgres { url, .. } => Err(StoreError::BadQuery(format!(
            "{} must be opened from async code (engram_backend::open)",
            describe_url(url)
        ))),
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
