//! The command-line side of the server and MCP work, as real processes: `engram import-graph`
//! on a file in the reference MCP memory server's format, and `engram token create|list|revoke`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

fn engram(home: &Path, args: &[&str]) -> Output {
    Command::new(ENGRAM)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("ENGRAM_LOG", "warn")
        .env_remove("ENGRAM_EMBED_MODEL")
        .env_remove("ENGRAM_USER")
        .output()
        .unwrap()
}

fn json_out(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn texts(home: &Path, user: &str) -> Vec<String> {
    let listed = engram(home, &["--json", "list", "--user", user, "--limit", "100"]);
    assert!(listed.status.success(), "{listed:?}");
    json_out(&listed)
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn import_graph_reads_the_reference_servers_file_and_reports_bad_lines() {
    let home = TempDir::new().unwrap();
    // Lines exactly as @modelcontextprotocol/server-memory writes them, plus one it never would.
    let file = home.path().join("memory.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"type":"entity","name":"Alice","entityType":"person","observations":["plays the cello","works at Acme"]}"#,
            "\n",
            r#"{"type":"entity","name":"Acme","entityType":"company","observations":["makes anvils"]}"#,
            "\n",
            r#"{"type":"node","name":"Bob"}"#,
            "\n\n",
            r#"{"type":"relation","from":"Alice","to":"Acme","relationType":"works_at"}"#,
            "\n",
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();

    let first = engram(
        home.path(),
        &["--json", "import-graph", path, "--user", "alice"],
    );
    // Good lines are imported; the bad one is reported with its line number (exit status 5).
    assert_eq!(first.status.code(), Some(5), "{first:?}");
    let summary = json_out(&first);
    assert_eq!(summary["entities_created"], 2, "{summary}");
    assert_eq!(summary["relations_created"], 1, "{summary}");
    assert_eq!(
        summary["rejected"].as_array().unwrap().len(),
        1,
        "{summary}"
    );
    assert_eq!(summary["rejected"][0]["line"], 3, "{summary}");

    // The observations are alice's memories, searchable like any other; bob has none.
    let alice = texts(home.path(), "alice");
    assert!(
        alice.iter().any(|t| t == "Alice: plays the cello"),
        "{alice:?}"
    );
    assert!(alice.iter().any(|t| t == "Acme: makes anvils"), "{alice:?}");
    assert!(texts(home.path(), "bob").is_empty());

    // Importing again adds nothing.
    let again = engram(
        home.path(),
        &["--json", "import-graph", path, "--user", "alice"],
    );
    let summary = json_out(&again);
    assert_eq!(
        (
            &summary["entities_created"],
            &summary["observations_added"],
            &summary["relations_created"]
        ),
        (&Value::from(0), &Value::from(0), &Value::from(0)),
        "{summary}"
    );
    assert_eq!(texts(home.path(), "alice").len(), alice.len());

    // A file that is not there is an error that names it.
    let missing = engram(
        home.path(),
        &[
            "import-graph",
            "/nonexistent/memory.jsonl",
            "--user",
            "alice",
        ],
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/memory.jsonl"),
        "{missing:?}"
    );
}

#[test]
fn tokens_are_shown_once_listed_without_their_secret_and_revoked() {
    let home = TempDir::new().unwrap();
    let created = engram(
        home.path(),
        &[
            "token", "create", "--user", "alice", "--user", "bob", "--name", "laptop",
        ],
    );
    assert!(created.status.success(), "{created:?}");
    let secret = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();
    assert!(secret.len() >= 32, "{secret}");
    assert!(!secret.contains(char::is_whitespace));

    let listed = engram(home.path(), &["--json", "token", "list"]);
    assert!(listed.status.success());
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&secret),
        "the list must never show a token"
    );
    let list = json_out(&listed);
    let token = &list[0];
    assert_eq!(token["name"], "laptop");
    assert_eq!(token["users"], serde_json::json!(["alice", "bob"]));
    let id = token["id"].as_str().unwrap().to_string();
    // Only the hash is kept: the token is in none of the database's files (WAL included).
    for entry in std::fs::read_dir(home.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the token as given",
                path.display()
            );
        }
    }

    let revoked = engram(home.path(), &["token", "revoke", &id]);
    assert!(revoked.status.success(), "{revoked:?}");
    let list = json_out(&engram(home.path(), &["--json", "token", "list"]));
    assert!(!list[0]["revoked_at"].is_null(), "{list}");
    let unknown = engram(home.path(), &["token", "revoke", "no-such-id"]);
    assert_eq!(unknown.status.code(), Some(3), "{unknown:?}");
    // A token needs a user.
    let userless = engram(home.path(), &["token", "create"]);
    assert_eq!(userless.status.code(), Some(2), "{userless:?}");
}
