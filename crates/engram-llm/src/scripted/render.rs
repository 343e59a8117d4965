//! Turning a scripted [`Turn`] into what a real server would send: status, headers and body,
//! or a stream of SSE frames, in the OpenAI or Anthropic wire format.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::turn::{DEFAULT_USAGE, ErrorKind, ScriptedError, Turn, split_chars};

/// The wire format of a request, told by its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireKind {
    OpenAi,
    Anthropic,
}

/// One piece of a response body.
#[derive(Debug, Clone)]
pub(crate) enum Frame {
    /// Bytes to send, and whether they carry content (text, reasoning, a tool call).
    Data(Bytes, bool),
    /// Break the connection here.
    Drop,
}

/// Everything about one response.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub frames: Vec<Frame>,
    pub chunk_delay: Duration,
}

const SIGNATURE: &str = "scripted-thinking-signature";

/// The response to a request of format `wire` with JSON `request`, the `number`th (from 1).
pub(crate) fn plan(turn: &Turn, wire: WireKind, request: &Value, number: usize) -> Plan {
    if let Some(error) = &turn.error {
        return error_plan(error, wire);
    }
    let stream =
        request.get("stream").and_then(Value::as_bool) == Some(true) && !turn.quirks.ignore_stream;
    let chunk_delay = Duration::from_millis(turn.chunk_delay_ms);
    if !stream {
        let frames = if turn.malformed {
            vec![Frame::Data(
                Bytes::from_static(b"{\"choices\": [{\"message\": <html>Bad Gateway</html>"),
                false,
            )]
        } else if turn.drop_after.is_some() {
            vec![Frame::Drop]
        } else {
            let body = match wire {
                WireKind::OpenAi => openai_whole(turn, request, number),
                WireKind::Anthropic => anthropic_whole(turn, request, number),
            };
            vec![Frame::Data(Bytes::from(body.to_string()), true)]
        };
        return Plan {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            frames,
            chunk_delay: Duration::ZERO,
        };
    }
    let mut frames: Vec<(Bytes, bool)> = if turn.malformed {
        vec![(Bytes::from_static(b"data: {this is not json\n\n"), true)]
    } else {
        match wire {
            WireKind::OpenAi => openai_stream(turn, request, number),
            WireKind::Anthropic => anthropic_stream(turn, request, number),
        }
    };
    let mut tail = Vec::new();
    if turn.drop_after.is_some() || turn.stream_error.is_some() {
        let keep = turn.drop_after.unwrap_or(0);
        let cut = frames
            .iter()
            .enumerate()
            .filter(|(_, (_, content))| *content)
            .nth(keep)
            .map_or(frames.len(), |(i, _)| i);
        // Without more content to cut before, cut before the closing frames.
        let cut = if cut == frames.len() {
            frames.iter().rposition(|(_, c)| *c).map_or(cut, |i| i + 1)
        } else {
            cut
        };
        frames.truncate(cut);
        match turn.stream_error {
            Some(kind) => tail.push(Frame::Data(stream_error_frame(kind, wire), false)),
            None => tail.push(Frame::Drop),
        }
    }
    let mut frames: Vec<Frame> = frames.into_iter().map(|(b, c)| Frame::Data(b, c)).collect();
    frames.extend(tail);
    Plan {
        status: 200,
        headers: vec![
            ("content-type", "text/event-stream".into()),
            ("cache-control", "no-cache".into()),
        ],
        frames,
        chunk_delay,
    }
}

fn model_of(request: &Value) -> Value {
    request.get("model").cloned().unwrap_or(json!("scripted"))
}

fn call_id(turn: &Turn, i: usize, number: usize, prefix: &str) -> String {
    turn.tool_calls[i]
        .id
        .clone()
        .unwrap_or_else(|| format!("{prefix}_{number}_{i}"))
}

/// Splits argument text into about three pieces, as servers stream it.
fn argument_pieces(text: &str) -> Vec<String> {
    let len = text.chars().count();
    if len < 3 {
        return vec![text.to_string()];
    }
    split_chars(text, len.div_ceil(3))
}

// ---- OpenAI ----

fn openai_finish(turn: &Turn) -> String {
    turn.finish_reason.clone().unwrap_or_else(|| {
        if turn.tool_calls.is_empty() {
            "stop".into()
        } else {
            "tool_calls".into()
        }
    })
}

fn openai_usage(turn: &Turn) -> Value {
    let u = turn.usage.unwrap_or(DEFAULT_USAGE);
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
    })
}

fn reasoning_key(turn: &Turn) -> &'static str {
    if turn.quirks.reasoning_field_named_reasoning {
        "reasoning"
    } else {
        "reasoning_content"
    }
}

fn openai_whole(turn: &Turn, request: &Value, number: usize) -> Value {
    let text = turn.full_text();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !turn.tool_calls.is_empty() { Value::Null } else { text.into() },
    });
    if let Some(reasoning) = &turn.reasoning {
        message[reasoning_key(turn)] = reasoning.clone().into();
    }
    if !turn.tool_calls.is_empty() {
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut call = json!({
                    "id": call_id(turn, i, number, "call"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.argument_text()},
                });
                if turn.quirks.omit_tool_call_ids
                    && let Some(o) = call.as_object_mut()
                {
                    o.remove("id");
                }
                call
            })
            .collect();
        message["tool_calls"] = calls.into();
    }
    json!({
        "id": format!("chatcmpl-scripted-{number}"),
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model_of(request),
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": openai_finish(turn)}],
        "usage": openai_usage(turn),
    })
}

fn openai_stream(turn: &Turn, request: &Value, number: usize) -> Vec<(Bytes, bool)> {
    let id = format!("chatcmpl-scripted-{number}");
    let model = model_of(request);
    let chunk = |choices: Value| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": choices,
        })
    };
    let delta = |delta: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}]));
    let frame = |value: Value, content: bool| (Bytes::from(format!("data: {value}\n\n")), content);

    let mut frames = vec![frame(
        delta(json!({"role": "assistant", "content": ""})),
        false,
    )];
    if let Some(reasoning) = &turn.reasoning {
        for piece in reasoning.split_inclusive(' ') {
            frames.push(frame(delta(json!({reasoning_key(turn): piece})), true));
        }
    }
    for piece in turn.text_deltas() {
        frames.push(frame(delta(json!({"content": piece})), true));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let text = call.argument_text();
        let (first, rest) = if turn.quirks.whole_arguments {
            (text, Vec::new())
        } else {
            (String::new(), argument_pieces(&text))
        };
        let mut start = json!({
            "index": i,
            "id": call_id(turn, i, number, "call"),
            "type": "function",
            "function": {"name": call.name, "arguments": first},
        });
        if turn.quirks.omit_tool_call_ids
            && let Some(o) = start.as_object_mut()
        {
            o.remove("id");
        }
        frames.push(frame(delta(json!({"tool_calls": [start]})), true));
        for piece in rest {
            frames.push(frame(
                delta(json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})),
                true,
            ));
        }
    }
    let mut finish =
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": openai_finish(turn)}]));
    if turn.quirks.usage_in_finish_chunk {
        finish["usage"] = openai_usage(turn);
    }
    frames.push(frame(finish, false));
    let wants_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    if wants_usage && !turn.quirks.usage_in_finish_chunk {
        let mut usage = chunk(json!([]));
        usage["usage"] = openai_usage(turn);
        frames.push(frame(usage, false));
    }
    if !turn.quirks.no_done {
        frames.push((Bytes::from_static(b"data: [DONE]\n\n"), false));
    }
    frames
}

// ---- Anthropic ----

fn anthropic_stop(turn: &Turn) -> String {
    turn.finish_reason.clone().unwrap_or_else(|| {
        if turn.tool_calls.is_empty() {
            "end_turn".into()
        } else {
            "tool_use".into()
        }
    })
}

fn anthropic_input(arguments: &str) -> Value {
    // The real API always sends an object; a scripted malformed call sends the text as is.
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

fn anthropic_whole(turn: &Turn, request: &Value, number: usize) -> Value {
    let mut content = Vec::new();
    if let Some(reasoning) = &turn.reasoning {
        content.push(json!({"type": "thinking", "thinking": reasoning, "signature": SIGNATURE}));
    }
    let text = turn.full_text();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        content.push(json!({
            "type": "tool_use",
            "id": call_id(turn, i, number, "toolu"),
            "name": call.name,
            "input": anthropic_input(&call.argument_text()),
        }));
    }
    let u = turn.usage.unwrap_or(DEFAULT_USAGE);
    json!({
        "id": format!("msg_scripted_{number}"),
        "type": "message",
        "role": "assistant",
        "model": model_of(request),
        "content": content,
        "stop_reason": anthropic_stop(turn),
        "stop_sequence": null,
        "usage": {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens},
    })
}

fn anthropic_stream(turn: &Turn, request: &Value, number: usize) -> Vec<(Bytes, bool)> {
    let frame = |value: Value, content: bool| {
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        (
            Bytes::from(format!("event: {kind}\ndata: {value}\n\n")),
            content,
        )
    };
    let u = turn.usage.unwrap_or(DEFAULT_USAGE);
    let mut frames = vec![frame(
        json!({"type": "message_start", "message": {
            "id": format!("msg_scripted_{number}"), "type": "message", "role": "assistant",
            "content": [], "model": model_of(request), "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": u.input_tokens, "output_tokens": 1},
        }}),
        false,
    )];
    frames.push(frame(json!({"type": "ping"}), false));
    let mut index = 0;
    if let Some(reasoning) = &turn.reasoning {
        frames.push(frame(
            json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            false,
        ));
        for piece in reasoning.split_inclusive(' ') {
            frames.push(frame(
                json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "thinking_delta", "thinking": piece}}),
                true,
            ));
        }
        frames.push(frame(
            json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
            false,
        ));
        frames.push(frame(
            json!({"type": "content_block_stop", "index": index}),
            false,
        ));
        index += 1;
    }
    let deltas = turn.text_deltas();
    if !deltas.is_empty() {
        frames.push(frame(
            json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}),
            false,
        ));
        for piece in deltas {
            frames.push(frame(
                json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}}),
                true,
            ));
        }
        frames.push(frame(
            json!({"type": "content_block_stop", "index": index}),
            false,
        ));
        index += 1;
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        frames.push(frame(
            json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": call_id(turn, i, number, "toolu"),
                              "name": call.name, "input": {}}}),
            true,
        ));
        for piece in argument_pieces(&call.argument_text()) {
            frames.push(frame(
                json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}}),
                true,
            ));
        }
        frames.push(frame(
            json!({"type": "content_block_stop", "index": index}),
            false,
        ));
        index += 1;
    }
    frames.push(frame(
        json!({"type": "message_delta", "delta": {"stop_reason": anthropic_stop(turn), "stop_sequence": null},
               "usage": {"output_tokens": u.output_tokens}}),
        false,
    ));
    frames.push(frame(json!({"type": "message_stop"}), false));
    frames
}

// ---- errors ----

fn default_status(kind: ErrorKind, wire: WireKind) -> u16 {
    match (kind, wire) {
        (ErrorKind::RateLimit, _) => 429,
        (ErrorKind::Auth, _) => 401,
        (ErrorKind::Permission, _) => 403,
        (ErrorKind::NotFound, _) => 404,
        (ErrorKind::ContextTooLong | ErrorKind::InvalidRequest, _) => 400,
        (ErrorKind::Quota, WireKind::OpenAi) => 429,
        (ErrorKind::Quota, WireKind::Anthropic) => 400,
        (ErrorKind::Server, _) => 500,
        (ErrorKind::Overloaded, WireKind::OpenAi) => 503,
        (ErrorKind::Overloaded, WireKind::Anthropic) => 529,
    }
}

/// The body the real API sends for an error of this kind.
pub(crate) fn error_body(kind: ErrorKind, wire: WireKind, message: Option<&str>) -> Value {
    let (openai_type, openai_code, anthropic_type, default_message) = match kind {
        ErrorKind::RateLimit => (
            "requests",
            json!("rate_limit_exceeded"),
            "rate_limit_error",
            "Rate limit reached for requests. Please try again in 1s.",
        ),
        ErrorKind::Auth => (
            "invalid_request_error",
            json!("invalid_api_key"),
            "authentication_error",
            "Incorrect API key provided. You can find your API key in your account settings.",
        ),
        ErrorKind::Permission => (
            "invalid_request_error",
            json!("model_not_allowed"),
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        ErrorKind::NotFound => (
            "invalid_request_error",
            json!("model_not_found"),
            "not_found_error",
            "The model does not exist or you do not have access to it.",
        ),
        ErrorKind::ContextTooLong => match wire {
            WireKind::OpenAi => (
                "invalid_request_error",
                json!("context_length_exceeded"),
                "",
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.",
            ),
            WireKind::Anthropic => (
                "",
                Value::Null,
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        },
        ErrorKind::Quota => match wire {
            WireKind::OpenAi => (
                "insufficient_quota",
                json!("insufficient_quota"),
                "",
                "You exceeded your current quota, please check your plan and billing details.",
            ),
            WireKind::Anthropic => (
                "",
                Value::Null,
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            ),
        },
        ErrorKind::InvalidRequest => (
            "invalid_request_error",
            Value::Null,
            "invalid_request_error",
            "Invalid request.",
        ),
        ErrorKind::Server => (
            "server_error",
            Value::Null,
            "api_error",
            "The server had an error while processing your request. Sorry about that!",
        ),
        ErrorKind::Overloaded => (
            "server_error",
            Value::Null,
            "overloaded_error",
            "Overloaded",
        ),
    };
    let message = message.unwrap_or(default_message);
    match wire {
        WireKind::OpenAi => json!({"error": {
            "message": message, "type": openai_type, "param": null, "code": openai_code,
        }}),
        WireKind::Anthropic => json!({"type": "error", "error": {
            "type": anthropic_type, "message": message,
        }}),
    }
}

fn error_plan(error: &ScriptedError, wire: WireKind) -> Plan {
    let kind = error.kind();
    let status = error.status.unwrap_or_else(|| default_status(kind, wire));
    let body = error
        .body
        .clone()
        .unwrap_or_else(|| error_body(kind, wire, error.message.as_deref()));
    let mut headers = vec![("content-type", "application/json".to_string())];
    if let Some(secs) = error.retry_after {
        headers.push(("retry-after", secs.to_string()));
    }
    Plan {
        status,
        headers,
        frames: vec![Frame::Data(Bytes::from(body.to_string()), false)],
        chunk_delay: Duration::ZERO,
    }
}

fn stream_error_frame(kind: ErrorKind, wire: WireKind) -> Bytes {
    let body = error_body(kind, wire, None);
    match wire {
        WireKind::OpenAi => Bytes::from(format!("data: {body}\n\n")),
        WireKind::Anthropic => Bytes::from(format!("event: error\ndata: {body}\n\n")),
    }
}
