//! What makes engram a memory and not a table.
//!
//! - [`search`]: hybrid retrieval — lexical (BM25) and dense (embedding) candidates fused, then
//!   weighed with recency, importance and any time the query names; every hit explains itself.
//! - [`ranking`]: the fusion methods and named ranking profiles.
//! - [`rerank`]: the optional rerank stage's language-model reranker (the stage itself is in
//!   [`search`]; a cross-encoder lives in `engram-embed`).
//! - [`when`]: time phrases in queries ("last week", "in May").
//! - [`indexing`]: giving memories their vectors, on add and afterwards.
//! - [`session`]: sessions as append-only JSONL files under ENGRAM_HOME/sessions.
//! - [`token_count`]: token counts with a real BPE tokenizer, for budgets.
//! - [`working`]: working memory in three layers (turn, window, summary) on a token budget.
//! - [`manager`]: the memory manager — the context block for each turn, extraction and merging
//!   after replies, the markdown mirror, maintenance; built from [`extract`], [`merge`],
//!   [`context`], [`mirror`], [`maintenance`] and the versioned [`prompts`]; [`grounding`]
//!   keeps out what the user never said.

pub mod context;
pub mod extract;
pub mod grounding;
pub mod indexing;
pub mod maintenance;
pub mod manager;
pub mod merge;
pub mod mirror;
pub mod prompts;
pub mod ranking;
pub mod rerank;
pub mod search;
pub mod session;
pub mod token_count;
pub mod when;
pub mod working;

pub use manager::{
    ContextBlock, ExtractionReport, ManagerConfig, MemoryError, MemoryManager, MemoryOverview,
};
pub use ranking::{Fusion, RankingProfile, Recency};
pub use rerank::LlmReranker;
pub use search::{
    Contributions, DEFAULT_RERANK_TOP, RerankStage, ScoreParts, SearchError, SearchHit,
    SearchRequest, SearchResults, Searcher,
};
