//! engram's MCP server driven by the official MCP Python SDK, over stdio (`engram mcp` as the
//! SDK's child process) and over streamable HTTP (`engram serve` as a real process, with a
//! token). The SDK comes from scripts/setup-python-mcp.sh, which scripts/test.sh runs and whose
//! python it exports as ENGRAM_TEST_MCP_PYTHON.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

fn python() -> PathBuf {
    match std::env::var_os("ENGRAM_TEST_MCP_PYTHON") {
        Some(path) if Path::new(&path).exists() => PathBuf::from(path),
        _ => panic!(
            "ENGRAM_TEST_MCP_PYTHON is not set to a python with the MCP SDK. Run the tests with \
             scripts/test.sh, or: export ENGRAM_TEST_MCP_PYTHON=\"$(scripts/setup-python-mcp.sh)\""
        ),
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/drive_engram.py")
}

fn check_run(output: std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python MCP client failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("no summary line ({e}): {stdout}"))
}

fn assert_summary(summary: &serde_json::Value) {
    let tools = summary["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 16, "{summary}");
    assert_eq!(summary["graph"]["entities"][0]["name"], "Alice");
}

#[test]
fn the_python_sdk_drives_engram_mcp_over_stdio() {
    let home = TempDir::new().unwrap();
    let output = Command::new(python())
        .arg(script())
        .args(["stdio", ENGRAM])
        .arg(home.path())
        .arg("alice")
        .env("ENGRAM_LOG", "warn")
        .output()
        .unwrap();
    assert_summary(&check_run(output));
    // What the tools wrote is in the store the CLI reads.
    let listed = Command::new(ENGRAM)
        .arg("--home")
        .arg(home.path())
        .args(["--json", "list", "--user", "alice", "--limit", "100"])
        .output()
        .unwrap();
    let memories: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let texts: Vec<&str> = memories
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(texts.contains(&"Alice: plays the cello"), "{texts:?}");
    assert!(
        texts.contains(&"Alice went hiking in the Alps last summer"),
        "{texts:?}"
    );
}

/// `engram serve` on a random port, with the address read from its log.
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
                    let url = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = sender.send(url);
                }
            }
        });
        let url = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("engram serve did not say where it listens");
        Self { child, url }
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "engram serve did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

#[test]
fn the_python_sdk_drives_engram_serve_over_http_with_a_token() {
    let home = TempDir::new().unwrap();
    let created = Command::new(ENGRAM)
        .arg("--home")
        .arg(home.path())
        .args(["token", "create", "--user", "alice", "--name", "python"])
        .output()
        .unwrap();
    assert!(created.status.success());
    let token = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();

    let served = Served::start(home.path());
    let mcp_url = format!("{}/mcp", served.url);
    // Without the token the SDK cannot even connect.
    let refused = Command::new(python())
        .arg(script())
        .args(["http", &mcp_url, "engram_000000000000_wrong"])
        .output()
        .unwrap();
    assert!(!refused.status.success());

    let output = Command::new(python())
        .arg(script())
        .args(["http", &mcp_url, &token])
        .output()
        .unwrap();
    let summary = check_run(output);
    assert_summary(&summary);
    let status = served.stop();
    assert!(
        status.success(),
        "engram serve exited with {status} after SIGTERM"
    );
}
