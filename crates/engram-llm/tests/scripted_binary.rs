//! The `engram-scripted-llm` binary as a child process, the way the CLI's tests use it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engram_core::llm::{ChatRequest, Message};
use engram_llm::scripted::RecordedRequest;
use engram_llm::{ClientConfig, Provider};

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path, script: &str) -> Server {
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, script).unwrap();
    let port_file = dir.join("port");
    let child = Command::new(env!("CARGO_BIN_EXE_engram-scripted-llm"))
        .arg("--script")
        .arg(&script_path)
        .arg("--port-file")
        .arg(&port_file)
        .arg("--record")
        .arg(dir.join("requests.jsonl"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Owned at once, so the child is killed even if the wait below fails.
    let mut server = Server { child, port: 0 };
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            server.port = text.trim().parse().unwrap();
            return server;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server never wrote its port"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn serves_a_json_script_to_both_wire_formats_and_records_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(
        dir.path(),
        r#"{"turns": [
            {"text": "from a file", "usage": {"input_tokens": 3, "output_tokens": 2}},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}, "id": "toolu_fixed"}]},
            {"error": {"kind": "rate_limit"}},
            {"text": "after the retry"}
        ]}"#,
    );
    let origin = format!("http://127.0.0.1:{}", server.port);

    let mut openai = ClientConfig::new(Provider::OpenAi, "m", format!("{origin}/v1"));
    openai.retry.base_delay = Duration::from_millis(5);
    let openai = engram_llm::build(openai).unwrap();
    let response = openai
        .chat_stream(&ChatRequest::new(vec![Message::user("hi")]), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(response.message.content, "from a file");
    assert_eq!(response.usage.total(), 5);

    let mut anthropic =
        ClientConfig::new(Provider::Anthropic, "c", origin.clone()).with_api_key("k");
    anthropic.retry.base_delay = Duration::from_millis(5);
    let anthropic = engram_llm::build(anthropic).unwrap();
    let request = ChatRequest::new(vec![Message::user("read it")]);
    let response = anthropic.chat(&request).await.unwrap();
    assert_eq!(response.message.tool_calls[0].id, "toolu_fixed");
    let response = anthropic.chat(&request).await.unwrap();
    assert_eq!(response.message.content, "after the retry");

    // The record file has one line per request, written as each arrived.
    let lines: Vec<RecordedRequest> = std::fs::read_to_string(dir.path().join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let paths: Vec<_> = lines.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/messages",
            "/v1/messages"
        ]
    );
    assert_eq!(lines[1].header("x-api-key"), Some("k"));

    // The same, with timings, over HTTP.
    let text = reqwest::get(format!("{origin}/_scripted/requests"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let all: Vec<RecordedRequest> = serde_json::from_str(&text).unwrap();
    assert_eq!(all.len(), 4);
    assert!(all[0].sent_unix_us.len() > 3, "stream chunks are timed");
    assert!(all[0].sent_unix_us[0] >= all[0].received_unix_us);
}

#[test]
fn a_bad_script_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"[{"txet": "typo"}]"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_engram-scripted-llm"))
        .arg("--script")
        .arg(&script)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not valid") && stderr.contains("txet"),
        "{stderr}"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_engram-scripted-llm"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--script is required"));
}
