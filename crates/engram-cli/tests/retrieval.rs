#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hybrid search, reindexing and model installation through the `engram` binary, with the real
//! all-MiniLM-L6-v2 model (fetched by scripts/test.sh) and a local stand-in for the model hub.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::prelude::*;
use predicates::prelude::*;
use serde_json::Value;
use tempfile::TempDir;

fn model_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("ENGRAM_TEST_MODEL_DIR") else {
        panic!(
            "ENGRAM_TEST_MODEL_DIR is not set: run the tests with scripts/test.sh, or export \
             ENGRAM_TEST_MODEL_DIR=\"$(scripts/fetch-test-model.sh)\" first"
        );
    };
    PathBuf::from(dir)
}

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("engram"));
    cmd.arg("--home").arg(home);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_USER",
        "ENGRAM_EMBED_MODEL",
        "HF_ENDPOINT",
        "HF_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn with_model(home: &Path) -> Command {
    let mut cmd = engram(home);
    cmd.env("ENGRAM_EMBED_MODEL", model_dir());
    cmd
}

fn json_of(cmd: &mut Command) -> Value {
    let out = cmd.arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const MEMORIES: [&str; 4] = [
    "I adopted a golden retriever puppy in March",
    "My sister works as a nurse in Leeds",
    "We repainted the kitchen a pale green",
    "The quarterly report is due on Friday",
];

#[test]
fn search_finds_meaning_when_a_model_is_configured() {
    let home = TempDir::new().unwrap();
    for text in MEMORIES {
        with_model(home.path())
            .args(["add", "--user", "u", text])
            .assert()
            .success();
    }
    let hits = json_of(with_model(home.path()).args([
        "search",
        "--user",
        "u",
        "--limit",
        "1",
        "--explain",
        "does",
        "the",
        "user",
        "own",
        "a",
        "dog",
    ]));
    assert_eq!(hits[0]["text"], MEMORIES[0]);
    assert!(hits[0]["explain"]["similarity"].as_f64().unwrap() > 0.2);
    assert_eq!(hits[0]["explain"]["profile"], "balanced");
    // Without the model the same question finds nothing: no word in common.
    let hits =
        json_of(engram(home.path()).args(["search", "--user", "u", "does the user own a dog"]));
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .all(|h| h["text"] != MEMORIES[0])
    );
}

#[test]
fn memories_added_without_a_model_are_embedded_by_reindex() {
    let home = TempDir::new().unwrap();
    let first = engram(home.path())
        .args(["add", "--user", "u", MEMORIES[1]])
        .output()
        .unwrap();
    // Said once per home: lexical only.
    assert!(String::from_utf8_lossy(&first.stderr).contains("lexical only"));
    let second = engram(home.path())
        .args(["add", "--user", "u", MEMORIES[2]])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&second.stderr).contains("lexical only"));

    with_model(home.path())
        .args(["search", "--user", "u", "healthcare relative"])
        .assert()
        .success()
        .stderr(predicate::str::contains("engram reindex"));
    let done = json_of(with_model(home.path()).arg("reindex"));
    assert_eq!(done["embedded"], 2);
    let hits = json_of(with_model(home.path()).args([
        "search",
        "--user",
        "u",
        "--limit",
        "1",
        "which relative is in healthcare",
    ]));
    assert_eq!(hits[0]["text"], MEMORIES[1]);
    let again = json_of(with_model(home.path()).arg("reindex"));
    assert_eq!(again["embedded"], 0);
}

#[test]
fn import_embeds_what_it_added() {
    let home = TempDir::new().unwrap();
    let file = home.path().join("in.jsonl");
    let lines: Vec<String> = MEMORIES
        .iter()
        .map(|t| serde_json::json!({"user_id": "u", "text": t}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    with_model(home.path())
        .arg("import")
        .arg(&file)
        .assert()
        .success();
    let hits = json_of(with_model(home.path()).args([
        "search",
        "--user",
        "u",
        "--limit",
        "1",
        "home decoration colours",
    ]));
    assert_eq!(hits[0]["text"], MEMORIES[2]);
    assert!(hits[0].get("explain").is_none());
}

#[test]
fn reindex_without_a_model_and_a_broken_model_are_clear_errors() {
    let home = TempDir::new().unwrap();
    engram(home.path())
        .arg("reindex")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no embedding model is configured"));
    // A copy of the model without its weights.
    let broken = home.path().join("broken-model");
    std::fs::create_dir(&broken).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(model_dir().join(file), broken.join(file)).unwrap();
    }
    engram(home.path())
        .env("ENGRAM_EMBED_MODEL", &broken)
        .args(["add", "--user", "u", "x"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("model.safetensors"));
    // Nothing was stored by the failed add.
    let list = json_of(engram(home.path()).args(["list", "--user", "u"]));
    assert!(list.as_array().unwrap().is_empty());
}

/// Serves `root` the way the Hugging Face hub serves a repository at
/// `/{owner}/{name}/resolve/{revision}/{file}`; anything else is 404.
fn hub_stand_in(root: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let root = root.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                reader.read_line(&mut request_line).unwrap();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap() == 0 || header == "\r\n" {
                        break;
                    }
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("/");
                let file = path
                    .strip_prefix("/sentence-transformers/all-MiniLM-L6-v2/resolve/main/")
                    .map(|f| root.join(f))
                    .filter(|p| p.is_file());
                match file {
                    Some(p) => {
                        let body = std::fs::read(p).unwrap();
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = stream.write_all(head.as_bytes());
                        let _ = stream.write_all(&body);
                    }
                    None => {
                        let _ = stream.write_all(
                            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        );
                    }
                }
            });
        }
    });
    format!("http://{address}")
}

#[test]
fn a_model_fetched_from_the_hub_is_listed_and_usable_by_name() {
    let home = TempDir::new().unwrap();
    let endpoint = hub_stand_in(model_dir());
    engram(home.path())
        .env("HF_ENDPOINT", &endpoint)
        .args(["model", "fetch"])
        .assert()
        .success()
        .stdout(predicate::str::contains("installed all-MiniLM-L6-v2"));
    let listed = json_of(engram(home.path()).args(["model", "list"]));
    assert_eq!(listed[0]["name"], "all-MiniLM-L6-v2");
    assert_eq!(listed[0]["dimension"], 384);
    // What each measured model costs and gains, and which is installed here.
    let known = json_of(engram(home.path()).args(["model", "known"]));
    let row = |name: &str| {
        known
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()
            .clone()
    };
    let lexical = known[0]["locomo_recall_at_10"].as_f64().unwrap();
    let (minilm, mpnet) = (row("all-MiniLM-L6-v2"), row("all-mpnet-base-v2"));
    assert_eq!(minilm["installed"], true);
    assert_eq!(mpnet["installed"], false);
    assert_eq!(mpnet["dimension"], 768);
    let recall = |m: &Value| m["locomo_recall_at_10"].as_f64().unwrap();
    assert!(lexical < recall(&minilm) && recall(&minilm) < recall(&mpnet));
    engram(home.path())
        .args(["model", "known"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("all-mpnet-base-v2").and(predicate::str::contains("5-9x")),
        );
    // Fetching again without --replace is refused, and nothing changes.
    engram(home.path())
        .env("HF_ENDPOINT", &endpoint)
        .args(["model", "fetch"])
        .assert()
        .failure();
    // An unknown repository is a clear error and installs nothing.
    engram(home.path())
        .env("HF_ENDPOINT", &endpoint)
        .args(["model", "fetch", "someone/no-such-model"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "someone/no-such-model has no config.json",
        ));
    assert_eq!(
        json_of(engram(home.path()).args(["model", "list"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The installed name works as ENGRAM_EMBED_MODEL.
    engram(home.path())
        .env("ENGRAM_EMBED_MODEL", "all-MiniLM-L6-v2")
        .args(["add", "--user", "u", MEMORIES[0]])
        .assert()
        .success();
    let hits = json_of(
        engram(home.path())
            .env("ENGRAM_EMBED_MODEL", "all-MiniLM-L6-v2")
            .args(["search", "--user", "u", "pets"]),
    );
    assert_eq!(hits[0]["text"], MEMORIES[0]);
}
