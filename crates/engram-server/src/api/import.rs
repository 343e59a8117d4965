//! `POST /v1/import`: a JSONL file of memories, as `engram export` writes it and `engram
//! import` reads it (the same line reader), stored in batches; bad lines are named, good ones
//! kept.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use engram_core::{AddOutcome, NewMemory};
use serde_json::{Value, json};

use super::AppState;
use super::memories::MAX_BATCH;
use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::extract::QueryPairs;

/// Content types a JSONL body may be sent with.
const JSONL_TYPES: [&str; 4] = [
    "application/x-ndjson",
    "application/jsonl",
    "application/json-lines",
    "application/x-jsonlines",
];

/// A JSONL request body (a JSON text per line), within the route's size limit.
pub(crate) struct JsonLines(Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonLines {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let essence = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default();
        if !JSONL_TYPES.contains(&essence.as_str()) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "the body must be JSONL (one JSON object a line), sent with Content-Type: \
                 application/x-ndjson",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the file is larger than this route accepts (max_batch_body_bytes under \
                     [server] in config.toml); split it, or use engram import",
                )
            } else {
                ApiError::invalid(format!("cannot read the request body: {rejection}"))
            }
        })?;
        Ok(JsonLines(bytes))
    }
}

fn rejection(line: u64, error: &ApiError) -> Value {
    json!({"line": line, "error": error.body()["error"].clone()})
}

/// `POST /v1/import[?user_id=U]`. With `user_id`, lines without one are that user's and lines
/// naming another user are rejected; without it, every line names its user. Lines for users
/// the token may not touch are rejected one by one.
pub(crate) async fn import(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
    JsonLines(body): JsonLines,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id"])?;
    let user = query.single("user_id")?.map(str::to_string);
    if let Some(user) = &user {
        engram_core::Scope::user(user.clone())
            .validate()
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        access.require(user)?;
    }
    let (mut added, mut duplicates) = (0u64, 0u64);
    let mut errors: Vec<Value> = Vec::new();
    let mut batch: Vec<(u64, NewMemory)> = Vec::new();
    for (index, line) in body.split(|b| *b == b'\n').enumerate() {
        let number = index as u64 + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let memory = match engram_core::import::parse_import_line(line, user.as_deref()) {
            Ok(memory) => memory,
            Err(message) => {
                errors.push(rejection(number, &ApiError::invalid(message)));
                continue;
            }
        };
        let owner = &memory.scope.user_id;
        if let Some(user) = user.as_deref().filter(|u| u != owner) {
            errors.push(rejection(
                number,
                &ApiError::invalid(format!(
                    "user_id '{owner}' is not the user this import is for ('{user}')"
                )),
            ));
            continue;
        }
        if let Err(e) = access.require(owner) {
            errors.push(rejection(number, &e));
            continue;
        }
        batch.push((number, memory));
        if batch.len() == MAX_BATCH {
            store(
                &state,
                &access,
                &mut batch,
                &mut added,
                &mut duplicates,
                &mut errors,
            )
            .await?;
        }
    }
    store(
        &state,
        &access,
        &mut batch,
        &mut added,
        &mut duplicates,
        &mut errors,
    )
    .await?;
    errors.sort_by_key(|e| e["line"].as_u64());
    Ok(axum::Json(json!({
        "added": added,
        "duplicates": duplicates,
        "rejected": errors.len(),
        "errors": errors,
    }))
    .into_response())
}

/// Stores one batch in one transaction, counting what happened to each line.
async fn store(
    state: &AppState,
    access: &Access,
    batch: &mut Vec<(u64, NewMemory)>,
    added: &mut u64,
    duplicates: &mut u64,
    errors: &mut Vec<Value>,
) -> Result<(), ApiError> {
    if batch.is_empty() {
        return Ok(());
    }
    let (lines, memories): (Vec<u64>, Vec<NewMemory>) = std::mem::take(batch).into_iter().unzip();
    let outcomes = state.service.add_many(access, memories).await?;
    for (line, outcome) in lines.into_iter().zip(outcomes) {
        match outcome {
            Ok(AddOutcome::Added(_)) => *added += 1,
            Ok(AddOutcome::Duplicate(_)) => *duplicates += 1,
            Err(e) => errors.push(rejection(line, &ApiError::from(e))),
        }
    }
    Ok(())
}
