//! Mem0's own clients, unchanged, against a real `engram serve`: the PyPI package `mem0ai`
//! (`MemoryClient(api_key=..., host=...)`) and the npm package `mem0ai` (its `MemoryClient`).
//! Each adds a conversation (infer true and false), searches with filters, gets, updates,
//! reads history, deletes, deletes all, and checks that another user's token sees nothing.
//! Extraction (`infer: true`) runs on the scripted model server.
//!
//! The clients come from scripts/setup-python-mem0.sh and scripts/setup-node-clients.sh, which
//! scripts/test.sh runs; the tests fail (never skip) without them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::json;
use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

fn mem0_python() -> PathBuf {
    match std::env::var_os("ENGRAM_TEST_MEM0_PYTHON") {
        Some(path) if Path::new(&path).exists() => PathBuf::from(path),
        _ => panic!(
            "ENGRAM_TEST_MEM0_PYTHON is not set to a python with mem0ai. Run the tests with \
             scripts/test.sh, or: export ENGRAM_TEST_MEM0_PYTHON=\"$(scripts/setup-python-mem0.sh)\""
        ),
    }
}

fn node_modules() -> PathBuf {
    match std::env::var_os("ENGRAM_TEST_NODE_MODULES") {
        Some(path) if Path::new(&path).join("mem0ai").is_dir() => PathBuf::from(path),
        _ => panic!(
            "ENGRAM_TEST_NODE_MODULES is not set to the node_modules holding mem0ai. Run the \
             tests with scripts/test.sh, or: export \
             ENGRAM_TEST_NODE_MODULES=\"$(scripts/setup-node-clients.sh)\""
        ),
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mem0")
        .join(name)
}

/// The two answers one extraction asks the model for: episodes, then facts and preferences.
fn one_extraction() -> Vec<Turn> {
    vec![
        Turn::text(
            json!({"episodes": [{"summary": "Started writing a Rust command-line tool for a running log",
                                 "category": "task_result", "importance": 3}]})
            .to_string(),
        ),
        Turn::text(
            json!({"facts": [{"key": "side_project_language", "value": "Rust"}], "preferences": []})
                .to_string(),
        ),
    ]
}

/// `engram serve` on a random port, extraction on the scripted model, two users with tokens.
struct Served {
    child: Child,
    url: String,
    token: String,
    other_token: String,
    _home: TempDir,
    model: ScriptedServer,
}

fn token(home: &Path, user: &str) -> String {
    let created = Command::new(ENGRAM)
        .arg("--home")
        .arg(home)
        .args(["token", "create", "--user", user])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string()
}

impl Served {
    fn start(user: &str) -> Self {
        let home = TempDir::new().unwrap();
        let token = token(home.path(), user);
        let other_token = token_for_other(home.path());
        let model = ScriptedServer::spawn(one_extraction()).unwrap();
        let mut child = Command::new(ENGRAM)
            .arg("--home")
            .arg(home.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("ENGRAM_LOG", "warn")
            .env("ENGRAM_PROVIDER", "openai")
            .env("ENGRAM_MODEL", SCRIPTED_MODEL)
            .env("OPENAI_API_KEY", SCRIPTED_KEY)
            .env("OPENAI_BASE_URL", model.base_url(Provider::OpenAi))
            .env_remove("ENGRAM_EMBED_MODEL")
            .env_remove("ENGRAM_USER")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("engram is listening on ") {
                    let url = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = sender.send(url);
                } else {
                    eprintln!("engram serve: {line}");
                }
            }
        });
        let url = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("engram serve did not say where it listens");
        Self {
            child,
            url,
            token,
            other_token,
            _home: home,
            model,
        }
    }
}

fn token_for_other(home: &Path) -> String {
    token(home, "mallory")
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn check_run(client: &str, output: Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the {client} client failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no summary line from the {client} client ({e}): {stdout}"))
}

#[test]
fn mem0s_python_client_works_unchanged_against_engram_serve() {
    let python = mem0_python();
    let served = Served::start("alice");
    let mem0_home = TempDir::new().unwrap();
    let output = Command::new(python)
        .arg(script("drive_python.py"))
        .args([&served.url, &served.token, &served.other_token, "alice"])
        // The client reports usage to its vendor unless told not to; no test reaches out.
        .env("MEM0_TELEMETRY", "false")
        .env("MEM0_DIR", mem0_home.path())
        .output()
        .unwrap();
    let summary = check_run("Python mem0ai", output);
    assert_eq!(summary["ok"], true, "{summary}");
    // The extraction went to the scripted model: both of its answers were used.
    assert_eq!(served.model.requests().len(), 2);
}

#[test]
fn mem0s_typescript_client_works_unchanged_against_engram_serve() {
    let modules = node_modules();
    let served = Served::start("carol");
    let mem0_home = TempDir::new().unwrap();
    let output = Command::new("node")
        .arg(script("drive_node.cjs"))
        .args([&served.url, &served.token, &served.other_token, "carol"])
        .env("NODE_PATH", &modules)
        .env("MEM0_TELEMETRY", "false")
        .env("MEM0_DIR", mem0_home.path())
        .output()
        .expect("node must be installed (scripts/setup-node-clients.sh needs it too)");
    let summary = check_run("TypeScript mem0ai", output);
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(served.model.requests().len(), 2);
}
