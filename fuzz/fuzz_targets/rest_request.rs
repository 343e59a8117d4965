//! REST request bodies (and query strings) on every route, through the real router over a real
//! store: whatever arrives, the answer is never a 5xx (and never a panic).
#![no_main]

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request};
use engram_server::config::ServerSettings;
use engram_server::{ServeOptions, Server, Stores};
use libfuzzer_sys::fuzz_target;

/// The routes requests go to (`{id}` is a memory that exists).
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/memories"),
    ("GET", "/v1/memories?"),
    ("POST", "/v1/memories/batch"),
    ("POST", "/v1/memories/search"),
    ("GET", "/v1/memories/{id}"),
    ("PATCH", "/v1/memories/{id}"),
    ("POST", "/v1/memories/{id}/invalidate"),
    ("GET", "/v1/memories/{id}/history"),
    ("GET", "/v1/export?"),
    ("GET", "/v1/sessions?"),
    ("GET", "/v1/users?"),
    ("GET", "/v1/profile?"),
    ("GET", "/v1/timeline?"),
    ("GET", "/v1/graph?"),
    ("POST", "/v1/import"),
    ("POST", "/memories"),
    ("POST", "/search"),
    ("POST", "/v1/memories/"),
    ("POST", "/v3/memories/add/"),
    ("POST", "/v2/memories/search/"),
    ("POST", "/v2/memories/"),
    ("DELETE", "/v1/memories/{id}"),
];

struct App {
    router: Router,
    id: String,
}

fn app() -> &'static App {
    static APP: OnceLock<App> = OnceLock::new();
    APP.get_or_init(|| {
        let runtime = engram_fuzz::runtime();
        let stores = engram_store_sqlite::SqliteStore::open(engram_fuzz::scratch().join("rest.db"))
            .map(|store| Stores::lexical(&store.into_backend()))
            .unwrap_or_else(|e| panic!("cannot open the stores: {e}"));
        let options = ServeOptions::new(
            "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            ServerSettings::default(),
        );
        let server = runtime
            .block_on(Server::bind(&stores, options))
            .unwrap_or_else(|e| panic!("cannot build the server: {e}"));
        let router = server.router();
        let mut app = App {
            router,
            id: String::new(),
        };
        let (status, body) = call(
            &app,
            "POST",
            "/v1/memories",
            br#"{"user_id": "u", "text": "Alice moved to Berlin in May"}"#,
        );
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        let added: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        app.id = added["id"].as_str().unwrap_or_default().to_string();
        app
    })
}

fn call(app: &App, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let uri = path.replace("{id}", &app.id);
    let Ok(request) = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET))
        .uri(uri)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
    else {
        return (400, Vec::new());
    };
    engram_fuzz::runtime().block_on(async {
        let mut router = app.router.clone();
        let response = tower_service::Service::call(&mut router, request)
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        (status, bytes)
    })
}

/// The selector that sends the rest of the input as it is: `METHOD /path?query`, a newline, the
/// body (any route, any path, the fuzzer's own).
const RAW: u8 = u8::MAX;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let app = app();
    let (method, path, body) = if selector == RAW {
        let (head, body) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], rest[at + 1..].to_vec()),
            None => (rest, Vec::new()),
        };
        let Some((method, path)) = std::str::from_utf8(head)
            .ok()
            .and_then(|h| h.split_once(' '))
        else {
            return;
        };
        // /mcp streams its answers; the MCP target covers it.
        if path.starts_with("/mcp") {
            return;
        }
        (method, path.to_string(), body)
    } else {
        let (method, route) = ROUTES[usize::from(selector) % ROUTES.len()];
        // GET routes take the input as their query string, the others as their body.
        if route.ends_with('?') {
            let query = String::from_utf8_lossy(rest);
            (method, format!("{route}{query}"), Vec::new())
        } else {
            (method, route.to_string(), rest.to_vec())
        }
    };
    if path.parse::<axum::http::Uri>().is_err() {
        return;
    }
    let (status, answer) = call(app, method, &path, &body);
    assert!(
        status < 500 || status == 501 || status == 503,
        "{method} {path} answered {status}: {}",
        String::from_utf8_lossy(&answer)
    );
    // Every refusal is JSON (the API's error shape, or Mem0's on its routes).
    if status >= 400 {
        assert!(
            serde_json::from_slice::<serde_json::Value>(&answer).is_ok(),
            "{method} {path} answered {status} in something other than JSON: {}",
            String::from_utf8_lossy(&answer)
        );
    }
});
