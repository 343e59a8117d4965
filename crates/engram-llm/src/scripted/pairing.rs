//! The rule both real APIs enforce on a conversation: every tool call is answered by a tool
//! result right after it (before anything else is said), and no tool result answers a call that
//! was not made or was already answered.

use serde_json::Value;

/// Checks a request body's `messages` (Anthropic form when `anthropic`, else OpenAI form).
pub fn check_wire_pairing(anthropic: bool, body: &Value) -> Result<(), String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if anthropic {
        check_anthropic(messages)
    } else {
        check_openai(messages)
    }
}

fn check_openai(messages: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            let id = message
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            match open.iter().position(|o| o == id) {
                Some(p) => {
                    open.remove(p);
                }
                None => {
                    return Err(format!(
                        "messages[{i}] is a tool result for '{id}', which answers no open tool call"
                    ));
                }
            }
            continue;
        }
        if !open.is_empty() {
            return Err(format!(
                "messages[{i}] ({role}) comes before the results of tool calls {open:?}"
            ));
        }
        if role == "assistant"
            && let Some(calls) = message.get("tool_calls").and_then(Value::as_array)
        {
            open = calls
                .iter()
                .map(|c| {
                    c.get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                })
                .collect();
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("tool calls {open:?} have no result"))
    }
}

fn check_anthropic(messages: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let blocks = message
            .get("content")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let of_type = |t: &'static str| {
            blocks
                .iter()
                .filter(move |b| b.get("type").and_then(Value::as_str) == Some(t))
        };
        if role == "user" {
            for result in of_type("tool_result") {
                let id = result
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match open.iter().position(|o| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Err(format!(
                            "messages[{i}] has a tool_result for '{id}', which no tool_use in the previous message made"
                        ));
                    }
                }
            }
        }
        if !open.is_empty() {
            return Err(format!(
                "tool_use ids {open:?} have no tool_result in the message right after them (messages[{i}])"
            ));
        }
        if role == "assistant" {
            open = of_type("tool_use")
                .map(|b| {
                    b.get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                })
                .collect();
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("tool_use ids {open:?} have no tool_result"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_rules() {
        let ok = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "assistant", "content": "done"},
        ]});
        assert_eq!(check_wire_pairing(false, &ok), Ok(()));
        let orphan = json!({"messages": [{"role": "user", "content": "go"}, {"role": "tool", "tool_call_id": "x", "content": ""}]});
        assert!(
            check_wire_pairing(false, &orphan)
                .unwrap_err()
                .contains("'x'")
        );
        let unanswered = json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [{"id": "a"}]},
            {"role": "user", "content": "hm"},
        ]});
        assert!(check_wire_pairing(false, &unanswered).is_err());
        let trailing = json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]});
        assert!(check_wire_pairing(false, &trailing).is_err());
    }

    #[test]
    fn anthropic_rules() {
        let ok = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "A"}, {"type": "text", "text": "more"}]},
            {"role": "assistant", "content": "done"},
        ]});
        assert_eq!(check_wire_pairing(true, &ok), Ok(()));
        let late = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}]},
            {"role": "user", "content": "unrelated"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "A"}]},
        ]});
        assert!(check_wire_pairing(true, &late).is_err());
        let orphan = json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "z", "content": ""}]}]});
        assert!(
            check_wire_pairing(true, &orphan)
                .unwrap_err()
                .contains("'z'")
        );
    }
}
