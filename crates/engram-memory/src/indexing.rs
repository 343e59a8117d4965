//! Giving memories their vectors: when they are added, and later for those that have none
//! (memories added without a model, or after switching models).

use std::sync::Arc;

use engram_core::{AddOutcome, Embedder, MemoryStore, NewMemory, StoreError, StoredVector};

use crate::search::SearchError;

/// How many texts are embedded and stored per round.
pub const EMBED_BATCH: usize = 64;

/// Stores `memory` and its vector. The text is embedded first, so a failing embedder stores
/// nothing; a duplicate gets no new vector (its text already has one, or gets it on reindex).
pub async fn add_with_vector(
    store: &Arc<dyn MemoryStore>,
    embedder: Option<&Arc<dyn Embedder>>,
    memory: NewMemory,
    actor: &str,
) -> Result<AddOutcome, SearchError> {
    let Some(embedder) = embedder else {
        return Ok(store.add(memory, actor).await?);
    };
    memory
        .validate()
        .map_err(|e| SearchError::Store(e.into()))?;
    let hash = memory.content_hash();
    let embedding = embedder.embed_one(&memory.text).await?;
    let outcome = store.add(memory, actor).await?;
    if matches!(outcome, AddOutcome::Added(_)) {
        store
            .put_vectors(
                embedder.model_id(),
                embedder.dimension(),
                vec![StoredVector {
                    content_hash: hash,
                    vector: embedding.vector,
                    truncated: embedding.truncated,
                }],
            )
            .await?;
    }
    Ok(outcome)
}

/// Stores many memories in one transaction, each with its vector when there is an embedder.
/// The texts are embedded first, [`EMBED_BATCH`] at a time, so a failing embedder stores
/// nothing; duplicates and invalid memories get no vector.
pub async fn add_many_with_vectors(
    store: &Arc<dyn MemoryStore>,
    embedder: Option<&Arc<dyn Embedder>>,
    memories: Vec<NewMemory>,
    actor: &str,
) -> Result<Vec<Result<AddOutcome, StoreError>>, SearchError> {
    let Some(embedder) = embedder else {
        return Ok(store.add_many(memories, actor).await?);
    };
    let valid: Vec<usize> = (0..memories.len())
        .filter(|&i| memories[i].validate().is_ok())
        .collect();
    let texts: Vec<String> = valid.iter().map(|&i| memories[i].text.clone()).collect();
    let hashes: Vec<String> = valid.iter().map(|&i| memories[i].content_hash()).collect();
    let mut embeddings = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(EMBED_BATCH) {
        embeddings.extend(embedder.embed(chunk).await?);
    }
    let outcomes = store.add_many(memories, actor).await?;
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
        store
            .put_vectors(embedder.model_id(), embedder.dimension(), vectors)
            .await?;
    }
    Ok(outcomes)
}

/// Embeds every stored text that has no vector for `embedder`'s model, `EMBED_BATCH` at a time,
/// calling `progress(done, total)` after each batch. Returns how many texts were embedded.
///
/// Each batch is stored as it completes, so an interrupted run keeps its progress.
pub async fn embed_pending(
    store: &Arc<dyn MemoryStore>,
    embedder: &Arc<dyn Embedder>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<u64, SearchError> {
    let model = embedder.model_id().to_string();
    let total = store.count_without_vectors(&model).await?;
    let mut done = 0u64;
    let mut after: Option<String> = None;
    progress(0, total);
    loop {
        let pending = store
            .texts_without_vectors(&model, after.as_deref(), EMBED_BATCH)
            .await?;
        let Some(last) = pending.last() else {
            break;
        };
        after = Some(last.content_hash.clone());
        let texts: Vec<String> = pending.iter().map(|p| p.text.clone()).collect();
        let embeddings = embedder.embed(&texts).await?;
        let vectors = pending
            .into_iter()
            .zip(embeddings)
            .map(|(p, e)| StoredVector {
                content_hash: p.content_hash,
                vector: e.vector,
                truncated: e.truncated,
            })
            .collect::<Vec<_>>();
        done += vectors.len() as u64;
        store
            .put_vectors(&model, embedder.dimension(), vectors)
            .await?;
        progress(done, total.max(done));
    }
    Ok(done)
}
