//! The Anthropic Messages wire format (`POST {base}/v1/messages`).
//!
//! System messages go into the top-level `system` field; tool calls are `tool_use` blocks and
//! their results `tool_result` blocks in the following user message (consecutive results, and
//! any user text after them, merged into one message as the API requires).

use async_trait::async_trait;
use engram_core::llm::{
    AssistantMessage, ChatModel, ChatRequest, ChatResponse, EventSink, FinishReason, LlmError,
    Message, ModelInfo, StreamEvent, ToolCall, Usage,
};
use serde_json::{Map, Value, json};

use crate::config::{ANTHROPIC_API_VERSION, ClientConfig, ConfigError, Provider};
use crate::openai::{sendable_arguments, temperature_json};
use crate::sse::SseEvent;
use crate::transport::{ResponseFault, StreamParser, Transport, Wire, generated_call_id};

/// The answer limit sent when neither the request nor the configuration sets one (the API
/// requires a limit; every Claude model accepts this one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A client for the Anthropic Messages API (or a server compatible with it).
pub struct AnthropicClient {
    transport: Transport<AnthropicWire>,
}

impl AnthropicClient {
    /// A client with these settings (the provider field is ignored: this is the Anthropic wire).
    pub fn new(config: ClientConfig) -> Result<Self, ConfigError> {
        let config = ClientConfig {
            provider: Provider::Anthropic,
            ..config
        };
        Ok(Self {
            transport: Transport::new(config, AnthropicWire)?,
        })
    }

    /// The exact JSON body this client sends for `request`.
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        self.transport.request_body(request, stream)
    }
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("info", self.transport.info())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ChatModel for AnthropicClient {
    fn info(&self) -> &ModelInfo {
        self.transport.info()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.transport.run(request, None).await
    }

    async fn chat_stream(
        &self,
        request: &ChatRequest,
        sink: &mut EventSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        self.transport.run(request, Some(sink)).await
    }
}

pub(crate) struct AnthropicWire;

impl Wire for AnthropicWire {
    type Parser = AnthropicStream;

    fn provider(&self) -> &'static str {
        "anthropic"
    }

    fn endpoint(&self, config: &ClientConfig) -> String {
        // ANTHROPIC_BASE_URL is conventionally given without /v1; accept it with, too.
        let base = config.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        format!("{base}/v1/messages")
    }

    fn headers(
        &self,
        config: &ClientConfig,
        request: reqwest::RequestBuilder,
    ) -> reqwest::RequestBuilder {
        let request = request.header("anthropic-version", ANTHROPIC_API_VERSION);
        match &config.api_key {
            Some(key) => request.header("x-api-key", key.expose()),
            None => request,
        }
    }

    fn body(&self, config: &ClientConfig, request: &ChatRequest, stream: bool) -> Value {
        let (system, messages) = messages_json(&request.messages);
        let mut body = Map::new();
        body.insert("model".into(), config.model.clone().into());
        body.insert(
            "max_tokens".into(),
            request
                .max_tokens
                .or(config.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS)
                .into(),
        );
        if !system.is_empty() {
            body.insert("system".into(), system.into());
        }
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.parameters,
                    })
                })
                .collect();
            body.insert("tools".into(), tools);
        }
        if let Some(t) = request.temperature.or(config.temperature) {
            body.insert("temperature".into(), temperature_json(t));
        }
        // JSON mode has no switch here: the prompt must ask for JSON, and the lenient parser
        // reads what comes back.
        body.insert("stream".into(), stream.into());
        for (key, value) in &config.extra_body {
            body.insert(key.clone(), value.clone());
        }
        Value::Object(body)
    }

    fn parse_response(&self, body: &Value) -> Result<ChatResponse, ResponseFault> {
        if body.get("type").and_then(Value::as_str) == Some("error") {
            return Err(ResponseFault::ServerError(
                body.get("error").cloned().unwrap_or(Value::Null),
            ));
        }
        let blocks = body
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| ResponseFault::Malformed("the response has no content list".into()))?;
        let mut message = AssistantMessage::default();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    message
                        .content
                        .push_str(block.get("text").and_then(Value::as_str).unwrap_or(""));
                }
                Some("thinking") => {
                    let text = block.get("thinking").and_then(Value::as_str).unwrap_or("");
                    message
                        .reasoning
                        .get_or_insert_with(String::new)
                        .push_str(text);
                    if let Some(sig) = block.get("signature").and_then(Value::as_str) {
                        message.reasoning_signature = Some(sig.to_string());
                    }
                }
                Some("tool_use") => {
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    if name.is_empty() {
                        return Err(ResponseFault::Malformed(
                            "a tool_use block has no name".into(),
                        ));
                    }
                    let id = block
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map_or_else(generated_call_id, str::to_string);
                    let input = block.get("input").cloned().unwrap_or(json!({}));
                    message
                        .tool_calls
                        .push(ToolCall::with_value(id, name, &input));
                }
                _ => {} // redacted thinking, server tools: nothing the agent uses
            }
        }
        let finish_reason = body
            .get("stop_reason")
            .and_then(Value::as_str)
            .map_or(FinishReason::Stop, stop_reason);
        let mut usage = Usage::default();
        if let Some(u) = body.get("usage") {
            apply_usage(&mut usage, u);
        }
        Ok(ChatResponse {
            message,
            finish_reason,
            usage,
        })
    }

    fn stream_parser(&self) -> AnthropicStream {
        AnthropicStream::default()
    }
}

/// Splits out the system prompt and converts the conversation to Messages-API form.
fn messages_json(messages: &[Message]) -> (String, Vec<Value>) {
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    // User-side blocks (text and tool results) waiting to become one user message.
    let mut user_blocks: Vec<Value> = Vec::new();
    let flush = |blocks: &mut Vec<Value>, out: &mut Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        let content = match blocks.as_slice() {
            [only] if only.get("type").and_then(Value::as_str) == Some("text") => {
                only.get("text").cloned().unwrap_or_default()
            }
            _ => Value::Array(std::mem::take(blocks)),
        };
        blocks.clear();
        out.push(json!({"role": "user", "content": content}));
    };
    for message in messages {
        match message {
            Message::System { content } => system.push(content.as_str()),
            Message::User { content } => {
                if !content.is_empty() {
                    user_blocks.push(json!({"type": "text", "text": content}));
                }
            }
            Message::Tool(t) => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": t.tool_call_id,
                    "content": t.content,
                });
                if t.is_error {
                    block["is_error"] = true.into();
                }
                user_blocks.push(block);
            }
            Message::Assistant(a) => {
                let mut blocks = Vec::new();
                // Thinking goes back only with its signature (the API rejects it otherwise).
                if let (Some(reasoning), Some(signature)) = (&a.reasoning, &a.reasoning_signature) {
                    blocks.push(
                        json!({"type": "thinking", "thinking": reasoning, "signature": signature}),
                    );
                }
                if !a.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": a.content}));
                }
                for call in &a.tool_calls {
                    let input: Value = serde_json::from_str(&sendable_arguments(&call.arguments))
                        .unwrap_or_else(|_| json!({}));
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                let content = match blocks.as_slice() {
                    // An empty turn is not allowed and said nothing: leave it out, and let
                    // the user text around it form one message.
                    [] => continue,
                    [only] if only["type"] == "text" => only["text"].clone(),
                    _ => Value::Array(blocks),
                };
                flush(&mut user_blocks, &mut out);
                out.push(json!({"role": "assistant", "content": content}));
            }
        }
    }
    flush(&mut user_blocks, &mut out);
    (system.join("\n\n"), out)
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// Input tokens include those written to and read from the prompt cache.
fn apply_usage(usage: &mut Usage, value: &Value) {
    let count = |k: &str| value.get(k).and_then(Value::as_u64);
    let input = [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| count(k))
    .reduce(|a, b| a.saturating_add(b));
    if let Some(input) = input {
        usage.input_tokens = input;
    }
    if let Some(output) = count("output_tokens") {
        usage.output_tokens = output;
    }
}

/// What a content block of the stream is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Text,
    Thinking,
    /// A tool call, by its position among the tool calls.
    Tool(usize),
    Other,
}

/// Reads a Messages stream.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    blocks: Vec<(u64, Block)>,
    tools: usize,
    usage: Usage,
    finish: Option<FinishReason>,
    signature: String,
}

impl AnthropicStream {
    fn block(&self, index: u64) -> Block {
        self.blocks
            .iter()
            .rev()
            .find(|(i, _)| *i == index)
            .map_or(Block::Other, |(_, b)| *b)
    }
}

impl StreamParser for AnthropicStream {
    fn on_event(
        &mut self,
        event: &SseEvent,
        out: &mut Vec<StreamEvent>,
    ) -> Result<bool, ResponseFault> {
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            ResponseFault::Malformed(format!(
                "a stream event is not JSON ({e}): {:.80}",
                event.data
            ))
        })?;
        // The data names its own type; the `event:` line is a fallback for proxies that keep
        // only one of them.
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match kind {
            "message_start" => {
                if let Some(u) = data.pointer("/message/usage") {
                    apply_usage(&mut self.usage, u);
                    out.push(StreamEvent::Usage(self.usage));
                }
            }
            "content_block_start" => {
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let kind = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = text(block, "text");
                        if !t.is_empty() {
                            out.push(StreamEvent::TextDelta(t));
                        }
                        Block::Text
                    }
                    Some("thinking") => {
                        let t = text(block, "thinking");
                        if !t.is_empty() {
                            out.push(StreamEvent::ReasoningDelta(t));
                        }
                        self.signature.push_str(&text(block, "signature"));
                        Block::Thinking
                    }
                    Some("tool_use") => {
                        let position = self.tools;
                        self.tools += 1;
                        let id = Some(text(block, "id"))
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(generated_call_id);
                        out.push(StreamEvent::ToolCallStart {
                            index: position,
                            id,
                            name: text(block, "name"),
                        });
                        // Anthropic starts with `{}` and streams the input; some compatible
                        // servers send the whole input here instead.
                        if let Some(input) = block
                            .get("input")
                            .and_then(Value::as_object)
                            .filter(|o| !o.is_empty())
                        {
                            out.push(StreamEvent::ToolCallArgumentsDelta {
                                index: position,
                                delta: Value::Object(input.clone()).to_string(),
                            });
                        }
                        Block::Tool(position)
                    }
                    _ => Block::Other,
                };
                self.blocks.push((index, kind));
            }
            "content_block_delta" => {
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match (delta.get("type").and_then(Value::as_str), self.block(index)) {
                    (Some("text_delta"), _) => {
                        let t = text(delta, "text");
                        if !t.is_empty() {
                            out.push(StreamEvent::TextDelta(t));
                        }
                    }
                    (Some("thinking_delta"), _) => {
                        let t = text(delta, "thinking");
                        if !t.is_empty() {
                            out.push(StreamEvent::ReasoningDelta(t));
                        }
                    }
                    (Some("signature_delta"), _) => {
                        self.signature.push_str(&text(delta, "signature"));
                    }
                    (Some("input_json_delta"), Block::Tool(position)) => {
                        let t = text(delta, "partial_json");
                        if !t.is_empty() {
                            out.push(StreamEvent::ToolCallArgumentsDelta {
                                index: position,
                                delta: t,
                            });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.finish = Some(stop_reason(reason));
                }
                if let Some(u) = data.get("usage") {
                    apply_usage(&mut self.usage, u);
                    out.push(StreamEvent::Usage(self.usage));
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                return Err(ResponseFault::ServerError(
                    data.get("error").cloned().unwrap_or(data.clone()),
                ));
            }
            // ping, content_block_stop, and event types added later.
            _ => {}
        }
        Ok(false)
    }

    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish.clone()
    }

    fn reasoning_signature(&self) -> Option<String> {
        Some(self.signature.clone()).filter(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::llm::{ResponseAssembler, ToolResultMessage};

    fn feed(events: &[(&str, &str)]) -> (ChatResponse, bool) {
        let mut parser = AnthropicStream::default();
        let mut assembler = ResponseAssembler::new();
        let mut done = false;
        for (name, data) in events {
            let mut out = Vec::new();
            done = parser
                .on_event(
                    &SseEvent {
                        event: Some(name.to_string()),
                        data: data.to_string(),
                    },
                    &mut out,
                )
                .unwrap();
            for e in &out {
                assembler.apply(e);
            }
        }
        if let Some(f) = parser.finish_reason() {
            assembler.apply(&StreamEvent::Done(f));
        }
        if let Some(s) = parser.reasoning_signature() {
            assembler.set_reasoning_signature(s);
        }
        (assembler.finish(), done)
    }

    #[test]
    fn assembles_text_thinking_and_tool_use() {
        let (r, done) = feed(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"c","stop_reason":null,"usage":{"input_tokens":20,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me look."}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"a.txt\"}"}}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        assert!(done);
        assert_eq!(r.message.content, "Let me look.");
        assert_eq!(r.message.reasoning.as_deref(), Some("hmm"));
        assert_eq!(r.message.reasoning_signature.as_deref(), Some("sig"));
        assert_eq!(
            r.message.tool_calls,
            vec![ToolCall::new("toolu_1", "read_file", r#"{"path":"a.txt"}"#)]
        );
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 25,
                output_tokens: 42
            }
        );
    }

    #[test]
    fn error_events_are_faults() {
        let mut parser = AnthropicStream::default();
        let mut out = Vec::new();
        let event = SseEvent {
            event: Some("error".into()),
            data: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                .into(),
        };
        assert!(matches!(
            parser.on_event(&event, &mut out),
            Err(ResponseFault::ServerError(_))
        ));
    }

    #[test]
    fn tool_results_merge_into_one_user_message_and_system_is_separate() {
        let call = |id: &str| ToolCall::new(id, "t", "{}");
        let (system, messages) = messages_json(&[
            Message::system("one"),
            Message::user("hi"),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![call("a"), call("b")],
                ..AssistantMessage::default()
            }),
            Message::tool_result("a", "A"),
            Message::Tool(ToolResultMessage {
                tool_call_id: "b".into(),
                content: "B".into(),
                is_error: true,
            }),
            Message::system("two"),
            Message::assistant("done"),
        ]);
        assert_eq!(system, "one\n\ntwo");
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[0], json!({"role": "user", "content": "hi"}));
        assert_eq!(messages[2]["content"][0]["tool_use_id"], "a");
        assert_eq!(messages[2]["content"][1]["is_error"], true);
        assert_eq!(messages[3], json!({"role": "assistant", "content": "done"}));
    }
}
