//! Calling the (async) searcher and embedder from blocking code.
//!
//! Store work runs on the blocking pool (see [`crate::service`]); searching and giving new
//! memories their vectors are async because embedding may be. These helpers run them to
//! completion from a blocking thread: on the server's runtime when there is one, or on a small
//! runtime of their own (the command line's `import-graph`).

use std::future::Future;
use std::sync::Arc;

use engram_core::{AddOutcome, BlockingMemoryStore, Embedder, NewMemory, StoreError, StoredVector};
use engram_memory::{SearchError, SearchRequest, SearchResults, Searcher};

use crate::error::ApiError;

/// Texts embedded per call when adding many memories.
const EMBED_BATCH: usize = 64;

impl From<SearchError> for ApiError {
    fn from(err: SearchError) -> Self {
        match err {
            SearchError::Store(e) => ApiError::from(e),
            SearchError::Embed(e) => ApiError::internal(format!("cannot embed the text: {e}")),
        }
    }
}

/// Runs `future` to completion. Must be called from a blocking thread, never from async code.
pub fn block_on<F: Future>(future: F) -> Result<F::Output, ApiError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => Ok(handle.block_on(future)),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|runtime| runtime.block_on(future))
            .map_err(|e| ApiError::internal(format!("cannot start an async runtime: {e}"))),
    }
}

/// A search, from a blocking thread.
pub fn search(searcher: &Searcher, request: &SearchRequest) -> Result<SearchResults, ApiError> {
    Ok(block_on(searcher.search(request))??)
}

/// Stores one memory with its vector (when the searcher has an embedder).
pub fn add(
    store: &Arc<dyn BlockingMemoryStore>,
    searcher: &Searcher,
    memory: NewMemory,
    actor: &str,
) -> Result<AddOutcome, ApiError> {
    Ok(block_on(engram_memory::indexing::add_with_vector(
        store,
        searcher.embedder(),
        memory,
        actor,
    ))??)
}

/// Stores many memories in one transaction, each with its vector when the searcher has an
/// embedder. The texts are embedded first, so a failing embedder stores nothing.
pub fn add_many(
    store: &Arc<dyn BlockingMemoryStore>,
    searcher: &Searcher,
    memories: Vec<NewMemory>,
    actor: &str,
) -> Result<Vec<Result<AddOutcome, StoreError>>, ApiError> {
    let Some(embedder) = searcher.embedder().cloned() else {
        return Ok(store.add_many(memories, actor)?);
    };
    let valid: Vec<usize> = (0..memories.len())
        .filter(|&i| memories[i].validate().is_ok())
        .collect();
    let texts: Vec<String> = valid.iter().map(|&i| memories[i].text.clone()).collect();
    let hashes: Vec<String> = valid.iter().map(|&i| memories[i].content_hash()).collect();
    let embeddings = embed_all(&embedder, texts)?;
    let outcomes = store.add_many(memories, actor)?;
    let mut vectors = Vec::new();
    for ((index, hash), embedding) in valid.into_iter().zip(hashes).zip(embeddings) {
        if matches!(outcomes.get(index), Some(Ok(AddOutcome::Added(_)))) {
            vectors.push(StoredVector {
                content_hash: hash,
                vector: embedding.vector,
                truncated: embedding.truncated,
            });
        }
    }
    if !vectors.is_empty() {
        store.put_vectors(embedder.model_id(), embedder.dimension(), vectors)?;
    }
    Ok(outcomes)
}

fn embed_all(
    embedder: &Arc<dyn Embedder>,
    texts: Vec<String>,
) -> Result<Vec<engram_core::Embedding>, ApiError> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(EMBED_BATCH) {
        let embeddings = block_on(embedder.embed(chunk))?
            .map_err(|e| ApiError::internal(format!("cannot embed the texts: {e}")))?;
        out.extend(embeddings);
    }
    Ok(out)
}
