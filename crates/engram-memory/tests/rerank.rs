#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The rerank stage over a real SQLite store: off by default (results exactly fusion's), the
//! language-model reranker through the scripted OpenAI-compatible server (its scores really
//! reorder the hits; a garbage or partial answer keeps fusion's order where it says nothing),
//! and the tiny cross-encoder checkpoint of engram-embed's fixtures.

use std::path::Path;
use std::sync::Arc;

use engram_core::{AddOutcome, ChatModel, Filter, FixedClock, MemoryStore, NewMemory, Scope};
use engram_embed::CrossEncoder;
use engram_llm::Provider;
use engram_llm::scripted::{ScriptedServer, Turn};
use engram_memory::indexing::add_with_vector;
use engram_memory::{LlmReranker, SearchHit, SearchRequest, Searcher};
use engram_store_sqlite::{SqliteStore, StoreOptions};
use jiff::tz::TimeZone;
use serde_json::json;
use tempfile::TempDir;

const TEXTS: [&str; 5] = [
    "the garden party is on saturday, garden chairs needed",
    "garden tools are in the shed",
    "we planted tomatoes in the garden in may",
    "the neighbours have a big garden",
    "garden",
];

struct World {
    _dir: TempDir,
    store: Arc<dyn MemoryStore>,
    clock: Arc<FixedClock>,
}

async fn world() -> World {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(FixedClock::new("2024-06-01T12:00:00Z".parse().unwrap()));
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
    for (i, text) in TEXTS.iter().enumerate() {
        let memory =
            NewMemory::new(Scope::user("u"), *text)
                .at(format!("2024-05-0{}T10:00:00Z", i + 1).parse().unwrap());
        let outcome = add_with_vector(&store, None, memory, "test").await.unwrap();
        assert!(matches!(outcome, AddOutcome::Added(_)));
    }
    World {
        _dir: dir,
        store,
        clock,
    }
}

fn searcher(w: &World) -> Searcher {
    Searcher::new(w.store.clone()).with_clock(w.clock.clone(), TimeZone::UTC)
}

fn request(limit: usize) -> SearchRequest {
    SearchRequest {
        filter: Filter::user("u"),
        query: "what is in the garden?".into(),
        limit,
    }
}

fn texts(hits: &[SearchHit]) -> Vec<String> {
    hits.iter().map(|h| h.memory.text.clone()).collect()
}

async fn scripted(turns: Vec<Turn>) -> (ScriptedServer, Arc<dyn ChatModel>) {
    let server = ScriptedServer::start(turns).await.unwrap();
    let model = engram_llm::build(server.client_config(Provider::OpenAi)).unwrap();
    (server, model)
}

#[tokio::test]
async fn without_a_reranker_results_are_exactly_fusions() {
    let w = world().await;
    let plain = searcher(&w);
    assert!(plain.rerank_stage().is_none());
    for limit in [1, 3, 10] {
        let fused = plain
            .candidates(&request(limit))
            .await
            .unwrap()
            .rank(plain.profile(), limit);
        let searched = plain.search(&request(limit)).await.unwrap();
        assert_eq!(searched.hits, fused);
        assert!(searched.notices.is_empty());
        // Saying "no reranker" explicitly is the same.
        let none = searcher(&w).with_reranker(None, 30);
        assert_eq!(none.search(&request(limit)).await.unwrap().hits, fused);
        assert!(
            fused
                .iter()
                .all(|h| h.parts.rerank.is_none() && h.parts.fused_rank.is_none())
        );
    }
}

#[tokio::test]
async fn the_language_model_s_scores_reorder_the_best_hits() {
    let w = world().await;
    let fused = texts(&searcher(&w).search(&request(10)).await.unwrap().hits);
    assert_eq!(fused.len(), TEXTS.len());
    // The model likes fusion's last hit best, then its first; the rest less, in reverse.
    let answer = json!({"scores": [
        {"id": 0, "score": 8}, {"id": 1, "score": 1}, {"id": 2, "score": 2},
        {"id": 3, "score": 3}, {"id": 4, "score": 10}
    ]});
    let (server, model) = scripted(vec![Turn::text(answer.to_string())]).await;
    let reranked = searcher(&w).with_reranker(Some(Arc::new(LlmReranker::new(model))), 30);
    let results = reranked.search(&request(3)).await.unwrap();
    assert!(results.notices.is_empty(), "{:?}", results.notices);
    assert_eq!(
        texts(&results.hits),
        [fused[4].clone(), fused[0].clone(), fused[3].clone()]
    );
    let first = &results.hits[0].parts;
    assert_eq!((first.rerank, first.fused_rank), (Some(10.0), Some(5)));

    // One request, with the versioned prompt and every fused hit numbered in fusion's order.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].messages();
    let system = messages[0]["content"].as_str().unwrap();
    assert_eq!(system, engram_memory::prompts::RERANK.text());
    let user = messages[1]["content"].as_str().unwrap();
    assert!(user.starts_with("Query: what is in the garden?"), "{user}");
    for (i, text) in fused.iter().enumerate() {
        assert!(
            user.contains(&format!("[{i}] {text}\n")) || user.ends_with(&format!("[{i}] {text}"))
        );
    }
}

#[tokio::test]
async fn a_garbage_answer_keeps_fusion_s_order_and_says_why() {
    let w = world().await;
    let fused = searcher(&w).search(&request(10)).await.unwrap().hits;
    let (_server, model) = scripted(vec![Turn::text("I'd rather talk about the weather.")]).await;
    let reranked = searcher(&w).with_reranker(Some(Arc::new(LlmReranker::new(model))), 30);
    let results = reranked.search(&request(10)).await.unwrap();
    assert_eq!(texts(&results.hits), texts(&fused));
    assert_eq!(results.hits, fused);
    assert_eq!(results.notices.len(), 1);
    assert!(
        results.notices[0].contains("fusion's order stands"),
        "{:?}",
        results.notices
    );
}

#[tokio::test]
async fn a_failing_model_never_fails_the_search() {
    let w = world().await;
    let fused = searcher(&w).search(&request(10)).await.unwrap().hits;
    let (server, model) = scripted(vec![Turn::unauthorized()]).await;
    let reranked = searcher(&w).with_reranker(Some(Arc::new(LlmReranker::new(model))), 30);
    let results = reranked.search(&request(10)).await.unwrap();
    assert_eq!(results.hits, fused);
    assert!(
        results.notices[0].contains("failed"),
        "{:?}",
        results.notices
    );
    drop(server);
}

#[tokio::test]
async fn hits_the_model_left_unscored_keep_their_places() {
    let w = world().await;
    let fused = texts(&searcher(&w).search(&request(10)).await.unwrap().hits);
    // Passages 1 and 3 get no usable score: they stay second and fourth.
    let answer = r#"Here you go: {"scores": [{"id": 0, "score": 1}, {"id": 2, "score": 5},
        {"id": 3, "score": "n/a"}, {"id": 4, "score": 9}, {"id": 9, "score": 10}]}"#;
    let (_server, model) = scripted(vec![Turn::text(answer)]).await;
    let reranked = searcher(&w).with_reranker(Some(Arc::new(LlmReranker::new(model))), 30);
    let results = reranked.search(&request(10)).await.unwrap();
    assert_eq!(
        texts(&results.hits),
        [&fused[4], &fused[1], &fused[2], &fused[3], &fused[0]].map(String::clone)
    );
    assert_eq!(results.hits[1].parts.rerank, None);
    assert_eq!(results.hits[1].parts.fused_rank, Some(2));
    assert!(
        results.notices[0].contains("scored 3 of the 5"),
        "{:?}",
        results.notices
    );
}

#[tokio::test]
async fn only_the_top_hits_are_read_and_the_rest_follow_in_fusion_s_order() {
    let w = world().await;
    let fused = texts(&searcher(&w).search(&request(10)).await.unwrap().hits);
    let answer = json!({"scores": [{"id": 0, "score": 1}, {"id": 1, "score": 2}]});
    let (server, model) = scripted(vec![Turn::text(answer.to_string())]).await;
    let reranked = searcher(&w).with_reranker(Some(Arc::new(LlmReranker::new(model))), 2);
    let results = reranked.search(&request(10)).await.unwrap();
    let mut expected = fused.clone();
    expected.swap(0, 1);
    assert_eq!(texts(&results.hits), expected);
    let user = server.requests()[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(user.contains("[1] ") && !user.contains("[2] "), "{user}");
}

#[tokio::test]
async fn the_cross_encoder_orders_the_hits_by_its_own_scores() {
    let w = world().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engram-embed/tests/fixtures/tiny-cross-encoder");
    let model = CrossEncoder::load(&dir).unwrap();
    let fused = texts(&searcher(&w).search(&request(10)).await.unwrap().hits);
    let scores = model.score_blocking(&request(10).query, &fused).unwrap();
    let mut expected: Vec<(f32, String)> = scores.into_iter().zip(fused.clone()).collect();
    expected.sort_by(|a, b| b.0.total_cmp(&a.0));
    let expected: Vec<String> = expected.into_iter().map(|(_, t)| t).collect();
    assert_ne!(
        expected, fused,
        "the random model happens to agree with fusion"
    );
    let reranked = searcher(&w).with_reranker(Some(Arc::new(model)), 30);
    let results = reranked.search(&request(10)).await.unwrap();
    assert!(results.notices.is_empty());
    assert_eq!(texts(&results.hits), expected);
}
