//! The REST API: routes, authentication, logging and the JSON error shape around them.
//!
//! | route | what it does |
//! |---|---|
//! | `GET /health` | liveness and database check (no token needed) |
//! | `GET /openapi.json` | the OpenAPI 3.1 description of this API (no token needed) |
//! | `POST /v1/memories` | add one memory, or messages (`infer: false` stores them verbatim) |
//! | `GET /v1/memories` | list one user's memories, newest first, a page at a time |
//! | `POST /v1/memories/batch` | add many memories in one transaction |
//! | `POST /v1/memories/search` | ranked search in one user's memories |
//! | `GET /v1/memories/{id}` | one memory |
//! | `PATCH /v1/memories/{id}` | change text, category, importance, metadata or expiry |
//! | `DELETE /v1/memories/{id}` | delete (the history keeps a record) |
//! | `POST /v1/memories/{id}/invalidate` | close: kept, audited, hidden from search |
//! | `GET /v1/memories/{id}/history` | the audit trail |
//! | `GET /v1/export` | one user's memories as JSONL, streamed |
//! | `GET /v1/sessions` | one user's sessions: the agent's conversations and those memories name |
//! | `GET /v1/sessions/{session_id}` | one session's memories |
//! | `GET /v1/sessions/{session_id}/messages` | one conversation's messages, as the agent kept them |
//! | `GET /v1/users` | the users the caller may see, with memory counts |
//! | `GET /v1/profile` | current facts and preferences, each with the values it replaced |
//! | `GET /v1/timeline` | memories per day and kind |
//! | `GET /v1/graph` | the knowledge graph (entities, observations, relations) |
//! | `POST /v1/import` | a JSONL file of memories (as export writes it) |
//! | `/ui/` | the memory inspector, a web page over this API (no token needed to load it) |
//! | `/mcp` | the MCP server over streamable HTTP (same tokens) |
//! | `/memories`, `/search`, `/v1/.../`, `/v3/.../` | Mem0's APIs ([`crate::mem0`]) |

mod import;
mod inspect;
mod memories;
mod sessions;

pub(crate) use memories::{hits_json, parse_id, parse_time};

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::auth::Authenticator;
use crate::error::{ApiError, ErrorCode};
use crate::service::MemoryService;

/// Everything a request handler needs.
#[derive(Clone)]
pub struct AppState {
    /// The memory operations.
    pub service: MemoryService,
    /// Who may do what.
    pub auth: Arc<Authenticator>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

/// Request body limits, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Every route but batch adds.
    pub default: usize,
    /// `POST /v1/memories/batch`.
    pub batch: usize,
}

/// The whole HTTP application: the REST API, `mcp` (a router serving `/mcp`) behind the same
/// authentication when given, and `mem0` (the Mem0-compatible routes, which authenticate
/// themselves) when given.
pub fn router(
    state: AppState,
    limits: BodyLimits,
    mcp: Option<Router<AppState>>,
    mem0: Option<Router<AppState>>,
) -> Router {
    let v1 = Router::new()
        .route("/v1/memories", post(memories::add).get(memories::list))
        .route(
            "/v1/memories/batch",
            post(memories::batch).layer(DefaultBodyLimit::max(limits.batch)),
        )
        .route("/v1/memories/search", post(memories::search))
        .route(
            "/v1/memories/{id}",
            get(memories::get_one)
                .patch(memories::update)
                .delete(memories::delete),
        )
        .route("/v1/memories/{id}/invalidate", post(memories::invalidate))
        .route("/v1/memories/{id}/history", get(memories::history))
        .route("/v1/export", get(memories::export))
        .route("/v1/sessions", get(sessions::list))
        .route("/v1/sessions/{session_id}", get(sessions::get_one))
        .route(
            "/v1/sessions/{session_id}/messages",
            get(sessions::messages),
        )
        .route("/v1/users", get(inspect::users))
        .route("/v1/profile", get(inspect::profile))
        .route("/v1/timeline", get(inspect::timeline))
        .route("/v1/graph", get(inspect::graph))
        .route(
            "/v1/import",
            post(import::import).layer(DefaultBodyLimit::max(limits.batch)),
        );
    let mut protected = v1;
    if let Some(mcp) = mcp {
        protected = protected.merge(mcp);
    }
    let protected =
        protected.route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let mut app = Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi))
        .merge(protected)
        .merge(crate::ui::router());
    if let Some(mem0) = mem0 {
        app = app.merge(mem0);
    }
    app.fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.default))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Resolves the caller's [`Access`] and hands it to the handler as a request extension.
pub(crate) async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let access = match state.auth.check_fast(request.headers()) {
        Some(decided) => decided?,
        None => {
            let _permit = state.service.permit().await?;
            state.auth.check(request.headers()).await?
        }
    };
    request.extensions_mut().insert(access);
    Ok(next.run(request).await)
}

/// One structured log line per request: method, route, status, time taken.
async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| request.uri().path().to_string());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let micros = started.elapsed().as_micros() as u64;
    if status >= 500 {
        tracing::warn!(%method, route, status, micros, "request");
    } else {
        tracing::debug!(%method, route, status, micros, "request");
    }
    response
}

async fn health(State(state): State<AppState>) -> Response {
    match state.auth.tokens_configured().await {
        Ok(_) => axum::Json(json!({
            "status": "ok",
            "version": env!("CARGO_PKG_VERSION"),
        }))
        .into_response(),
        Err(e) => {
            let mut response = ApiError::new(
                ErrorCode::Busy,
                format!("the database cannot be read: {}", e.message),
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
    }
}

async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        crate::openapi::document_text(),
    )
        .into_response()
}

/// An error in the shape of the API family the path belongs to.
fn family_error(path: &str, error: ApiError) -> Response {
    if crate::mem0::owns_path(path) {
        crate::mem0::error_response(&error)
    } else {
        error.into_response()
    }
}

async fn route_not_found(request: Request) -> Response {
    let path = request.uri().path();
    family_error(
        path,
        ApiError::new(
            ErrorCode::RouteNotFound,
            format!("no route {} {path} (see /openapi.json)", request.method()),
        ),
    )
}

async fn method_not_allowed(request: Request) -> Response {
    let path = request.uri().path();
    family_error(
        path,
        ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!(
                "{} is not allowed on {path} (see /openapi.json)",
                request.method()
            ),
        ),
    )
}
