//! `/v1/sessions`: a user's sessions, as the agent kept them (transcripts of its
//! conversations, `ENGRAM_HOME/sessions`) and as the memories know them (memories that carry a
//! `session_id`): the list, a session's memories, and a transcript's messages.

use axum::Extension;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use engram_core::Filter;
use engram_core::Message;
use jiff::Timestamp;
use serde::Serialize;
use serde_json::json;

use super::AppState;
use super::memories::{encode_cursor, next_link, page_from_query, page_response};
use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{PathParam, QueryPairs};

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
    PathParam(session_id): PathParam<String>,
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

/// One message of a transcript: its place, its time, and the message as the model saw it
/// (`role`, `content`, an assistant's `tool_calls`, a tool result's `tool_call_id`).
#[derive(Debug, Serialize)]
struct MessageJson<'a> {
    index: usize,
    timestamp: Timestamp,
    #[serde(flatten)]
    message: &'a Message,
}

/// `GET /v1/sessions/{session_id}/messages?user_id=U`: the conversation, oldest first, paged.
pub(crate) async fn messages(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    PathParam(session_id): PathParam<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id", "limit", "offset", "cursor"])?;
    let user_id = required_user(&query)?;
    let (limit, offset) = page_from_query(&query)?;
    let Some(log) = state
        .service
        .transcript(&access, user_id.clone(), session_id.clone())
        .await?
    else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no conversation '{session_id}' kept for user '{user_id}'"),
        ));
    };
    let all = log.messages();
    let page: Vec<MessageJson<'_>> = all
        .iter()
        .enumerate()
        .skip(offset)
        .take(limit)
        .map(|(index, m)| MessageJson {
            index,
            timestamp: m.timestamp,
            message: &m.message,
        })
        .collect();
    let next_offset = offset.saturating_add(limit);
    let more = all.len() > next_offset;
    Ok(axum::Json(json!({
        "session_id": log.key.as_str(),
        "user_id": user_id,
        "total": all.len(),
        "messages": page,
        "limit": limit,
        "offset": offset,
        "next_cursor": more.then(|| encode_cursor(next_offset)),
        "next": more.then(|| next_link(&uri, next_offset)),
    }))
    .into_response())
}
