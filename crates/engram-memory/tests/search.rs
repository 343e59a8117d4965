#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hybrid search over a real store with the real all-MiniLM-L6-v2 model.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use engram_core::{
    AddOutcome, Embedder, Filter, FixedClock, MemoryStore, NewMemory, Scope, StoredVector,
};
use engram_embed::LocalEmbedder;
use engram_memory::indexing::{add_with_vector, embed_pending};
use engram_memory::{Fusion, RankingProfile, SearchRequest, Searcher};
use engram_store_sqlite::{SqliteStore, StoreOptions};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use tempfile::TempDir;

fn model_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("ENGRAM_TEST_MODEL_DIR") else {
        panic!(
            "ENGRAM_TEST_MODEL_DIR is not set: run the tests with scripts/test.sh, or export \
             ENGRAM_TEST_MODEL_DIR=\"$(scripts/fetch-test-model.sh)\" first"
        );
    };
    PathBuf::from(dir)
}

/// One model for all tests in this file: loading it is the slow part.
fn embedder() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<dyn Embedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(LocalEmbedder::load(&model_dir()).unwrap()))
        .clone()
}

fn now() -> Timestamp {
    "2024-05-16T15:00:00Z".parse().unwrap()
}

struct Fixture {
    _dir: TempDir,
    store: Arc<dyn MemoryStore>,
    searcher: Searcher,
}

fn fixture() -> Fixture {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(FixedClock::new(now()));
    let store: Arc<dyn MemoryStore> = Arc::new(
        SqliteStore::open_with(
            dir.path().join("engram.db"),
            StoreOptions {
                clock: clock.clone(),
                ..StoreOptions::default()
            },
        )
        .unwrap(),
    );
    let searcher = Searcher::new(store.clone())
        .with_embedder(Some(embedder()))
        .with_clock(clock, TimeZone::UTC);
    Fixture {
        _dir: dir,
        store,
        searcher,
    }
}

async fn remember(f: &Fixture, user: &str, text: &str, at: &str) {
    let memory = NewMemory::new(Scope::user(user), text).at(at.parse().unwrap());
    let outcome = add_with_vector(&f.store, Some(&embedder()), memory, "test")
        .await
        .unwrap();
    assert!(matches!(outcome, AddOutcome::Added(_)));
}

async fn texts(f: &Fixture, user: &str, query: &str, limit: usize) -> Vec<String> {
    let request = SearchRequest {
        filter: Filter::user(user),
        query: query.into(),
        limit,
    };
    f.searcher
        .search(&request)
        .await
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.memory.text)
        .collect()
}

#[tokio::test]
async fn meaning_is_found_where_words_differ() {
    let f = fixture();
    for text in [
        "I adopted a golden retriever puppy in March",
        "My sister works as a nurse in Leeds",
        "We repainted the kitchen a pale green",
        "The quarterly report is due on Friday",
    ] {
        remember(&f, "u", text, "2024-04-01T10:00:00Z").await;
    }
    // No word in common with the memory, but the same meaning.
    let found = texts(&f, "u", "does the user have a dog?", 1).await;
    assert_eq!(found, ["I adopted a golden retriever puppy in March"]);
    let found = texts(&f, "u", "which relative is in healthcare", 1).await;
    assert_eq!(found, ["My sister works as a nurse in Leeds"]);
}

#[tokio::test]
async fn every_hit_explains_its_score() {
    let f = fixture();
    remember(
        &f,
        "u",
        "Caroline went to the LGBTQ support group",
        "2023-05-07T10:00:00Z",
    )
    .await;
    remember(
        &f,
        "u",
        "Melanie painted a sunrise over the lake",
        "2023-05-08T10:00:00Z",
    )
    .await;
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: "support group".into(),
        limit: 2,
    };
    let results = f.searcher.search(&request).await.unwrap();
    assert!(results.notices.is_empty(), "{:?}", results.notices);
    let top = &results.hits[0];
    assert!(top.memory.text.contains("support group"));
    assert_eq!(top.parts.lexical_rank, Some(1));
    assert_eq!(top.parts.dense_rank, Some(1));
    assert!(top.parts.bm25.unwrap() > 0.0);
    assert!(top.parts.similarity.unwrap() > 0.3);
    // Min-max fusion: each list stretched over its candidates, shared half and half; the
    // hit first in both lists scores 1.
    assert!((top.parts.relevance - 1.0).abs() < 1e-9, "{:?}", top.parts);
    assert_eq!(top.parts.profile, "balanced");
    // No recency in the balanced profile: relevance, importance and the time boosts.
    let expected = 0.8 * top.parts.relevance + 0.1 * top.parts.importance;
    assert!((top.score - expected).abs() < 1e-9);
    // The score taken apart: each list's weighted share of relevance, recency, importance.
    let c = &top.parts.contributions;
    assert!((c.lexical - 0.8 * 0.5).abs() < 1e-9, "{c:?}");
    assert!((c.dense - 0.8 * 0.5).abs() < 1e-9, "{c:?}");
    assert_eq!(c.recency, 0.0);
    assert_eq!(c.time_match, 0.0);
    let sum = c.lexical
        + c.dense
        + c.recency
        + c.importance
        + c.time_match
        + c.time_mention
        + c.neighbours;
    assert!((top.score - sum).abs() < 1e-9);
    // The other hit shares no word with the query: only the dense list has it, at its bottom.
    let other = &results.hits[1];
    assert_eq!(other.parts.lexical_rank, None);
    assert!(other.parts.relevance.abs() < 1e-9, "{:?}", other.parts);

    // Weighted fusion: half BM25 relative to the best, half cosine similarity.
    let weighted = f.searcher.clone().with_profile(RankingProfile {
        fusion: Fusion::Weighted,
        ..RankingProfile::balanced()
    });
    let top = &weighted.search(&request).await.unwrap().hits[0];
    let expected_relevance = 0.5 + 0.5 * top.parts.similarity.unwrap();
    assert!((top.parts.relevance - expected_relevance).abs() < 1e-9);
    let c = &top.parts.contributions;
    assert!((c.dense - 0.8 * 0.5 * top.parts.similarity.unwrap()).abs() < 1e-9);
}

#[tokio::test]
async fn filters_hold_for_dense_hits_too() {
    let f = fixture();
    remember(
        &f,
        "alice",
        "Alice keeps bees on her roof",
        "2024-01-01T00:00:00Z",
    )
    .await;
    remember(
        &f,
        "bob",
        "Bob keeps bees in his garden",
        "2024-01-01T00:00:00Z",
    )
    .await;
    let found = texts(&f, "bob", "honey insects", 5).await;
    assert_eq!(found, ["Bob keeps bees in his garden"]);
}

#[tokio::test]
async fn a_time_phrase_favours_memories_from_then() {
    let f = fixture();
    remember(
        &f,
        "u",
        "cooked a mushroom risotto for dinner",
        "2024-05-15T19:00:00Z",
    )
    .await;
    remember(
        &f,
        "u",
        "cooked a mushroom risotto for the guests",
        "2024-03-02T19:00:00Z",
    )
    .await;
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: "what did I cook yesterday".into(),
        limit: 2,
    };
    let results = f.searcher.search(&request).await.unwrap();
    assert_eq!(
        results.hits[0].memory.text,
        "cooked a mushroom risotto for dinner"
    );
    assert_eq!(
        results.hits[0].parts.time_match.as_deref(),
        Some("yesterday")
    );
    assert_eq!(results.hits[1].parts.time_match, None);
}

#[tokio::test]
async fn memories_added_without_a_model_are_embedded_later() {
    let f = fixture();
    for text in ["learning to play the cello", "allergic to peanuts"] {
        f.store
            .add(NewMemory::new(Scope::user("u"), text), "test")
            .await
            .unwrap();
    }
    // Nothing has a vector yet: search says so and stays lexical.
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: "musical instrument".into(),
        limit: 1,
    };
    let results = f.searcher.search(&request).await.unwrap();
    assert!(
        results.notices[0].contains("engram reindex"),
        "{:?}",
        results.notices
    );
    assert!(results.hits.is_empty());

    let mut calls = Vec::new();
    let embedded = embed_pending(&f.store, &embedder(), &mut |done, total| {
        calls.push((done, total))
    })
    .await
    .unwrap();
    assert_eq!(embedded, 2);
    assert_eq!(calls.last(), Some(&(2, 2)));
    let found = texts(&f, "u", "musical instrument", 1).await;
    assert_eq!(found, ["learning to play the cello"]);
    // A second run has nothing to do.
    assert_eq!(
        embed_pending(&f.store, &embedder(), &mut |_, _| {})
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn vectors_of_another_model_are_never_mixed_in() {
    let f = fixture();
    f.store
        .add(
            NewMemory::new(Scope::user("u"), "sailing on weekends"),
            "test",
        )
        .await
        .unwrap();
    let pending = f
        .store
        .texts_without_vectors("other-model@1", None, 10)
        .await
        .unwrap();
    let vectors = pending
        .into_iter()
        .map(|p| StoredVector {
            content_hash: p.content_hash,
            vector: vec![1.0, 0.0],
            truncated: false,
        })
        .collect();
    f.store
        .put_vectors("other-model@1", 2, vectors)
        .await
        .unwrap();
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: "sailing".into(),
        limit: 1,
    };
    let results = f.searcher.search(&request).await.unwrap();
    assert!(
        results.notices[0].contains("other-model@1"),
        "{:?}",
        results.notices
    );
    // Lexical search still answers.
    assert_eq!(results.hits.len(), 1);
    assert_eq!(results.hits[0].parts.similarity, None);
}

#[tokio::test]
async fn the_reference_profile_weighs_recency_and_importance() {
    let f = fixture();
    let searcher = f.searcher.clone().with_profile(RankingProfile::reference());
    remember(&f, "u", "started a pottery class", "2024-05-15T10:00:00Z").await;
    remember(&f, "u", "started a pottery course", "2022-05-15T10:00:00Z").await;
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: "pottery".into(),
        limit: 2,
    };
    let results = searcher.search(&request).await.unwrap();
    let recent = &results.hits[0];
    assert_eq!(recent.memory.text, "started a pottery class");
    assert!(recent.parts.recency > 0.9);
    assert_eq!(results.hits[1].parts.recency, 0.0);
    assert_eq!(recent.parts.profile, "reference");
}

#[tokio::test]
async fn a_turn_shares_in_the_relevance_of_the_turn_next_to_it() {
    let f = fixture();
    let at: Timestamp = "2024-05-10T18:00:00Z".parse().unwrap();
    let turns = [
        "Anna: Did you ever finish the pottery course?",
        "Ben: Yes, twice in fact, the glazing part was the best",
        "Anna: Nice. The weather has been awful all week",
        "Ben: A pottery course is on my list too, once work calms down",
    ];
    let batch = turns
        .iter()
        .map(|text| NewMemory::new(Scope::user("u").with_session("chat-1"), *text).at(at))
        .collect();
    for outcome in f.store.add_many(batch, "test").await.unwrap() {
        assert!(matches!(outcome.unwrap(), AddOutcome::Added(_)));
    }
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: "did Ben finish the pottery course".into(),
        limit: 4,
    };
    // Lexical only: the plain profile ranks the answer ("Yes, twice...") by its own words and
    // those of the question it answers, which its document carries.
    let plain = Searcher::new(f.store.clone()).with_profile(RankingProfile {
        neighbours: 0.0,
        ..RankingProfile::relevance()
    });
    let neighbourly = Searcher::new(f.store.clone()).with_profile(RankingProfile {
        neighbours: 0.5,
        ..RankingProfile::relevance()
    });
    let rank_of_answer = |hits: &[engram_memory::SearchHit]| {
        hits.iter()
            .position(|h| h.memory.text.starts_with("Ben: Yes"))
            .unwrap()
    };
    let before = plain.search(&request).await.unwrap().hits;
    let after = neighbourly.search(&request).await.unwrap().hits;
    assert!(before.iter().all(|h| h.parts.from_neighbours == 0.0));
    let answer = &after[rank_of_answer(&after)];
    assert!(answer.parts.from_neighbours > 0.0, "{:?}", answer.parts);
    // Its share is half of its best neighbour's own relevance.
    let best_neighbour = after
        .iter()
        .filter(|h| {
            h.memory.text.starts_with("Anna: Did") || h.memory.text.starts_with("Anna: Nice")
        })
        .map(|h| h.parts.relevance - h.parts.from_neighbours)
        .fold(0.0f64, f64::max);
    assert!((answer.parts.from_neighbours - 0.5 * best_neighbour).abs() < 1e-9);
    assert!(rank_of_answer(&after) <= rank_of_answer(&before));
    // A memory outside any conversation has no neighbours.
    f.store
        .add(
            NewMemory::new(Scope::user("u"), "pottery course notes").at(at),
            "test",
        )
        .await
        .unwrap();
    let request = SearchRequest {
        limit: 10,
        ..request
    };
    let loose = neighbourly.search(&request).await.unwrap().hits;
    let notes = loose
        .iter()
        .find(|h| h.memory.text == "pottery course notes")
        .unwrap();
    assert_eq!(notes.parts.from_neighbours, 0.0);
}
