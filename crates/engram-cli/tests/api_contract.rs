//! The REST API's contract: schemathesis (PyPI), run as a child process against a real
//! `engram serve` on 127.0.0.1 with a token, generates requests from `/openapi.json` (valid
//! ones and deliberately broken ones) with a fixed seed and a bounded number of cases, and
//! checks every answer: no 5xx, every status, content type, header and body as the document
//! says, valid requests accepted and invalid ones refused.
//!
//! The store is seeded first (memories with scopes, categories, metadata and an expiry, and
//! one closed memory) so that listings, searches and exports return real memories whose shape
//! is checked too, and the `{id}` routes are pointed at a memory that exists.
//!
//! schemathesis comes from scripts/setup-python-schemathesis.sh, which scripts/test.sh runs;
//! the test fails (never skips) without it. tests/contract/ holds its hooks (JSON Lines for
//! import and export, and the rules between query parameters that OpenAPI cannot state) and
//! its settings file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

/// The seed and the cases per operation and phase: enough to reach every rule the document
/// states, few enough to finish in under two minutes on two cores. To explore further, set
/// ENGRAM_CONTRACT_SEED and ENGRAM_CONTRACT_CASES (CI keeps these).
const SEED: &str = "20261127";
const CASES_PER_OPERATION: &str = "50";

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn schemathesis_python() -> PathBuf {
    match std::env::var_os("ENGRAM_TEST_SCHEMATHESIS_PYTHON") {
        Some(path) if Path::new(&path).exists() => PathBuf::from(path),
        _ => panic!(
            "ENGRAM_TEST_SCHEMATHESIS_PYTHON is not set to a python with schemathesis. Run the \
             tests with scripts/test.sh, or: export \
             ENGRAM_TEST_SCHEMATHESIS_PYTHON=\"$(scripts/setup-python-schemathesis.sh)\""
        ),
    }
}

fn contract_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/contract")
        .join(name)
}

fn engram(home: &Path) -> Command {
    let mut command = Command::new(ENGRAM);
    command
        .arg("--home")
        .arg(home)
        .env("ENGRAM_LOG", "warn")
        .env_remove("ENGRAM_EMBED_MODEL")
        .env_remove("ENGRAM_USER")
        .env_remove("ENGRAM_PROVIDER")
        .env_remove("ENGRAM_MODEL");
    command
}

/// The id the settings point the `{id}` routes at (`[parameters] "path.id"`).
fn known_id(settings: &str) -> String {
    let settings: toml::Table = settings.parse().unwrap();
    settings["parameters"]["path.id"]
        .as_str()
        .expect("schemathesis.toml names a path.id")
        .to_string()
}

/// Memories of the token's user in several shapes (one of them with `known_id`), and one of
/// another user.
fn seed(home: &Path, known_id: &str) {
    let lines = [
        format!(
            r#"{{"id": "{known_id}", "user_id": "alice", "text": "Alice prefers green tea in the morning", "kind": "preference", "category": "food", "importance": 4, "metadata": {{"key": "drink", "source": "chat"}}}}"#
        ),
        r#"{"user_id": "alice", "agent_id": "planner", "session_id": "s1", "text": "Booked a flight to Lisbon for the conference", "kind": "episode", "category": "travel", "created_at": "2026-03-01T09:30:00Z"}"#.to_string(),
        r#"{"user_id": "alice", "session_id": "s1", "text": "The conference talk is about memory for agents", "kind": "note", "expires_at": "2099-01-01T00:00:00Z"}"#.to_string(),
        r#"{"user_id": "alice", "text": "Alice's favourite editor is Helix", "kind": "fact", "metadata": {"key": "editor", "n": 3, "ok": true}}"#.to_string(),
        r#"{"user_id": "alice", "text": "Alice's favourite editor was Vim", "kind": "fact", "metadata": {"key": "editor"}, "valid_to": "2026-01-01T00:00:00Z"}"#.to_string(),
        r#"{"user_id": "bob", "text": "Bob keeps bees on the roof", "kind": "fact"}"#.to_string(),
    ];
    let file = home.join("seed.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let imported = engram(home).arg("import").arg(&file).output().unwrap();
    assert!(imported.status.success(), "{imported:?}");
}

/// `engram serve` on a random port, with a token for alice.
struct Served {
    child: Child,
    url: String,
    token: String,
}

impl Served {
    fn start(home: &Path) -> Self {
        let created = engram(home)
            .args(["token", "create", "--user", "alice"])
            .output()
            .unwrap();
        assert!(created.status.success(), "{created:?}");
        let token = String::from_utf8(created.stdout)
            .unwrap()
            .trim()
            .to_string();
        let mut child = engram(home)
            .args(["serve", "--listen", "127.0.0.1:0"])
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
        Self { child, url, token }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_rest_api_keeps_its_openapi_contract_under_schemathesis() {
    let python = schemathesis_python();
    let home = TempDir::new().unwrap();
    let config = contract_file("schemathesis.toml");
    let settings = std::fs::read_to_string(&config).unwrap();
    seed(home.path(), &known_id(&settings));
    let served = Served::start(home.path());

    let reports = home.path().join("reports");
    let output = Command::new(python)
        .args(["-m", "schemathesis.cli", "--no-color", "--config-file"])
        .arg(&config)
        .arg("run")
        .arg(format!("{}/openapi.json", served.url))
        .args([
            "--header",
            &format!("Authorization: Bearer {}", served.token),
        ])
        .args(["--seed", &setting("ENGRAM_CONTRACT_SEED", SEED)])
        .args([
            "--max-examples",
            &setting("ENGRAM_CONTRACT_CASES", CASES_PER_OPERATION),
        ])
        .args(["--workers", "1", "--generation-database", "none"])
        .arg("--report-dir")
        .arg(&reports)
        .env("SCHEMATHESIS_HOOKS", contract_file("hooks.py"))
        // No examples saved between runs (--generation-database none): every run is the same.
        .env("HOME", home.path())
        .current_dir(home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "schemathesis found answers that break the contract ({}):\n{stdout}\n{stderr}",
        output.status
    );
    // It really ran: every operation of the document was tested, and cases were generated.
    assert!(
        tested_all(&stdout),
        "not every operation was tested:\n{stdout}"
    );
    let generated = generated_cases(&stdout);
    assert!(generated >= 1000, "only {generated} cases ran:\n{stdout}");
}

/// Whether the summary says every selected operation was tested ("Selected: N/N" and
/// "Tested: N").
fn tested_all(stdout: &str) -> bool {
    let selected = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Selected: "))
        .and_then(|s| s.split('/').next())
        .and_then(|n| n.trim().parse::<usize>().ok());
    let tested = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Tested: "))
        .and_then(|n| n.trim().parse::<usize>().ok());
    matches!((selected, tested), (Some(s), Some(t)) if s == t && t > 0)
}

/// The number in the summary's "N generated, N passed" line.
fn generated_cases(stdout: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.split_once(" generated").map(|(n, _)| n.trim())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
