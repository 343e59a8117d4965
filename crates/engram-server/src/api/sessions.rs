//! `/v1/sessions`: sessions as the memories know them.
//!
//! The session store (transcripts of agent conversations) arrives with a later part of engram;
//! until then a session is the set of memories that carry its `session_id`, and these routes
//! list and show exactly that.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use engram_core::Filter;
use serde_json::json;

use super::AppState;
use super::memories::{page_from_query, page_response};
use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::extract::QueryPairs;

fn required_user(query: &QueryPairs) -> Result<String, ApiError> {
    query
        .single("user_id")?
        .map(str::to_string)
        .ok_or_else(|| ApiError::invalid("query parameter 'user_id' is required (whose sessions?)"))
}

/// `GET /v1/sessions?user_id=U`: the user's sessions, most recent first.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id"])?;
    let user_id = required_user(&query)?;
    let sessions = state.service.sessions(&access, user_id).await?;
    Ok(axum::Json(json!({"sessions": sessions})).into_response())
}

/// `GET /v1/sessions/{session_id}?user_id=U`: the session's memories, newest first, paged.
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    Path(session_id): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id", "include_closed", "limit", "offset", "cursor"])?;
    let user_id = required_user(&query)?;
    let (limit, offset) = page_from_query(&query)?;
    let filter = Filter {
        session_id: Some(session_id.clone()),
        include_closed: query.flag("include_closed")?,
        ..Filter::user(user_id.clone())
    };
    let exists = Filter {
        include_closed: true,
        ..filter.clone()
    };
    if state.service.list(&access, exists, 1, 0).await?.is_empty() {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no session '{session_id}' for user '{user_id}'"),
        ));
    }
    page_response(
        &state,
        &access,
        &uri,
        filter,
        limit,
        offset,
        json!({"session_id": session_id, "user_id": user_id}),
    )
    .await
}
