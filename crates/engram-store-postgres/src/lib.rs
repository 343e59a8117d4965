//! engram's shared storage engine: everything engram keeps, in one PostgreSQL database, so that
//! several `engram serve` and `engram gateway` processes on several machines work as one.
//!
//! - **Driver.** tokio-postgres with a deadpool pool: async all the way (no blocking thread per
//!   call), statements prepared once per connection, queries pipelined, binary `COPY` for bulk
//!   imports, and `LISTEN`/`NOTIFY` for news from other processes; TLS (rustls, the
//!   certificate verified) with `sslmode=require`.
//! - **Schema.** Versioned migrations, each applied once inside one transaction under an
//!   advisory lock (see [`schema`]); a database written by a newer engram, or one that holds
//!   some other program's tables, is refused with its own message and left untouched.
//! - **Lexical search.** The same analysis as the SQLite engine (engram-text) into a postings
//!   table keyed by user, scored with the same BM25 from each user's own statistics
//!   (engram_text::bm25), so both engines return the same memories with the same scores.
//! - **Dense search.** pgvector's HNSW index when the `vector` extension can be used, exact
//!   search otherwise; [`PgStore::dense_search`] says which.
//! - **Many processes.** Jobs are claimed under row locks (`FOR UPDATE SKIP LOCKED`), so two
//!   gateways never run one occurrence; `LISTEN`/`NOTIFY` tells every process at once of jobs
//!   added and tokens revoked anywhere; a run left by a process that died (on any host) is known
//!   by the advisory lock its process no longer holds; memory extraction claims the messages
//!   it extracts under an advisory lock per stream, so two hosts never extract them both.
//!
//! [`PgStore`] implements every storage trait of engram-core (memories, jobs, tokens, the
//! graph, session logs, claims); [`PgStore::backend`] hands it out as one `Backend`.

mod claims;
mod error;
mod graph;
mod integrity;
mod jobs;
mod lexical;
mod memories;
mod memory_store;
mod notify;
mod rows;
pub mod schema;
mod sessions;
mod store;
mod tls;
mod tokens;
mod transfer;
mod vectors;

pub use error::describe_url;
pub use integrity::Integrity;
pub use store::{DenseSearch, PgOptions, PgStore, fresh_schema};

/// The engine's name in statistics and messages.
pub const ENGINE: &str = "postgresql";
