//! What the scripted server answers: one [`Turn`] per request, in order.
//!
//! A turn is plain data (serde), so the same script can be written in Rust with the builder
//! methods or in a JSON file for the `engram-scripted-llm` binary.

use std::time::Duration;

use engram_core::llm::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The usage reported when a turn sets none.
pub const DEFAULT_USAGE: Usage = Usage {
    input_tokens: 10,
    output_tokens: 5,
};

/// One scripted answer. Built with the constructors and modifiers below, or read from JSON:
///
/// ```json
/// [
///   {"text": "Hello!", "reasoning": "The user greets me.", "chunk_chars": 2},
///   {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}},
///                   {"name": "list_dir", "raw_arguments": "{'path': '.'"}]},
///   {"error": {"kind": "rate_limit", "retry_after": 1}},
///   {"error": {"status": 500}},
///   {"text": "cut short", "drop_after": 1},
///   {"stream_deltas": 1000},
///   {"text": "slow", "delay_ms": 200, "chunk_delay_ms": 50}
/// ]
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Turn {
    /// The answer text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The stream deltas the text is sent in (their concatenation is the text); overrides
    /// `text` and `chunk_chars`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<String>>,
    /// Split the text into deltas of this many characters (default: one word per delta).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_chars: Option<usize>,
    /// Stream this many numbered deltas (`"t0 "`, `"t1 "`, ...) as the text, with no delay
    /// unless `chunk_delay_ms` says otherwise: a benchmark load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_deltas: Option<usize>,
    /// Reasoning sent before the text (`reasoning_content` / a thinking block).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls, after the text; several are parallel calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptedCall>,
    /// Token counts reported (default 10 in, 5 out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The wire's finish reason, verbatim (default: `stop`/`end_turn`, or `tool_calls`/`tool_use`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Answer with an HTTP error instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptedError>,
    /// Break the connection after this many content deltas (0: right after the headers). On a
    /// request without streaming, the body is cut off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_after: Option<usize>,
    /// Send this error inside the stream (after `drop_after` deltas, or first) and end it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_error: Option<ErrorKind>,
    /// Send a body (or stream chunk) that is not JSON.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub malformed: bool,
    /// Wait this long before answering (before the response headers).
    #[serde(skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Wait this long before each stream chunk.
    #[serde(skip_serializing_if = "is_zero")]
    pub chunk_delay_ms: u64,
    /// Imitate other servers' habits.
    #[serde(skip_serializing_if = "Quirks::is_none")]
    pub quirks: Quirks,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Habits of OpenAI-compatible servers other than OpenAI's, to exercise the client's tolerance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quirks {
    /// Tool calls come without ids.
    pub omit_tool_call_ids: bool,
    /// Tool-call arguments arrive in one piece with the name.
    pub whole_arguments: bool,
    /// The stream ends without `data: [DONE]`.
    pub no_done: bool,
    /// Usage rides on the chunk with the finish reason (instead of a separate chunk with empty
    /// `choices`), whether or not the request asked for it.
    pub usage_in_finish_chunk: bool,
    /// Reasoning is sent as `reasoning` (vLLM, Ollama) instead of `reasoning_content`.
    pub reasoning_field_named_reasoning: bool,
    /// The server ignores `stream: true` and answers with one JSON body.
    pub ignore_stream: bool,
}

impl Quirks {
    fn is_none(&self) -> bool {
        self == &Quirks::default()
    }
}

/// One scripted tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The arguments as raw text (possibly malformed); overrides `arguments`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
    /// The call id (default: generated, `call_<request>_<n>` / `toolu_<request>_<n>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl ScriptedCall {
    /// A call with JSON arguments.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            name: name.into(),
            arguments: Some(arguments),
            ..Self::default()
        }
    }

    /// A call whose arguments are this raw text (e.g. malformed JSON).
    pub fn raw(name: impl Into<String>, raw_arguments: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            raw_arguments: Some(raw_arguments.into()),
            ..Self::default()
        }
    }

    /// Uses this id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The argument text as sent on the OpenAI wire.
    pub(crate) fn argument_text(&self) -> String {
        match (&self.raw_arguments, &self.arguments) {
            (Some(raw), _) => raw.clone(),
            (None, Some(value)) => value.to_string(),
            (None, None) => "{}".to_string(),
        }
    }
}

/// Kinds of error a real API sends, each with the status and body that API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 429, too many requests.
    RateLimit,
    /// 401, bad API key.
    Auth,
    /// 403, the key may not use this model.
    Permission,
    /// 404, unknown model.
    NotFound,
    /// 400, the conversation does not fit the context window.
    ContextTooLong,
    /// 429, no quota left (OpenAI) / 400 low credit (Anthropic).
    Quota,
    /// 400, some other invalid request.
    InvalidRequest,
    /// 500, internal error.
    Server,
    /// 529 (Anthropic) / 503 (OpenAI), overloaded.
    Overloaded,
}

impl ErrorKind {
    /// The kind a bare status stands for.
    pub fn for_status(status: u16) -> ErrorKind {
        match status {
            401 => ErrorKind::Auth,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            429 => ErrorKind::RateLimit,
            503 | 529 => ErrorKind::Overloaded,
            500..=599 => ErrorKind::Server,
            _ => ErrorKind::InvalidRequest,
        }
    }
}

/// A scripted HTTP error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptedError {
    /// The status (default: the kind's usual one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What sort of error (default: the status's usual kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ErrorKind>,
    /// The message in the body (default: the real API's wording).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The whole body, verbatim (overrides kind and message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A `retry-after` header, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl ScriptedError {
    /// The kind, from the field or the status.
    pub fn kind(&self) -> ErrorKind {
        self.kind
            .or_else(|| self.status.map(ErrorKind::for_status))
            .unwrap_or(ErrorKind::Server)
    }
}

impl Turn {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A text answer streamed in exactly these deltas.
    pub fn chunks<S: Into<String>>(chunks: impl IntoIterator<Item = S>) -> Self {
        Self {
            chunks: Some(chunks.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// `n` numbered text deltas sent back to back (a benchmark load).
    pub fn stream_deltas(n: usize) -> Self {
        Self {
            stream_deltas: Some(n),
            ..Self::default()
        }
    }

    /// One tool call.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls([ScriptedCall::new(name, arguments)])
    }

    /// Several tool calls at once (parallel calls).
    pub fn tool_calls(calls: impl IntoIterator<Item = ScriptedCall>) -> Self {
        Self {
            tool_calls: calls.into_iter().collect(),
            ..Self::default()
        }
    }

    /// An HTTP error with this status, its body as the real API would send it.
    pub fn status(status: u16) -> Self {
        Self {
            error: Some(ScriptedError {
                status: Some(status),
                ..ScriptedError::default()
            }),
            ..Self::default()
        }
    }

    /// An HTTP error of this kind, with the real API's status and body.
    pub fn error(kind: ErrorKind) -> Self {
        Self {
            error: Some(ScriptedError {
                kind: Some(kind),
                ..ScriptedError::default()
            }),
            ..Self::default()
        }
    }

    /// 429 Too Many Requests.
    pub fn rate_limited() -> Self {
        Self::error(ErrorKind::RateLimit)
    }

    /// 401, the key is wrong.
    pub fn unauthorized() -> Self {
        Self::error(ErrorKind::Auth)
    }

    /// 400, the context window is full.
    pub fn context_too_long() -> Self {
        Self::error(ErrorKind::ContextTooLong)
    }

    /// 500, internal server error.
    pub fn server_error() -> Self {
        Self::error(ErrorKind::Server)
    }

    /// A 200 answer whose body (or first stream chunk) is not JSON.
    pub fn malformed() -> Self {
        Self {
            malformed: true,
            ..Self::default()
        }
    }

    /// Adds text before the tool calls.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Adds reasoning before the text.
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Adds a tool call.
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push(ScriptedCall::new(name, arguments));
        self
    }

    /// Adds a tool call with raw (possibly malformed) argument text.
    pub fn with_raw_tool_call(
        mut self,
        name: impl Into<String>,
        raw_arguments: impl Into<String>,
    ) -> Self {
        self.tool_calls.push(ScriptedCall::raw(name, raw_arguments));
        self
    }

    /// Streams the text in deltas of `n` characters.
    pub fn chunk_chars(mut self, n: usize) -> Self {
        self.chunk_chars = Some(n.max(1));
        self
    }

    /// Reports these token counts.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some(Usage {
            input_tokens,
            output_tokens,
        });
        self
    }

    /// Sends this finish reason, verbatim.
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Adds a `retry-after` header (seconds) to the error.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.error
            .get_or_insert_with(ScriptedError::default)
            .retry_after = Some(seconds);
        self
    }

    /// Replaces the error body with this one, verbatim.
    pub fn error_body(mut self, body: Value) -> Self {
        self.error.get_or_insert_with(ScriptedError::default).body = Some(body);
        self
    }

    /// Breaks the connection after `n` content deltas.
    pub fn drop_after(mut self, n: usize) -> Self {
        self.drop_after = Some(n);
        self
    }

    /// Sends an error of this kind inside the stream (after `drop_after` deltas, or first).
    pub fn stream_error(mut self, kind: ErrorKind) -> Self {
        self.stream_error = Some(kind);
        self
    }

    /// Waits before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Waits before each stream chunk.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Imitates other servers' habits.
    pub fn quirks(mut self, quirks: Quirks) -> Self {
        self.quirks = quirks;
        self
    }

    /// The text deltas this turn streams.
    pub(crate) fn text_deltas(&self) -> Vec<String> {
        if let Some(chunks) = &self.chunks {
            return chunks.clone();
        }
        if let Some(n) = self.stream_deltas {
            return (0..n).map(|i| format!("t{i} ")).collect();
        }
        let Some(text) = self.text.as_deref().filter(|t| !t.is_empty()) else {
            return Vec::new();
        };
        match self.chunk_chars {
            Some(n) => split_chars(text, n),
            None => text.split_inclusive(' ').map(str::to_string).collect(),
        }
    }

    /// The whole answer text.
    pub(crate) fn full_text(&self) -> String {
        self.text_deltas().concat()
    }
}

/// Splits text into pieces of `n` characters (the last may be shorter).
pub(crate) fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// Reads a script file's text: a JSON array of turns, or `{"turns": [...]}`.
pub fn parse_script(text: &str) -> Result<Vec<Turn>, serde_json::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Script {
        turns: Vec<Turn>,
    }
    if text.trim_start().starts_with('{') {
        serde_json::from_str::<Script>(text).map(|s| s.turns)
    } else {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builders_and_json_describe_the_same_turns() {
        let built = vec![
            Turn::text("Hello there")
                .with_reasoning("greet")
                .chunk_chars(2),
            Turn::tool_calls([
                ScriptedCall::new("read_file", json!({"path": "a.txt"})),
                ScriptedCall::raw("list_dir", "{'path': '.'"),
            ]),
            Turn::rate_limited().retry_after(1),
            Turn::status(500),
            Turn::text("cut short").drop_after(1),
            Turn::stream_deltas(3),
            Turn::text("slow")
                .delay(Duration::from_millis(200))
                .chunk_delay(Duration::from_millis(50)),
        ];
        let file = r#"[
            {"text": "Hello there", "reasoning": "greet", "chunk_chars": 2},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}},
                            {"name": "list_dir", "raw_arguments": "{'path': '.'"}]},
            {"error": {"kind": "rate_limit", "retry_after": 1}},
            {"error": {"status": 500}},
            {"text": "cut short", "drop_after": 1},
            {"stream_deltas": 3},
            {"text": "slow", "delay_ms": 200, "chunk_delay_ms": 50}
        ]"#;
        assert_eq!(parse_script(file).unwrap(), built);
        let wrapped = format!("{{\"turns\": {file}}}");
        assert_eq!(parse_script(&wrapped).unwrap(), built);
        let round = serde_json::to_string(&built).unwrap();
        assert_eq!(parse_script(&round).unwrap(), built);
    }

    #[test]
    fn script_mistakes_are_reported() {
        let err = parse_script(r#"[{"txt": "typo"}]"#).unwrap_err();
        assert!(err.to_string().contains("txt"), "{err}");
        let err = parse_script(r#"{"turns": [{"txt": "typo"}]}"#).unwrap_err();
        assert!(err.to_string().contains("txt"), "{err}");
    }

    #[test]
    fn deltas_follow_the_chunking() {
        assert_eq!(Turn::text("a b c").text_deltas(), ["a ", "b ", "c"]);
        assert_eq!(
            Turn::text("héllo").chunk_chars(2).text_deltas(),
            ["hé", "ll", "o"]
        );
        assert_eq!(Turn::stream_deltas(2).full_text(), "t0 t1 ");
        assert!(Turn::tool_call("x", json!({})).text_deltas().is_empty());
    }
}
