//! Graceful shutdown: a response in flight when the stop signal comes is finished whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TestServer, client};
use futures::StreamExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_finish_after_the_stop_signal() {
    let mut server = TestServer::start().await;
    for chunk in 0..4 {
        let memories: Vec<_> = (0..5000)
            .map(|i| json!({"user_id": "u", "text": format!("memory {chunk}-{i} with some words to make the export longer")}))
            .collect();
        let response = client()
            .post(server.url("/v1/memories/batch"))
            .json(&json!({"memories": memories}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let response = client()
        .get(server.url("/v1/export?user_id=u"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    let mut received = first.to_vec();

    // Stop while the export is still streaming; the server waits for it.
    let addr = server.addr;
    let stopping = tokio::spawn(async move { server.stop().await });
    while let Some(chunk) = body.next().await {
        received.extend_from_slice(&chunk.unwrap());
    }
    let lines = received
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(lines, 20_000, "the export in flight must arrive whole");
    stopping.await.unwrap().unwrap();
    // And nothing new is accepted.
    assert!(
        client()
            .get(format!("http://{addr}/health"))
            .send()
            .await
            .is_err()
    );
}
