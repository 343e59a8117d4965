//! Finding memories again: one request shape, ranked hits, and the score parts behind each rank.

use std::sync::Arc;

use engram_core::{Filter, Memory, MemoryStore, StoreError};
use serde::Serialize;

/// What to look for, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// Which memories may be returned (always one user).
    pub filter: Filter,
    /// The words to look for.
    pub query: String,
    /// How many hits at most.
    pub limit: usize,
}

/// Why a hit ranked where it did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScoreParts {
    /// BM25 relevance from the full-text index (higher is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bm25: Option<f64>,
    /// Position in the lexical ranking, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
}

/// One memory found, with its score.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The memory.
    pub memory: Memory,
    /// The final score; hits are sorted by it, best first.
    pub score: f64,
    /// How the score came about.
    pub parts: ScoreParts,
}

/// Runs searches against a store.
#[derive(Clone)]
pub struct Searcher {
    store: Arc<dyn MemoryStore>,
}

impl std::fmt::Debug for Searcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher").finish_non_exhaustive()
    }
}

impl Searcher {
    /// A searcher over `store`.
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        Self { store }
    }

    /// The best memories for the request, best first.
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<SearchHit>, StoreError> {
        let hits = self
            .store
            .search_lexical(&request.filter, &request.query, request.limit)?;
        Ok(hits
            .into_iter()
            .enumerate()
            .map(|(i, hit)| SearchHit {
                score: hit.bm25,
                parts: ScoreParts {
                    bm25: Some(hit.bm25),
                    lexical_rank: Some(i + 1),
                },
                memory: hit.memory,
            })
            .collect())
    }
}
