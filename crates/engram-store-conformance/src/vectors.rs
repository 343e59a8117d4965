//! [`MemoryStore`]'s vectors: storing them per model, pending texts, dense search.

use engram_core::store::MemoryPatch;
use engram_core::{Filter, MemoryStore, StoredVector};

use crate::memories::add;
use crate::{Engine, open};

fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// Gives every text without a vector for `model` the vector `f` makes of it.
async fn embed_all(store: &dyn MemoryStore, model: &str, f: impl Fn(&str) -> Vec<f32>) {
    let pending = store
        .texts_without_vectors(model, None, 1000)
        .await
        .unwrap();
    let vectors = pending
        .into_iter()
        .map(|p| StoredVector {
            vector: unit(&f(&p.text)),
            content_hash: p.content_hash,
            truncated: false,
        })
        .collect();
    store.put_vectors(model, 3, vectors).await.unwrap();
}

/// A toy "embedding": how much a text is about tea, coffee and hiking.
fn toy(text: &str) -> Vec<f32> {
    let has = |w: &str| if text.contains(w) { 1.0 } else { 0.05 };
    vec![has("tea"), has("coffee"), has("hik")]
}

/// Dense search ranks by similarity within the filter (user, closed memories) applied before
/// the top k; a stored vector is replaced by a new one for the same text.
pub async fn vectors_are_found_by_similarity_within_the_filter(engine: &dyn Engine) {
    let (backend, _) = open(engine).await;
    let store = &*backend.memories;
    add(store, "u", "green tea in the morning").await;
    add(store, "u", "coffee after lunch").await;
    let hike = add(store, "u", "hiking on sunday").await;
    add(store, "other", "tea with bob").await;
    assert_eq!(store.count_without_vectors("toy").await.unwrap(), 4);
    embed_all(store, "toy", toy).await;
    assert_eq!(store.count_without_vectors("toy").await.unwrap(), 0);

    let hits = store
        .vector_search("toy", &Filter::user("u"), &unit(&[1.0, 0.0, 0.0]), 2)
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].memory.text, "green tea in the morning");
    assert!(hits[0].similarity > hits[1].similarity);
    assert!((hits[0].similarity - unit(&toy("tea"))[0]).abs() < 1e-4);
    assert!(!hits[0].truncated);

    // Filters apply before top-k: closed memories are not candidates at all.
    backend.memories.invalidate(hike, "t").await.unwrap();
    let hits = store
        .vector_search("toy", &Filter::user("u"), &unit(&[0.0, 0.0, 1.0]), 5)
        .await
        .unwrap();
    assert!(hits.iter().all(|h| h.memory.id != hike));
    assert_eq!(hits.len(), 2);
    let included = Filter {
        include_closed: true,
        ..Filter::user("u")
    };
    let hits = store
        .vector_search("toy", &included, &unit(&[0.0, 0.0, 1.0]), 1)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, hike);

    let stats = store.vector_models().await.unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].model, "toy");
    assert_eq!((stats[0].dimension, stats[0].vectors), (3, 4));

    // Putting a vector again replaces it (and marks truncation).
    let coffee = store
        .list(&Filter::user("u"), 10, 0)
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.text.starts_with("coffee"))
        .unwrap();
    store
        .put_vectors(
            "toy",
            3,
            vec![StoredVector {
                content_hash: coffee.content_hash.clone(),
                vector: unit(&[1.0, 0.0, 0.0]),
                truncated: true,
            }],
        )
        .await
        .unwrap();
    let hits = store
        .vector_search("toy", &Filter::user("u"), &unit(&[1.0, 0.0, 0.0]), 1)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, coffee.id);
    assert!(hits[0].truncated);
    assert_eq!(store.vector_models().await.unwrap()[0].vectors, 4);
}

/// A model keeps the dimension it was first given; another model's vectors never answer for
/// it (nor say it has any); a query of the wrong length is refused.
pub async fn a_model_keeps_its_dimension_and_spaces_never_mix(engine: &dyn Engine) {
    let (backend, _) = open(engine).await;
    let store = &*backend.memories;
    add(store, "u", "x").await;
    assert!(!store.has_vectors("toy").await.unwrap());
    embed_all(store, "toy", toy).await;
    assert!(store.has_vectors("toy").await.unwrap());
    assert!(!store.has_vectors("other-model").await.unwrap());
    assert!(
        store
            .texts_without_vectors("toy", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let wrong = StoredVector {
        content_hash: "abc".into(),
        vector: vec![1.0; 4],
        truncated: false,
    };
    assert!(
        store
            .put_vectors("toy", 4, vec![wrong.clone()])
            .await
            .is_err()
    );
    assert!(store.put_vectors("toy", 3, vec![wrong]).await.is_err());
    assert_eq!(store.vector_models().await.unwrap()[0].vectors, 1);
    let hits = store
        .vector_search("other-model", &Filter::user("u"), &[1.0, 0.0, 0.0], 5)
        .await
        .unwrap();
    assert!(hits.is_empty());
    assert_eq!(store.count_without_vectors("other-model").await.unwrap(), 1);
    assert!(
        store
            .vector_search("toy", &Filter::user("u"), &[1.0, 0.0], 5)
            .await
            .is_err()
    );
}

/// Texts without vectors page by content hash; vectors follow their memories (a delete, a
/// changed text and forgetting a user take theirs away).
pub async fn pending_texts_page_by_hash_and_vectors_follow_their_memories(engine: &dyn Engine) {
    let (backend, _) = open(engine).await;
    let store = &*backend.memories;
    for i in 0..25 {
        add(store, "u", &format!("memory {i} about tea")).await;
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .texts_without_vectors("toy", after.as_deref(), 10)
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 10);
        after = page.last().map(|p| p.content_hash.clone());
        seen.extend(page);
    }
    assert_eq!(seen.len(), 25);
    assert!(
        seen.windows(2)
            .all(|w| w[0].content_hash < w[1].content_hash)
    );
    embed_all(store, "toy", toy).await;
    let id = store.list(&Filter::user("u"), 1, 0).await.unwrap()[0].id;
    store.delete(id, "t").await.unwrap();
    assert_eq!(store.vector_models().await.unwrap()[0].vectors, 24);
    // A changed text needs a new vector; the old one goes.
    let id = store.list(&Filter::user("u"), 1, 0).await.unwrap()[0].id;
    store
        .update(id, MemoryPatch::text("now about coffee"), "t")
        .await
        .unwrap();
    assert_eq!(store.count_without_vectors("toy").await.unwrap(), 1);
    assert_eq!(store.vector_models().await.unwrap()[0].vectors, 23);
    store.forget_user("u").await.unwrap();
    assert_eq!(
        store
            .vector_models()
            .await
            .unwrap()
            .iter()
            .map(|m| m.vectors)
            .sum::<u64>(),
        0
    );
}
