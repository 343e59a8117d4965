//! The chat-model abstraction: the message vocabulary, requests and responses, streaming events,
//! the errors a model call can end in, and the [`ChatModel`] trait the wire clients implement.
//!
//! The agent talks to every provider through these types; the OpenAI and Anthropic wire formats
//! live in `engram-llm`. Lenient JSON parsing of model output (for models without native tool
//! calls, and for malformed tool arguments) lives in [`lenient_json`] and [`json_protocol`].

pub mod json_protocol;
pub mod lenient_json;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{ToolOutput, ToolSpec};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model. Anthropic takes these apart from the conversation; several
    /// system messages are joined in order.
    System {
        /// The instructions.
        content: String,
    },
    /// What the user said.
    User {
        /// The user's words.
        content: String,
    },
    /// What the model answered: text, reasoning and tool calls.
    Assistant(AssistantMessage),
    /// The result of one tool call, answering the assistant's call with the same id.
    Tool(ToolResultMessage),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::Assistant(AssistantMessage::text(content))
    }

    /// A successful tool result for the call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Tool(ToolResultMessage {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            is_error: false,
        })
    }

    /// The result of running a tool for the call `tool_call_id`, as the model should see it.
    pub fn tool_output(tool_call_id: impl Into<String>, output: &ToolOutput) -> Self {
        Message::Tool(ToolResultMessage {
            tool_call_id: tool_call_id.into(),
            content: output.to_model_text(),
            is_error: !output.success,
        })
    }

    /// Who wrote the message.
    pub fn role(&self) -> Role {
        match self {
            Message::System { .. } => Role::System,
            Message::User { .. } => Role::User,
            Message::Assistant(_) => Role::Assistant,
            Message::Tool(_) => Role::Tool,
        }
    }

    /// The message's main text (an assistant's answer text, a tool's result).
    pub fn text(&self) -> &str {
        match self {
            Message::System { content } | Message::User { content } => content,
            Message::Assistant(a) => &a.content,
            Message::Tool(t) => &t.content,
        }
    }

    /// A rough token count (about four bytes a token, plus framing), for budgeting history
    /// before a request. Not exact for any tokenizer; never zero.
    pub fn estimated_tokens(&self) -> usize {
        let body = match self {
            Message::Assistant(a) => {
                a.content.len()
                    + a.reasoning.as_deref().map_or(0, str::len)
                    + a.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len() + c.id.len())
                        .sum::<usize>()
            }
            other => other.text().len(),
        };
        body.div_ceil(4) + 4
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    /// The lowercase name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The model's side of a turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The answer text (may be empty when the model only calls tools).
    #[serde(default)]
    pub content: String,
    /// The model's visible reasoning (`reasoning_content` of DeepSeek-style servers, Anthropic
    /// thinking), sent back with the message so reasoning models can continue a tool loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The signature Anthropic attaches to a thinking block; needed to send the thinking back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_signature: Option<String>,
    /// Tools the model asked to run, in order; several at once are run in parallel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl AssistantMessage {
    /// An assistant message with text only.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
    }
}

/// One tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the result must quote (generated locally when a server sends none).
    pub id: String,
    /// The tool's name, as the model wrote it (it may name no existing tool).
    pub name: String,
    /// The arguments exactly as the model wrote them: normally a JSON object, possibly
    /// malformed. See [`ToolCall::parse_arguments`].
    pub arguments: String,
}

impl ToolCall {
    /// A tool call with raw argument text.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// A tool call whose arguments are given as a JSON value.
    pub fn with_value(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        Self::new(id, name, arguments.to_string())
    }

    /// The arguments as a JSON object. Empty text means no arguments (`{}`); small syntax
    /// mistakes (trailing commas, single quotes, unquoted keys, missing closing braces, a code
    /// fence) are repaired. The error's text is meant to be returned to the model.
    pub fn parse_arguments(&self) -> Result<Value, lenient_json::ArgumentsError> {
        lenient_json::parse_arguments(&self.arguments)
    }
}

/// A tool's result, answering one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultMessage {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// What the tool returned, as text for the model.
    pub content: String,
    /// Whether the tool failed (Anthropic shows the model `is_error`; OpenAI sees the text only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// How the model should format its answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    #[default]
    Text,
    /// A single JSON object (OpenAI `response_format: json_object`; Anthropic has no switch for
    /// it, so the instruction must be in the prompt).
    JsonObject,
}

/// One request to a chat model. The model name, key and endpoint belong to the client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call (empty: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Longest answer, in tokens; `None` uses the client's configured default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; `None` uses the client's configured default (or the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Free text or a JSON object.
    #[serde(default)]
    pub response_format: ResponseFormat,
}

impl ChatRequest {
    /// A request with these messages and no tools.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// Offers these tools to the model.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the longest answer, in tokens.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the sampling temperature.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Asks for a single JSON object as the answer.
    pub fn json_object(mut self) -> Self {
        self.response_format = ResponseFormat::JsonObject;
        self
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its answer.
    #[default]
    Stop,
    /// It wants tools run (check [`AssistantMessage::tool_calls`], which is what counts).
    ToolCalls,
    /// It ran out of answer tokens (`max_tokens`) or context.
    Length,
    /// The provider's content filter cut the answer, or the model refused.
    ContentFilter,
    /// Anything else the server said, verbatim.
    Other(String),
}

/// Tokens spent by one request, or summed over many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, including any served from the provider's cache.
    pub input_tokens: u64,
    /// Answer tokens, including reasoning.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;

    fn add(self, rhs: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(rhs.input_tokens),
            output_tokens: self.output_tokens.saturating_add(rhs.output_tokens),
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}

/// The model's complete answer to one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The answer, ready to append to the history.
    pub message: AssistantMessage,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// Tokens spent (zero when the server did not say).
    pub usage: Usage,
}

impl ChatResponse {
    /// The events a stream of this response would have carried, in order; lets a client without
    /// streaming still feed an [`EventSink`].
    pub fn to_events(&self) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        if let Some(reasoning) = self.message.reasoning.as_ref().filter(|r| !r.is_empty()) {
            events.push(StreamEvent::ReasoningDelta(reasoning.clone()));
        }
        if !self.message.content.is_empty() {
            events.push(StreamEvent::TextDelta(self.message.content.clone()));
        }
        for (index, call) in self.message.tool_calls.iter().enumerate() {
            events.push(StreamEvent::ToolCallStart {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            });
            if !call.arguments.is_empty() {
                events.push(StreamEvent::ToolCallArgumentsDelta {
                    index,
                    delta: call.arguments.clone(),
                });
            }
        }
        events.push(StreamEvent::Usage(self.usage));
        events.push(StreamEvent::Done(self.finish_reason.clone()));
        events
    }
}

/// Something that arrived on a streamed answer, delivered as soon as it is parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// More answer text.
    TextDelta(String),
    /// More reasoning text.
    ReasoningDelta(String),
    /// A new tool call; `index` is its position in the final [`AssistantMessage::tool_calls`].
    ToolCallStart {
        /// Position in the final list of tool calls.
        index: usize,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More argument text for the tool call at `index`.
    ToolCallArgumentsDelta {
        /// Position in the final list of tool calls.
        index: usize,
        /// The next piece of the arguments' JSON text.
        delta: String,
    },
    /// Token counts so far (the last one wins). Informational: a retried attempt may have sent
    /// one before failing, so count tokens from the returned [`ChatResponse`].
    Usage(Usage),
    /// The request failed before anything was delivered and is being sent again after `delay`.
    Retrying {
        /// The attempt that is about to start (2 for the first retry).
        attempt: u32,
        /// How long the client waits first.
        #[serde(with = "duration_millis")]
        delay: Duration,
        /// Why, as a sentence for the user.
        reason: String,
    },
    /// The answer is complete.
    Done(FinishReason),
}

impl StreamEvent {
    /// Whether the event carries part of the answer (text, reasoning or a tool call), as
    /// opposed to bookkeeping. Once such an event is delivered, a request is never retried.
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            StreamEvent::TextDelta(_)
                | StreamEvent::ReasoningDelta(_)
                | StreamEvent::ToolCallStart { .. }
                | StreamEvent::ToolCallArgumentsDelta { .. }
        )
    }
}

mod duration_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// Where streamed events go: a callback run on each event as it is parsed. Keep it quick (print,
/// forward to a channel); the stream waits for it.
pub type EventSink<'a> = dyn FnMut(&StreamEvent) + Send + 'a;

/// Builds a [`ChatResponse`] from stream events, as they arrive.
///
/// Tool calls are keyed by the event's `index`; a start for an index that already exists fills
/// in a missing id or name rather than adding a call.
#[derive(Debug, Clone, Default)]
pub struct ResponseAssembler {
    message: AssistantMessage,
    finish_reason: Option<FinishReason>,
    usage: Usage,
    content_seen: bool,
}

impl ResponseAssembler {
    /// An empty answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one event to the answer.
    pub fn apply(&mut self, event: &StreamEvent) {
        if event.is_content() {
            self.content_seen = true;
        }
        match event {
            StreamEvent::TextDelta(text) => self.message.content.push_str(text),
            StreamEvent::ReasoningDelta(text) => self
                .message
                .reasoning
                .get_or_insert_with(String::new)
                .push_str(text),
            StreamEvent::ToolCallStart { index, id, name } => {
                let call = self.call_at(*index);
                if call.id.is_empty() {
                    call.id.clone_from(id);
                }
                if call.name.is_empty() {
                    call.name.clone_from(name);
                }
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                self.call_at(*index).arguments.push_str(delta);
            }
            StreamEvent::Usage(usage) => self.usage = *usage,
            StreamEvent::Retrying { .. } => {}
            StreamEvent::Done(reason) => self.finish_reason = Some(reason.clone()),
        }
    }

    fn call_at(&mut self, index: usize) -> &mut ToolCall {
        let calls = &mut self.message.tool_calls;
        if calls.len() <= index {
            calls.resize_with(index + 1, || ToolCall::new("", "", ""));
        }
        &mut calls[index]
    }

    /// Whether any part of the answer (text, reasoning, a tool call) has arrived.
    pub fn has_content(&self) -> bool {
        self.content_seen
    }

    /// Whether a [`StreamEvent::Done`] has arrived.
    pub fn is_done(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// The tool calls received so far (a call's name or id may still be empty).
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.message.tool_calls
    }

    /// The text received so far.
    pub fn text(&self) -> &str {
        &self.message.content
    }

    /// Records the thinking signature (Anthropic) that must accompany the reasoning.
    pub fn set_reasoning_signature(&mut self, signature: String) {
        if !signature.is_empty() {
            self.message.reasoning_signature = Some(signature);
        }
    }

    /// The finished answer. Tool calls with no name (a server that never sent one) are dropped;
    /// a finish reason of `Stop` with tool calls present becomes `ToolCalls` (some servers say
    /// "stop" regardless).
    pub fn finish(self) -> ChatResponse {
        let mut message = self.message;
        message.tool_calls.retain(|c| !c.name.is_empty());
        let mut finish_reason = self.finish_reason.unwrap_or_default();
        if finish_reason == FinishReason::Stop && !message.tool_calls.is_empty() {
            finish_reason = FinishReason::ToolCalls;
        }
        ChatResponse {
            message,
            finish_reason,
            usage: self.usage,
        }
    }
}

/// What a client knows about the model behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The wire format: "openai" or "anthropic".
    pub provider: String,
    /// The model's name as sent to the server.
    pub model: String,
    /// The server's base URL.
    pub base_url: String,
    /// The context window in tokens, when configured; budget history against it.
    pub context_window: Option<u32>,
    /// Whether the model takes tools natively; when false the agent uses the JSON protocol
    /// of [`json_protocol`] and sends no tools.
    pub native_tools: bool,
}

/// A language model that chats, with or without streaming.
///
/// Implementations retry transient failures themselves (rate limits, server errors, dropped
/// connections) as long as nothing has been delivered to the caller yet. Cancel a call by
/// dropping its future.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// The provider, model and limits behind this client.
    fn info(&self) -> &ModelInfo;

    /// Sends the request and waits for the whole answer.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// Sends the request and hands each event to `sink` as it arrives; returns the assembled
    /// answer. The default implementation calls [`ChatModel::chat`] and replays the answer.
    async fn chat_stream(
        &self,
        request: &ChatRequest,
        sink: &mut EventSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let response = self.chat(request).await?;
        for event in response.to_events() {
            sink(&event);
        }
        Ok(response)
    }
}

/// How a network failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkFailure {
    /// No connection could be made.
    Connect,
    /// The server took too long (to answer, or between two pieces of a stream).
    Timeout,
    /// The connection broke while the answer was being read.
    Dropped,
}

impl NetworkFailure {
    fn describe(self) -> &'static str {
        match self {
            NetworkFailure::Connect => "could not connect to",
            NetworkFailure::Timeout => "timed out waiting for",
            NetworkFailure::Dropped => "lost the connection to",
        }
    }
}

fn retry_after_text(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (the server asks to wait {} s)", d.as_secs_f64().ceil()),
        None => String::new(),
    }
}

/// Why a model call failed, classified so the user knows what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The server refused the credentials (HTTP 401 or 403).
    #[error(
        "the {provider} server at {url} rejected the API key (HTTP {status}: {detail}); check that {key_env} holds a valid key with access to this model."
    )]
    Auth {
        /// "openai" or "anthropic".
        provider: String,
        /// The endpoint's base URL.
        url: String,
        /// 401 or 403.
        status: u16,
        /// What the server said.
        detail: String,
        /// The environment variable the key comes from.
        key_env: String,
    },
    /// Too many requests (HTTP 429) and the retries ran out.
    #[error(
        "the {provider} server is rate limiting requests{}: {detail}; wait a minute and try again, or lower the request rate.",
        retry_after_text(.retry_after)
    )]
    RateLimited {
        /// "openai" or "anthropic".
        provider: String,
        /// How long the server asked to wait, if it said.
        retry_after: Option<Duration>,
        /// What the server said.
        detail: String,
    },
    /// The account has no credit or quota left (OpenAI's `insufficient_quota`).
    #[error(
        "the {provider} account has run out of quota or credit ({detail}); check the plan and billing for this API key."
    )]
    QuotaExceeded {
        /// "openai" or "anthropic".
        provider: String,
        /// What the server said.
        detail: String,
    },
    /// The conversation does not fit in the model's context window.
    #[error(
        "the model's context window is full ({detail}); shorten the conversation (start a new one) or use a model with a larger context."
    )]
    ContextTooLong {
        /// What the server said.
        detail: String,
    },
    /// The server failed (HTTP 5xx, overloaded) and the retries ran out.
    #[error(
        "the {provider} server failed (HTTP {status}: {detail}); it is likely a temporary problem, try again in a few minutes."
    )]
    Server {
        /// "openai" or "anthropic".
        provider: String,
        /// The HTTP status (500, 502, 503, 529, ...).
        status: u16,
        /// What the server said.
        detail: String,
    },
    /// The server refused the request itself (HTTP 400, 404, 422, ...).
    #[error(
        "the {provider} server rejected the request (HTTP {status}: {detail}); check the model name (ENGRAM_MODEL), the base URL and the [llm] settings."
    )]
    Rejected {
        /// "openai" or "anthropic".
        provider: String,
        /// The HTTP status.
        status: u16,
        /// What the server said.
        detail: String,
    },
    /// The network failed and the retries ran out.
    #[error(
        "{} {url} ({detail}); check the network connection and the base URL, and that the server is running.",
        .failure.describe()
    )]
    Network {
        /// How it failed.
        failure: NetworkFailure,
        /// The endpoint.
        url: String,
        /// The underlying error.
        detail: String,
    },
    /// The stream broke after part of the answer had been delivered, so it was not retried.
    #[error(
        "the answer stopped halfway because {reason}; it was not retried because part of it had already been shown, so send the request again."
    )]
    StreamInterrupted {
        /// What went wrong, as a clause ("the connection to ... was lost").
        reason: String,
        /// Whether retrying makes sense (the failure itself was transient).
        transient: bool,
    },
    /// The server answered with something that is not the expected wire format.
    #[error(
        "the {provider} server sent a response that could not be understood ({detail}); check that the base URL points to a {provider}-compatible API."
    )]
    MalformedResponse {
        /// "openai" or "anthropic".
        provider: String,
        /// What was wrong.
        detail: String,
    },
}

impl LlmError {
    /// Whether sending the same request again may succeed: rate limits, server errors and
    /// network failures. A stream that already delivered content is never retried automatically
    /// ([`LlmError::StreamInterrupted`] answers false); the user may resend it.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. } | LlmError::Server { .. } | LlmError::Network { .. }
        )
    }

    /// How long the server asked to wait before the next request, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short name of the class, for logs and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Auth { .. } => "auth",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::QuotaExceeded { .. } => "quota_exceeded",
            LlmError::ContextTooLong { .. } => "context_too_long",
            LlmError::Server { .. } => "server",
            LlmError::Rejected { .. } => "rejected",
            LlmError::Network { .. } => "network",
            LlmError::StreamInterrupted { .. } => "stream_interrupted",
            LlmError::MalformedResponse { .. } => "malformed_response",
        }
    }
}

/// Rough token count of a conversation (see [`Message::estimated_tokens`]).
pub fn estimate_tokens(messages: &[Message]) -> usize {
    messages.iter().map(Message::estimated_tokens).sum()
}

/// Checks that every tool result answers a tool call made earlier in the same conversation and
/// not yet answered, and (when `require_complete`) that every call has its result. Both providers
/// reject a conversation that breaks this; the agent must keep it even when a run is cancelled.
pub fn check_tool_pairing(messages: &[Message], require_complete: bool) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    for (position, message) in messages.iter().enumerate() {
        match message {
            Message::Assistant(a) => {
                if require_complete && !open.is_empty() {
                    return Err(format!(
                        "message {position} (assistant) comes before the results of tool calls {open:?}"
                    ));
                }
                open.extend(a.tool_calls.iter().map(|c| c.id.as_str()));
            }
            Message::Tool(t) => match open.iter().position(|id| *id == t.tool_call_id) {
                Some(i) => {
                    open.remove(i);
                }
                None => {
                    return Err(format!(
                        "message {position} is a tool result for '{}', which no earlier assistant message called (or which was already answered)",
                        t.tool_call_id
                    ));
                }
            },
            Message::User { .. } | Message::System { .. } => {
                if require_complete && !open.is_empty() {
                    return Err(format!(
                        "message {position} ({}) comes before the results of tool calls {open:?}",
                        message.role()
                    ));
                }
            }
        }
    }
    if require_complete && !open.is_empty() {
        return Err(format!("tool calls {open:?} have no result"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_serialise_with_a_role_tag_and_round_trip() {
        let messages = vec![
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: Some("think".into()),
                reasoning_signature: None,
                tool_calls: vec![ToolCall::with_value(
                    "c1",
                    "read_file",
                    &json!({"path": "a"}),
                )],
            }),
            Message::tool_output("c1", &ToolOutput::error("no such file")),
        ];
        let text = serde_json::to_string(&messages).unwrap();
        assert!(text.contains(r#""role":"assistant""#));
        assert!(text.contains(r#""is_error":true"#));
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn assembler_builds_text_reasoning_and_parallel_calls() {
        let mut a = ResponseAssembler::new();
        assert!(!a.has_content());
        for e in [
            StreamEvent::ReasoningDelta("hm".into()),
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into()),
            StreamEvent::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "two".into(),
            },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "one".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "{\"x\":".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "{}".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "1}".into(),
            },
            StreamEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 4,
            }),
            StreamEvent::Done(FinishReason::Stop),
        ] {
            a.apply(&e);
        }
        assert!(a.has_content());
        let r = a.finish();
        assert_eq!(r.message.content, "Hello");
        assert_eq!(r.message.reasoning.as_deref(), Some("hm"));
        assert_eq!(
            r.message.tool_calls[0],
            ToolCall::new("a", "one", "{\"x\":1}")
        );
        assert_eq!(r.message.tool_calls[1], ToolCall::new("b", "two", "{}"));
        assert_eq!(
            r.finish_reason,
            FinishReason::ToolCalls,
            "stop with calls means calls"
        );
        assert_eq!(r.usage.total(), 7);
    }

    #[test]
    fn to_events_replays_into_the_same_response() {
        let response = ChatResponse {
            message: AssistantMessage {
                content: "done".into(),
                reasoning: Some("r".into()),
                reasoning_signature: None,
                tool_calls: vec![ToolCall::new("x", "t", "{\"a\":1}")],
            },
            finish_reason: FinishReason::ToolCalls,
            usage: Usage {
                input_tokens: 1,
                output_tokens: 2,
            },
        };
        let mut a = ResponseAssembler::new();
        for e in response.to_events() {
            a.apply(&e);
        }
        assert_eq!(a.finish(), response);
    }

    #[test]
    fn retryable_classes() {
        let rate = LlmError::RateLimited {
            provider: "openai".into(),
            retry_after: Some(Duration::from_secs(2)),
            detail: "slow down".into(),
        };
        assert!(rate.is_retryable());
        assert_eq!(rate.retry_after(), Some(Duration::from_secs(2)));
        assert!(rate.to_string().contains("wait 2 s"));
        let ctx = LlmError::ContextTooLong {
            detail: "too long".into(),
        };
        assert!(!ctx.is_retryable());
        assert!(
            ctx.to_string()
                .starts_with("the model's context window is full")
        );
        let cut = LlmError::StreamInterrupted {
            reason: "the connection was lost".into(),
            transient: true,
        };
        assert!(!cut.is_retryable());
        for e in [rate, ctx, cut] {
            let text = e.to_string();
            assert!(text.ends_with('.'), "{text}");
            assert!(!text.contains('\n'));
        }
    }

    #[test]
    fn pairing_catches_orphans_and_missing_results() {
        let call = Message::Assistant(AssistantMessage {
            tool_calls: vec![
                ToolCall::new("c1", "t", "{}"),
                ToolCall::new("c2", "t", "{}"),
            ],
            ..AssistantMessage::default()
        });
        let ok = vec![
            Message::user("go"),
            call.clone(),
            Message::tool_result("c2", "b"),
            Message::tool_result("c1", "a"),
            Message::assistant("done"),
        ];
        assert_eq!(check_tool_pairing(&ok, true), Ok(()));
        let orphan = vec![Message::user("go"), Message::tool_result("c1", "a")];
        assert!(check_tool_pairing(&orphan, false).is_err());
        let missing = vec![
            Message::user("go"),
            call.clone(),
            Message::tool_result("c1", "a"),
        ];
        assert!(check_tool_pairing(&missing, false).is_ok());
        assert!(check_tool_pairing(&missing, true).is_err());
        let twice = vec![
            call,
            Message::tool_result("c1", "a"),
            Message::tool_result("c1", "a"),
        ];
        assert!(check_tool_pairing(&twice, false).is_err());
    }
}
