#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The registry as the agent loop sees it: exported tool lists (snapshots: the descriptions are
//! part of the product) and every kind of bad call answered as text.

mod common;

use async_trait::async_trait;
use common::{Fixture, content_of, error_of};
use engram_agent::tools::ToolRegistry;
use engram_core::{Tool, ToolOutput};
use serde_json::{Value, json};

#[test]
fn the_builtin_tools_in_openai_format() {
    let f = Fixture::new();
    insta::assert_json_snapshot!("openai_tools", f.registry.openai_tools());
}

#[test]
fn the_builtin_tools_in_anthropic_format() {
    let f = Fixture::new();
    insta::assert_json_snapshot!("anthropic_tools", f.registry.anthropic_tools());
}

#[test]
fn both_exports_carry_the_same_tools_in_the_same_order() {
    let f = Fixture::new();
    let names = f.registry.names();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "bash",
            "bash_output",
            "bash_kill",
            "record_note",
            "recall_notes"
        ]
    );
    let openai = f.registry.openai_tools();
    let anthropic = f.registry.anthropic_tools();
    for ((name, o), a) in names.iter().zip(&openai).zip(&anthropic) {
        assert_eq!(o["type"], "function");
        assert_eq!(o["function"]["name"], *name);
        assert_eq!(a["name"], *name);
        assert_eq!(o["function"]["parameters"], a["input_schema"]);
        assert_eq!(o["function"]["description"], a["description"]);
        assert_eq!(a.as_object().unwrap().len(), 3);
    }
}

#[tokio::test]
async fn an_unknown_tool_lists_the_available_ones() {
    let f = Fixture::new();
    let out = f.call("read_files", json!({"path": "x"})).await;
    assert_eq!(
        error_of(&out),
        "unknown tool 'read_files'. Available tools: read_file, write_file, edit_file, list_dir, \
         bash, bash_output, bash_kill, record_note, recall_notes."
    );
}

#[tokio::test]
async fn argument_errors_come_back_as_text_with_the_expected_parameters() {
    let f = Fixture::new();
    let cases = [
        (
            "read_file",
            json!({}),
            "invalid arguments for tool 'read_file': missing required field 'path'. Expected \
             parameters: path (string, required), offset (integer), limit (integer). Fix the \
             arguments and call the tool again.",
        ),
        (
            "read_file",
            json!({"path": "a", "offset": "10"}),
            "invalid arguments for tool 'read_file': field 'offset' must be an integer, got a \
             string (\"10\"). Expected parameters: path (string, required), offset (integer), \
             limit (integer). Fix the arguments and call the tool again.",
        ),
        (
            "read_file",
            json!({"path": "a", "line": 3}),
            "invalid arguments for tool 'read_file': field 'line' is not a known field (allowed \
             fields: path, offset, limit). Expected parameters: path (string, required), offset \
             (integer), limit (integer). Fix the arguments and call the tool again.",
        ),
        (
            "edit_file",
            json!({"path": 1, "old_text": "a"}),
            "invalid arguments for tool 'edit_file': missing required field 'new_text'; field \
             'path' must be a string, got an integer (1). Expected parameters: path (string, \
             required), old_text (string, required), new_text (string, required), replace_all \
             (boolean). Fix the arguments and call the tool again.",
        ),
        (
            "bash",
            json!({"command": "ls", "run_in_background": "yes"}),
            "invalid arguments for tool 'bash': field 'run_in_background' must be a boolean, got \
             a string (\"yes\"). Expected parameters: command (string, required), timeout \
             (integer), run_in_background (boolean). Fix the arguments and call the tool again.",
        ),
    ];
    for (tool, args, expected) in cases {
        let out = f.call(tool, args).await;
        assert_eq!(error_of(&out), expected);
    }
}

#[tokio::test]
async fn arguments_sent_as_a_json_string_are_accepted() {
    let f = Fixture::new();
    f.write("a.txt", "hello\n");
    let out = f.call("read_file", json!("{\"path\": \"a.txt\"}")).await;
    assert_eq!(content_of(&out), "     1→hello\n");
    let out = f.call("list_dir", Value::Null).await;
    assert!(content_of(&out).contains("a.txt"));
    let out = f.call("read_file", json!("{\"path\": ")).await;
    assert!(error_of(&out).starts_with(
        "arguments for tool 'read_file' must be a JSON object; the string given is not valid JSON"
    ));
    let out = f.call("read_file", json!(["a.txt"])).await;
    assert_eq!(
        error_of(&out),
        "arguments for tool 'read_file' must be a JSON object, got an array of 1 items"
    );
}

struct Panicky;

#[async_trait]
impl Tool for Panicky {
    fn name(&self) -> &str {
        "panicky"
    }
    fn description(&self) -> &str {
        "Always panics."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn execute(&self, _args: Value) -> ToolOutput {
        panic!("boom");
    }
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_output() {
    let mut registry = ToolRegistry::new();
    registry.register(Panicky).unwrap();
    let out = registry.call("panicky", json!({})).await;
    assert_eq!(
        error_of(&out),
        "tool 'panicky' failed unexpectedly (it panicked: boom); this is a bug in the tool, not in your arguments"
    );
    // The registry still works afterwards.
    let out = registry.call("panicky", json!({})).await;
    assert!(!out.success);
}

#[tokio::test]
async fn registering_a_builtin_name_twice_is_an_error() {
    let mut f = Fixture::new();
    let spare = Fixture::new();
    let read = spare.registry.get("read_file").unwrap().clone();
    let err = f.registry.register_arc(read).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a tool named 'read_file' is already registered"
    );
}

#[tokio::test]
async fn tool_calls_from_a_model_are_parsed_leniently() {
    use engram_core::llm::ToolCall;
    let f = Fixture::new();
    f.write("a.txt", "hello\n");
    // A trailing comma and single quotes are repaired.
    let call = ToolCall::new("c1", "read_file", "{'path': 'a.txt',}");
    assert_eq!(
        content_of(&f.registry.call_tool(&call).await),
        "     1→hello\n"
    );
    let call = ToolCall::new("c2", "list_dir", "");
    assert!(content_of(&f.registry.call_tool(&call).await).contains("a.txt"));
    let call = ToolCall::new("c3", "read_file", "path is a.txt");
    let out = f.registry.call_tool(&call).await;
    assert!(
        error_of(&out).starts_with("arguments for tool 'read_file' are not a JSON object ("),
        "{out:?}"
    );
    let call = ToolCall::new("c4", "nope", "{}");
    assert!(error_of(&f.registry.call_tool(&call).await).starts_with("unknown tool 'nope'."));
}
