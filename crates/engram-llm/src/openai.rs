//! The OpenAI-compatible chat-completions wire format (`POST {base}/chat/completions`).
//!
//! Spoken by OpenAI, DeepSeek, MiniMax, Ollama, vLLM, llama.cpp, LM Studio and many others, each
//! with quirks tolerated here: tool calls without ids, arguments delivered whole or as an object,
//! tool-call deltas without an index, chunks with empty `choices`, usage in the last chunk or in
//! a separate one, `reasoning_content` or `reasoning` for the model's thinking, no `[DONE]`.

use async_trait::async_trait;
use engram_core::llm::lenient_json;
use engram_core::llm::{
    AssistantMessage, ChatModel, ChatRequest, ChatResponse, EventSink, FinishReason, LlmError,
    Message, ModelInfo, ResponseFormat, StreamEvent, ToolCall, Usage,
};
use serde_json::{Map, Value, json};

use crate::config::{ClientConfig, ConfigError, MaxTokensField, Provider};
use crate::sse::SseEvent;
use crate::transport::{ResponseFault, StreamParser, Transport, Wire, generated_call_id};

/// A client for an OpenAI-compatible chat-completions server.
pub struct OpenAiClient {
    transport: Transport<OpenAiWire>,
}

impl OpenAiClient {
    /// A client with these settings (the provider field is ignored: this is the OpenAI wire).
    pub fn new(config: ClientConfig) -> Result<Self, ConfigError> {
        let config = ClientConfig {
            provider: Provider::OpenAi,
            ..config
        };
        Ok(Self {
            transport: Transport::new(config, OpenAiWire)?,
        })
    }

    /// The exact JSON body this client sends for `request`.
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        self.transport.request_body(request, stream)
    }
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("info", self.transport.info())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
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

pub(crate) struct OpenAiWire;

impl Wire for OpenAiWire {
    type Parser = OpenAiStream;

    fn provider(&self) -> &'static str {
        "openai"
    }

    fn endpoint(&self, config: &ClientConfig) -> String {
        format!("{}/chat/completions", config.base_url)
    }

    fn headers(
        &self,
        config: &ClientConfig,
        request: reqwest::RequestBuilder,
    ) -> reqwest::RequestBuilder {
        match &config.api_key {
            Some(key) => request.bearer_auth(key.expose()),
            None => request,
        }
    }

    fn body(&self, config: &ClientConfig, request: &ChatRequest, stream: bool) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), config.model.clone().into());
        body.insert(
            "messages".into(),
            request.messages.iter().map(message_json).collect(),
        );
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        }
                    })
                })
                .collect();
            body.insert("tools".into(), tools);
        }
        if let Some(max) = request.max_tokens.or(config.max_tokens) {
            let field = match config.max_tokens_field {
                MaxTokensField::MaxTokens => "max_tokens",
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            };
            body.insert(field.into(), max.into());
        }
        if let Some(t) = request.temperature.or(config.temperature) {
            body.insert("temperature".into(), temperature_json(t));
        }
        if request.response_format == ResponseFormat::JsonObject {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        body.insert("stream".into(), stream.into());
        if stream && config.stream_usage {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        for (key, value) in &config.extra_body {
            body.insert(key.clone(), value.clone());
        }
        Value::Object(body)
    }

    fn parse_response(&self, body: &Value) -> Result<ChatResponse, ResponseFault> {
        if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
            return Err(ResponseFault::ServerError(error.clone()));
        }
        let choice = body
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .ok_or_else(|| ResponseFault::Malformed("the response has no choices".into()))?;
        let message = choice
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| ResponseFault::Malformed("the choice has no message".into()))?;
        let mut tool_calls = Vec::new();
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let function = call.get("function").unwrap_or(&Value::Null);
                let name = function
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if name.is_empty() {
                    return Err(ResponseFault::Malformed("a tool call has no name".into()));
                }
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map_or_else(generated_call_id, str::to_string);
                let arguments = arguments_text(function.get("arguments"));
                tool_calls.push(ToolCall::new(id, name, arguments));
            }
        }
        let reasoning = reasoning_of(message).filter(|r| !r.is_empty());
        let mut finish_reason = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map_or(FinishReason::Stop, finish_reason);
        if finish_reason == FinishReason::Stop && !tool_calls.is_empty() {
            finish_reason = FinishReason::ToolCalls;
        }
        Ok(ChatResponse {
            message: AssistantMessage {
                content: content_text(message.get("content")),
                reasoning,
                reasoning_signature: None,
                tool_calls,
            },
            finish_reason,
            usage: body.get("usage").map(usage_of).unwrap_or_default(),
        })
    }

    fn stream_parser(&self) -> OpenAiStream {
        OpenAiStream::default()
    }
}

/// A message as the chat-completions API takes it.
fn message_json(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant(a) => {
            let mut m = Map::new();
            m.insert("role".into(), "assistant".into());
            // Servers want null rather than "" next to tool calls.
            let content = if a.content.is_empty() && !a.tool_calls.is_empty() {
                Value::Null
            } else {
                a.content.clone().into()
            };
            m.insert("content".into(), content);
            // Reasoning models (DeepSeek) continue a tool loop from their reasoning; servers that
            // never sent reasoning never get it back.
            if let Some(reasoning) = a.reasoning.as_ref().filter(|r| !r.is_empty()) {
                m.insert("reasoning_content".into(), reasoning.clone().into());
            }
            if !a.tool_calls.is_empty() {
                let calls = a
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": sendable_arguments(&c.arguments)},
                        })
                    })
                    .collect();
                m.insert("tool_calls".into(), calls);
            }
            Value::Object(m)
        }
        Message::Tool(t) => json!({
            "role": "tool",
            "tool_call_id": t.tool_call_id,
            "content": t.content,
        }),
    }
}

/// A temperature as the decimal the user wrote (0.2, not f32's 0.20000000298023224).
pub(crate) fn temperature_json(t: f32) -> Value {
    t.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// Arguments as they go back to the server: servers that render them through a chat template
/// reject malformed JSON, so a malformed call is sent repaired (or as `{}`); the model learns of
/// its mistake from the tool result.
pub(crate) fn sendable_arguments(raw: &str) -> String {
    if serde_json::from_str::<Map<String, Value>>(raw).is_ok() {
        return raw.to_string();
    }
    match lenient_json::parse_arguments(raw) {
        Ok(value) => value.to_string(),
        Err(_) => "{}".to_string(),
    }
}

fn arguments_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        // Some servers send the arguments as an object.
        Some(other) => other.to_string(),
    }
}

fn content_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        // Content as an array of parts.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn reasoning_of(message: &Value) -> Option<String> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| message.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "eos" | "end_turn" => FinishReason::Stop,
        "length" | "max_tokens" => FinishReason::Length,
        "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

fn usage_of(usage: &Value) -> Usage {
    let count = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: count("prompt_tokens"),
        output_tokens: count("completion_tokens"),
    }
}

/// One tool call being streamed.
#[derive(Debug, Default)]
struct StreamedCall {
    wire_index: Option<u64>,
    id: Option<String>,
    /// Set once the start event went out (it waits for the name).
    started: bool,
    name: String,
    /// Arguments that arrived before the name.
    pending: String,
}

/// Reads a chat-completions stream.
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    calls: Vec<StreamedCall>,
    finish: Option<FinishReason>,
}

impl OpenAiStream {
    /// Which call a tool-call delta belongs to: by wire index; without one, by id; else the
    /// latest call. A known index with a new id is a new call (servers that number every call 0).
    fn call_for(&mut self, wire_index: Option<u64>, id: Option<&str>) -> usize {
        let known_id = |c: &StreamedCall| c.id.as_deref().is_some_and(|cid| Some(cid) == id);
        if let Some(position) = self.calls.iter().position(known_id) {
            return position;
        }
        let by_index = match wire_index {
            Some(i) => self.calls.iter().rposition(|c| c.wire_index == Some(i)),
            None if id.is_some() => None,
            None => self.calls.len().checked_sub(1),
        };
        match by_index {
            Some(position) if id.is_none() || self.calls[position].id.is_none() => position,
            _ => {
                self.calls.push(StreamedCall {
                    wire_index,
                    ..StreamedCall::default()
                });
                self.calls.len() - 1
            }
        }
    }

    fn tool_delta(&mut self, delta: &Value, out: &mut Vec<StreamEvent>) {
        let id = delta
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let function = delta.get("function").unwrap_or(&Value::Null);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let arguments = arguments_text(function.get("arguments"));
        let index = self.call_for(delta.get("index").and_then(Value::as_u64), id);
        let call = &mut self.calls[index];
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        if !call.started {
            if let Some(name) = name {
                call.name = name.to_string();
            }
            if call.name.is_empty() {
                call.pending.push_str(&arguments);
                return;
            }
            call.started = true;
            let id = call.id.get_or_insert_with(generated_call_id).clone();
            out.push(StreamEvent::ToolCallStart {
                index,
                id,
                name: call.name.clone(),
            });
            let pending = std::mem::take(&mut call.pending) + &arguments;
            if !pending.is_empty() {
                out.push(StreamEvent::ToolCallArgumentsDelta {
                    index,
                    delta: pending,
                });
            }
        } else if !arguments.is_empty() {
            out.push(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: arguments,
            });
        }
    }
}

impl StreamParser for OpenAiStream {
    fn on_event(
        &mut self,
        event: &SseEvent,
        out: &mut Vec<StreamEvent>,
    ) -> Result<bool, ResponseFault> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ResponseFault::Malformed(format!("a stream chunk is not JSON ({e}): {data:.80}"))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(ResponseFault::ServerError(error.clone()));
        }
        if let Some(choices) = chunk.get("choices").and_then(Value::as_array) {
            // n = 1: only the first choice is ours.
            if let Some(choice) = choices.iter().find(|c| {
                c.get("index")
                    .and_then(Value::as_u64)
                    .is_none_or(|i| i == 0)
            }) {
                let delta = choice.get("delta").unwrap_or(&Value::Null);
                if let Some(reasoning) = reasoning_of(delta).filter(|r| !r.is_empty()) {
                    out.push(StreamEvent::ReasoningDelta(reasoning));
                }
                let text = content_text(delta.get("content"));
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta(text));
                }
                if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                    for call in calls {
                        self.tool_delta(call, out);
                    }
                }
                if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                    self.finish = Some(finish_reason(reason));
                }
            }
        } else if ["usage", "id", "object"]
            .iter()
            .all(|k| chunk.get(*k).is_none())
        {
            return Err(ResponseFault::Malformed(format!(
                "a stream chunk is not a chat-completion chunk: {data:.80}"
            )));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage(usage_of(usage)));
        }
        Ok(false)
    }

    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::llm::ResponseAssembler;

    fn feed(chunks: &[&str]) -> (engram_core::llm::ChatResponse, bool) {
        let mut parser = OpenAiStream::default();
        let mut assembler = ResponseAssembler::new();
        let mut done = false;
        for data in chunks {
            let mut out = Vec::new();
            done = parser
                .on_event(
                    &SseEvent {
                        event: None,
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
        (assembler.finish(), done)
    }

    #[test]
    fn assembles_parallel_tool_calls_by_index() {
        let (r, done) = feed(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"list","arguments":"{\"p\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":2}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}"#,
            "[DONE]",
        ]);
        assert!(done);
        assert_eq!(
            r.message.tool_calls,
            vec![
                ToolCall::new("a", "read", "{\"x\":1}"),
                ToolCall::new("b", "list", "{\"p\":2}")
            ]
        );
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(r.usage.input_tokens, 9);
    }

    #[test]
    fn tolerates_missing_ids_indexes_and_whole_arguments() {
        let (r, _) = feed(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"a","arguments":{"k":"v"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"x2","function":{"name":"b","arguments":"{}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        ]);
        assert_eq!(r.message.tool_calls.len(), 2);
        assert!(r.message.tool_calls[0].id.starts_with("call_"));
        assert_eq!(r.message.tool_calls[0].arguments, r#"{"k":"v"}"#);
        assert_eq!(r.message.tool_calls[1], ToolCall::new("x2", "b", "{}"));
        assert_eq!(r.finish_reason, FinishReason::ToolCalls, "stop with calls");
        assert_eq!(r.usage.output_tokens, 2);
    }

    #[test]
    fn same_index_with_a_new_id_is_a_new_call() {
        let (r, _) = feed(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"one","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"two","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"two","arguments":""}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        let names: Vec<_> = r
            .message
            .tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["one", "two"]);
    }

    #[test]
    fn reasoning_under_either_name_and_text() {
        let (r, _) = feed(&[
            r#"{"choices":[{"delta":{"reasoning_content":"think "}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"more"}}]}"#,
            r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
            r#"{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(r.message.reasoning.as_deref(), Some("think more"));
        assert_eq!(r.message.content, "Hi");
    }

    #[test]
    fn broken_chunks_are_faults() {
        let mut parser = OpenAiStream::default();
        let mut out = Vec::new();
        let bad = |d: &str| SseEvent {
            event: None,
            data: d.into(),
        };
        assert!(matches!(
            parser.on_event(&bad("{not json"), &mut out),
            Err(ResponseFault::Malformed(_))
        ));
        assert!(matches!(
            parser.on_event(
                &bad(r#"{"error":{"message":"boom","type":"server_error"}}"#),
                &mut out
            ),
            Err(ResponseFault::ServerError(_))
        ));
        assert!(matches!(
            parser.on_event(&bad(r#"{"something":"else"}"#), &mut out),
            Err(ResponseFault::Malformed(_))
        ));
    }

    #[test]
    fn malformed_arguments_go_back_repaired() {
        assert_eq!(sendable_arguments(r#"{"a":1}"#), r#"{"a":1}"#);
        assert_eq!(sendable_arguments("{'a': 1,"), r#"{"a":1}"#);
        assert_eq!(sendable_arguments("???"), "{}");
        assert_eq!(sendable_arguments(""), "{}");
    }
}
