//! [`Backend`]: every store of one engine, opened once and passed down.

use std::sync::Arc;

use super::MemoryStore;
use super::claims::ClaimStore;
use super::graph::GraphStore;
use super::jobs::JobStore;
use super::sessions::SessionLogStore;
use super::tokens::TokenStore;
use super::transfer::Transfer;

/// One engine's stores, opened once by the program's composition root (engram-cli's
/// `backend`) from the configuration, and handed to whatever needs them: the memory layer
/// takes `memories` and `claims`, the scheduler `jobs`, the server `tokens` and `graph`. Cheap to clone.
///
/// An engine implements every trait on one value that owns its connections, so the fields
/// usually point at the same object; nothing here names the engine's type.
#[derive(Clone)]
pub struct Backend {
    /// Memories, history, lexical and dense search.
    pub memories: Arc<dyn MemoryStore>,
    /// Scheduled jobs and their runs.
    pub jobs: Arc<dyn JobStore>,
    /// API tokens.
    pub tokens: Arc<dyn TokenStore>,
    /// Knowledge graphs.
    pub graph: Arc<dyn GraphStore>,
    /// Claims on ranges of streams (what memory extraction has done or is doing).
    pub claims: Arc<dyn ClaimStore>,
    /// Copying everything to or from another store (`engram copy`).
    pub transfer: Arc<dyn Transfer>,
    /// Session logs, when the engine holds them (a shared engine); `None` means files under
    /// ENGRAM_HOME/sessions, the default on one machine.
    pub sessions: Option<Arc<dyn SessionLogStore>>,
    /// The engine's name (`sqlite`, `postgresql`).
    pub engine: &'static str,
    /// Where its data lives, as a person would name it (a file; a URL without its password).
    pub location: String,
}

impl Backend {
    /// A backend whose every store is `engine`, which implements all of them; session logs
    /// stay in files (see [`Backend::with_sessions`]).
    pub fn from_engine<E>(engine: Arc<E>, name: &'static str, location: String) -> Self
    where
        E: MemoryStore + JobStore + TokenStore + GraphStore + ClaimStore + Transfer + 'static,
    {
        Self {
            memories: engine.clone(),
            jobs: engine.clone(),
            tokens: engine.clone(),
            transfer: engine.clone(),
            claims: engine.clone(),
            graph: engine,
            sessions: None,
            engine: name,
            location,
        }
    }

    /// The same backend with session logs held by `sessions` (a shared engine).
    pub fn with_sessions(mut self, sessions: Arc<dyn SessionLogStore>) -> Self {
        self.sessions = Some(sessions);
        self
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("engine", &self.engine)
            .field("location", &self.location)
            .field("shared_sessions", &self.sessions.is_some())
            .finish_non_exhaustive()
    }
}
