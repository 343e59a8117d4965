//! The REST API over real HTTP on 127.0.0.1: every route, errors, pagination, export, sessions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TestServer, client, code, json_of};
use engram_server::config::ServerSettings;
use serde_json::{Value, json};

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    json_of(
        client()
            .post(server.url(path))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn get(server: &TestServer, path: &str) -> (u16, Value) {
    json_of(client().get(server.url(path)).send().await.unwrap()).await
}

async fn add(server: &TestServer, user: &str, text: &str) -> String {
    let (status, body) = post(
        server,
        "/v1/memories",
        json!({"user_id": user, "text": text}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_openapi_need_no_token() {
    let server = TestServer::start().await;
    server.token(&["alice"]).await;
    let (status, body) = get(&server, "/health").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, doc) = get(&server, "/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    // With a token configured, the API itself is closed to anonymous callers.
    let (status, body) = get(&server, "/v1/memories?user_id=alice").await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served() {
    let server = TestServer::start().await;
    let id = add(&server, "u", "something to act on").await;
    let (_, doc) = get(&server, "/openapi.json").await;
    let paths = doc["paths"].as_object().unwrap();
    let mut probed = 0;
    for (path, item) in paths {
        for method in ["get", "post", "patch", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let url = server.url(&path.replace("{id}", &id).replace("{session_id}", "s1"));
            let request = match method {
                "get" => client().get(format!("{url}?user_id=u")),
                "post" => client().post(url).json(&json!({})),
                "patch" => client().patch(url).json(&json!({})),
                _ => client().delete(url),
            };
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            assert!(
                !matches!(code(&body), "route_not_found" | "method_not_allowed"),
                "{method} {path} is documented but not served: {status} {text}"
            );
            probed += 1;
        }
    }
    assert_eq!(probed, 20);
    // And the routes not documented are not served.
    let (status, body) = get(&server, "/v1/nothing").await;
    assert_eq!((status, code(&body)), (404, "route_not_found"));
    let response = client()
        .put(server.url("/v1/memories"))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, code(&body)), (405, "method_not_allowed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_lives_through_every_route() {
    let server = TestServer::start().await;
    let (status, added) = post(
        &server,
        "/v1/memories",
        json!({"user_id": "alice", "agent_id": "bot", "text": "Alice prefers tabs over spaces",
               "kind": "preference", "category": "style", "importance": 4, "metadata": {"n": 3}}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(added["status"], "added");
    let id = added["id"].as_str().unwrap().to_string();
    assert_eq!(added["memory"]["source"], "api");

    let (status, again) = post(
        &server,
        "/v1/memories",
        json!({"user_id": "alice", "agent_id": "bot", "text": "Alice  prefers tabs over spaces"}),
    )
    .await;
    assert_eq!(
        (status, again["status"].as_str(), again["id"].as_str()),
        (200, Some("duplicate"), Some(id.as_str()))
    );

    let (status, memory) = get(&server, &format!("/v1/memories/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(memory["kind"], "preference");
    assert_eq!(memory["metadata"]["n"], 3);

    let response = client()
        .patch(server.url(&format!("/v1/memories/{id}")))
        .json(&json!({"text": "Alice prefers spaces now", "category": null, "importance": 5}))
        .send()
        .await
        .unwrap();
    let (status, updated) = json_of(response).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["text"], "Alice prefers spaces now");
    assert!(updated.get("category").is_none());

    let (status, closed) = post(&server, &format!("/v1/memories/{id}/invalidate"), json!({})).await;
    assert_eq!(status, 200);
    assert!(closed["valid_to"].is_string());
    let (status, body) = post(&server, &format!("/v1/memories/{id}/invalidate"), json!({})).await;
    assert_eq!((status, code(&body)), (409, "already_invalidated"));

    let response = client()
        .delete(server.url(&format!("/v1/memories/{id}")))
        .send()
        .await
        .unwrap();
    let (status, deleted) = json_of(response).await;
    assert_eq!((status, deleted["status"].as_str()), (200, Some("deleted")));
    let (status, body) = get(&server, &format!("/v1/memories/{id}")).await;
    assert_eq!((status, code(&body)), (404, "not_found"));

    let (status, history) = get(&server, &format!("/v1/memories/{id}/history")).await;
    assert_eq!(status, 200);
    let events: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, vec!["add", "update", "invalidate", "delete"]);
    assert_eq!(history["events"][0]["actor"], "api");

    let (status, body) = get(&server, "/v1/memories/not-an-id").await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
}

/// Found by the fuzz target `rest_request`: a path parameter that is not UTF-8 once decoded got
/// axum's plain-text 400; every route answers in its own JSON error shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_not_utf8_once_decoded_gets_a_json_error() {
    let server = TestServer::start().await;
    for path in [
        "/v1/memories/%FF",
        "/v1/memories/0189f5c2%8f3a-7d4e-9b3a-2c3d4u5f6a7b/history",
        "/v1/sessions/%C3%28/messages",
        "/ui/%FF",
    ] {
        let (status, body) = get(&server, path).await;
        assert_eq!(
            (status, code(&body)),
            (400, "invalid_request"),
            "{path}: {body}"
        );
    }
    // Mem0's routes answer in Mem0's shape.
    let (status, body) = get(&server, "/memories/%FF").await;
    assert_eq!(status, 400, "{body}");
    assert!(body["detail"].is_string(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_that_duplicates_is_a_conflict() {
    let server = TestServer::start().await;
    add(&server, "u", "one thing").await;
    let id = add(&server, "u", "another thing").await;
    let response = client()
        .patch(server.url(&format!("/v1/memories/{id}")))
        .json(&json!({"text": "one thing"}))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, code(&body)), (409, "duplicate"));
    let response = client()
        .patch(server.url(&format!("/v1/memories/{id}")))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_report_each_item() {
    let server = TestServer::start().await;
    let (status, body) = post(
        &server,
        "/v1/memories/batch",
        json!({"memories": [
            {"user_id": "u", "text": "first"},
            {"user_id": "u", "text": "   "},
            {"user_id": "u", "text": "first"},
            {"user_id": "u", "text": "dated", "created_at": "2023-05-08T13:56:00Z"},
            {"user_id": "u", "text": "bad time", "created_at": "the day after"}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            body["added"].as_u64(),
            body["duplicates"].as_u64(),
            body["rejected"].as_u64()
        ),
        (Some(2), Some(1), Some(2))
    );
    let statuses: Vec<&str> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        vec!["added", "rejected", "duplicate", "added", "rejected"]
    );
    assert_eq!(body["results"][1]["error"]["code"], "invalid_request");
    assert_eq!(body["results"][2]["id"], body["results"][0]["id"]);

    // A malformed item fails the whole request, naming the item.
    let (status, body) = post(
        &server,
        "/v1/memories/batch",
        json!({"memories": [{"user_id": "u", "text": "ok"}, {"user_id": "u", "txt": "typo"}]}),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memories[1]"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_takes_the_cli_filters_and_answers_like_the_cli() {
    let server = TestServer::start().await;
    let (status, _) = post(
        &server,
        "/v1/memories/batch",
        json!({"memories": [
            {"user_id": "u", "text": "I use Python for data work", "kind": "fact", "metadata": {"project": "x"}},
            {"user_id": "u", "text": "Python 2 was my first language", "kind": "episode", "created_at": "2010-01-01"},
            {"user_id": "u", "text": "I like hiking", "kind": "preference"},
            {"user_id": "v", "text": "Python everywhere"}
        ]}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "python", "explain": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let hits = body["results"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    for hit in hits {
        assert!(hit["score"].is_number() && hit["id"].is_string() && hit["user_id"] == "u");
        assert!(hit["explain"].is_object());
    }
    let (_, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "python", "kinds": ["fact"]}),
    )
    .await;
    assert_eq!(body["results"].as_array().unwrap().len(), 1);
    assert!(body["results"][0].get("explain").is_none());
    let (_, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "python", "since": "2020-01-01"}),
    )
    .await;
    assert_eq!(body["results"].as_array().unwrap().len(), 1);
    let (_, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "python", "where": {"project": "x"}}),
    )
    .await;
    assert_eq!(body["results"][0]["metadata"]["project"], "x");
    assert_eq!(body["results"].as_array().unwrap().len(), 1);
    let (_, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "python", "limit": 1}),
    )
    .await;
    assert_eq!(body["results"].as_array().unwrap().len(), 1);

    for bad in [
        json!({"user_id": "u", "query": "  "}),
        json!({"user_id": "u", "query": "x", "limit": 0}),
        json!({"user_id": "u", "query": "x", "kinds": ["memo"]}),
        json!({"user_id": "u", "query": "x", "since": "whenever"}),
        json!({"user_id": "u", "query": "x", "min_importance": 9}),
        json!({"user_id": "u", "query": "x", "where": {"a": [1]}}),
        json!({"query": "x"}),
    ] {
        let (status, body) = post(&server, "/v1/memories/search", bad.clone()).await;
        assert_eq!(
            (status, code(&body)),
            (400, "invalid_request"),
            "{bad} -> {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_with_next_links() {
    let server = TestServer::start().await;
    let memories: Vec<Value> = (0..25)
        .map(|i| json!({"user_id": "u", "text": format!("memory number {i}"), "kind": if i % 2 == 0 { "fact" } else { "note" },
                        "created_at": format!("2024-01-01T00:00:{i:02}Z")}))
        .collect();
    let (status, _) = post(&server, "/v1/memories/batch", json!({"memories": memories})).await;
    assert_eq!(status, 200);

    let mut seen = Vec::new();
    let mut path = "/v1/memories?user_id=u&limit=10".to_string();
    let mut pages = 0;
    loop {
        let (status, page) = get(&server, &path).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for memory in page["memories"].as_array().unwrap() {
            seen.push(memory["text"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(next) => path = next.to_string(),
            None => {
                assert!(page["next_cursor"].is_null());
                break;
            }
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25);
    assert_eq!(seen[0], "memory number 24", "newest first");
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 25);

    let (_, page) = get(&server, "/v1/memories?user_id=u&kind=fact&limit=100").await;
    assert_eq!(page["memories"].as_array().unwrap().len(), 13);
    let (_, page) = get(&server, "/v1/memories?user_id=u&kind=fact,note&offset=20").await;
    assert_eq!(page["memories"].as_array().unwrap().len(), 5);
    let (_, page) = get(&server, "/v1/memories?user_id=u&until=2024-01-01T00:00:05Z").await;
    assert_eq!(page["memories"].as_array().unwrap().len(), 5);

    for bad in [
        "/v1/memories",
        "/v1/memories?user_id=u&limit=0",
        "/v1/memories?user_id=u&limit=abc",
        "/v1/memories?user_id=u&cursor=zzz",
        "/v1/memories?user_id=u&offset=1&cursor=o1",
        "/v1/memories?user_id=u&colour=red",
        "/v1/memories?user_id=u&user_id=v",
        "/v1/memories?user_id=u&where=novalue",
    ] {
        let (status, body) = get(&server, bad).await;
        assert_eq!(
            (status, code(&body)),
            (400, "invalid_request"),
            "{bad} -> {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_streams_jsonl_that_import_reads() {
    let server = TestServer::start().await;
    let memories: Vec<Value> = (0..3000)
        .map(|i| json!({"user_id": "u", "text": format!("exported memory {i}")}))
        .collect();
    let (status, body) = post(&server, "/v1/memories/batch", json!({"memories": memories})).await;
    assert_eq!((status, body["added"].as_u64()), (200, Some(3000)));
    let response = client()
        .get(server.url("/v1/export?user_id=u"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3000);
    assert_eq!(lines[0]["text"], "exported memory 0");
    assert!(
        lines
            .iter()
            .all(|l| l["user_id"] == "u" && l["content_hash"].is_string())
    );
    let (status, body) = get(&server, "/v1/export").await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_seen_through_their_memories() {
    let server = TestServer::start().await;
    let (status, body) = post(
        &server,
        "/v1/memories",
        json!({"user_id": "u", "session_id": "chat-1", "infer": false, "messages": [
            {"role": "user", "content": "I am moving to Berlin next month"},
            {"role": "assistant", "content": "Good luck with the move!"}
        ]}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["memory"]["metadata"]["role"], "user");
    assert_eq!(results[1]["memory"]["kind"], "episode");
    add(&server, "u", "no session here").await;

    let (status, body) = get(&server, "/v1/sessions?user_id=u").await;
    assert_eq!(status, 200);
    let sessions = body["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        (
            sessions[0]["session_id"].as_str(),
            sessions[0]["memories"].as_u64()
        ),
        (Some("chat-1"), Some(2))
    );

    let (status, body) = get(&server, "/v1/sessions/chat-1?user_id=u").await;
    assert_eq!(status, 200);
    assert_eq!(body["memories"].as_array().unwrap().len(), 2);
    assert_eq!(body["session_id"], "chat-1");
    let (status, body) = get(&server, "/v1/sessions/chat-2?user_id=u").await;
    assert_eq!((status, code(&body)), (404, "not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_need_a_model_for_extraction_or_infer_false() {
    let server = TestServer::start().await;
    let messages = json!([{"role": "user", "content": "hello"}]);
    let (status, body) = post(
        &server,
        "/v1/memories",
        json!({"user_id": "u", "messages": messages}),
    )
    .await;
    assert_eq!((status, code(&body)), (501, "not_implemented"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"infer\": false")
    );
    let (status, body) = post(
        &server,
        "/v1/memories",
        json!({"user_id": "u", "messages": messages, "infer": true}),
    )
    .await;
    assert_eq!((status, code(&body)), (501, "not_implemented"));
    for bad in [
        json!({"user_id": "u", "text": "x", "messages": messages, "infer": false}),
        json!({"user_id": "u"}),
        json!({"user_id": "u", "messages": [{"role": "robot", "content": "x"}], "infer": false}),
        json!({"user_id": "u", "messages": [{"role": "user", "text": "x"}], "infer": false}),
        json!({"user_id": "u", "messages": [], "infer": false}),
        json!({"user_id": "u", "text": "x", "infer": false}),
    ] {
        let (status, body) = post(&server, "/v1/memories", bad.clone()).await;
        assert_eq!(
            (status, code(&body)),
            (400, "invalid_request"),
            "{bad} -> {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_json_errors() {
    let settings = ServerSettings {
        max_body_bytes: Some(4096),
        max_batch_body_bytes: Some(1 << 20),
        ..ServerSettings::default()
    };
    let server = TestServer::start_with(settings).await;
    let send = |body: String, content_type: &'static str| {
        client()
            .post(server.url("/v1/memories"))
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let (status, body) = json_of(
        send("{\"user_id\": ".into(), "application/json")
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "invalid_json"));
    let (status, body) = json_of(
        send(
            "{\"user_id\": \"u\", \"text\": \"x\", \"colour\": 1}".into(),
            "application/json",
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
            .contains("unknown field `colour`"),
        "{body}"
    );
    let (status, body) = json_of(
        send(
            "{\"user_id\": \"u\", \"text\": 5}".into(),
            "application/json",
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
            .starts_with("text:"),
        "{body}"
    );
    let (status, body) = json_of(
        send(
            "{\"user_id\": \"u\", \"text\": \"x\", \"importance\": 7}".into(),
            "application/json",
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    let (status, body) = json_of(send("{}".into(), "text/plain").await.unwrap()).await;
    assert_eq!((status, code(&body)), (415, "unsupported_media_type"));

    let big = json!({"user_id": "u", "text": "x".repeat(10_000)}).to_string();
    let (status, body) = json_of(send(big.clone(), "application/json").await.unwrap()).await;
    assert_eq!((status, code(&body)), (413, "payload_too_large"));
    // The batch route takes more.
    let batch = json!({"memories": [{"user_id": "u", "text": "y".repeat(10_000)}]}).to_string();
    let response = client()
        .post(server.url("/v1/memories/batch"))
        .header("content-type", "application/json")
        .body(batch)
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, body["added"].as_u64()), (200, Some(1)), "{body}");
    // Chunked bodies (no Content-Length) are cut off too.
    let chunks = futures::stream::iter((0..10).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
    let response = client()
        .post(server.url("/v1/memories"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, code(&body)), (413, "payload_too_large"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_must_address_this_machine() {
    let server = TestServer::start().await;
    let response = client()
        .get(server.url("/v1/memories?user_id=u"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_with_infer_go_through_extraction_and_merging() {
    use engram_llm::Provider;
    use engram_llm::scripted::{ScriptedServer, Turn};
    use engram_server::ServeOptions;
    use engram_server::service::Extraction;

    let model_server = ScriptedServer::start(vec![
        Turn::text(
            json!({"episodes": [{"summary": "Asked for help moving a FastAPI app to Python 3.12",
                                 "category": "task_result", "importance": 3}]})
            .to_string(),
        ),
        Turn::text(
            json!({"facts": [{"key": "web_framework", "value": "FastAPI"}],
                   "preferences": [{"key": "editor", "value": "helix"}]})
            .to_string(),
        ),
    ])
    .await
    .unwrap();
    let model = engram_llm::build(model_server.client_config(Provider::OpenAi)).unwrap();
    let dir = tempfile::TempDir::new().unwrap();
    let mut options = ServeOptions::new("127.0.0.1:0".parse().unwrap(), ServerSettings::default());
    std::fs::create_dir(dir.path().join("workspace")).unwrap();
    options.extraction = Some(Extraction {
        model,
        workspace: engram_workspace::Workspace::confined(dir.path().join("workspace")).unwrap(),
        config: Default::default(),
    });
    let server = TestServer::start_with_options(dir, options).await;

    let messages = json!([
        {"role": "user", "content": "I build APIs with FastAPI and I edit in helix."},
        {"role": "assistant", "content": "Good choices. What do you need?"},
        {"role": "user", "content": "Help me move the app to Python 3.12."},
        {"role": "assistant", "content": "Start by updating the base image and the lock file."}
    ]);
    let (status, body) = post(
        &server,
        "/v1/memories",
        json!({"user_id": "u", "messages": messages}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["extraction"]["episodes_added"], 1, "{body}");
    assert_eq!(body["extraction"]["facts_added"], 2, "{body}");
    let (status, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "which editor"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.to_string().contains("editor: helix"), "{body}");
    // Another user's token cannot extract into u's memory.
    let (_, other) = server.token(&["v"]).await;
    let response = client()
        .post(server.url("/v1/memories"))
        .bearer_auth(other)
        .json(&json!({"user_id": "u", "messages": messages}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert_eq!(model_server.requests().len(), 2);

    // The same messages again add nothing twice, and ask the model nothing. (A token exists
    // now, so requests carry one.)
    let (_, mine) = server.token(&["u"]).await;
    let post = |body: Value| {
        let request = client()
            .post(server.url("/v1/memories"))
            .bearer_auth(mine.clone())
            .json(&body)
            .send();
        async move { json_of(request.await.unwrap()).await }
    };
    let (status, body) = post(json!({"user_id": "u", "messages": messages})).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["extraction"]["skipped"]
            .as_str()
            .unwrap()
            .contains("already extracted"),
        "{body}"
    );
    assert_eq!(model_server.requests().len(), 2);

    // One message is enough; what the model gave the user from what the user said of someone
    // else is filed under them; what it made up is rejected with the reason.
    model_server.push(Turn::text(json!({"episodes": []}).to_string()));
    model_server.push(Turn::text(
        json!({"facts": [{"key": "daughter", "value": "Ines"},
                         {"key": "allergy", "value": "peanuts"},
                         {"key": "location", "value": "Munich"}]})
        .to_string(),
    ));
    let (status, body) = post(json!({"user_id": "u", "messages": [
        {"role": "user", "content": "Please remember: my daughter Ines is allergic to peanuts"}
    ]}))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["extraction"]["facts_added"], 2, "{body}");
    let rejected: Vec<(&str, &str)> = body["extraction"]["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["text"].as_str().unwrap(), r["code"].as_str().unwrap()))
        .collect();
    assert_eq!(rejected, vec![("location: Munich", "not_said")], "{body}");
}
