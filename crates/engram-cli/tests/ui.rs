//! The memory inspector in a real browser: Debian's Chromium, headless, driven by Playwright
//! (tests/ui/inspector.mjs) against a real `engram serve` on a real store that this test fills
//! with the CLI. scripts/test.sh installs Chromium and playwright-core (scripts/setup-browser.sh)
//! and exports ENGRAM_TEST_PLAYWRIGHT; without them the test fails and says so, it never skips.
//!
//! Screenshots of every view are written to target/ui-screenshots/ (the path is printed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engram_core::{AssistantMessage, Message, ToolCall};
use engram_memory::session::{SessionKey, SessionStore};
use jiff::Timestamp;
use serde_json::{Value, json};
use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");
const CHROMIUM: &str = "/usr/bin/chromium";

/// playwright-core's node_modules, Chromium and node, or a failure that says how to get them.
fn browser() -> PathBuf {
    let modules = match std::env::var_os("ENGRAM_TEST_PLAYWRIGHT") {
        Some(path) if Path::new(&path).join("playwright-core").is_dir() => PathBuf::from(path),
        _ => panic!(
            "ENGRAM_TEST_PLAYWRIGHT is not set to a node_modules folder with playwright-core. Run \
             the tests with scripts/test.sh, or: export ENGRAM_TEST_PLAYWRIGHT=\"$(scripts/setup-browser.sh)\""
        ),
    };
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: scripts/setup-browser.sh installs Debian's chromium"
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is not on the PATH: scripts/setup-browser.sh installs Node.js"
    );
    modules
}

/// Where the screenshots go: target/ui-screenshots/<run>.
fn screenshot_dir(run: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = target.join("ui-screenshots").join(run);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn engram(home: &Path, args: &[&str]) -> String {
    let output = Command::new(ENGRAM)
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "engram {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn json_lines(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Alice's memories over several days (a fact that replaced another, a conversation she had
/// with the agent, a knowledge graph), and bob's.
fn fill(home: &Path) {
    let session = |text: &str, at: &str| {
        json!({"user_id": "alice", "session_id": "cli:trip", "text": text, "created_at": at,
               "metadata": {"session": "cli:trip"}, "source": "extraction"})
    };
    let fact = |text: &str, key: &str, at: &str| {
        json!({"user_id": "alice", "kind": "fact", "text": text, "created_at": at, "importance": 4,
               "category": "user_info", "metadata": {"key": key, "session": "cli:trip"}, "source": "extraction"})
    };
    let mut berlin = fact("home: Berlin", "home", "2024-01-10T08:00:00Z");
    berlin["valid_to"] = json!("2024-05-07T10:00:00Z");
    let memories = [
        session(
            "Alice flew to Lisbon for a conference",
            "2024-05-06T09:00:05Z",
        ),
        session(
            "Alice visited the Belém tower in Lisbon",
            "2024-05-07T15:00:00Z",
        ),
        json!({"user_id": "alice", "text": "Alice went hiking in Sintra", "created_at": "2024-05-08T11:00:00Z"}),
        json!({"user_id": "alice", "text": "Alice booked a table at a Lisbon fado bar", "created_at": "2024-05-08T19:00:00Z"}),
        json!({"user_id": "alice", "kind": "note", "text": "Ask about the conference talk", "created_at": "2024-05-09T09:00:00Z"}),
        berlin,
        fact("home: Lisbon", "home", "2024-05-07T10:00:00Z"),
        fact("job: nurse", "job", "2024-03-01T10:00:00Z"),
        json!({"user_id": "alice", "kind": "preference", "text": "tea over coffee", "created_at": "2024-04-01T10:00:00Z",
               "metadata": {"key": "drink"}, "category": "user_preference"}),
        json!({"user_id": "bob", "text": "Bob plays chess on Sundays", "created_at": "2024-05-05T10:00:00Z"}),
    ];
    let file = home.join("memories.jsonl");
    std::fs::write(&file, json_lines(&memories)).unwrap();
    engram(home, &["import", file.to_str().unwrap()]);

    let graph = [
        json!({"type": "entity", "name": "Alice", "entityType": "person", "observations": ["plays the cello", "lives in Lisbon"]}),
        json!({"type": "entity", "name": "Bob", "entityType": "person", "observations": ["likes chess"]}),
        json!({"type": "entity", "name": "Lisbon", "entityType": "city", "observations": []}),
        json!({"type": "relation", "from": "Alice", "to": "Bob", "relationType": "knows"}),
        json!({"type": "relation", "from": "Alice", "to": "Lisbon", "relationType": "lives_in"}),
    ];
    let file = home.join("graph.jsonl");
    std::fs::write(&file, json_lines(&graph)).unwrap();
    engram(
        home,
        &["import-graph", file.to_str().unwrap(), "--user", "alice"],
    );

    // The conversation the trip memories came from, as the agent keeps it.
    let sessions = SessionStore::files(home.join("sessions"));
    let mut metadata = serde_json::Map::new();
    metadata.insert("user".into(), json!("alice"));
    let trip = sessions.session(SessionKey::parse("cli:trip").unwrap(), metadata);
    let at = |s: &str| -> Timestamp { s.parse().unwrap() };
    let messages = [
        (
            Message::user("I just flew to Lisbon for a conference."),
            "2024-05-06T09:00:00Z",
        ),
        (
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::new("call-1", "recall", r#"{"query": "Lisbon"}"#)],
                ..AssistantMessage::default()
            }),
            "2024-05-06T09:00:01Z",
        ),
        (
            Message::tool_result("call-1", "nothing about Lisbon yet"),
            "2024-05-06T09:00:02Z",
        ),
        (
            Message::assistant("Welcome to Lisbon! Enjoy the conference."),
            "2024-05-06T09:00:03Z",
        ),
        (
            Message::user("I live here now, actually."),
            "2024-05-07T10:00:00Z",
        ),
        (
            Message::assistant("Noted: you live in Lisbon."),
            "2024-05-07T10:00:01Z",
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (message, when) in messages {
        runtime
            .block_on(trip.append_message(&message, at(when)))
            .unwrap();
    }
}

fn token(home: &Path, user: &str) -> String {
    engram(home, &["token", "create", "--user", user, "--name", user])
        .trim()
        .to_string()
}

/// `engram serve` on a random port of 127.0.0.1, killed when dropped.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(home: &Path) -> Self {
        let mut child = Command::new(ENGRAM)
            .arg("--home")
            .arg(home)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("ENGRAM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("engram is listening on ") {
                    let _ = sender.send(rest.split_whitespace().next().unwrap_or("").to_string());
                } else {
                    eprintln!("engram serve: {line}");
                }
            }
        });
        let url = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("engram serve did not say where it listens");
        Self { child, url }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the browser script; returns its summary line.
fn drive(modules: &Path, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/inspector.mjs");
    let started = Instant::now();
    let output = Command::new("node")
        .arg(script)
        .args(args)
        .env("ENGRAM_TEST_PLAYWRIGHT", modules)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser run failed ({}) after {:?}:\n{stderr}\n{stdout}",
        output.status,
        started.elapsed()
    );
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("no summary line ({e}): {stdout}"))
}

fn get(home: &Path, id: &str) -> Value {
    serde_json::from_str(&engram(home, &["--json", "get", id])).unwrap()
}

fn find(home: &Path, user: &str, kind: &str, text: &str) -> Value {
    let listed: Value = serde_json::from_str(&engram(
        home,
        &[
            "--json", "list", "--user", user, "--kind", kind, "--all", "--limit", "100",
        ],
    ))
    .unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["text"] == text)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} '{text}' for {user}: {listed}"))
}

#[test]
fn the_inspector_works_in_a_real_browser() {
    let modules = browser();
    let home = TempDir::new().unwrap();
    fill(home.path());
    let alice = token(home.path(), "alice");
    let bob = token(home.path(), "bob");
    let upload = home.path().join("upload.jsonl");
    std::fs::write(
        &upload,
        json_lines(&[
            json!({"text": "Alice ran a marathon in Porto", "created_at": "2024-05-12T08:00:00Z"}),
            json!({"text": "Alice wants to learn Portuguese", "kind": "note"}),
            json!({"text": "a dream", "kind": "dream"}),
        ]),
    )
    .unwrap();
    let nurse_id = find(home.path(), "alice", "fact", "job: nurse")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let tea_id = find(home.path(), "alice", "preference", "tea over coffee")["id"]
        .as_str()
        .unwrap()
        .to_string();

    let served = Served::start(home.path());
    let shots = screenshot_dir("tokens");
    println!("inspector screenshots: {}", shots.display());
    let summary = drive(
        &modules,
        &[
            "tokens",
            &served.url,
            shots.to_str().unwrap(),
            &alice,
            &bob,
            upload.to_str().unwrap(),
        ],
    );
    assert!(summary["checks"].as_u64().unwrap() >= 60, "{summary}");
    assert_eq!(
        summary["screenshots"].as_array().unwrap().len(),
        13,
        "{summary}"
    );
    drop(served);

    // What the page did is what the store holds, with history as the CLI writes it.
    let edited = get(home.path(), &nurse_id);
    assert_eq!(edited["text"], "job: doctor");
    let history: Value =
        serde_json::from_str(&engram(home.path(), &["--json", "history", &nurse_id])).unwrap();
    let update = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "update")
        .unwrap();
    assert_eq!(
        (update["old_text"].as_str(), update["new_text"].as_str()),
        (Some("job: nurse"), Some("job: doctor"))
    );
    assert!(
        update["actor"].as_str().unwrap().starts_with("api:"),
        "{update}"
    );
    assert!(get(home.path(), &tea_id)["valid_to"].is_string());
    find(
        home.path(),
        "alice",
        "episode",
        "Alice ran a marathon in Porto",
    );
}

#[test]
fn a_local_server_without_tokens_needs_no_sign_in() {
    let modules = browser();
    let home = TempDir::new().unwrap();
    engram(
        home.path(),
        &[
            "add",
            "--user",
            "solo",
            "--kind",
            "fact",
            "solo lives alone",
        ],
    );
    let served = Served::start(home.path());
    let shots = screenshot_dir("local");
    println!("inspector screenshots: {}", shots.display());
    let summary = drive(&modules, &["local", &served.url, shots.to_str().unwrap()]);
    assert_eq!(summary["mode"], "local");
}
