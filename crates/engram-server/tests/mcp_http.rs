//! The MCP endpoint of `engram serve` behind tokens, driven by the official Rust SDK's client
//! over real HTTP: a token reaches its own users only, another user's memory is answered exactly
//! as a missing one, and naming another user outright is refused, for memory and graph tools.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TestServer, client, json_of};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Session = RunningService<RoleClient, ()>;

async fn connect(server: &TestServer, token: &str) -> Session {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config =
        StreamableHttpClientTransportConfig::with_uri(server.url("/mcp")).auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

/// Whether the call failed, and its text.
async fn call(session: &Session, tool: &str, arguments: Value) -> (bool, String) {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let result = session
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
        .await
        .unwrap();
    let text: String = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect();
    (result.is_error == Some(true), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_reaches_only_its_own_users_through_mcp() {
    let server = TestServer::start().await;
    let (_, alice) = server.token(&["alice"]).await;
    let (_, bob) = server.token(&["bob"]).await;
    let (status, body) = json_of(
        client()
            .post(server.url("/v1/memories"))
            .bearer_auth(&bob)
            .json(&json!({"user_id": "bob", "text": "bob hides the key under the flowerpot"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let bobs = body["id"].as_str().unwrap().to_string();
    let missing = engram_core::MemoryId::new().to_string();

    let session = connect(&server, &alice).await;
    // Without user_id, tools act for the token's user.
    let (failed, text) = call(
        &session,
        "memory_add",
        json!({"text": "alice grows tomatoes on the balcony"}),
    )
    .await;
    assert!(!failed, "{text}");
    let added: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(added["memory"]["user_id"], "alice");

    // Bob's memory by id: the same answer as a memory that does not exist.
    for tool in ["memory_get", "memory_history", "memory_delete"] {
        let (f1, t1) = call(&session, tool, json!({"id": bobs})).await;
        let (f2, t2) = call(&session, tool, json!({"id": missing})).await;
        assert!(f1 && f2, "{tool}: {t1} / {t2}");
        assert_eq!(
            t1.replace(&bobs, "<id>"),
            t2.replace(&missing, "<id>"),
            "{tool}: the answers must not differ"
        );
    }
    let (f1, t1) = call(
        &session,
        "memory_update",
        json!({"id": bobs, "text": "mine now"}),
    )
    .await;
    let (f2, t2) = call(
        &session,
        "memory_update",
        json!({"id": missing, "text": "mine now"}),
    )
    .await;
    assert!(f1 && f2);
    assert_eq!(t1.replace(&bobs, "<id>"), t2.replace(&missing, "<id>"));

    // Naming bob is refused, for memory and graph tools alike.
    for (tool, arguments) in [
        ("memory_search", json!({"query": "key", "user_id": "bob"})),
        ("memory_list", json!({"user_id": "bob"})),
        (
            "memory_add",
            json!({"text": "planted by alice", "user_id": "bob"}),
        ),
        ("read_graph", json!({"user_id": "bob"})),
        ("search_nodes", json!({"query": "key", "user_id": "bob"})),
        (
            "create_entities",
            json!({"user_id": "bob", "entities": [{"name": "Key", "entityType": "thing", "observations": []}]}),
        ),
    ] {
        let (failed, text) = call(&session, tool, arguments).await;
        assert!(failed, "{tool} for bob must fail: {text}");
        assert!(text.contains("may not touch"), "{tool}: {text}");
    }
    // Alice's own search does not see bob's memory.
    let (failed, text) = call(&session, "memory_search", json!({"query": "key flowerpot"})).await;
    assert!(!failed, "{text}");
    assert!(!text.contains("flowerpot"), "{text}");
    session.cancel().await.unwrap();

    // Bob's memory is still there and unchanged.
    let (status, memory) = json_of(
        client()
            .get(server.url(&format!("/v1/memories/{bobs}")))
            .bearer_auth(&bob)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(memory["text"], "bob hides the key under the flowerpot");
    let (_, page) = json_of(
        client()
            .get(server.url("/v1/memories?user_id=bob"))
            .bearer_auth(&bob)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page["memories"].as_array().unwrap().len(), 1, "{page}");
}

/// Starts an MCP session with raw HTTP (so the test sees its id) and returns the id.
async fn initialize(server: &TestServer, token: &str) -> String {
    let response = client()
        .post(server.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = response.text().await;
    id
}

/// One request naming `session`, with `token`: its status.
async fn in_session(
    server: &TestServer,
    method: reqwest::Method,
    token: &str,
    session: &str,
    body: Option<Value>,
) -> u16 {
    let mut request = client()
        .request(method, server.url("/mcp"))
        .bearer_auth(token)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .header("accept", "application/json, text/event-stream");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_is_used_and_ended_only_with_the_token_that_started_it() {
    let server = TestServer::start().await;
    let (_, alice) = server.token(&["alice"]).await;
    let (_, bob) = server.token(&["bob"]).await;
    let session = initialize(&server, &alice).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        in_session(
            &server,
            reqwest::Method::POST,
            &alice,
            &session,
            Some(initialized)
        )
        .await,
        202
    );

    // Bob's token cannot end, post to or listen on alice's session: the answer a session that
    // does not exist gets.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for (method, body) in [
        (reqwest::Method::DELETE, None),
        (reqwest::Method::POST, Some(list.clone())),
        (reqwest::Method::GET, None),
    ] {
        assert_eq!(
            in_session(&server, method.clone(), &bob, &session, body).await,
            404,
            "{method} with another token"
        );
    }
    assert_eq!(
        in_session(
            &server,
            reqwest::Method::DELETE,
            &bob,
            "no-such-session",
            None
        )
        .await,
        404
    );

    // Alice's session is untouched, and she can end it.
    assert_eq!(
        in_session(&server, reqwest::Method::POST, &alice, &session, Some(list)).await,
        200
    );
    assert_eq!(
        in_session(&server, reqwest::Method::DELETE, &alice, &session, None).await,
        202
    );
}

/// A failed call's stable code (`_meta["engram/error"].code`).
async fn error_code(session: &Session, tool: &str, arguments: Value) -> String {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let result = session
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
        .await
        .unwrap();
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} should fail: {result:?}"
    );
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get("engram/error"))
        .and_then(|e| e["code"].as_str())
        .unwrap_or("<no code>")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_calls_fail_with_a_stable_code_and_change_nothing() {
    let settings = engram_server::config::ServerSettings {
        max_body_bytes: Some(64 * 1024),
        max_batch_body_bytes: Some(64 * 1024),
        ..Default::default()
    };
    let server = TestServer::start_with(settings).await;
    let (_, alice) = server.token(&["alice"]).await;
    let (_, bob) = server.token(&["bob"]).await;
    let session = connect(&server, &bob).await;
    let (failed, text) = call(&session, "memory_add", json!({"text": "bob's secret"})).await;
    assert!(!failed, "{text}");
    let bobs = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let session = connect(&server, &alice).await;
    for (tool, arguments, code) in [
        (
            "memory_add",
            json!({"text": "x", "colour": "red"}),
            "invalid_request",
        ),
        ("memory_add", json!({"text": 42}), "invalid_request"),
        ("memory_add", json!({"text": "  "}), "invalid_request"),
        (
            "memory_add",
            json!({"text": "x", "user_id": "bob"}),
            "forbidden",
        ),
        ("memory_search", json!({"query": ""}), "invalid_request"),
        (
            "memory_search",
            json!({"query": "x", "limit": 0}),
            "invalid_request",
        ),
        ("memory_get", json!({"id": "not-a-uuid"}), "invalid_request"),
        ("memory_get", json!({"id": bobs}), "not_found"),
        (
            "memory_update",
            json!({"id": bobs, "text": "mine now"}),
            "not_found",
        ),
        ("memory_delete", json!({"id": bobs}), "not_found"),
        ("memory_history", json!({"id": bobs}), "not_found"),
        (
            "create_entities",
            json!({"entities": [{"name": "A"}]}),
            "invalid_request",
        ),
        (
            "add_observations",
            json!({"observations": [{"entityName": "Nobody", "contents": ["x"]}]}),
            "not_found",
        ),
        (
            "search_nodes",
            json!({"query": "x", "user_id": "bob"}),
            "forbidden",
        ),
    ] {
        let got = error_code(&session, tool, arguments.clone()).await;
        assert_eq!(got, code, "{tool} {arguments}");
    }
    // A body over the limit is refused before any tool runs.
    let huge = "x".repeat(100 * 1024);
    let id = initialize(&server, &alice).await;
    let status = in_session(
        &server,
        reqwest::Method::POST,
        &alice,
        &id,
        Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "memory_add", "arguments": {"text": huge}}})),
    )
    .await;
    assert_eq!(status, 413);
    // Bob's memory is untouched.
    let session = connect(&server, &bob).await;
    let (failed, text) = call(&session, "memory_get", json!({"id": bobs})).await;
    assert!(!failed && text.contains("bob's secret"), "{text}");
}
