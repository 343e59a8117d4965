#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `engram search --rerank` as a child process on a real store in a temporary home: the
//! language model (the scripted server) and the tiny cross-encoder fixture of engram-embed,
//! chosen by flag or by `[search]` in config.toml, and the errors when one is not set up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::{Value, json};
use tempfile::TempDir;

const TEXTS: [&str; 4] = [
    "the garden party is on saturday",
    "garden tools are in the shed",
    "we planted tomatoes in the garden",
    "the neighbours have a big garden",
];

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_engram"));
    cmd.arg("--home").arg(home);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_USER",
        "ENGRAM_EMBED_MODEL",
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

fn with_model(home: &Path, server: &ScriptedServer) -> Command {
    let mut cmd = engram(home);
    cmd.env("ENGRAM_PROVIDER", "openai")
        .env("ENGRAM_MODEL", SCRIPTED_MODEL)
        .env("OPENAI_API_KEY", SCRIPTED_KEY)
        .env("OPENAI_BASE_URL", server.base_url(Provider::OpenAi));
    cmd
}

fn ok(output: Output) -> (String, String) {
    assert!(
        output.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn home() -> TempDir {
    let home = TempDir::new().unwrap();
    let file = home.path().join("in.jsonl");
    let lines: Vec<String> = TEXTS
        .iter()
        .map(|t| json!({"user_id": "ana", "text": t}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    ok(engram(home.path())
        .arg("import")
        .arg(&file)
        .output()
        .unwrap());
    home
}

const SEARCH: [&str; 6] = ["search", "--user", "ana", "--json", "--explain", "garden"];

fn hits(stdout: &str) -> Vec<Value> {
    serde_json::from_str(stdout).unwrap()
}

fn texts(hits: &[Value]) -> Vec<String> {
    hits.iter()
        .map(|h| h["text"].as_str().unwrap().to_string())
        .collect()
}

fn cross_encoder_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engram-embed/tests/fixtures/tiny-cross-encoder")
        .canonicalize()
        .unwrap()
}

#[test]
fn rerank_llm_reorders_by_the_model_s_scores_and_explains_it() {
    let home = home();
    let (out, _) = ok(engram(home.path()).args(SEARCH).output().unwrap());
    let fused = texts(&hits(&out));
    assert_eq!(fused.len(), TEXTS.len());
    assert!(
        hits(&out)
            .iter()
            .all(|h| h["explain"].get("rerank").is_none())
    );

    let answer = json!({"scores": [
        {"id": 0, "score": 1}, {"id": 1, "score": 2}, {"id": 2, "score": 3}, {"id": 3, "score": 9}
    ]});
    let server = ScriptedServer::spawn(vec![Turn::text(answer.to_string())]).unwrap();
    let (out, _) = ok(with_model(home.path(), &server)
        .args(SEARCH)
        .args(["--rerank", "llm"])
        .output()
        .unwrap());
    let reranked = hits(&out);
    let reversed: Vec<String> = fused.iter().rev().cloned().collect();
    assert_eq!(texts(&reranked), reversed);
    assert_eq!(reranked[0]["explain"]["rerank"], 9.0);
    assert_eq!(reranked[0]["explain"]["fused_rank"], 4);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_garbage_answer_from_the_configured_reranker_keeps_the_fused_order_with_a_note() {
    let home = home();
    let (out, _) = ok(engram(home.path()).args(SEARCH).output().unwrap());
    let fused = texts(&hits(&out));
    std::fs::write(
        home.path().join("config.toml"),
        "[search]\nrerank = \"llm\"\n",
    )
    .unwrap();
    let server = ScriptedServer::spawn(vec![Turn::text("no idea, sorry")]).unwrap();
    let (out, err) = ok(with_model(home.path(), &server)
        .args(SEARCH)
        .output()
        .unwrap());
    assert_eq!(texts(&hits(&out)), fused);
    assert!(err.contains("fusion's order stands"), "{err}");
    // --rerank none overrides the configuration: no request is made.
    let (out, _) = ok(with_model(home.path(), &server)
        .args(SEARCH)
        .args(["--rerank", "none"])
        .output()
        .unwrap());
    assert_eq!(texts(&hits(&out)), fused);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn rerank_cross_encoder_runs_the_configured_folder() {
    let home = home();
    let config = format!(
        "[search]\nrerank_model = {:?}\nrerank_top = 3\n",
        cross_encoder_dir().display().to_string()
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let (out, _) = ok(engram(home.path())
        .args(SEARCH)
        .args(["--rerank", "cross-encoder"])
        .output()
        .unwrap());
    let reranked = hits(&out);
    assert_eq!(reranked.len(), TEXTS.len());
    // The first three were read and scored, best first; the fourth was not.
    let scores: Vec<f64> = reranked[..3]
        .iter()
        .map(|h| h["explain"]["rerank"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(reranked[3]["explain"].get("rerank").is_none());
}

#[test]
fn a_reranker_that_is_not_set_up_is_a_clear_error() {
    let home = home();
    let out = engram(home.path())
        .args(SEARCH)
        .args(["--rerank", "cross-encoder"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rerank_model"), "{err}");

    std::fs::write(
        home.path().join("config.toml"),
        "[search]\nrerank_model = \"/nonexistent/cross-encoder\"\n",
    )
    .unwrap();
    let out = engram(home.path())
        .args(SEARCH)
        .args(["--rerank", "cross-encoder"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/cross-encoder"), "{err}");

    let out = engram(home.path())
        .args(SEARCH)
        .args(["--rerank", "llm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[llm]"), "{err}");

    let out = engram(home.path())
        .args(SEARCH)
        .args(["--rerank", "sideways"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
