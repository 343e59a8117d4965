#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `engram memory cleanup` and `engram memory compact` as child processes, on a real store in a
//! temporary home, compact against the scripted model server.

use std::path::Path;
use std::process::{Command, Output};

use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::{Value, json};
use tempfile::TempDir;

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_engram"));
    cmd.arg("--home").arg(home);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_USER",
        "ENGRAM_PROVIDER",
        "ENGRAM_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn import(home: &Path, lines: &[Value]) {
    let file = home.join("in.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&file, text.join("\n")).unwrap();
    ok(engram(home).arg("import").arg(&file).output().unwrap());
}

fn texts(home: &Path, all: bool) -> Vec<String> {
    let mut cmd = engram(home);
    cmd.args(["list", "--user", "ana", "--limit", "100", "--json"]);
    if all {
        cmd.arg("--all");
    }
    let out = ok(cmd.output().unwrap());
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    let mut texts: Vec<String> = list
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    texts.sort();
    texts
}

#[test]
fn cleanup_invalidates_old_unimportant_episodes_and_expired_memories_and_dry_run_changes_nothing() {
    let home = TempDir::new().unwrap();
    let long_ago = "2020-01-01T10:00:00Z";
    import(
        home.path(),
        &[
            json!({"user_id": "ana", "text": "asked about lunch", "kind": "episode", "importance": 1, "created_at": long_ago}),
            json!({"user_id": "ana", "text": "shipped the billing service", "kind": "episode", "importance": 4, "created_at": long_ago}),
            json!({"user_id": "ana", "text": "fixed a typo today", "kind": "episode", "importance": 1}),
            json!({"user_id": "ana", "text": "on call this week", "kind": "fact", "expires_at": "2021-01-01T00:00:00Z", "created_at": long_ago}),
            json!({"user_id": "bob", "text": "bob's old chat", "kind": "episode", "importance": 1, "created_at": long_ago}),
        ],
    );
    let before = texts(home.path(), true);

    let out = ok(engram(home.path())
        .args(["memory", "cleanup", "--user", "ana", "--dry-run", "--json"])
        .output()
        .unwrap());
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["invalidated"], 0);
    let picked: Vec<(&str, &str)> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["memory"]["text"].as_str().unwrap(),
                i["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(picked.len(), 2, "{picked:?}");
    assert!(picked.contains(&("asked about lunch", "old_and_unimportant")));
    assert!(picked.contains(&("on call this week", "expired")));
    assert_eq!(texts(home.path(), true), before);

    let out = ok(engram(home.path())
        .args(["memory", "cleanup", "--user", "ana"])
        .output()
        .unwrap());
    assert!(out.contains("Invalidated 2 memories of ana"), "{out}");
    assert_eq!(
        texts(home.path(), false),
        vec!["fixed a typo today", "shipped the billing service"]
    );
    // Kept in history, not deleted.
    assert_eq!(texts(home.path(), true), before);

    // A shorter age and a higher threshold reach further.
    let out = ok(engram(home.path())
        .args([
            "memory",
            "cleanup",
            "--user",
            "ana",
            "--older-than",
            "0s",
            "--below-importance",
            "2",
            "--dry-run",
        ])
        .output()
        .unwrap());
    assert!(
        out.contains("fixed a typo today") && out.contains("Would invalidate 1"),
        "{out}"
    );

    let bad = engram(home.path())
        .args(["memory", "cleanup", "--user", "ana", "--older-than", "soon"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn compact_condenses_the_profile_through_the_model_and_keeps_the_old_entries_in_history() {
    let home = TempDir::new().unwrap();
    let facts = [
        ("programming_language", "Python 3.12"),
        ("web_framework", "FastAPI"),
        ("test_framework", "pytest"),
        ("database", "PostgreSQL 16"),
        ("role", "backend developer"),
    ];
    let lines: Vec<Value> = facts
        .iter()
        .map(|(k, v)| json!({"user_id": "ana", "text": format!("{k}: {v}"), "kind": "fact", "metadata": {"key": k}}))
        .collect();
    import(home.path(), &lines);

    let server = ScriptedServer::spawn(vec![Turn::text(
        json!({"facts": [
            {"key": "stack", "value": "Python 3.12, FastAPI, pytest, PostgreSQL 16"},
            {"key": "role", "value": "backend developer"}],
          "preferences": []})
        .to_string(),
    )])
    .unwrap();
    let out = ok(engram(home.path())
        .args(["memory", "compact", "--user", "ana", "--json"])
        .env("ENGRAM_PROVIDER", "openai")
        .env("ENGRAM_MODEL", SCRIPTED_MODEL)
        .env("OPENAI_API_KEY", SCRIPTED_KEY)
        .env("OPENAI_BASE_URL", server.base_url(Provider::OpenAi))
        .output()
        .unwrap());
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["before"].as_u64(), report["after"].as_u64()),
        (Some(5), Some(2)),
        "{report}"
    );
    assert_eq!(report["invalidated"], 4);
    assert_eq!(
        texts(home.path(), false),
        vec![
            "role: backend developer",
            "stack: Python 3.12, FastAPI, pytest, PostgreSQL 16"
        ]
    );
    assert_eq!(texts(home.path(), true).len(), 6);
    let prompt = server.requests()[0].body.to_string();
    assert!(prompt.contains("database: PostgreSQL 16"));

    // Without a model it says what to set.
    let out = engram(home.path())
        .args(["memory", "compact", "--user", "ana"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
