//! The OpenAI-compatible embedder against a real HTTP server on 127.0.0.1 speaking the
//! `/v1/embeddings` wire format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::http::{Reply, Request, TestServer};
use engram_core::{EmbedError, Embedder};
use engram_embed::{OpenAiEmbedder, OpenAiOptions};
use serde_json::{Value, json};

/// A vector that encodes its text, so tests can check which text got which vector.
fn vector_for(text: &str, dimension: usize) -> Vec<f32> {
    (0..dimension)
        .map(|i| (text.len() * 10 + i) as f32 + f32::from(text.as_bytes()[0]) / 1000.0)
        .collect()
}

/// Answers like an embeddings endpoint, listing the vectors in reverse order (with `index`).
fn embeddings_reply(request: &Request, dimension: usize) -> Reply {
    let body = request.json();
    let inputs: Vec<String> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            json!({"object": "embedding", "index": index, "embedding": vector_for(text, dimension)})
        })
        .collect();
    data.reverse();
    Reply::json(
        200,
        &json!({"object": "list", "model": body["model"], "data": data}),
    )
}

fn options(server: &TestServer) -> OpenAiOptions {
    let mut options = OpenAiOptions::new(format!("{}/v1", server.url()), "test-embed");
    options.timeout = Duration::from_secs(5);
    options
}

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("text number {i}{}", "x".repeat(i % 7)))
        .collect()
}

#[tokio::test]
async fn batches_are_sent_and_vectors_come_back_in_input_order() {
    let server = TestServer::start(|r| embeddings_reply(r, 8)).await;
    let mut options = options(&server);
    options.batch_size = 3;
    options.api_key = Some("sk-test".into());
    let embedder = OpenAiEmbedder::new(options).unwrap();
    assert_eq!(embedder.dimension(), 0, "unknown until the first answer");

    let input = texts(7);
    let embeddings = embedder.embed(&input).await.unwrap();
    assert_eq!(embeddings.len(), 7);
    for (text, embedding) in input.iter().zip(&embeddings) {
        assert_eq!(embedding.vector, vector_for(text, 8), "vector for {text:?}");
        assert!(!embedding.truncated);
    }
    assert_eq!(embedder.dimension(), 8);

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "7 texts in batches of 3");
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/v1/embeddings");
        assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(request.json()["model"], "test-embed");
        assert!(request.json().get("dimensions").is_none());
    }
    assert_eq!(requests[2].json()["input"].as_array().unwrap().len(), 1);
    assert_eq!(
        embedder.model_id(),
        format!("openai:test-embed@{}", server.addr)
    );
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let server = TestServer::start(move |r| match seen.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::json(429, &json!({"error": {"message": "slow down"}}))
            .with_header("retry-after", "0"),
        1 => Reply::bytes(503, "overloaded"),
        _ => embeddings_reply(r, 4),
    })
    .await;
    let embedder = OpenAiEmbedder::new(options(&server)).unwrap();
    let embeddings = embedder.embed(&texts(2)).await.unwrap();
    assert_eq!(embeddings.len(), 2);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn persistent_errors_end_with_status_and_body() {
    let server = TestServer::start(|_| Reply::bytes(500, "the model crashed\nbadly")).await;
    let mut options = options(&server);
    options.max_retries = 2;
    let embedder = OpenAiEmbedder::new(options).unwrap();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(
        matches!(&err, EmbedError::Http { status: 500, body, .. } if body == "the model crashed badly"),
        "{err:?}"
    );
    assert!(err.to_string().contains("HTTP 500"), "{err}");
    assert_eq!(server.requests().len(), 3, "one try and two retries");

    // Client errors are not retried.
    let server = TestServer::start(|_| {
        Reply::json(
            401,
            &json!({"error": {"message": "Incorrect API key provided"}}),
        )
    })
    .await;
    let embedder = OpenAiEmbedder::new(self::options(&server)).unwrap();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(err.to_string().contains("Incorrect API key"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_wrong_dimension_is_an_error() {
    let server = TestServer::start(|r| embeddings_reply(r, 3)).await;
    let mut options = options(&server);
    options.dimension = Some(4);
    let embedder = OpenAiEmbedder::new(options).unwrap();
    let err = embedder.embed(&texts(2)).await.unwrap_err();
    assert_eq!(
        err,
        EmbedError::WrongDimension {
            model: embedder.model_id().to_string(),
            expected: 4,
            found: 3
        }
    );

    // The first answer fixes the dimension; a later change is caught.
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let server = TestServer::start(move |r| {
        let dimension = if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            5
        } else {
            6
        };
        embeddings_reply(r, dimension)
    })
    .await;
    let embedder = OpenAiEmbedder::new(self::options(&server)).unwrap();
    embedder.embed(&texts(1)).await.unwrap();
    assert_eq!(embedder.dimension(), 5);
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            EmbedError::WrongDimension {
                expected: 5,
                found: 6,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn requested_dimensions_are_sent() {
    let server = TestServer::start(|r| embeddings_reply(r, 16)).await;
    let mut options = options(&server);
    options.dimension = Some(16);
    options.request_dimensions = true;
    let embedder = OpenAiEmbedder::new(options).unwrap();
    embedder.embed(&texts(1)).await.unwrap();
    assert_eq!(server.requests()[0].json()["dimensions"], 16);
    assert!(embedder.model_id().ends_with("/16"));
}

#[tokio::test]
async fn malformed_answers_are_explained() {
    let server = TestServer::start(|_| Reply::bytes(200, "<html>proxy login</html>")).await;
    let embedder = OpenAiEmbedder::new(options(&server)).unwrap();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(matches!(err, EmbedError::BadResponse(_)), "{err:?}");
    assert!(err.to_string().contains("proxy login"), "{err}");

    let server = TestServer::start(|_| {
        Reply::json(
            200,
            &json!({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}),
        )
    })
    .await;
    let embedder = OpenAiEmbedder::new(options(&server)).unwrap();
    let err = embedder.embed(&texts(2)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("2 texts were sent but 1 vectors came back"),
        "{err}"
    );

    let server = TestServer::start(|_| {
        Reply::json(
            200,
            &json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]}),
        )
    })
    .await;
    let embedder = OpenAiEmbedder::new(options(&server)).unwrap();
    let err = embedder.embed(&texts(2)).await.unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let server = TestServer::start(|r| {
        Reply::Delayed(Duration::from_secs(5), Box::new(embeddings_reply(r, 2)))
    })
    .await;
    let mut options = options(&server);
    options.timeout = Duration::from_millis(500);
    options.max_retries = 1;
    let embedder = OpenAiEmbedder::new(options).unwrap();
    let start = Instant::now();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(matches!(err, EmbedError::Timeout { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(4));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_network_error() {
    // A port that was just free and now has nobody listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut options = OpenAiOptions::new(format!("http://127.0.0.1:{port}/v1"), "m");
    options.max_retries = 1;
    let embedder = OpenAiEmbedder::new(options).unwrap();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(matches!(err, EmbedError::Network { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

#[tokio::test]
async fn blank_texts_are_refused_before_any_request_and_long_ones_are_cut() {
    let server = TestServer::start(|r| embeddings_reply(r, 2)).await;
    let mut options = options(&server);
    options.max_input_bytes = 100;
    let embedder = OpenAiEmbedder::new(options).unwrap();
    let err = embedder
        .embed(&["fine".to_string(), "   ".to_string()])
        .await
        .unwrap_err();
    assert_eq!(err, EmbedError::EmptyText { index: 1 });
    assert!(embedder.embed(&[]).await.unwrap().is_empty());
    assert!(server.requests().is_empty());

    let long = "word ".repeat(100);
    let embeddings = embedder.embed(&[long, "short".into()]).await.unwrap();
    assert!(embeddings[0].truncated);
    assert!(!embeddings[1].truncated);
    let sent = server.requests()[0].json()["input"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sent.len() <= 100 && sent.starts_with("word word"),
        "{sent:?}"
    );
}
