//! The routes that look at a user's memory as a whole, over real HTTP: users, profile (with
//! what each entry replaced), timeline, graph, import; and the inspector's page itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TestServer, client, code, json_of};
use engram_core::store::graph::{Entity, Relation};
use jiff::Timestamp;
use serde_json::{Value, json};

async fn get(server: &TestServer, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = client().get(server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    json_of(request.send().await.unwrap()).await
}

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

async fn add(server: &TestServer, body: Value) -> String {
    let (status, answer) = post(server, "/v1/memories", body).await;
    assert_eq!(status, 201, "{answer}");
    answer["id"].as_str().unwrap().to_string()
}

async fn import(
    server: &TestServer,
    query: &str,
    body: &str,
    token: Option<&str>,
    content_type: &str,
) -> (u16, Value) {
    let mut request = client()
        .post(server.url(&format!("/v1/import{query}")))
        .header("content-type", content_type)
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    json_of(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_those_the_caller_may_see() {
    let server = TestServer::start().await;
    add(&server, json!({"user_id": "bob", "text": "one"})).await;
    add(&server, json!({"user_id": "alice", "text": "one"})).await;
    let id = add(&server, json!({"user_id": "alice", "text": "two"})).await;
    post(&server, &format!("/v1/memories/{id}/invalidate"), json!({})).await;
    let (status, body) = get(&server, "/v1/users", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["access"], "local");
    assert_eq!(
        body["users"],
        json!([{"user_id": "alice", "memories": 2}, {"user_id": "bob", "memories": 1}])
    );

    // A token sees its own users only, even one with no memories yet.
    let (token_id, token) = server.token(&["alice", "carol"]).await;
    let (status, body) = get(&server, "/v1/users", Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["access"].as_str(), body["token_id"].as_str()),
        (Some("token"), Some(token_id.as_str()))
    );
    assert_eq!(
        body["users"],
        json!([{"user_id": "alice", "memories": 2}, {"user_id": "carol", "memories": 0}])
    );
    let (status, body) = get(&server, "/v1/users", None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
    let (status, body) = get(&server, "/v1/users?user_id=x", Some(&token)).await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profile_shows_current_entries_and_what_they_replaced() {
    let server = TestServer::start().await;
    let fact = |text: &str, key: &str, at: &str| {
        json!({"user_id": "alice", "kind": "fact", "text": text, "created_at": at,
               "metadata": {"key": key, "session": "cli:direct"}})
    };
    let berlin = add(
        &server,
        fact("home: Berlin", "home", "2024-01-01T10:00:00Z"),
    )
    .await;
    post(
        &server,
        &format!("/v1/memories/{berlin}/invalidate"),
        json!({}),
    )
    .await;
    let lisbon = add(
        &server,
        fact("home: Lisbon", "Home", "2024-03-01T10:00:00Z"),
    )
    .await;
    add(&server, fact("job: nurse", "job", "2024-02-01T10:00:00Z")).await;
    add(
        &server,
        json!({"user_id": "alice", "kind": "preference", "text": "tea over coffee", "created_at": "2024-04-01T10:00:00Z"}),
    )
    .await;
    add(
        &server,
        json!({"user_id": "alice", "text": "an episode, not profile"}),
    )
    .await;
    add(
        &server,
        fact("home: Paris", "home", "2024-05-01T10:00:00Z")
            .as_object()
            .map(|o| {
                let mut o = o.clone();
                o.insert("user_id".into(), json!("bob"));
                Value::Object(o)
            })
            .unwrap(),
    )
    .await;

    let (status, page) = get(&server, "/v1/profile?user_id=alice", None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 3);
    let texts: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["tea over coffee", "home: Lisbon", "job: nurse"]);
    let home = &page["entries"][1];
    assert_eq!(home["id"], lisbon.as_str());
    // Keys match without case; bob's Paris is not alice's.
    let replaced = home["supersedes"].as_array().unwrap();
    assert_eq!(replaced.len(), 1, "{home}");
    assert_eq!(replaced[0]["id"], berlin.as_str());
    assert!(replaced[0]["valid_to"].is_string());
    assert_eq!(page["entries"][2]["supersedes"], json!([]));
    assert!(page["next"].is_null());

    // A page at a time.
    let (_, first) = get(&server, "/v1/profile?user_id=alice&limit=2", None).await;
    assert_eq!(first["entries"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().unwrap().to_string();
    let (_, second) = get(&server, &next, None).await;
    assert_eq!(second["entries"][0]["text"], "job: nurse");
    assert!(second["next"].is_null());

    let (_, token) = server.token(&["bob"]).await;
    let (status, body) = get(&server, "/v1/profile?user_id=alice", Some(&token)).await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = get(&server, "/v1/profile", Some(&token)).await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_counts_memories_per_day_and_kind() {
    let server = TestServer::start().await;
    for (text, kind, at) in [
        ("late on the first", "episode", "2024-05-01T23:30:00Z"),
        ("morning of the second", "episode", "2024-05-02T08:00:00Z"),
        ("a fact on the second", "fact", "2024-05-02T09:00:00Z"),
    ] {
        add(
            &server,
            json!({"user_id": "u", "text": text, "kind": kind, "created_at": at}),
        )
        .await;
    }
    let (status, body) = get(&server, "/v1/timeline?user_id=u", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["time_zone"], "UTC");
    assert_eq!(body["total"], 3);
    assert_eq!(
        body["days"],
        json!([
            {"day": "2024-05-01", "total": 1, "kinds": {"episode": 1}},
            {"day": "2024-05-02", "total": 2, "kinds": {"episode": 1, "fact": 1}}
        ])
    );
    // Days are cut where the reader lives (when the machine has the zone's rules).
    if jiff::tz::TimeZone::get("Europe/Berlin").is_ok() {
        let (_, body) = get(&server, "/v1/timeline?user_id=u&tz=Europe/Berlin", None).await;
        assert_eq!(
            body["days"],
            json!([{"day": "2024-05-02", "total": 3, "kinds": {"episode": 2, "fact": 1}}])
        );
    }
    let (_, body) = get(&server, "/v1/timeline?user_id=u&kind=fact", None).await;
    assert_eq!(body["total"], 1);
    let (status, body) = get(&server, "/v1/timeline?user_id=u&tz=Mars/Olympus", None).await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Mars/Olympus")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_graph_is_read_whole_or_searched() {
    let server = TestServer::start().await;
    let entity = |name: &str, kind: &str, observations: &[&str]| Entity {
        name: name.into(),
        entity_type: kind.into(),
        observations: observations.iter().map(|o| o.to_string()).collect(),
    };
    server
        .stores
        .graph
        .create_entities(
            "alice",
            &[
                entity("Alice", "person", &["plays the cello"]),
                entity("Bob", "person", &["likes coffee"]),
            ],
            Timestamp::now(),
        )
        .await
        .unwrap();
    server
        .stores
        .graph
        .create_relations(
            "alice",
            &[Relation {
                from: "Alice".into(),
                to: "Bob".into(),
                relation_type: "knows".into(),
            }],
            Timestamp::now(),
        )
        .await
        .unwrap();
    let (status, graph) = get(&server, "/v1/graph?user_id=alice", None).await;
    assert_eq!(status, 200, "{graph}");
    assert_eq!(graph["entities"].as_array().unwrap().len(), 2);
    assert_eq!(graph["entities"][0]["entityType"], "person");
    assert_eq!(
        graph["relations"],
        json!([{"from": "Alice", "to": "Bob", "relationType": "knows"}])
    );
    let (status, found) = get(&server, "/v1/graph?user_id=alice&query=coffee", None).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["entities"][0]["name"], "Bob");
    let (_, empty) = get(&server, "/v1/graph?user_id=bob", None).await;
    assert_eq!(empty, json!({"entities": [], "relations": []}));
    let (status, body) = get(&server, "/v1/graph?user_id=alice&limit=3", None).await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    // The search memories the graph keeps of its observations are facts, but not beliefs
    // about the user: the profile leaves them out.
    let (_, facts) = get(&server, "/v1/memories?user_id=alice&kind=fact", None).await;
    assert_eq!(facts["memories"].as_array().unwrap().len(), 2, "{facts}");
    add(
        &server,
        json!({"user_id": "alice", "kind": "fact", "text": "home: Lisbon"}),
    )
    .await;
    let (_, profile) = get(&server, "/v1/profile?user_id=alice&limit=1", None).await;
    assert_eq!(profile["total"], 1, "{profile}");
    assert_eq!(profile["entries"][0]["text"], "home: Lisbon");
    assert!(profile["next"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_keeps_good_lines_and_names_bad_ones() {
    let server = TestServer::start().await;
    let file = [
        r#"{"text": "no user: the import's user"}"#,
        "",
        r#"{"user_id": "alice", "text": "Alice moved to Lisbon", "kind": "fact", "created_at": "2023-05-08T13:56:00Z", "metadata": {"key": "home"}}"#,
        r#"{"user_id": "bob", "text": "someone else's"}"#,
        r#"{"user_id": "alice", "text": "x", "colour": "red"}"#,
        "not json",
        r#"{"text": "no user: the import's user"}"#,
    ]
    .join("\n");
    let (status, result) = import(
        &server,
        "?user_id=alice",
        &file,
        None,
        "application/x-ndjson",
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        (
            result["added"].as_u64(),
            result["duplicates"].as_u64(),
            result["rejected"].as_u64()
        ),
        (Some(2), Some(1), Some(3))
    );
    let lines: Vec<u64> = result["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [4, 5, 6]);
    let messages = result["errors"].to_string();
    assert!(
        messages.contains("is not the user this import is for"),
        "{messages}"
    );
    assert!(messages.contains("unknown field `colour`"), "{messages}");
    assert!(messages.contains("not valid JSON"), "{messages}");
    let (_, listed) = get(&server, "/v1/memories?user_id=alice&kind=fact", None).await;
    assert_eq!(listed["memories"][0]["created_at"], "2023-05-08T13:56:00Z");

    // Export, then import into another server: the same memories, closed ones too.
    let id = listed["memories"][0]["id"].as_str().unwrap().to_string();
    post(&server, &format!("/v1/memories/{id}/invalidate"), json!({})).await;
    let exported = client()
        .get(server.url("/v1/export?user_id=alice"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let other = TestServer::start().await;
    let (status, result) = import(&other, "", &exported, None, "application/jsonl").await;
    assert_eq!(
        (status, result["added"].as_u64()),
        (200, Some(2)),
        "{result}"
    );
    let again = client()
        .get(other.url("/v1/export?user_id=alice"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(again, exported);

    // Without user_id every line names its user; a token's other users are refused line by line.
    let (_, token) = server.token(&["alice"]).await;
    let (status, result) = import(
        &server,
        "",
        "{\"user_id\": \"alice\", \"text\": \"fine\"}\n{\"user_id\": \"bob\", \"text\": \"not yours\"}\n{\"text\": \"whose?\"}\n",
        Some(&token),
        "application/x-ndjson",
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["added"], 1);
    assert_eq!(result["errors"][0]["error"]["code"], "forbidden");
    assert!(
        result["errors"][1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("user_id")
    );
    let (status, body) = import(
        &server,
        "?user_id=bob",
        "{\"text\": \"x\"}",
        Some(&token),
        "application/x-ndjson",
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = import(
        &server,
        "?user_id=alice",
        "{\"text\": \"x\"}",
        Some(&token),
        "application/json",
    )
    .await;
    assert_eq!((status, code(&body)), (415, "unsupported_media_type"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_takes_the_score_apart() {
    let server = TestServer::start().await;
    add(
        &server,
        json!({"user_id": "u", "text": "Alice flew to Lisbon in May", "importance": 5}),
    )
    .await;
    let (status, body) = post(
        &server,
        "/v1/memories/search",
        json!({"user_id": "u", "query": "lisbon", "explain": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let hit = &body["results"][0];
    let parts = &hit["explain"]["contributions"];
    let sum: f64 = [
        "lexical",
        "dense",
        "recency",
        "importance",
        "time_match",
        "time_mention",
        "neighbours",
    ]
    .iter()
    .map(|k| parts[k].as_f64().unwrap())
    .sum();
    assert!((sum - hit["score"].as_f64().unwrap()).abs() < 1e-9, "{hit}");
    assert!(parts["lexical"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_without_a_token() {
    let server = TestServer::start().await;
    server.token(&["alice"]).await;
    let response = client().get(server.url("/ui/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"));
    let html = response.text().await.unwrap();
    assert!(html.contains("<script type=\"module\" src=\"app.js\">"));
    // Nothing outside this server: no CDN, no web fonts.
    assert!(!html.contains("http://") && !html.contains("https://"));

    let response = client()
        .get(server.url("/ui/views/profile.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    // Revalidated on every load; unchanged files are not sent again.
    assert_eq!(response.headers()["cache-control"], "no-cache");
    let tag = response.headers()["etag"].to_str().unwrap().to_string();
    let again = client()
        .get(server.url("/ui/views/profile.js"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert!(again.text().await.unwrap().is_empty());
    let response = client().get(server.url("/ui")).send().await.unwrap();
    // reqwest follows the redirect to /ui/.
    assert_eq!(response.url().path(), "/ui/");
    let response = client()
        .get(server.url("/ui/../Cargo.toml"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let response = client()
        .get(server.url("/ui/nothing.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // The data behind it still needs the token.
    let (status, body) = get(&server, "/v1/users", None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_the_conversations_the_agent_kept() {
    use engram_core::{AssistantMessage, Message, ToolCall};
    use engram_memory::session::{SessionKey, SessionStore};
    use engram_server::ServeOptions;
    use engram_server::config::ServerSettings;

    let dir = tempfile::TempDir::new().unwrap();
    let sessions = SessionStore::files(dir.path().join("sessions"));
    let mut options = ServeOptions::new("127.0.0.1:0".parse().unwrap(), ServerSettings::default());
    options.transcripts = Some(sessions.clone());
    let server = TestServer::start_with_options(dir, options).await;

    let mut metadata = serde_json::Map::new();
    metadata.insert("user".into(), json!("alice"));
    let trip = sessions.session(SessionKey::parse("cli:trip").unwrap(), metadata.clone());
    let at = |s: &str| -> Timestamp { s.parse().unwrap() };
    trip.append_message(
        &Message::user("Where did I fly in May?"),
        at("2024-05-06T09:00:00Z"),
    )
    .await
    .unwrap();
    let call = ToolCall::new("call-1", "recall", r#"{"query": "flight May"}"#);
    trip.append_message(
        &Message::Assistant(AssistantMessage {
            tool_calls: vec![call],
            ..AssistantMessage::default()
        }),
        at("2024-05-06T09:00:01Z"),
    )
    .await
    .unwrap();
    trip.append_message(
        &Message::tool_result("call-1", "Lisbon"),
        at("2024-05-06T09:00:02Z"),
    )
    .await
    .unwrap();
    trip.append_message(
        &Message::assistant("To Lisbon."),
        at("2024-05-06T09:00:03Z"),
    )
    .await
    .unwrap();
    let mut bobs = serde_json::Map::new();
    bobs.insert("user".into(), json!("bob"));
    sessions
        .session(SessionKey::parse("cli:bob").unwrap(), bobs)
        .append_message(&Message::user("hi"), at("2024-05-07T09:00:00Z"))
        .await
        .unwrap();
    add(
        &server,
        json!({"user_id": "alice", "session_id": "cli:trip", "text": "Alice flew to Lisbon", "created_at": "2024-05-06T09:00:05Z"}),
    )
    .await;
    add(
        &server,
        json!({"user_id": "alice", "session_id": "api:other", "text": "something else"}),
    )
    .await;

    let (status, body) = get(&server, "/v1/sessions?user_id=alice", None).await;
    assert_eq!(status, 200, "{body}");
    let list = body["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{body}");
    let trip_entry = list.iter().find(|s| s["session_id"] == "cli:trip").unwrap();
    assert_eq!(
        (
            trip_entry["messages"].as_u64(),
            trip_entry["memories"].as_u64()
        ),
        (Some(4), Some(1))
    );
    assert_eq!(trip_entry["transcript"], true);
    assert_eq!(trip_entry["first_at"], "2024-05-06T09:00:00Z");
    let other = list
        .iter()
        .find(|s| s["session_id"] == "api:other")
        .unwrap();
    assert_eq!(
        (other["transcript"].as_bool(), other["messages"].as_u64()),
        (Some(false), Some(0))
    );

    let (status, page) = get(
        &server,
        "/v1/sessions/cli:trip/messages?user_id=alice&limit=3",
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 4);
    let messages = page["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        (messages[0]["role"].as_str(), messages[0]["index"].as_u64()),
        (Some("user"), Some(0))
    );
    assert_eq!(messages[1]["tool_calls"][0]["name"], "recall");
    assert_eq!(messages[2]["tool_call_id"], "call-1");
    let (_, rest) = get(&server, page["next"].as_str().unwrap(), None).await;
    assert_eq!(rest["messages"][0]["content"], "To Lisbon.");
    assert!(rest["next"].is_null());

    // Another user's conversation is not alice's, and a token for bob cannot ask for hers.
    let (status, body) = get(&server, "/v1/sessions/cli:bob/messages?user_id=alice", None).await;
    assert_eq!((status, code(&body)), (404, "not_found"));
    let (_, token) = server.token(&["bob"]).await;
    let (status, body) = get(
        &server,
        "/v1/sessions/cli:trip/messages?user_id=alice",
        Some(&token),
    )
    .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (_, body) = get(&server, "/v1/sessions?user_id=bob", Some(&token)).await;
    assert_eq!(body["sessions"][0]["session_id"], "cli:bob");
}
