#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Two real `engram serve` processes get the same conversation to extract at the same moment:
//! one of them extracts it, the other says another process is doing it, and sending it again
//! later adds nothing. Once on one home (SQLite), once with two homes (two machines, each with
//! its own workspace) on one PostgreSQL database. The model is the scripted server, slow enough
//! that the two requests overlap.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::{Value, json};

struct Serve {
    child: Child,
    url: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `engram serve` on `home`, with the database of ENGRAM_DATABASE_URL when `database` names
/// one, else the home's SQLite file.
fn serve(home: &std::path::Path, database: Option<&str>, model: &ScriptedServer) -> Serve {
    let provider = Provider::OpenAi;
    std::fs::write(
        home.join("config.toml"),
        "[llm]\nmax_attempts = 1\n\n[memory]\nmodel_merge = false\n",
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_engram"));
    match database {
        Some(url) => command.env("ENGRAM_DATABASE_URL", url),
        None => command.env_remove("ENGRAM_DATABASE_URL"),
    };
    let mut child = command
        .arg("--home")
        .arg(home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("ENGRAM_EMBED_MODEL")
        .env("ENGRAM_PROVIDER", provider.as_str())
        .env("ENGRAM_MODEL", SCRIPTED_MODEL)
        .env(provider.default_key_env(), SCRIPTED_KEY)
        .env(provider.base_url_env(), model.base_url(provider))
        .env("ENGRAM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("engram serve ended before listening")
            .unwrap();
        if let Some(rest) = line.strip_prefix("engram is listening on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Serve { child, url }
}

fn client() -> reqwest::Client {
    // reqwest is built without a TLS provider of its own; the requests here are plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn post(url: String, body: Value) -> Value {
    let response = client()
        .post(format!("{url}/v1/memories"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.json::<Value>().await.unwrap()
}

/// A model whose one extraction takes two calls, the first slow.
fn slow_model() -> ScriptedServer {
    ScriptedServer::spawn(vec![
        Turn::text(json!({"episodes": []}).to_string()).delay(Duration::from_millis(1500)),
        Turn::text(
            json!({"facts": [{"key": "pet", "value": "a cat called Miso"}], "preferences": []})
                .to_string(),
        ),
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_extract_one_conversation_once() {
    let home = tempfile::tempdir().unwrap();
    let model = slow_model();
    let first = serve(home.path(), None, &model);
    let second = serve(home.path(), None, &model);
    extract_once(&first, &second, &model).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_machines_on_one_postgresql_extract_one_conversation_once() {
    let db = common::Database::new("claims");
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let model = slow_model();
    let first = serve(home_a.path(), Some(&db.url), &model);
    let second = serve(home_b.path(), Some(&db.url), &model);
    extract_once(&first, &second, &model).await;
}

/// The same conversation sent to both servers at nearly the same moment is extracted by one;
/// sent again, by nobody.
async fn extract_once(first: &Serve, second: &Serve, model: &ScriptedServer) {
    // Two calls for one extraction: if both processes extracted, the second would find no
    // turn left and fail.
    let body = json!({"user_id": "u", "session_id": "s", "messages": [
        {"role": "user", "content": "I have a cat called Miso."}
    ]});
    let a = tokio::spawn(post(first.url.clone(), body.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = tokio::spawn(post(second.url.clone(), body.clone()));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let reports = [&a["extraction"], &b["extraction"]];
    let extracted: Vec<&&Value> = reports.iter().filter(|r| r["skipped"].is_null()).collect();
    assert_eq!(extracted.len(), 1, "{a}\n{b}");
    assert_eq!(extracted[0]["facts_added"], 1);
    let skipped: Vec<&str> = reports
        .iter()
        .filter_map(|r| r["skipped"].as_str())
        .collect();
    assert!(skipped[0].contains("another process"), "{skipped:?}");
    assert_eq!(model.requests().len(), 2);

    // Again, through either process: already extracted, no model call, nothing added.
    let again = post(second.url.clone(), body).await;
    assert!(
        again["extraction"]["skipped"]
            .as_str()
            .unwrap()
            .contains("already extracted"),
        "{again}"
    );
    assert_eq!(model.requests().len(), 2);
    let listed: Value = client()
        .get(format!("{}/v1/memories?user_id=u&kind=fact", first.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1, "{listed}");
}
