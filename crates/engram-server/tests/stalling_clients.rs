//! Clients that stall cannot hold the server: half a request head, a body that stops coming and a
//! response nobody reads are cut off after their timeouts, and connections over the cap get a
//! clear `503 busy` at once while the connections already served go on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, client, code, json_of};
use engram_server::config::ServerSettings;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A client that opens a new connection for every request (a pooled one would hold a slot).
fn fresh_client() -> reqwest::Client {
    let _ = client();
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

fn settings(header: u64, idle: u64, max_connections: usize) -> ServerSettings {
    ServerSettings {
        header_timeout_secs: Some(header),
        idle_timeout_secs: Some(idle),
        max_connections: Some(max_connections),
        ..ServerSettings::default()
    }
}

/// Reads until the server closes the connection (or `limit` passes: then panics). Returns what
/// was read and how long it took.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(
            limit.saturating_sub(started.elapsed()),
            stream.read(&mut buf),
        )
        .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server still holds the connection after {limit:?}; read so far: {}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_request_head_is_cut_off_after_the_header_timeout() {
    let server = TestServer::start_with(settings(1, 30, 100)).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let mut half = TcpStream::connect(server.addr).await.unwrap();
    half.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .await
        .unwrap();
    for stream in [&mut silent, &mut half] {
        let (_, took) = read_until_closed(stream, Duration::from_secs(10)).await;
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }

    // A keep-alive connection that goes quiet after a request is closed the same way.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = read_until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stops_coming_is_cut_off_after_the_idle_timeout() {
    let server = TestServer::start_with(settings(30, 1, 100)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(
            b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n\
              content-length: 200\r\n\r\n{\"user_id\": \"u\", \"text\": ",
        )
        .await
        .unwrap();
    let (answer, took) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    // The handler is told why it got no body; nothing was stored.
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("no part of the request body"), "{answer}");
    let (status, body) = json_of(
        client()
            .get(server.url("/v1/memories?user_id=u"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["memories"].as_array().unwrap().len(), 0, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_503_busy_and_the_slot_comes_back() {
    let server = TestServer::start_with(settings(2, 30, 2)).await;
    // Two connections that send nothing hold both slots.
    let _a = TcpStream::connect(server.addr).await.unwrap();
    let _b = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (status, body) = json_of(
        fresh_client()
            .get(server.url("/health"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (503, "busy"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_connections")
    );

    // Once the header timeout has closed them, new clients are served again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = fresh_client()
            .get(server.url("/health"))
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slots never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_nobody_reads_frees_its_connection_after_the_idle_timeout() {
    let server = TestServer::start_with(settings(30, 1, 1)).await;
    // An export larger than the kernel's send and receive buffers together (4 MB at most each).
    for batch in 0..2 {
        let memories: Vec<_> = (0..8000)
            .map(|i| json!({"user_id": "u", "text": format!("memory {batch}-{i}: {}", "padding words ".repeat(50))}))
            .collect();
        let response = fresh_client()
            .post(server.url("/v1/memories/batch"))
            .json(&json!({"memories": memories}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        // Let the connection go, so the one slot is free.
        drop(response);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A client with a tiny receive window asks for the ~12 MB export and never reads it.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(server.addr).await.unwrap();
    stalled
        .write_all(b"GET /v1/export?user_id=u HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();

    // While it holds the only slot, others are turned away; within the idle timeout (and the
    // time the kernel's buffers take to fill) the slot is free again.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut turned_away = 0;
    loop {
        let response = fresh_client()
            .get(server.url("/health"))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            200 => break,
            503 => turned_away += 1,
            other => panic!("unexpected status {other}"),
        }
        assert!(
            Instant::now() < deadline,
            "the stalled reader still holds its connection"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(turned_away > 0, "the stalled export never held the slot");
    drop(stalled);
}
