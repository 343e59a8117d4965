//! Errors as the API reports them: an HTTP status and a JSON body with a stable code.
//!
//! Every error body reads `{"error": {"code": "not_found", "message": "..."}}`. Codes never
//! change meaning; messages are for people and may be reworded.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram_core::StoreError;
use serde::Serialize;

/// The stable error codes, each with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the body is not JSON at all.
    InvalidJson,
    /// 400: the JSON or query has the wrong shape (unknown or missing fields, wrong types) or
    /// an unacceptable value (empty text, bad time, importance out of range).
    InvalidRequest,
    /// 401: no token, or a token that is wrong or revoked.
    Unauthorized,
    /// 403: the token may not touch this user's memories (or, without a token, the request
    /// does not come from this machine).
    Forbidden,
    /// 404: no such memory or session, or one the token may not see (the same answer).
    NotFound,
    /// 404: no such route.
    RouteNotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 409: the change would duplicate another current memory's text in the same scope.
    Duplicate,
    /// 409: the memory is already invalidated.
    AlreadyInvalidated,
    /// 413: the body is larger than the limit.
    PayloadTooLarge,
    /// 415: the body is not declared as JSON.
    UnsupportedMediaType,
    /// 501: the request needs a language model (extraction) and the server has none.
    NotImplemented,
    /// 501: a route or option of another memory API (Mem0's organisations, projects, webhooks,
    /// ...) that engram has no counterpart for.
    NotSupported,
    /// 502: the language model behind extraction failed or answered with an error.
    ModelFailed,
    /// 503: the database stayed locked by another process; try again.
    Busy,
    /// 507: the disk (or the database quota) is full; nothing was written.
    StorageFull,
    /// 500: anything else; the server log has the details.
    Internal,
}

impl ErrorCode {
    /// Every code, in the order the documentation lists them.
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::InvalidJson,
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::RouteNotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Duplicate,
        ErrorCode::AlreadyInvalidated,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::NotImplemented,
        ErrorCode::NotSupported,
        ErrorCode::ModelFailed,
        ErrorCode::Busy,
        ErrorCode::StorageFull,
        ErrorCode::Internal,
    ];

    /// The code as it appears in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::RouteNotFound => "route_not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Duplicate => "duplicate",
            ErrorCode::AlreadyInvalidated => "already_invalidated",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::NotImplemented => "not_implemented",
            ErrorCode::NotSupported => "not_supported",
            ErrorCode::ModelFailed => "model_failed",
            ErrorCode::Busy => "busy",
            ErrorCode::StorageFull => "storage_full",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status that goes with the code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidJson | ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::NotFound | ErrorCode::RouteNotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::Duplicate | ErrorCode::AlreadyInvalidated => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::NotImplemented | ErrorCode::NotSupported => StatusCode::NOT_IMPLEMENTED,
            ErrorCode::ModelFailed => StatusCode::BAD_GATEWAY,
            ErrorCode::Busy => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What the code means, for the documentation.
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "The body is not valid JSON.",
            ErrorCode::InvalidRequest => {
                "The JSON or query string has the wrong shape (unknown or missing fields, wrong \
                 types) or an unacceptable value; the message names the field."
            }
            ErrorCode::Unauthorized => {
                "No bearer token, or a token that is wrong or revoked (tokens are required once \
                 any token exists, and always when listening beyond this machine)."
            }
            ErrorCode::Forbidden => {
                "The token is not bound to this user, or a request without a token does not \
                 come from this machine."
            }
            ErrorCode::NotFound => {
                "No such memory or session, or one the token may not see: both get this same \
                 answer."
            }
            ErrorCode::RouteNotFound => "No such route.",
            ErrorCode::MethodNotAllowed => "The route exists, but not with this method.",
            ErrorCode::Duplicate => {
                "The change would make the memory a copy of another current memory in the \
                 same scope."
            }
            ErrorCode::AlreadyInvalidated => "The memory is already invalidated.",
            ErrorCode::PayloadTooLarge => "The body is larger than the server's limit.",
            ErrorCode::UnsupportedMediaType => "The body is not sent as application/json.",
            ErrorCode::NotImplemented => {
                "The request needs a language model (extraction with `infer: true`) and the \
                 server has none configured."
            }
            ErrorCode::NotSupported => {
                "A route or option of Mem0's API that engram has no counterpart for \
                 (organisations, projects, webhooks, custom extraction instructions, ...)."
            }
            ErrorCode::ModelFailed => {
                "The language model behind extraction failed (unreachable, bad key, rate \
                 limited, ...); nothing was extracted. The message says which."
            }
            ErrorCode::Busy => {
                "The database stayed locked by another process for the whole busy timeout; \
                 retry."
            }
            ErrorCode::StorageFull => {
                "The disk or the database quota is full; nothing was written."
            }
            ErrorCode::Internal => "Anything else; the server log has the details.",
        }
    }
}

/// An error the API answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, in one sentence.
    pub message: String,
}

impl ApiError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// 400 invalid_request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// 404 not_found for a memory id: the one answer for "missing" and "not yours".
    pub fn memory_not_found(id: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::NotFound, format!("no memory with id {id}"))
    }

    /// 500 internal.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code.as_str(), "message": self.message}})
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        let code = match &err {
            StoreError::NotFound(_) => ErrorCode::NotFound,
            StoreError::Invalid(_) | StoreError::BadQuery(_) => ErrorCode::InvalidRequest,
            StoreError::Duplicate(_) => ErrorCode::Duplicate,
            StoreError::AlreadyClosed(_) => ErrorCode::AlreadyInvalidated,
            // The database is away or locked: 503, try again.
            StoreError::Busy(_) | StoreError::Unavailable { .. } => ErrorCode::Busy,
            StoreError::DiskFull => ErrorCode::StorageFull,
            _ => ErrorCode::Internal,
        };
        ApiError::new(code, err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        // A route or model engram does not have is the caller's news, not the server's fault.
        if status.is_server_error()
            && !matches!(
                self.code,
                ErrorCode::NotImplemented | ErrorCode::NotSupported
            )
        {
            tracing::error!(code = self.code.as_str(), message = %self.message, "request failed");
        }
        let mut response = (status, axum::Json(self.body())).into_response();
        // Front ends with another error shape (the Mem0 routes) rewrite the body from this.
        response.extensions_mut().insert(self.clone());
        let headers = response.headers_mut();
        match self.code {
            ErrorCode::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"engram\""),
                );
            }
            ErrorCode::Busy => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

impl From<engram_core::store::tokens::TokenError> for ApiError {
    fn from(err: engram_core::store::tokens::TokenError) -> Self {
        use engram_core::store::tokens::TokenError;
        match err {
            TokenError::Store(e) => ApiError::from(e),
            TokenError::NotFound(_) => ApiError::new(ErrorCode::NotFound, err.to_string()),
            TokenError::Invalid(message) => ApiError::invalid(message),
            TokenError::Unreadable { .. } => ApiError::internal(err.to_string()),
        }
    }
}

impl From<engram_memory::SearchError> for ApiError {
    fn from(err: engram_memory::SearchError) -> Self {
        match err {
            engram_memory::SearchError::Store(e) => ApiError::from(e),
            engram_memory::SearchError::Embed(e) => {
                ApiError::internal(format!("cannot embed the text: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()));
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert!(code.status().is_client_error() || code.status().is_server_error());
        }
    }

    #[test]
    fn store_errors_map_to_codes() {
        let id = engram_core::MemoryId::new();
        assert_eq!(
            ApiError::from(StoreError::NotFound(id)).code,
            ErrorCode::NotFound
        );
        assert_eq!(
            ApiError::from(StoreError::NotFound(id)),
            ApiError::memory_not_found(id)
        );
        assert_eq!(ApiError::from(StoreError::Busy(15)).code, ErrorCode::Busy);
        assert_eq!(
            ApiError::from(StoreError::DiskFull).code,
            ErrorCode::StorageFull
        );
        assert_eq!(
            ApiError::from(StoreError::AlreadyClosed(id)).code,
            ErrorCode::AlreadyInvalidated
        );
    }
}
