//! engram's embedded store: memories, their audit trail and a full-text index in one SQLite file.
//!
//! The file is opened in WAL mode with a busy timeout, so several processes can read and write it
//! at once; every write runs in an immediate transaction, so two writers queue instead of
//! failing half-way. Migrations run on open; a file written by a newer engram, a file of another
//! program and a damaged file are each refused with their own message.

mod ann;
mod error;
pub mod fts;
pub mod graph;
pub mod jobs;
mod lexical;
mod lexical_docs;
mod rows;
pub mod schema;
mod store;
pub mod tokens;
mod vectors;

pub use ann::{IndexBuild, VectorIndexOptions, VectorIndexStats, VectorSearchCounts};
pub use store::{SqliteStore, StoreOptions};

/// The database file's name inside ENGRAM_HOME.
pub const DATABASE_FILE: &str = "engram.db";
