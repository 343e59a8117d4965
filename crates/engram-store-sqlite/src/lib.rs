//! engram's embedded storage engine: memories, their audit trail, a full-text index, vectors,
//! jobs, API tokens, the knowledge graph and extraction claims in one SQLite file.
//!
//! [`SqliteStore`] implements every storage trait of engram-core (async, through the blocking
//! pool); [`Database`] is the same file, synchronously.
//!
//! The file is opened in WAL mode with a busy timeout, so several processes can read and write it
//! at once; every write runs in an immediate transaction, so two writers queue instead of
//! failing half-way. Migrations run on open; a file written by a newer engram, a file of another
//! program and a damaged file are each refused with their own message.

mod ann;
pub mod claims;
mod engine;
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
mod topk;
mod transfer;
mod vectors;

pub use ann::{IndexBuild, VectorIndexOptions, VectorIndexStats, VectorSearchCounts};
pub use engine::SqliteStore;
pub use lexical_docs::LexicalSearchCounts;
pub use store::{Database, ENGINE, StoreOptions};

/// The database file's name inside ENGRAM_HOME.
pub const DATABASE_FILE: &str = "engram.db";
