#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent's MCP client end to end: `engram run` (a real process, with the scripted model
//! server as the model) uses the tools of two MCP servers from config.toml — engram's own, once
//! as a child process over stdio (`engram mcp`) and once over streamable HTTP (`engram serve`,
//! with a bearer token from the environment) — while a third, broken server is left out with a
//! warning and the run goes on.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::json;
use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(ENGRAM);
    cmd.arg("--home").arg(home);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_USER",
        "ENGRAM_PROVIDER",
        "ENGRAM_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "NO_COLOR",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("ENGRAM_LOG", "warn");
    cmd
}

/// `engram serve` on a random port; killed when dropped.
struct Served(Child, String);

impl Served {
    fn start(home: &Path) -> Self {
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
                    let _ = sender.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        });
        let url = receiver.recv_timeout(Duration::from_secs(60)).unwrap();
        Self(child, url)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn engram_run_uses_mcp_tools_over_stdio_and_http_and_skips_a_dead_server() {
    let memory_home = TempDir::new().unwrap();
    let agent_home = TempDir::new().unwrap();
    std::fs::create_dir(agent_home.path().join("ws")).unwrap();
    let token = engram(memory_home.path())
        .args(["token", "create", "--user", "alice"])
        .output()
        .unwrap();
    assert!(token.status.success());
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();
    let served = Served::start(memory_home.path());

    let config = format!(
        r#"[llm]
retry_base_delay_ms = 10

[mcp.servers.local]
command = {engram}
args = ["--home", {home}, "mcp", "--user", "alice"]
env = {{ ENGRAM_LOG = "warn" }}

[mcp.servers.remote]
url = "{url}/mcp"
bearer_token_env = "ENGRAM_TEST_REMOTE_TOKEN"

[mcp.servers.broken]
command = "/nonexistent/engram-test-mcp-server"
connect_timeout_secs = 3
"#,
        engram = json!(ENGRAM),
        home = json!(memory_home.path()),
        url = served.1,
    );
    std::fs::write(agent_home.path().join("config.toml"), config).unwrap();

    let model = ScriptedServer::spawn(vec![
        Turn::tool_call(
            "mcp_local_memory_add",
            json!({"text": "Alice's cat is called Miso"}),
        ),
        Turn::tool_call("mcp_remote_memory_search", json!({"query": "cat"})),
        Turn::text("Alice's cat is called Miso."),
    ])
    .unwrap();
    let provider = Provider::OpenAi;
    let out = engram(agent_home.path())
        .env("ENGRAM_PROVIDER", provider.as_str())
        .env("ENGRAM_MODEL", SCRIPTED_MODEL)
        .env(provider.default_key_env(), SCRIPTED_KEY)
        .env(provider.base_url_env(), model.base_url(provider))
        .env("ENGRAM_TEST_REMOTE_TOKEN", &token)
        .args([
            "run",
            "-m",
            "What is my cat called? Remember it first.",
            "--workspace",
        ])
        .arg(agent_home.path().join("ws"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "Alice's cat is called Miso.");
    assert!(
        stderr.contains("warning: the MCP server 'broken' is unavailable"),
        "{stderr}"
    );

    let requests = model.requests();
    let offered = requests[0].tool_names();
    for name in [
        "mcp_local_memory_add",
        "mcp_remote_memory_search",
        "mcp_remote_search_nodes",
        "read_file",
    ] {
        assert!(
            offered.contains(&name.to_string()),
            "{name} not offered: {offered:?}"
        );
    }
    assert!(!offered.iter().any(|n| n.starts_with("mcp_broken_")));
    model.check_tool_pairing().unwrap();
    // The search over HTTP found what the stdio server stored: one database, two processes.
    let last = serde_json::to_string(requests[2].messages()).unwrap();
    assert!(last.contains("Miso") && last.contains("score"), "{last}");
    let listed = engram(memory_home.path())
        .args(["--json", "list", "--user", "alice"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains("Alice's cat is called Miso"));
}
