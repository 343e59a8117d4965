//! The routes of Mem0's open-source REST server (its `server/main.py`): `/memories`,
//! `/memories/{id}`, `/memories/{id}/history`, `/search` and `/reset`, with its bodies and
//! answers.

use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::filter::{self, Dialect};
use super::item::{self, Flavor};
use super::platform::patch_for;
use super::{
    AddInput, MAX_PAGE_SIZE, MAX_TOP_K, Mem0State, MessageIn, refuse_unsupported, scope_filter,
};
use crate::api::parse_id;
use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{JsonBody, PathParam, QueryPairs};

pub(super) fn routes() -> Router<Mem0State> {
    Router::new()
        .route("/memories", post(add).get(list).delete(delete_all))
        .route(
            "/memories/{id}",
            get(get_one).put(update).delete(delete_one),
        )
        .route("/memories/{id}/history", get(history))
        .route("/search", post(search))
        .route("/reset", post(reset))
}

/// `POST /memories`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBody {
    messages: Vec<MessageIn>,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    expiration_date: Option<String>,
    #[serde(default)]
    infer: Option<bool>,
    #[serde(default)]
    memory_type: Option<Value>,
    #[serde(default)]
    prompt: Option<Value>,
}

async fn add(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<AddBody>,
) -> Result<Response, ApiError> {
    refuse_unsupported(&[("memory_type", &body.memory_type), ("prompt", &body.prompt)])?;
    if body.user_id.is_none() && body.agent_id.is_none() && body.run_id.is_none() {
        return Err(ApiError::invalid(
            "At least one identifier (user_id, agent_id, run_id) is required.",
        ));
    }
    let done = state
        .add(
            &access,
            AddInput {
                user_id: body.user_id,
                agent_id: body.agent_id,
                run_id: body.run_id,
                messages: body.messages,
                metadata: body.metadata,
                infer: body.infer.unwrap_or(true),
                expiration_date: body.expiration_date,
                ..AddInput::default()
            },
        )
        .await?;
    let results: Vec<Value> = done
        .results
        .into_iter()
        .map(|mut r| {
            if let Some(object) = r.as_object_mut() {
                object.remove("data");
            }
            r
        })
        .collect();
    Ok(axum::Json(json!({"results": results})).into_response())
}

/// `GET /memories?user_id=...`: a scope's memories, newest first.
async fn list(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id", "agent_id", "run_id", "top_k", "show_expired"])?;
    let one = |key: &str| query.single(key).map(|v| v.map(str::to_string));
    let top_k = query.number("top_k", 0, MAX_PAGE_SIZE)?.unwrap_or(20);
    let show_expired = query.flag("show_expired")?;
    let filters = scope_filter(one("user_id")?, one("agent_id")?, None, one("run_id")?);
    // Without a scope: every memory the caller may see (the server's admin listing).
    let cond = filter::parse(&filters, Dialect::OpenSource)?;
    let (_, memories) = state.list(&access, &cond, show_expired, 0, top_k).await?;
    let items: Vec<Value> = memories
        .iter()
        .map(|m| item::memory_item(m, Flavor::OpenSource, None))
        .collect();
    Ok(axum::Json(json!({"results": items})).into_response())
}

/// A memory id from a path: not a UUID is "no such memory", as for a missing one.
fn memory_id(raw: &str) -> Result<engram_core::MemoryId, ApiError> {
    parse_id(raw).map_err(|_| ApiError::memory_not_found(raw))
}

async fn get_one(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let memory = state.service().get(&access, memory_id(&id)?).await?;
    Ok(axum::Json(item::memory_item(&memory, Flavor::OpenSource, None)).into_response())
}

/// `PUT /memories/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "nullable")]
    expiration_date: Option<Option<String>>,
}

fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

async fn update(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
    JsonBody(body): JsonBody<UpdateBody>,
) -> Result<Response, ApiError> {
    let id = memory_id(&id)?;
    let current = state.service().get(&access, id).await?;
    let patch = patch_for(
        &current.metadata,
        body.text,
        body.metadata,
        body.expiration_date,
    )?;
    state.service().update(&access, id, patch).await?;
    Ok(axum::Json(json!({"message": "Memory updated successfully!"})).into_response())
}

async fn delete_one(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    state.service().delete(&access, memory_id(&id)?).await?;
    Ok(axum::Json(json!({"message": "Memory deleted successfully"})).into_response())
}

async fn history(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let id = memory_id(&id)?;
    let events = state.service().history(&access, id).await?;
    let memory = state.service().get(&access, id).await.ok();
    let rows: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, e)| item::history_row(e, i, memory.as_ref(), Flavor::OpenSource))
        .collect();
    Ok(axum::Json(rows).into_response())
}

/// `DELETE /memories?user_id=...`: every memory of a scope.
async fn delete_all(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id", "agent_id", "run_id"])?;
    let one = |key: &str| query.single(key).map(|v| v.map(str::to_string));
    let filters = scope_filter(one("user_id")?, one("agent_id")?, None, one("run_id")?);
    if filters.is_empty() {
        return Err(ApiError::invalid("At least one identifier is required."));
    }
    let cond = filter::parse(&filters, Dialect::OpenSource)?;
    state.delete_all(&access, &cond).await?;
    Ok(axum::Json(json!({"message": "All relevant memories deleted"})).into_response())
}

/// `POST /search`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchBody {
    query: String,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    filters: Option<Map<String, Value>>,
    #[serde(default)]
    top_k: Option<usize>,
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(default)]
    explain: Option<bool>,
    #[serde(default)]
    show_expired: Option<bool>,
}

async fn search(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Response, ApiError> {
    let mut filters = body.filters.unwrap_or_default();
    // Top-level scope ids are the deprecated form of the same filters.
    for (key, value) in [
        ("user_id", body.user_id),
        ("agent_id", body.agent_id),
        ("run_id", body.run_id),
    ] {
        if let Some(value) = value {
            filters.insert(key.into(), Value::String(value));
        }
    }
    let cond = filter::parse(&filters, Dialect::OpenSource)?;
    if !cond.names_a_scope() {
        return Err(ApiError::invalid(
            "filters must contain at least one of: user_id, agent_id, run_id. Example: \
             filters={'user_id': 'u1'}",
        ));
    }
    let top_k = body.top_k.unwrap_or(20);
    if !(1..=MAX_TOP_K).contains(&top_k) {
        return Err(ApiError::invalid(format!(
            "top_k must be between 1 and {MAX_TOP_K}, got {top_k}"
        )));
    }
    let hits = state
        .search(
            &access,
            &body.query,
            &cond,
            top_k,
            body.threshold,
            body.show_expired.unwrap_or(false),
        )
        .await?;
    let items: Vec<item::Item> = hits
        .iter()
        .map(|(memory, score)| item::Item {
            memory,
            flavor: Flavor::OpenSource,
            score: Some(*score),
        })
        .collect();
    if body.explain.unwrap_or(false) {
        let items: Vec<Value> = items
            .iter()
            .map(|i| {
                let mut item = json!(i);
                if let Some(object) = item.as_object_mut() {
                    object.insert("score_details".into(), json!({"score": i.score}));
                }
                item
            })
            .collect();
        return Ok(axum::Json(json!({"results": items})).into_response());
    }
    Ok(axum::Json(super::platform::Results { results: items }).into_response())
}

/// `POST /reset`: erases every memory the caller may touch. The open-source server allows it
/// to its admin only; here the caller must present a token bound to those users, never the
/// token-less local access.
async fn reset(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
) -> Result<Response, ApiError> {
    let Access::Token { users, .. } = &access else {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "reset erases memories for good: it needs an explicit token (create one with \
             `engram token create --user NAME`); requests without one may not reset",
        ));
    };
    let mut erased = 0;
    for user in users.clone() {
        erased += state.forget(&access, &user).await?;
    }
    Ok(axum::Json(json!({"message": "All memories reset", "erased": erased})).into_response())
}
