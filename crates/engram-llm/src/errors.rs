//! Turning what a server or the network did into a classified [`LlmError`].

use engram_core::llm::{LlmError, NetworkFailure};
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::retry::retry_after;

/// Longest server message quoted in an error.
const MAX_DETAIL_CHARS: usize = 300;

/// Who was being talked to, for error messages.
#[derive(Debug, Clone)]
pub(crate) struct ErrorContext {
    pub provider: &'static str,
    pub base_url: String,
    pub key_env: String,
}

impl ErrorContext {
    /// An error for an HTTP status with its headers and body text.
    pub fn status_error(&self, status: u16, headers: &HeaderMap, body: &str) -> LlmError {
        let (message, code) = detail_of(body);
        let detail = if message.is_empty() {
            format!("empty response with status {status}")
        } else {
            message
        };
        self.classify(Some(status), code.as_deref(), detail, retry_after(headers))
    }

    /// An error reported inside a stream (Anthropic's `error` event, an OpenAI-style
    /// `{"error": ...}` chunk).
    pub fn stream_error(&self, error: &Value) -> LlmError {
        let (message, code) = error_fields(error);
        let status = error
            .get("status")
            .or_else(|| error.get("code"))
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| (400..600).contains(s));
        let detail = if message.is_empty() {
            "the server reported an error in the stream".to_string()
        } else {
            message
        };
        self.classify(status, code.as_deref(), detail, None)
    }

    fn classify(
        &self,
        status: Option<u16>,
        code: Option<&str>,
        detail: String,
        retry_after: Option<std::time::Duration>,
    ) -> LlmError {
        let provider = self.provider.to_string();
        let code = code.unwrap_or("").to_ascii_lowercase();
        let haystack = format!("{code} {}", detail.to_ascii_lowercase());
        if is_quota(&haystack) {
            return LlmError::QuotaExceeded { provider, detail };
        }
        if is_context_overflow(&haystack) || status == Some(413) {
            return LlmError::ContextTooLong { detail };
        }
        let status = status.unwrap_or_else(|| status_for_code(&code));
        match status {
            401 | 403 => LlmError::Auth {
                provider,
                url: self.base_url.clone(),
                status,
                detail,
                key_env: self.key_env.clone(),
            },
            429 => LlmError::RateLimited {
                provider,
                retry_after,
                detail,
            },
            // Request timeout and conflict are transient by the HTTP book.
            408 | 409 | 500..=599 => LlmError::Server {
                provider,
                status,
                detail,
            },
            _ => LlmError::Rejected {
                provider,
                status,
                detail,
            },
        }
    }

    /// An error from the HTTP client itself (connect, timeout, broken body).
    pub fn transport_error(&self, error: &reqwest::Error) -> LlmError {
        let failure = if error.is_timeout() {
            NetworkFailure::Timeout
        } else if error.is_connect() {
            NetworkFailure::Connect
        } else {
            NetworkFailure::Dropped
        };
        self.network(failure, describe_transport(error))
    }

    /// A network failure with a description.
    pub fn network(&self, failure: NetworkFailure, detail: String) -> LlmError {
        LlmError::Network {
            failure,
            url: self.base_url.clone(),
            detail: one_line(&detail),
        }
    }

    /// A response that is not the wire format.
    pub fn malformed(&self, detail: impl Into<String>) -> LlmError {
        LlmError::MalformedResponse {
            provider: self.provider.to_string(),
            detail: one_line(&detail.into()),
        }
    }
}

/// An error after part of the answer reached the caller: never retried, says so.
pub(crate) fn interrupted(error: LlmError) -> LlmError {
    if matches!(error, LlmError::StreamInterrupted { .. }) {
        return error;
    }
    let transient = error.is_retryable();
    let reason = match &error {
        LlmError::Network { failure, url, .. } => match failure {
            NetworkFailure::Timeout => format!("the server at {url} went silent"),
            _ => format!("the connection to {url} was lost"),
        },
        other => {
            let text = other.to_string();
            format!("of an error: {}", text.trim_end_matches('.'))
        }
    };
    LlmError::StreamInterrupted { reason, transient }
}

fn status_for_code(code: &str) -> u16 {
    match code {
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" => 403,
        "not_found_error" | "model_not_found" => 404,
        "rate_limit_error" | "rate_limit_exceeded" => 429,
        "invalid_request_error" => 400,
        "overloaded_error" => 529,
        _ => 500,
    }
}

fn is_context_overflow(text: &str) -> bool {
    const SIGNS: [&str; 14] = [
        "context_length_exceeded",
        "exceed_context_size",
        "context length",
        "maximum context",
        "context window",
        "context_window",
        "prompt is too long",
        "prompt too long",
        "input is too long",
        "too many tokens",
        "exceeds the context",
        "exceeds the available context",
        "reduce the length of the messages",
        "maximum prompt length",
    ];
    SIGNS.iter().any(|s| text.contains(s))
}

fn is_quota(text: &str) -> bool {
    text.contains("insufficient_quota")
        || text.contains("exceeded your current quota")
        || text.contains("credit balance is too low")
        || text.contains("insufficient balance")
        || text.contains("billing_error")
}

/// The message and code/type of an error body, whatever the server's dialect:
/// `{"error": {"message", "type", "code"}}` (OpenAI, Anthropic, llama.cpp),
/// `{"error": "text"}` (Ollama), `{"message": ..., "type": ...}` (vLLM), `{"detail": ...}`,
/// or plain text.
pub(crate) fn detail_of(body: &str) -> (String, Option<String>) {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => {
            let (message, code) = error_fields(&value);
            if message.is_empty() && code.is_none() {
                (one_line(body), None)
            } else {
                (message, code)
            }
        }
        Err(_) => (one_line(body), None),
    }
}

fn error_fields(value: &Value) -> (String, Option<String>) {
    let inner = match value.get("error") {
        Some(Value::String(s)) => return (one_line(s), None),
        Some(obj @ Value::Object(_)) => obj,
        _ => value,
    };
    let message = ["message", "detail", "msg"]
        .iter()
        .find_map(|k| match inner.get(*k) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        })
        .unwrap_or_default();
    // Prefer the specific `code` ("context_length_exceeded") over the broad `type`.
    let code = ["code", "type"].iter().find_map(|k| {
        inner
            .get(*k)
            .and_then(Value::as_str)
            .filter(|s| *s != "error")
            .map(str::to_string)
    });
    let code = match (code, inner.get("type").and_then(Value::as_str)) {
        (Some(c), Some(t)) if c != t => Some(format!("{c} {t}")),
        (c, _) => c,
    };
    (one_line(&message), code)
}

fn describe_transport(error: &reqwest::Error) -> String {
    // reqwest's Display stops at the top error; the cause chain says what actually happened.
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Collapses whitespace and clips to a length fit for a one-line message.
pub(crate) fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= MAX_DETAIL_CHARS {
        return joined;
    }
    let clipped: String = joined.chars().take(MAX_DETAIL_CHARS).collect();
    format!("{clipped}...")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorContext {
        ErrorContext {
            provider: "openai",
            base_url: "http://x/v1".into(),
            key_env: "OPENAI_API_KEY".into(),
        }
    }

    fn classify(status: u16, body: &str) -> LlmError {
        ctx().status_error(status, &HeaderMap::new(), body)
    }

    #[test]
    fn statuses_and_bodies_map_to_classes() {
        let e = classify(
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
        );
        assert_eq!(e.kind(), "auth");
        assert!(
            e.to_string()
                .contains("check that OPENAI_API_KEY holds a valid key"),
            "{e}"
        );
        assert_eq!(classify(429, r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#).kind(), "rate_limited");
        assert_eq!(classify(429, r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#).kind(), "quota_exceeded");
        assert_eq!(classify(503, "upstream connect error").kind(), "server");
        assert_eq!(
            classify(
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            )
            .kind(),
            "server"
        );
        assert_eq!(
            classify(404, r#"{"error":"model 'x' not found"}"#).kind(),
            "rejected"
        );
        assert_eq!(classify(413, r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#).kind(), "context_too_long");
    }

    #[test]
    fn context_overflow_is_recognised_in_every_dialect() {
        for body in [
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}"#,
        ] {
            let e = classify(400, body);
            assert_eq!(e.kind(), "context_too_long", "{body}");
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn details_are_one_clipped_line() {
        let long = "word\n".repeat(200);
        let e = classify(500, &long);
        let text = e.to_string();
        assert!(!text.contains('\n'));
        assert!(text.contains("..."));
        assert_eq!(detail_of(""), (String::new(), None));
    }

    #[test]
    fn stream_errors_are_classified_by_type() {
        let c = ctx();
        let overloaded = serde_json::json!({"type": "overloaded_error", "message": "Overloaded"});
        let e = c.stream_error(&overloaded);
        assert!(matches!(e, LlmError::Server { status: 529, .. }), "{e:?}");
        let rate = serde_json::json!({"type": "rate_limit_error", "message": "slow"});
        assert_eq!(c.stream_error(&rate).kind(), "rate_limited");
        let cut = interrupted(c.network(NetworkFailure::Dropped, "eof".into()));
        assert!(
            cut.to_string()
                .contains("the connection to http://x/v1 was lost"),
            "{cut}"
        );
        assert!(!cut.is_retryable());
    }
}
