//! `engram mcp` started with no arguments by the official MCP TypeScript SDK, side by side with
//! the reference MCP memory server (`@modelcontextprotocol/server-memory`): the same tools,
//! titles, annotations, output schemas, resource and answers. The SDK and the reference server
//! come from scripts/setup-node-clients.sh, which scripts/test.sh runs and whose node_modules it
//! exports as ENGRAM_TEST_NODE_MODULES.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

/// The node_modules holding the clients; the test fails (never skips) without them.
fn node_modules() -> PathBuf {
    match std::env::var_os("ENGRAM_TEST_NODE_MODULES") {
        Some(path) if Path::new(&path).join("@modelcontextprotocol/sdk").is_dir() => {
            PathBuf::from(path)
        }
        _ => panic!(
            "ENGRAM_TEST_NODE_MODULES is not set to the node_modules of the MCP TypeScript SDK. \
             Run the tests with scripts/test.sh, or: export \
             ENGRAM_TEST_NODE_MODULES=\"$(scripts/setup-node-clients.sh)\""
        ),
    }
}

#[test]
fn the_typescript_sdk_finds_in_engram_mcp_what_the_reference_server_offers() {
    let modules = node_modules();
    let home = TempDir::new().unwrap();
    let reference = TempDir::new().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/compare_reference.cjs");
    let output = Command::new("node")
        .arg(&script)
        .arg(ENGRAM)
        .arg(home.path())
        .arg("alice")
        .arg(reference.path())
        .env("NODE_PATH", &modules)
        .output()
        .expect("node must be installed (scripts/setup-node-clients.sh needs it too)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the TypeScript MCP client failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no summary line ({e}): {stdout}"));
    assert_eq!(summary["tools"].as_array().unwrap().len(), 16, "{summary}");
    assert_eq!(summary["updates"], 8, "{summary}");
    // The reference matches a query as one substring: the question finds nothing there.
    assert_eq!(summary["reference_search_hits"], 0, "{summary}");

    // `engram mcp` with no arguments acted for the login name, in the home it was given.
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
}
