//! The reranker abstraction: a second, slower look at the best few candidates of a search.
//!
//! Search fuses lexical and dense evidence cheaply over many candidates; a [`Reranker`] reads
//! the query and each of the top few candidates' texts together (a cross-encoder, or a language
//! model asked to judge them) and scores them again. It is optional: no reranker configured is
//! `None`, not a dummy implementation, and search then orders exactly as without this stage.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::embed::EmbedError;
use crate::llm::LlmError;

/// Why a reranker could not score the candidates. Search never fails because of it: the fused
/// order is kept and the reason is reported.
#[derive(Debug, thiserror::Error)]
pub enum RerankError {
    /// The language model asked to judge the candidates failed.
    #[error("the language model failed: {0}")]
    Llm(#[from] LlmError),
    /// The reranking model could not be run (tokenizer, inference).
    #[error("the reranking model failed: {0}")]
    Model(#[from] EmbedError),
    /// The reranker answered, but nothing in the answer could be read as scores.
    #[error("the reranker's answer could not be read: {0}")]
    BadReply(String),
}

/// Scores how well texts answer a query, reading each pair together.
///
/// Implementations are cheap to share (`Arc<dyn Reranker>`) and safe to call from several tasks
/// at once.
#[async_trait]
pub trait Reranker: Send + Sync + Debug {
    /// A short name for reports and `--explain`, e.g. `llm:gpt-4o-mini` or
    /// `cross-encoder:ms-marco-MiniLM-L-6-v2`.
    fn name(&self) -> &str;

    /// One score per text, in order, higher meaning more relevant to `query`; `None` for a text
    /// the reranker did not score (a language model that skipped it), which then keeps its
    /// place. Scores are only compared with each other within one call.
    async fn score(&self, query: &str, texts: &[String]) -> Result<Vec<Option<f64>>, RerankError>;
}
