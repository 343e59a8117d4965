//! The Mem0-compatible routes over real HTTP: the open-source server's routes and shapes, the
//! hosted platform's error handling, tokens in every form Mem0's clients send them, isolation
//! between users, and bad input (always a 4xx with a stable code in Mem0's shape, never a 500,
//! nothing changed). The real Mem0 clients are driven in engram-cli's tests/mem0_clients.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TestServer, client, json_of};
use engram_server::config::ServerSettings;
use reqwest::Method;
use serde_json::{Value, json};

/// A request with a token sent as Mem0's clients send it.
async fn call(
    server: &TestServer,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client()
        .request(method, server.url(path))
        .header("authorization", format!("Token {token}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    json_of(request.send().await.unwrap()).await
}

/// The Mem0 error shape: `detail` for people, `code` for programs.
fn mem0_code(body: &Value) -> &str {
    assert!(body["detail"].is_string(), "no detail: {body}");
    body["code"].as_str().unwrap_or("<no code>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_source_servers_routes_answer_in_its_shapes() {
    let server = TestServer::start().await;
    let (_, token) = server.token(&["alice"]).await;
    let t = token.as_str();
    let (status, added) = call(
        &server,
        Method::POST,
        "/memories",
        t,
        Some(json!({
            "messages": [
                {"role": "user", "content": "I love hiking in the Alps"},
                {"role": "assistant", "content": "Which trail is your favourite?"}
            ],
            "user_id": "alice", "run_id": "trip", "metadata": {"topic": "outdoors"}, "infer": false
        })),
    )
    .await;
    assert_eq!(status, 200, "{added}");
    let results = added["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{added}");
    assert_eq!(results[0]["event"], "ADD");
    assert_eq!(results[0]["memory"], "I love hiking in the Alps");
    let id = results[0]["id"].as_str().unwrap().to_string();

    let (status, listed) = call(&server, Method::GET, "/memories?user_id=alice", t, None).await;
    assert_eq!(status, 200, "{listed}");
    let item = &listed["results"][1];
    for key in [
        "id",
        "memory",
        "hash",
        "metadata",
        "created_at",
        "updated_at",
        "user_id",
        "run_id",
    ] {
        assert!(item.get(key).is_some(), "{key} missing: {item}");
    }
    assert!(
        item.get("agent_id").is_none(),
        "only the ids a memory has: {item}"
    );
    assert_eq!(item["metadata"]["topic"], "outdoors");

    let (status, found) = call(
        &server,
        Method::POST,
        "/search",
        t,
        Some(json!({"query": "hiking alps", "filters": {"user_id": "alice", "topic": "outdoors"}, "top_k": 5})),
    )
    .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["results"][0]["id"], id.as_str());
    assert!(found["results"][0]["score"].is_number());
    // The deprecated top-level user_id still works.
    let (status, found) = call(
        &server,
        Method::POST,
        "/search",
        t,
        Some(json!({"query": "hiking", "user_id": "alice"})),
    )
    .await;
    assert_eq!(
        (status, found["results"][0]["id"].as_str()),
        (200, Some(id.as_str()))
    );

    let (status, got) = call(&server, Method::GET, &format!("/memories/{id}"), t, None).await;
    assert_eq!(
        (status, got["memory"].as_str()),
        (200, Some("I love hiking in the Alps"))
    );
    let (status, answer) = call(
        &server,
        Method::PUT,
        &format!("/memories/{id}"),
        t,
        Some(json!({"text": "I love hiking in the Dolomites"})),
    )
    .await;
    assert_eq!(
        (status, answer["message"].as_str()),
        (200, Some("Memory updated successfully!"))
    );
    let (status, history) = call(
        &server,
        Method::GET,
        &format!("/memories/{id}/history"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 200, "{history}");
    assert_eq!(history[0]["event"], "ADD");
    assert_eq!(history[1]["event"], "UPDATE");
    assert_eq!(history[1]["old_memory"], "I love hiking in the Alps");
    assert_eq!(history[1]["new_memory"], "I love hiking in the Dolomites");
    assert_eq!(history[0]["role"], "user");

    let (status, answer) = call(&server, Method::DELETE, &format!("/memories/{id}"), t, None).await;
    assert_eq!(
        (status, answer["message"].as_str()),
        (200, Some("Memory deleted successfully"))
    );
    let (status, body) = call(&server, Method::GET, &format!("/memories/{id}"), t, None).await;
    assert_eq!((status, mem0_code(&body)), (404, "not_found"));
    let (status, answer) = call(&server, Method::DELETE, "/memories?user_id=alice", t, None).await;
    assert_eq!(
        (status, answer["message"].as_str()),
        (200, Some("All relevant memories deleted"))
    );
    let (_, listed) = call(&server, Method::GET, "/memories?user_id=alice", t, None).await;
    assert_eq!(listed["results"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_needs_an_explicit_token_and_erases_only_its_users() {
    let server = TestServer::start().await;
    let add = |user: &'static str| json!({"messages": [{"role": "user", "content": format!("{user} likes tea")}], "user_id": user, "infer": false});
    // Without any token the server is open to this machine, but reset is not.
    let (status, body) = json_of(client().post(server.url("/reset")).send().await.unwrap()).await;
    assert_eq!((status, mem0_code(&body)), (403, "forbidden"), "{body}");
    let (_, alice) = server.token(&["alice"]).await;
    let (_, bob) = server.token(&["bob"]).await;
    call(
        &server,
        Method::POST,
        "/memories",
        &alice,
        Some(add("alice")),
    )
    .await;
    call(&server, Method::POST, "/memories", &bob, Some(add("bob"))).await;
    let (status, body) = call(&server, Method::POST, "/reset", &alice, None).await;
    assert_eq!(
        (status, body["message"].as_str()),
        (200, Some("All memories reset")),
        "{body}"
    );
    let (_, listed) = call(
        &server,
        Method::GET,
        "/memories?user_id=alice",
        &alice,
        None,
    )
    .await;
    assert_eq!(listed["results"], json!([]));
    let (_, listed) = call(&server, Method::GET, "/memories?user_id=bob", &bob, None).await;
    assert_eq!(
        listed["results"].as_array().unwrap().len(),
        1,
        "bob's memories stay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_go_as_token_bearer_or_x_api_key_and_bind_users() {
    let server = TestServer::start().await;
    let (_, token) = server.token(&["alice"]).await;
    for (header, value) in [
        ("authorization", format!("Token {token}")),
        ("authorization", format!("Bearer {token}")),
        ("x-api-key", token.clone()),
    ] {
        let (status, body) = json_of(
            client()
                .get(server.url("/v1/ping/"))
                .header(header, &value)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["status"].as_str()),
            (200, Some("ok")),
            "{header}: {body}"
        );
    }
    let (status, body) = json_of(
        client()
            .get(server.url("/v1/ping/"))
            .header("authorization", "Token engram_000000000000_wrong")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, mem0_code(&body)), (401, "unauthorized"), "{body}");
    let (status, body) = json_of(client().get(server.url("/v1/ping/")).send().await.unwrap()).await;
    assert_eq!((status, mem0_code(&body)), (401, "unauthorized"), "{body}");
    // The native API still answers in its own shape.
    let (status, body) = json_of(
        client()
            .get(server.url("/v1/memories?user_id=alice"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_memory_is_not_found_through_every_route() {
    let server = TestServer::start().await;
    let (_, alice) = server.token(&["alice"]).await;
    let (_, bob) = server.token(&["bob"]).await;
    let (status, added) = call(
        &server,
        Method::POST,
        "/v3/memories/add/",
        &alice,
        Some(json!({"messages": "Alice's bank PIN hint is the cat's name", "user_id": "alice", "infer": false})),
    )
    .await;
    assert_eq!(status, 200, "{added}");
    let id = added["results"][0]["id"].as_str().unwrap().to_string();
    let missing = "0190f5a3-0000-7000-8000-000000000000";
    for (method, path, body) in [
        (Method::GET, format!("/v1/memories/{id}/"), None),
        (
            Method::PUT,
            format!("/v1/memories/{id}/"),
            Some(json!({"text": "x"})),
        ),
        (Method::DELETE, format!("/v1/memories/{id}/"), None),
        (Method::GET, format!("/v1/memories/{id}/history/"), None),
        (Method::GET, format!("/memories/{id}"), None),
        (
            Method::PUT,
            format!("/memories/{id}"),
            Some(json!({"text": "x"})),
        ),
        (Method::DELETE, format!("/memories/{id}"), None),
        (Method::GET, format!("/memories/{id}/history"), None),
        (
            Method::PUT,
            "/v1/batch/".to_string(),
            Some(json!({"memories": [{"memory_id": id, "text": "x"}]})),
        ),
        (
            Method::DELETE,
            "/v1/batch/".to_string(),
            Some(json!({"memories": [{"memory_id": id}]})),
        ),
    ] {
        let (status, theirs) = call(&server, method.clone(), &path, &bob, body.clone()).await;
        assert_eq!(
            (status, mem0_code(&theirs)),
            (404, "not_found"),
            "{method} {path}: {theirs}"
        );
        // Exactly what a memory that does not exist gets.
        let path = path.replace(&id, missing);
        let body =
            body.map(|b| serde_json::from_str(&b.to_string().replace(&id, missing)).unwrap());
        let (_, absent) = call(&server, method.clone(), &path, &bob, body).await;
        assert_eq!(
            theirs.to_string().replace(&id, missing),
            absent.to_string(),
            "{method} {path}"
        );
    }
    // Naming another user outright is refused.
    for (path, body) in [
        (
            "/v3/memories/search/",
            json!({"query": "PIN", "filters": {"user_id": "alice"}}),
        ),
        ("/v3/memories/", json!({"filters": {"user_id": "alice"}})),
        ("/search", json!({"query": "PIN", "user_id": "alice"})),
        (
            "/v3/memories/add/",
            json!({"messages": "x", "user_id": "alice", "infer": false}),
        ),
    ] {
        let (status, body) = call(&server, Method::POST, path, &bob, Some(body)).await;
        assert_eq!(
            (status, mem0_code(&body)),
            (403, "forbidden"),
            "{path}: {body}"
        );
    }
    let (status, body) = call(
        &server,
        Method::DELETE,
        "/v1/memories/?user_id=alice",
        &bob,
        None,
    )
    .await;
    assert_eq!((status, mem0_code(&body)), (403, "forbidden"), "{body}");
    // Bob's own unscoped listing does not reach Alice.
    let (status, listed) = call(&server, Method::GET, "/memories", &bob, None).await;
    assert_eq!((status, listed["results"].clone()), (200, json!([])));
    // And nothing of Alice's changed.
    let (status, got) = call(
        &server,
        Method::GET,
        &format!("/v1/memories/{id}/"),
        &alice,
        None,
    )
    .await;
    assert_eq!(
        (status, got["memory"].as_str()),
        (200, Some("Alice's bank PIN hint is the cat's name"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_with_a_stable_code_and_changes_nothing() {
    let settings = ServerSettings {
        max_body_bytes: Some(64 * 1024),
        ..ServerSettings::default()
    };
    let server = TestServer::start_with(settings).await;
    let (_, token) = server.token(&["alice"]).await;
    let t = token.as_str();
    let add = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hello"}], "user_id": "alice", "infer": false});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let cases: Vec<(Method, &str, Value, u16, &str)> = vec![
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"colour": "red"})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"infer": "no"})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"messages": []})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"messages": [{"role": "robot", "content": "x"}]})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"messages": [{"role": "user", "content": "  "}]})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            json!({"messages": "x", "infer": false}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"expiration_date": "soon"})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"user_id": ""})),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"custom_instructions": "x"})),
            501,
            "not_supported",
        ),
        (
            Method::POST,
            "/v3/memories/add/",
            add(json!({"infer": true})),
            501,
            "not_implemented",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "", "filters": {"user_id": "alice"}}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "x", "filters": {"user_id": "alice"}, "top_k": 0}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "x", "filters": {"user_id": "alice"}, "top_k": "5"}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "x", "filters": {"user_id": "alice"}, "threshold": 7}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "x", "filters": {"user_id": {"like": "a"}}}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "x", "filters": {"categories": {"in": ["a"]}}}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/search/",
            json!({"query": "x"}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/",
            json!({"filters": {"user_id": "alice"}, "page": 0}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/",
            json!({"filters": {"user_id": "alice"}, "page_size": 5000}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v3/memories/",
            json!({"filter": {"user_id": "alice"}}),
            400,
            "invalid_request",
        ),
        (
            Method::PUT,
            "/v1/memories/not-a-uuid/",
            json!({"text": "x"}),
            404,
            "not_found",
        ),
        (
            Method::PUT,
            "/v1/batch/",
            json!({"memories": []}),
            400,
            "invalid_request",
        ),
        (
            Method::PUT,
            "/v1/batch/",
            json!({"memories": [{"memory_id": "nope", "text": "x"}]}),
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            "/v1/batch/",
            json!({"memories": [{"memory_id": "nope", "text": "x"}]}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/memories",
            json!({"messages": [{"role": "user", "content": "x"}]}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/memories",
            json!({"messages": "x", "user_id": "alice"}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/memories",
            json!({"messages": [{"role": "user", "content": "x"}], "user_id": "alice", "prompt": "p"}),
            501,
            "not_supported",
        ),
        (
            Method::POST,
            "/search",
            json!({"query": "x", "filters": {"topic": "a"}}),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/search",
            json!({"query": " ", "user_id": "alice"}),
            400,
            "invalid_request",
        ),
        (
            Method::PUT,
            "/memories/0190f5a3-0000-7000-8000-000000000000",
            json!({}),
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/event/nope/",
            Value::Null,
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/memories/12/",
            Value::Null,
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/memories/12/history",
            Value::Null,
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/memories?user_id=alice&colour=red",
            Value::Null,
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/memories?user_id=alice&top_k=x",
            Value::Null,
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/memories",
            Value::Null,
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/v1/memories/",
            Value::Null,
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/v1/memories/?user_id=alice&colour=red",
            Value::Null,
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/api/v1/orgs/organizations/",
            Value::Null,
            501,
            "not_supported",
        ),
        (
            Method::POST,
            "/api/v1/webhooks/projects/p/",
            json!({}),
            501,
            "not_supported",
        ),
        (
            Method::GET,
            "/v1/entities/filters/",
            Value::Null,
            501,
            "not_supported",
        ),
        (
            Method::DELETE,
            "/v2/entities/robot/r2/",
            Value::Null,
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/v2/entities/user/bob/",
            Value::Null,
            403,
            "forbidden",
        ),
        (
            Method::POST,
            "/v1/feedback/",
            json!({}),
            501,
            "not_supported",
        ),
        (
            Method::GET,
            "/v3/nothing/",
            Value::Null,
            404,
            "route_not_found",
        ),
        (
            Method::PATCH,
            "/v1/memories/0190f5a3-0000-7000-8000-000000000000/",
            json!({}),
            405,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/search",
            Value::Null,
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, body, want_status, want_code) in cases {
        let body = (!body.is_null()).then_some(body);
        let (status, answer) = call(&server, method.clone(), path, t, body.clone()).await;
        assert_eq!(
            (status, mem0_code(&answer)),
            (want_status, want_code),
            "{method} {path} {body:?}: {answer}"
        );
    }
    // Not JSON, not declared as JSON, too big.
    let response = client()
        .post(server.url("/v3/memories/add/"))
        .header("authorization", format!("Token {t}"))
        .header("content-type", "application/json")
        .body("{\"messages\": ")
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, mem0_code(&body)), (400, "invalid_json"));
    let response = client()
        .post(server.url("/search"))
        .header("authorization", format!("Token {t}"))
        .body("{\"query\": \"x\", \"user_id\": \"alice\"}")
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, mem0_code(&body)), (415, "unsupported_media_type"));
    let huge = "x".repeat(100 * 1024);
    let (status, body) = call(
        &server,
        Method::POST,
        "/v3/memories/add/",
        t,
        Some(json!({"messages": huge, "user_id": "alice", "infer": false})),
    )
    .await;
    assert_eq!(
        (status, mem0_code(&body)),
        (413, "payload_too_large"),
        "{body}"
    );
    // Nothing was stored by any of it.
    let (status, listed) = call(
        &server,
        Method::POST,
        "/v3/memories/",
        t,
        Some(json!({"filters": {"user_id": "alice"}})),
    )
    .await;
    assert_eq!(
        (status, listed["count"].as_u64()),
        (200, Some(0)),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_and_expiry_hides_until_asked() {
    let server = TestServer::start().await;
    let (_, token) = server.token(&["alice"]).await;
    let t = token.as_str();
    let messages: Vec<Value> = (0..5)
        .map(|i| json!({"role": "user", "content": format!("note number {i}")}))
        .collect();
    call(
        &server,
        Method::POST,
        "/v3/memories/add/",
        t,
        Some(json!({"messages": messages, "user_id": "alice", "infer": false})),
    )
    .await;
    let (status, added) = call(
        &server,
        Method::POST,
        "/v3/memories/add/",
        t,
        Some(json!({"messages": "an old note", "user_id": "alice", "infer": false, "expiration_date": "2001-01-01"})),
    )
    .await;
    assert_eq!(status, 200, "{added}");
    let (_, page) = call(
        &server,
        Method::POST,
        "/v3/memories/?page=2&page_size=2",
        t,
        Some(json!({"filters": {"user_id": "alice"}})),
    )
    .await;
    assert_eq!(page["count"], 5, "the expired note is hidden: {page}");
    assert_eq!(page["results"].as_array().unwrap().len(), 2);
    assert!(page["next"].as_str().unwrap().contains("page=3"));
    assert!(page["previous"].as_str().unwrap().contains("page=1"));
    let (_, all) = call(&server, Method::POST, "/v3/memories/", t, Some(json!({"filters": {"user_id": "alice"}, "show_expired": true, "fields": ["id", "memory", "expiration_date"]}))).await;
    assert_eq!(all["count"], 6, "{all}");
    let old = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["memory"] == "an old note")
        .unwrap();
    assert_eq!(old["expiration_date"], "2001-01-01");
    assert_eq!(
        old.as_object().unwrap().len(),
        3,
        "fields keeps only what was asked: {old}"
    );
    let (_, v2) = call(
        &server,
        Method::POST,
        "/v2/memories/",
        t,
        Some(json!({"filters": {"user_id": "alice"}})),
    )
    .await;
    assert_eq!(
        v2.as_array().unwrap().len(),
        5,
        "v2 answers a bare list: {v2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_the_users_the_caller_may_see() {
    let server = TestServer::start().await;
    let add = |user: &str| json!({"messages": [{"role": "user", "content": format!("{user} likes tea")}], "user_id": user, "infer": false});
    // Without any token, this machine sees every user, as Mem0's admin does.
    for user in ["alice", "bob"] {
        let response = client()
            .post(server.url("/memories"))
            .json(&add(user))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
    }
    let (status, listed) =
        json_of(client().get(server.url("/memories")).send().await.unwrap()).await;
    assert_eq!(
        (status, listed["results"].as_array().unwrap().len()),
        (200, 2),
        "{listed}"
    );
    let (_, alice) = server.token(&["alice"]).await;
    let (status, entities) = call(&server, Method::GET, "/v1/entities/", &alice, None).await;
    assert_eq!(status, 200, "{entities}");
    assert_eq!(entities["results"][0]["name"], "alice");
    assert_eq!(entities["results"][0]["type"], "user");
    assert_eq!(entities["results"][0]["total_memories"], 1);
    assert_eq!(entities["count"], 1, "bob is not alice's: {entities}");
    let (status, body) = call(
        &server,
        Method::DELETE,
        "/v2/entities/user/alice/",
        &alice,
        None,
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (200, Some("Entity deleted successfully."))
    );
    let (_, entities) = call(&server, Method::GET, "/v1/entities/", &alice, None).await;
    assert_eq!(entities["results"][0]["total_memories"], 0, "{entities}");
}
