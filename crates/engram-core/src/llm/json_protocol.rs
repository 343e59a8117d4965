//! The JSON protocol for models without native tool calls.
//!
//! The model answers with one object, `{"thought": "...", "tool": "<name>", "params": {...}}`;
//! the tool `chat` means "reply to the user" with `params.response` as the reply. Answers wrapped
//! in code fences or prose are unwrapped, small JSON mistakes repaired, and anything that still is
//! not such an object is taken as a plain reply — a model that forgets the protocol still talks.

use serde_json::{Map, Value};

use super::lenient_json;
use crate::tool::ToolSpec;

/// The tool name that means "reply to the user".
pub const CHAT_TOOL: &str = "chat";

/// What the model decided, read from its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolReply {
    /// The model's stated reasoning, if it gave one.
    pub thought: Option<String>,
    /// What to do next.
    pub action: ProtocolAction,
}

/// The next step a protocol answer asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum ProtocolAction {
    /// Reply to the user with this text.
    Reply(String),
    /// Run a tool with these parameters (always a JSON object).
    Tool {
        /// The tool's name as written (it may name no existing tool).
        name: String,
        /// The parameters.
        params: Value,
    },
}

/// Keys a chat reply's text may come under, in order of preference.
const REPLY_KEYS: [&str; 6] = ["response", "message", "content", "text", "answer", "reply"];

/// Reads a model's answer under the JSON protocol. Never fails: output that holds no protocol
/// object is a plain reply with the whole (trimmed) text.
pub fn parse_reply(text: &str) -> ProtocolReply {
    let found = lenient_json::find_object(text, |map| {
        matches!(map.get("tool"), Some(Value::String(_)))
            || (map.contains_key("thought") && REPLY_KEYS.iter().any(|k| map.contains_key(*k)))
    });
    let Some(object) = found else {
        return plain_reply(text);
    };
    let thought = object
        .get("thought")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let tool = object
        .get("tool")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or(CHAT_TOOL);
    let params = object.get("params").cloned().unwrap_or(Value::Null);

    if tool.is_empty() || tool.eq_ignore_ascii_case(CHAT_TOOL) {
        let reply = reply_text(&params)
            .or_else(|| reply_text(&Value::Object(object.clone())))
            .or_else(|| thought.clone())
            .unwrap_or_else(|| text.trim().to_string());
        return ProtocolReply {
            thought,
            action: ProtocolAction::Reply(reply),
        };
    }
    let params = match params {
        Value::Object(_) => params,
        Value::Null => Value::Object(Map::new()),
        // Parameters written as a string of JSON.
        Value::String(s) => lenient_json::parse_arguments(&s)
            .unwrap_or_else(|_| Value::Object(Map::from_iter([("input".to_string(), s.into())]))),
        other => Value::Object(Map::from_iter([("input".to_string(), other)])),
    };
    ProtocolReply {
        thought,
        action: ProtocolAction::Tool {
            name: tool.to_string(),
            params,
        },
    }
}

fn plain_reply(text: &str) -> ProtocolReply {
    ProtocolReply {
        thought: None,
        action: ProtocolAction::Reply(lenient_json::strip_code_fence(text).to_string()),
    }
}

fn reply_text(params: &Value) -> Option<String> {
    match params {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Object(map) => REPLY_KEYS
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .map(str::to_string),
        _ => None,
    }
}

/// Renders a protocol answer back to the text a model would have written; used to put the
/// model's own turns into the history it sees next time.
pub fn render_reply(reply: &ProtocolReply) -> String {
    let mut object = Map::new();
    object.insert(
        "thought".into(),
        Value::String(reply.thought.clone().unwrap_or_default()),
    );
    match &reply.action {
        ProtocolAction::Reply(text) => {
            object.insert("tool".into(), CHAT_TOOL.into());
            object.insert(
                "params".into(),
                Value::Object(Map::from_iter([(
                    "response".to_string(),
                    text.clone().into(),
                )])),
            );
        }
        ProtocolAction::Tool { name, params } => {
            object.insert("tool".into(), name.clone().into());
            object.insert("params".into(), params.clone());
        }
    }
    Value::Object(object).to_string()
}

/// The system-prompt section that teaches a model the protocol and lists the tools.
pub fn instructions(tools: &[ToolSpec]) -> String {
    let mut text = String::from(
        "Answer with exactly one JSON object and nothing else (no prose, no code fence):\n\
         - to use a tool: {\"thought\": \"<why>\", \"tool\": \"<tool name>\", \"params\": {<arguments>}}\n\
         - to reply to the user: {\"thought\": \"<why>\", \"tool\": \"chat\", \"params\": {\"response\": \"<your reply>\"}}\n\
         Use one tool at a time; its result comes back in the next message.",
    );
    if tools.is_empty() {
        text.push_str("\nNo tools are available: always use \"chat\".");
        return text;
    }
    text.push_str("\n\nTools:");
    for tool in tools {
        text.push_str(&format!(
            "\n- {}: {}\n  params (JSON Schema): {}",
            tool.name,
            tool.description.trim(),
            tool.parameters
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn tool(name: &str, params: Value) -> ProtocolAction {
        ProtocolAction::Tool {
            name: name.into(),
            params,
        }
    }

    #[test]
    fn reads_tool_calls_and_replies() {
        let r = parse_reply(
            r#"{"thought": "need the file", "tool": "read_file", "params": {"path": "a.txt"}}"#,
        );
        assert_eq!(r.thought.as_deref(), Some("need the file"));
        assert_eq!(r.action, tool("read_file", json!({"path": "a.txt"})));

        let r = parse_reply(r#"{"thought": "", "tool": "chat", "params": {"response": "Hello!"}}"#);
        assert_eq!(r.thought, None);
        assert_eq!(r.action, ProtocolAction::Reply("Hello!".into()));
    }

    #[test]
    fn unwraps_fences_and_prose_and_repairs() {
        let r =
            parse_reply("```json\n{'thought': 'x', tool: 'list_dir', params: {path: '.',},}\n```");
        assert_eq!(r.action, tool("list_dir", json!({"path": "."})));
        let r = parse_reply(
            "Let me check.\n{\"thought\": \"look\", \"tool\": \"bash\", \"params\": {\"command\": \"ls\"}}\nThanks",
        );
        assert_eq!(r.action, tool("bash", json!({"command": "ls"})));
        let r = parse_reply(r#"{"thought": "t", "tool": "read_file", "params": {"path": "a""#);
        assert_eq!(
            r.action,
            tool("read_file", json!({"path": "a"})),
            "missing braces closed"
        );
    }

    #[test]
    fn unparseable_output_is_a_plain_reply() {
        let r = parse_reply("  Just a friendly answer, no JSON.  ");
        assert_eq!(
            r.action,
            ProtocolAction::Reply("Just a friendly answer, no JSON.".into())
        );
        let r = parse_reply("Use {curly} braces like {this}.");
        assert_eq!(
            r.action,
            ProtocolAction::Reply("Use {curly} braces like {this}.".into())
        );
        let r = parse_reply(r#"{"unrelated": 1}"#);
        assert_eq!(
            r.action,
            ProtocolAction::Reply(r#"{"unrelated": 1}"#.into())
        );
    }

    #[test]
    fn odd_params_become_objects() {
        let r = parse_reply(r#"{"tool": "bash", "params": "{\"command\": \"ls\"}"}"#);
        assert_eq!(r.action, tool("bash", json!({"command": "ls"})));
        let r = parse_reply(r#"{"tool": "recall_notes"}"#);
        assert_eq!(r.action, tool("recall_notes", json!({})));
        let r = parse_reply(r#"{"tool": "chat", "params": "hi there"}"#);
        assert_eq!(r.action, ProtocolAction::Reply("hi there".into()));
        let r = parse_reply(r#"{"thought": "greet", "response": "hey"}"#);
        assert_eq!(r.action, ProtocolAction::Reply("hey".into()));
    }

    #[test]
    fn instructions_list_tools_and_the_chat_form() {
        let text = instructions(&[ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]);
        assert!(text.contains(r#""tool": "chat", "params": {"response""#));
        assert!(text.contains("- read_file: Reads a file."));
        assert!(text.contains(r#"{"type":"object","properties":{"path":{"type":"string"}}}"#));
    }

    proptest! {
        #[test]
        fn never_panics(text in ".*") {
            let _ = parse_reply(&text);
        }

        #[test]
        fn rendered_replies_parse_back(
            thought in "[^\u{0}]{0,20}",
            name in "[a-z_]{1,12}",
            path in ".{0,20}",
            reply in ".{1,40}",
        ) {
            prop_assume!(name != CHAT_TOOL);
            let thought = Some(thought.trim().to_string()).filter(|t| !t.is_empty());
            let as_tool = ProtocolReply { thought: thought.clone(), action: tool(&name, json!({"path": path})) };
            prop_assert_eq!(parse_reply(&render_reply(&as_tool)), as_tool);
            let as_reply = ProtocolReply { thought, action: ProtocolAction::Reply(reply) };
            prop_assert_eq!(parse_reply(&render_reply(&as_reply)), as_reply);
        }
    }
}
