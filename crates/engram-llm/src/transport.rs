//! What both wire formats share: the HTTP client, timeouts, the retry loop, reading an event
//! stream and handing its events to the caller as they arrive.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engram_core::llm::{
    ChatRequest, ChatResponse, EventSink, FinishReason, LlmError, ModelInfo, NetworkFailure,
    ResponseAssembler, StreamEvent,
};
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use crate::config::{ClientConfig, ConfigError};
use crate::errors::{ErrorContext, interrupted};
use crate::sse::{SseDecoder, SseEvent};

/// Largest error body read, in bytes (error pages can be big HTML).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// One provider's wire format.
pub(crate) trait Wire: Send + Sync + 'static {
    /// The stream parser this format uses.
    type Parser: StreamParser;

    /// "openai" or "anthropic".
    fn provider(&self) -> &'static str;
    /// The URL requests go to.
    fn endpoint(&self, config: &ClientConfig) -> String;
    /// Adds authentication and version headers.
    fn headers(
        &self,
        config: &ClientConfig,
        request: reqwest::RequestBuilder,
    ) -> reqwest::RequestBuilder;
    /// The JSON body for a request.
    fn body(&self, config: &ClientConfig, request: &ChatRequest, stream: bool) -> Value;
    /// Reads a complete (non-streamed) response body; `Err` says what is wrong with it.
    fn parse_response(&self, body: &Value) -> Result<ChatResponse, ResponseFault>;
    /// A parser for one streamed response.
    fn stream_parser(&self) -> Self::Parser;
}

/// What was wrong with a response body or a stream event.
#[derive(Debug)]
pub(crate) enum ResponseFault {
    /// Not the wire format: says what is wrong.
    Malformed(String),
    /// The server reported an error object in a successful response or in the stream.
    ServerError(Value),
}

/// Reads one streamed response, event by event.
pub(crate) trait StreamParser: Send {
    /// Handles one event, appending what it carried to `out`. Returns true when the event ends
    /// the stream (`[DONE]`, `message_stop`).
    fn on_event(
        &mut self,
        event: &SseEvent,
        out: &mut Vec<StreamEvent>,
    ) -> Result<bool, ResponseFault>;
    /// The finish reason the stream announced, if any; a stream that closes after announcing one
    /// is complete even without its end marker.
    fn finish_reason(&self) -> Option<FinishReason>;
    /// The thinking signature to keep with the reasoning (Anthropic).
    fn reasoning_signature(&self) -> Option<String> {
        None
    }
}

/// A tool-call id for servers that send none: unique within and across runs.
pub(crate) fn generated_call_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("call_{:x}{n:x}", nanos & 0xffff_ffff_ffff)
}

/// A chat model speaking wire format `W` over HTTP.
pub(crate) struct Transport<W> {
    http: reqwest::Client,
    wire: W,
    config: ClientConfig,
    errors: ErrorContext,
    info: ModelInfo,
}

fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Another part of the process may have installed one already; that one is fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn is_loopback(base_url: &str) -> bool {
    let rest = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest);
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = if host.starts_with('[') {
        host.split(']').next().map_or(host, |h| &h[1..])
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost") || host == "::1" || host.starts_with("127.")
}

impl<W: Wire> Transport<W> {
    pub fn new(config: ClientConfig, wire: W) -> Result<Self, ConfigError> {
        install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.timeouts.connect)
            .tcp_nodelay(true)
            .user_agent(concat!("engram/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&config.base_url) {
            // A local model server is never behind the user's HTTP proxy.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| ConfigError::Http(e.to_string()))?;
        let errors = ErrorContext {
            provider: wire.provider(),
            base_url: config.base_url.clone(),
            key_env: config.api_key_env.clone(),
        };
        let info = ModelInfo {
            provider: wire.provider().to_string(),
            model: config.model.clone(),
            base_url: config.base_url.clone(),
            context_window: config.context_window,
            native_tools: config.native_tools,
        };
        Ok(Self {
            http,
            wire,
            config,
            errors,
            info,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The JSON body a request is sent as (for tests and debugging).
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        self.wire.body(&self.config, request, stream)
    }

    /// Sends the request, retrying transient failures while nothing has been delivered.
    pub async fn run(
        &self,
        request: &ChatRequest,
        mut sink: Option<&mut EventSink<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.wire.body(&self.config, request, sink.is_some());
        let body = serde_json::to_vec(&body).map_err(|e| self.errors.malformed(e.to_string()))?;
        let mut attempt = 1;
        loop {
            let result = match sink.as_mut() {
                Some(sink) => self.attempt_stream(&body, &mut **sink).await,
                None => self.attempt_once(&body).await,
            };
            let error = match result {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            // StreamInterrupted (content already delivered) is never retryable.
            if !error.is_retryable() {
                return Err(error);
            }
            let Some(delay) = self.config.retry.delay_after(attempt, error.retry_after()) else {
                return Err(error);
            };
            attempt += 1;
            tracing::warn!(attempt, ?delay, %error, "retrying model request");
            if let Some(sink) = sink.as_mut() {
                sink(&StreamEvent::Retrying {
                    attempt,
                    delay,
                    reason: error.to_string(),
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    fn post(&self, body: &[u8]) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(self.wire.endpoint(&self.config))
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        self.wire.headers(&self.config, request)
    }

    fn timed_out(&self, what: &str, after: Duration) -> LlmError {
        self.errors.network(
            NetworkFailure::Timeout,
            format!("{what} within {} s", after.as_secs_f64()),
        )
    }

    /// Reads an error response into a classified error.
    async fn status_error(&self, mut response: reqwest::Response, deadline: Instant) -> LlmError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY {
            match timeout_at(deadline, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        self.errors
            .status_error(status, &headers, &String::from_utf8_lossy(&body))
    }

    async fn attempt_once(&self, body: &[u8]) -> Result<ChatResponse, LlmError> {
        let limit = self.config.timeouts.request;
        let deadline = Instant::now() + limit;
        let response = match timeout_at(deadline, self.post(body).send()).await {
            Err(_) => return Err(self.timed_out("no answer", limit)),
            Ok(Err(e)) => return Err(self.errors.transport_error(&e)),
            Ok(Ok(response)) => response,
        };
        if !response.status().is_success() {
            return Err(self.status_error(response, deadline).await);
        }
        let bytes = match timeout_at(deadline, response.bytes()).await {
            Err(_) => return Err(self.timed_out("no complete answer", limit)),
            Ok(Err(e)) => return Err(self.errors.transport_error(&e)),
            Ok(Ok(bytes)) => bytes,
        };
        self.parse_whole(&bytes)
    }

    fn parse_whole(&self, bytes: &[u8]) -> Result<ChatResponse, LlmError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            self.errors.malformed(format!(
                "the body is not JSON: {e}; it starts with {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
            ))
        })?;
        self.wire
            .parse_response(&value)
            .map_err(|fault| self.fault(fault))
    }

    fn fault(&self, fault: ResponseFault) -> LlmError {
        match fault {
            ResponseFault::Malformed(detail) => self.errors.malformed(detail),
            ResponseFault::ServerError(error) => self.errors.stream_error(&error),
        }
    }

    async fn attempt_stream(
        &self,
        body: &[u8],
        sink: &mut EventSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let timeouts = self.config.timeouts;
        let deadline = Instant::now() + timeouts.request;
        let idle_deadline = || (Instant::now() + timeouts.idle).min(deadline);

        let mut response = match timeout_at(idle_deadline(), self.post(body).send()).await {
            Err(_) => return Err(self.timed_out("no answer", timeouts.idle)),
            Ok(Err(e)) => return Err(self.errors.transport_error(&e)),
            Ok(Ok(response)) => response,
        };
        if !response.status().is_success() {
            return Err(self.status_error(response, deadline).await);
        }

        let mut assembler = ResponseAssembler::new();
        let mut deliver = |event: StreamEvent, assembler: &mut ResponseAssembler| {
            assembler.apply(&event);
            sink(&event);
        };

        // A server that ignored `stream: true` answers with one JSON body.
        if is_json(response.headers()) {
            let bytes = match timeout_at(deadline, response.bytes()).await {
                Err(_) => return Err(self.timed_out("no complete answer", timeouts.request)),
                Ok(Err(e)) => return Err(self.errors.transport_error(&e)),
                Ok(Ok(bytes)) => bytes,
            };
            let whole = self.parse_whole(&bytes)?;
            for event in whole.to_events() {
                deliver(event, &mut assembler);
            }
            return Ok(whole);
        }

        // Once content has reached the caller, a failure is reported, never retried.
        let fail = |error: LlmError, assembler: &ResponseAssembler| {
            if assembler.has_content() {
                interrupted(error)
            } else {
                error
            }
        };
        let mut parser = self.wire.stream_parser();
        let mut decoder = SseDecoder::new();
        let mut sse_events = Vec::new();
        let mut out = Vec::new();
        let mut complete = false;
        loop {
            let ended = match timeout_at(idle_deadline(), response.chunk()).await {
                Err(_) => {
                    let error = if Instant::now() >= deadline {
                        self.timed_out("no complete answer", timeouts.request)
                    } else {
                        self.timed_out("nothing new on the stream", timeouts.idle)
                    };
                    return Err(fail(error, &assembler));
                }
                // A body error mid-stream is a dropped connection, whatever its cause.
                Ok(Err(e)) => {
                    let detail = match self.errors.transport_error(&e) {
                        LlmError::Network { detail, .. } => detail,
                        other => other.to_string(),
                    };
                    let error = self.errors.network(NetworkFailure::Dropped, detail);
                    return Err(fail(error, &assembler));
                }
                Ok(Ok(Some(chunk))) => {
                    decoder
                        .push(&chunk, &mut sse_events)
                        .map_err(|e| fail(self.errors.malformed(e.to_string()), &assembler))?;
                    false
                }
                Ok(Ok(None)) => {
                    decoder.finish(&mut sse_events);
                    true
                }
            };
            for event in sse_events.drain(..) {
                let done = match parser.on_event(&event, &mut out) {
                    Ok(done) => done,
                    Err(fault) => return Err(fail(self.fault(fault), &assembler)),
                };
                for e in out.drain(..) {
                    deliver(e, &mut assembler);
                }
                if done {
                    complete = true;
                    break;
                }
            }
            if complete || ended {
                break;
            }
        }
        let finish = parser.finish_reason();
        if !complete && finish.is_none() {
            let error = self.errors.network(
                NetworkFailure::Dropped,
                "the stream ended before the answer was complete".into(),
            );
            return Err(fail(error, &assembler));
        }
        let mut finish = finish.unwrap_or_default();
        if finish == FinishReason::Stop && !assembler.tool_calls().is_empty() {
            finish = FinishReason::ToolCalls;
        }
        deliver(StreamEvent::Done(finish), &mut assembler);
        if let Some(signature) = parser.reasoning_signature() {
            assembler.set_reasoning_signature(signature);
        }
        Ok(assembler.finish())
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for url in [
            "http://localhost:11434/v1",
            "http://127.0.0.1:8080",
            "http://[::1]:1234/v1",
            "http://LOCALHOST",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://10.0.0.2:8000/v1",
            "http://localhost.evil.com",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn generated_ids_differ() {
        assert_ne!(generated_call_id(), generated_call_id());
        assert!(generated_call_id().starts_with("call_"));
    }
}
