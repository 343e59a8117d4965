//! Tokens and isolation over real HTTP: no token, wrong token, revoked token, config tokens,
//! another user's memories answered exactly as missing ones, bad bodies with and without a
//! token, and the loopback rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TestServer, client, code, json_of};
use engram_core::store::tokens::TokenStore;
use engram_server::config::{ConfigToken, ServerSettings};
use engram_server::tokens::{create_token, hash_token};
use engram_server::{ServeError, ServeOptions, Server, Stores};
use engram_store_sqlite::SqliteStore;
use jiff::Timestamp;
use serde_json::{Value, json};

async fn send(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client().request(method, server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    json_of(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_required_once_one_exists() {
    let server = TestServer::start().await;
    let (_, alice) = server.token(&["alice"]).await;
    let get = reqwest::Method::GET;
    let (status, body) = send(
        &server,
        get.clone(),
        "/v1/memories?user_id=alice",
        None,
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
    let response = client()
        .get(server.url("/v1/memories?user_id=alice"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"engram\""
    );

    let wrong = format!("{}0", &alice[..alice.len() - 1]);
    let wrong = if wrong == alice {
        format!("{}1", &alice[..alice.len() - 1])
    } else {
        wrong
    };
    let (status, body) = send(
        &server,
        get.clone(),
        "/v1/memories?user_id=alice",
        Some(&wrong),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
    let (status, body) = send(
        &server,
        get.clone(),
        "/v1/memories?user_id=alice",
        Some("garbage"),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));

    let (status, _) = send(
        &server,
        get.clone(),
        "/v1/memories?user_id=alice",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, 200);
    // The MCP endpoint is behind the same door.
    let response = client()
        .post(server.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_refused_at_once() {
    let server = TestServer::start().await;
    let (id, alice) = server.token(&["alice"]).await;
    let (_, _other) = server.token(&["bob"]).await;
    let path = "/v1/memories?user_id=alice";
    let (status, _) = send(&server, reqwest::Method::GET, path, Some(&alice), None).await;
    assert_eq!(status, 200);
    // Revoked by another process (the CLI), while the server runs.
    SqliteStore::open(server.db())
        .unwrap()
        .revoke(&id, Timestamp::now())
        .await
        .unwrap();
    let (status, body) = send(&server, reqwest::Method::GET, path, Some(&alice), None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_memory_is_answered_as_a_missing_one() {
    let server = TestServer::start().await;
    let (_, alice) = server.token(&["alice"]).await;
    let (_, bob) = server.token(&["bob"]).await;
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/v1/memories",
        Some(&bob),
        Some(json!({"user_id": "bob", "text": "bob's secret"})),
    )
    .await;
    assert_eq!(status, 201);
    let bobs = body["id"].as_str().unwrap().to_string();
    let missing = engram_core::MemoryId::new().to_string();

    // Every route on one memory: alice asking for bob's memory and for a missing one.
    let routes: Vec<(reqwest::Method, String, Option<Value>)> = vec![
        (reqwest::Method::GET, "/v1/memories/{}".into(), None),
        (
            reqwest::Method::PATCH,
            "/v1/memories/{}".into(),
            Some(json!({"text": "mine now"})),
        ),
        (
            reqwest::Method::POST,
            "/v1/memories/{}/invalidate".into(),
            Some(json!({})),
        ),
        (reqwest::Method::GET, "/v1/memories/{}/history".into(), None),
        (reqwest::Method::DELETE, "/v1/memories/{}".into(), None),
    ];
    for (method, template, body) in routes {
        let (s1, b1) = send(
            &server,
            method.clone(),
            &template.replace("{}", &bobs),
            Some(&alice),
            body.clone(),
        )
        .await;
        let (s2, b2) = send(
            &server,
            method.clone(),
            &template.replace("{}", &missing),
            Some(&alice),
            body,
        )
        .await;
        assert_eq!((s1, code(&b1)), (404, "not_found"), "{method} {template}");
        assert_eq!(s1, s2, "{method} {template}: the statuses must not differ");
        let scrub = |v: &Value, id: &str| v.to_string().replace(id, "<id>");
        assert_eq!(
            scrub(&b1, &bobs),
            scrub(&b2, &missing),
            "{method} {template}: the answers must not differ"
        );
    }
    // Bob's memory is untouched, and its history shows no trace of alice.
    let (status, memory) = send(
        &server,
        reqwest::Method::GET,
        &format!("/v1/memories/{bobs}"),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(
        (status, memory["text"].as_str()),
        (200, Some("bob's secret"))
    );

    // Naming bob outright is refused.
    let (status, body) = send(
        &server,
        reqwest::Method::GET,
        "/v1/memories?user_id=bob",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/v1/memories/search",
        Some(&alice),
        Some(json!({"user_id": "bob", "query": "secret"})),
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/v1/memories/batch",
        Some(&alice),
        Some(json!({"memories": [{"user_id": "alice", "text": "ok"}, {"user_id": "bob", "text": "sneaky"}]})),
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = send(
        &server,
        reqwest::Method::GET,
        "/v1/export?user_id=bob",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = send(
        &server,
        reqwest::Method::GET,
        "/v1/sessions?user_id=bob",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    // Nothing of bob's was written by alice's batch.
    let (_, page) = send(
        &server,
        reqwest::Method::GET,
        "/v1/memories?user_id=bob",
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(page["memories"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_two_users_reaches_both_and_changes_are_attributed() {
    let server = TestServer::start().await;
    let (id, both) = server.token(&["alice", "bob"]).await;
    for user in ["alice", "bob"] {
        let (status, body) = send(
            &server,
            reqwest::Method::POST,
            "/v1/memories",
            Some(&both),
            Some(json!({"user_id": user, "text": format!("{user} was here")})),
        )
        .await;
        assert_eq!(status, 201);
        let memory = body["id"].as_str().unwrap();
        let (_, history) = send(
            &server,
            reqwest::Method::GET,
            &format!("/v1/memories/{memory}/history"),
            Some(&both),
            None,
        )
        .await;
        assert_eq!(history["events"][0]["actor"], format!("api:{id}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_tokens_work_by_hash() {
    let text = "a-long-random-token-kept-in-the-config";
    let settings = ServerSettings {
        tokens: vec![ConfigToken {
            name: Some("laptop".into()),
            sha256: hash_token(text),
            users: vec!["me".into()],
        }],
        ..ServerSettings::default()
    };
    let server = TestServer::start_with(settings).await;
    let (status, body) = send(
        &server,
        reqwest::Method::GET,
        "/v1/memories?user_id=me",
        None,
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
    let (status, _) = send(
        &server,
        reqwest::Method::GET,
        "/v1/memories?user_id=me",
        Some(text),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = send(
        &server,
        reqwest::Method::GET,
        "/v1/memories?user_id=you",
        Some(text),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listening_beyond_loopback_needs_a_token() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("engram.db");
    let backend = SqliteStore::open(&path).unwrap().into_backend();
    let stores = Stores::lexical(&backend);
    let options = ServeOptions::new("0.0.0.0:0".parse().unwrap(), ServerSettings::default());
    let err = Server::bind(&stores, options.clone()).await.unwrap_err();
    assert!(matches!(err, ServeError::NoTokens(_)), "{err}");
    assert!(err.to_string().contains("engram token create"));

    // With a token it starts, and anonymous requests are refused even from this machine.
    let (_, text) = create_token(
        backend.tokens.as_ref(),
        None,
        &["u".to_string()],
        Timestamp::now(),
    )
    .await
    .unwrap();
    let server = Server::bind(&stores, options).await.unwrap();
    let port = server.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let url = format!("http://127.0.0.1:{port}/v1/memories?user_id=u");
    let (status, body) = json_of(client().get(&url).send().await.unwrap()).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
    let (status, _) = json_of(client().get(&url).bearer_auth(&text).send().await.unwrap()).await;
    assert_eq!(status, 200);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_behind_a_token_are_refused_before_and_after_authentication() {
    let settings = ServerSettings {
        max_body_bytes: Some(4096),
        ..ServerSettings::default()
    };
    let server = TestServer::start_with(settings).await;
    let (_, alice) = server.token(&["alice"]).await;
    let post = |body: String, token: Option<&str>| {
        let mut request = client()
            .post(server.url("/v1/memories"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let big = json!({"user_id": "alice", "text": "x".repeat(10_000)}).to_string();
    // Without a token nothing of the body is read: the door answers first.
    let (status, body) = json_of(post(big.clone(), None).await.unwrap()).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
    let (status, body) = json_of(post(big, Some(&alice)).await.unwrap()).await;
    assert_eq!((status, code(&body)), (413, "payload_too_large"));
    let (status, body) = json_of(
        post("{\"user_id\": \"alice\", ".into(), Some(&alice))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "invalid_json"));
    let (status, body) = json_of(
        post(
            json!({"user_id": "alice", "text": "x", "owner": "bob"}).to_string(),
            Some(&alice),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `owner`"),
        "{body}"
    );
    // A well-formed body naming another user is refused.
    let (status, body) = json_of(
        post(
            json!({"user_id": "bob", "text": "x"}).to_string(),
            Some(&alice),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    // Nothing was stored by any of them.
    let (status, page) = send(
        &server,
        reqwest::Method::GET,
        "/v1/memories?user_id=alice",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(page["memories"].as_array().unwrap().len(), 0, "{page}");
}
