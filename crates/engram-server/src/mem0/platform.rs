//! The hosted platform's routes, as Mem0's `MemoryClient` (Python `mem0ai`, npm `mem0ai`)
//! calls them: trailing slashes, `Authorization: Token KEY`, v3 adds, lists and searches, v1
//! single-memory routes, batches and events.

use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::{Extension, Router};
use engram_core::MemoryId;
use engram_core::store::MemoryPatch;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::filter::{self, Dialect};
use super::item::{self, Flavor};
use super::{
    AddInput, MAX_BATCH, MAX_PAGE_SIZE, MAX_TOP_K, Mem0State, MessagesIn, not_supported, project,
    refuse_unsupported, scope_filter,
};
use crate::api::parse_id;
use crate::auth::Access;
use crate::error::ApiError;
use crate::extract::{JsonBody, PathParam, QueryPairs};

pub(super) fn routes() -> Router<Mem0State> {
    let mut router = Router::new()
        .route("/v1/ping/", get(ping))
        .route("/v3/memories/add/", post(add))
        .route("/v3/memories/", post(list_v3))
        .route("/v2/memories/", post(list_v2))
        .route("/v3/memories/search/", post(search_v3))
        .route("/v2/memories/search/", post(search_v2))
        .route(
            "/v1/memories/",
            axum::routing::delete(delete_all)
                .post(not_supported)
                .get(not_supported),
        )
        .route(
            "/v1/memories/{id}/",
            get(get_one).put(update).delete(delete_one),
        )
        .route("/v1/memories/{id}/history/", get(history))
        .route("/v1/batch/", put(batch_update).delete(batch_delete))
        .route("/v1/event/{event_id}/", get(event));
    // Platform features without an engram counterpart: a clear 501, never a 404 or a 500.
    router = router
        .route("/v1/entities/", get(entities))
        .route(
            "/v2/entities/{kind}/{name}/",
            axum::routing::delete(delete_entity),
        )
        .route(
            "/v1/entities/{kind}/{name}/",
            axum::routing::delete(delete_entity),
        );
    for path in [
        "/api/v1/{*rest}",
        "/v1/entities/filters/",
        "/v1/events/",
        "/v1/memories/events/",
        "/v1/memories/search/",
        "/v1/exports/",
        "/v1/exports/get/",
        "/v1/summary/",
        "/v1/feedback/",
        "/v1/stats/",
        "/v1/users/",
        "/v1/agents/",
        "/v1/apps/",
        "/v1/runs/",
        "/v2/profiles/{*rest}",
    ] {
        router = router.route(path, any(not_supported));
    }
    router
}

async fn ping(Extension(access): Extension<Access>) -> Response {
    axum::Json(json!({
        "status": "ok",
        "message": "engram: the token is valid",
        // The clients insist on an organisation and a project; engram has one of each.
        "org_id": "engram",
        "project_id": "default",
        "user_email": null,
        "users": match &access {
            Access::Token { users, .. } => json!(users),
            Access::Local => Value::Null,
        },
    }))
    .into_response()
}

/// `POST /v3/memories/add/`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBody {
    messages: MessagesIn,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    app_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    /// The typed options of the Python client put entity ids here.
    #[serde(default)]
    filters: Option<Map<String, Value>>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    infer: Option<bool>,
    #[serde(default)]
    expiration_date: Option<String>,
    /// Unix seconds: when the conversation happened.
    #[serde(default)]
    timestamp: Option<f64>,
    // Only the answer's envelope or how it is processed; engram answers one way.
    #[serde(default)]
    output_format: Option<Value>,
    #[serde(default)]
    version: Option<Value>,
    #[serde(default)]
    async_mode: Option<Value>,
    #[serde(default)]
    org_id: Option<Value>,
    #[serde(default)]
    project_id: Option<Value>,
    // Mem0 features engram has no counterpart for: refused when given.
    #[serde(default)]
    custom_categories: Option<Value>,
    #[serde(default)]
    custom_instructions: Option<Value>,
    #[serde(default)]
    agent_custom_instructions: Option<Value>,
    #[serde(default)]
    includes: Option<Value>,
    #[serde(default)]
    excludes: Option<Value>,
    #[serde(default)]
    immutable: Option<Value>,
    #[serde(default)]
    enable_graph: Option<Value>,
    #[serde(default)]
    structured_data_schema: Option<Value>,
    #[serde(default)]
    prompt_profile_id: Option<Value>,
}

/// An entity id from the top level or from `filters` (never both, never two different ones).
fn entity(
    top: Option<String>,
    filters: &Map<String, Value>,
    key: &str,
) -> Result<Option<String>, ApiError> {
    let nested = match filters.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::invalid(format!(
                "filters.{key}: an add takes one {key}, as a string"
            )));
        }
    };
    match (top, nested) {
        (Some(a), Some(b)) if a != b => {
            Err(ApiError::invalid(format!("{key} and filters.{key} differ")))
        }
        (a, b) => Ok(a.or(b)),
    }
}

async fn add(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<AddBody>,
) -> Result<Response, ApiError> {
    refuse_unsupported(&[
        ("custom_categories", &body.custom_categories),
        ("custom_instructions", &body.custom_instructions),
        ("agent_custom_instructions", &body.agent_custom_instructions),
        ("includes", &body.includes),
        ("excludes", &body.excludes),
        ("immutable", &body.immutable),
        ("enable_graph", &body.enable_graph),
        ("structured_data_schema", &body.structured_data_schema),
        ("prompt_profile_id", &body.prompt_profile_id),
    ])?;
    let _ = (&body.output_format, &body.version, &body.async_mode);
    let _ = (&body.org_id, &body.project_id);
    let filters = body.filters.unwrap_or_default();
    for key in filters.keys() {
        if !["user_id", "agent_id", "app_id", "run_id"].contains(&key.as_str()) {
            return Err(ApiError::invalid(format!(
                "filters.{key}: an add's filters name its scope only (user_id, agent_id, app_id, run_id)"
            )));
        }
    }
    let created_at = body
        .timestamp
        .map(|secs| {
            jiff::Timestamp::from_microsecond((secs * 1e6) as i64)
                .map_err(|e| ApiError::invalid(format!("timestamp: {e}")))
        })
        .transpose()?;
    let input = AddInput {
        user_id: entity(body.user_id, &filters, "user_id")?,
        agent_id: entity(body.agent_id, &filters, "agent_id")?,
        app_id: entity(body.app_id, &filters, "app_id")?,
        run_id: entity(body.run_id, &filters, "run_id")?,
        messages: body.messages.into_vec(),
        metadata: body.metadata,
        infer: body.infer.unwrap_or(true),
        expiration_date: body.expiration_date,
        created_at,
    };
    let started = jiff::Timestamp::now();
    let payload = json!({
        "user_id": input.user_id, "agent_id": input.agent_id, "app_id": input.app_id,
        "run_id": input.run_id, "infer": input.infer, "messages": input.messages.len(),
    });
    let done = state.add(&access, input).await?;
    let results = Value::Array(done.results);
    let event_id = state
        .events
        .finished_add(&done.owner, payload, results.clone(), started);
    Ok(axum::Json(json!({
        "message": "Memories processed",
        "status": "SUCCEEDED",
        "event_id": event_id,
        "results": results,
    }))
    .into_response())
}

/// `POST /v3/memories/` and `POST /v2/memories/`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListBody {
    filters: Map<String, Value>,
    #[serde(default)]
    page: Option<usize>,
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    show_expired: bool,
    #[serde(default)]
    start_date: Option<String>,
    #[serde(default)]
    end_date: Option<String>,
    #[serde(default)]
    categories: Option<Vec<String>>,
    #[serde(default)]
    keywords: Option<String>,
    #[serde(default)]
    fields: Option<Vec<String>>,
    #[serde(default)]
    latest_only: Option<bool>,
    #[serde(default)]
    org_id: Option<Value>,
    #[serde(default)]
    project_id: Option<Value>,
}

/// The filter of a request: `filters`, plus the shortcuts some routes take beside it.
fn read_filter(
    filters: &Map<String, Value>,
    extra: Vec<(&str, Value)>,
) -> Result<filter::Cond, ApiError> {
    let mut all = vec![Value::Object(filters.clone())];
    for (key, value) in extra {
        let mut one = Map::new();
        one.insert(key.to_string(), value);
        all.push(Value::Object(one));
    }
    let mut top = Map::new();
    top.insert("AND".into(), Value::Array(all));
    let cond = filter::parse(&top, Dialect::Platform)?;
    if !cond.names_a_scope() {
        return Err(ApiError::invalid(
            "filters must name at least one of user_id, agent_id, app_id or run_id, e.g. \
             {\"user_id\": \"alice\"}",
        ));
    }
    Ok(cond)
}

async fn list_v3(
    state: State<Mem0State>,
    access: Extension<Access>,
    uri: Uri,
    body: JsonBody<ListBody>,
) -> Result<Response, ApiError> {
    list(state, access, uri, body, true).await
}

async fn list_v2(
    state: State<Mem0State>,
    access: Extension<Access>,
    uri: Uri,
    body: JsonBody<ListBody>,
) -> Result<Response, ApiError> {
    list(state, access, uri, body, false).await
}

async fn list(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    uri: Uri,
    JsonBody(body): JsonBody<ListBody>,
    paged: bool,
) -> Result<Response, ApiError> {
    let _ = (&body.org_id, &body.project_id, body.latest_only);
    let query = QueryPairs::parse(uri.query());
    query.only(&["page", "page_size"])?;
    let page = query
        .number("page", 1, usize::MAX)?
        .or(body.page)
        .unwrap_or(1);
    let page_size = query
        .number("page_size", 1, MAX_PAGE_SIZE)?
        .or(body.page_size)
        .unwrap_or(100);
    if page == 0 || !(1..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(ApiError::invalid(format!(
            "page starts at 1 and page_size is between 1 and {MAX_PAGE_SIZE}"
        )));
    }
    let mut extra = Vec::new();
    if let Some(start) = body.start_date {
        extra.push(("created_at", json!({"gte": start})));
    }
    if let Some(end) = body.end_date {
        extra.push(("created_at", json!({"lte": end})));
    }
    if let Some(categories) = body.categories {
        extra.push(("categories", json!({"in": categories})));
    }
    if let Some(keywords) = body.keywords {
        extra.push(("keywords", json!({"icontains": keywords})));
    }
    let cond = read_filter(&body.filters, extra)?;
    let offset = (page - 1).saturating_mul(page_size);
    let (count, memories) = state
        .list(&access, &cond, body.show_expired, offset, page_size)
        .await?;
    let items = project(
        memories
            .iter()
            .map(|m| item::memory_item(m, Flavor::Platform, None))
            .collect(),
        &body.fields,
    );
    if !paged {
        return Ok(axum::Json(items).into_response());
    }
    let link = |p: usize| format!("{}?page={p}&page_size={page_size}", uri.path());
    let more = (offset + page_size) < count as usize;
    Ok(axum::Json(json!({
        "count": count,
        "next": more.then(|| link(page + 1)),
        "previous": (page > 1).then(|| link(page - 1)),
        "results": items,
    }))
    .into_response())
}

/// `POST /v3/memories/search/` and `POST /v2/memories/search/`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchBody {
    query: String,
    #[serde(default)]
    filters: Option<Map<String, Value>>,
    #[serde(default)]
    top_k: Option<usize>,
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(default)]
    show_expired: bool,
    #[serde(default)]
    categories: Option<Vec<String>>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    fields: Option<Vec<String>>,
    /// engram ranks one way; a request for Mem0's reranker or keyword mode gets that ranking.
    #[serde(default)]
    rerank: Option<bool>,
    #[serde(default)]
    keyword_search: Option<bool>,
    #[serde(default)]
    latest_only: Option<bool>,
    #[serde(default)]
    output_format: Option<Value>,
    #[serde(default)]
    version: Option<Value>,
    #[serde(default)]
    org_id: Option<Value>,
    #[serde(default)]
    project_id: Option<Value>,
    #[serde(default)]
    filter_memories: Option<Value>,
    #[serde(default)]
    reference_date: Option<Value>,
}

async fn search_v3(
    state: State<Mem0State>,
    access: Extension<Access>,
    body: JsonBody<SearchBody>,
) -> Result<Response, ApiError> {
    search(state, access, body, true).await
}

async fn search_v2(
    state: State<Mem0State>,
    access: Extension<Access>,
    body: JsonBody<SearchBody>,
) -> Result<Response, ApiError> {
    search(state, access, body, false).await
}

async fn search(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<SearchBody>,
    wrapped: bool,
) -> Result<Response, ApiError> {
    refuse_unsupported(&[("reference_date", &body.reference_date)])?;
    let _ = (body.rerank, body.keyword_search, body.latest_only);
    let _ = (
        &body.output_format,
        &body.version,
        &body.org_id,
        &body.project_id,
    );
    let _ = &body.filter_memories;
    let top_k = body.top_k.unwrap_or(10);
    if !(1..=MAX_TOP_K).contains(&top_k) {
        return Err(ApiError::invalid(format!(
            "top_k must be between 1 and {MAX_TOP_K}, got {top_k}"
        )));
    }
    if let Some(t) = body.threshold
        && !(0.0..=1.0).contains(&t)
    {
        return Err(ApiError::invalid(format!(
            "threshold must be between 0 and 1, got {t}"
        )));
    }
    let mut extra = Vec::new();
    if let Some(categories) = body.categories {
        extra.push(("categories", json!({"in": categories})));
    }
    if let Some(metadata) = body.metadata {
        extra.push(("metadata", Value::Object(metadata)));
    }
    let cond = read_filter(&body.filters.unwrap_or_default(), extra)?;
    let hits = state
        .search(
            &access,
            &body.query,
            &cond,
            top_k,
            body.threshold,
            body.show_expired,
        )
        .await?;
    let items: Vec<item::Item> = hits
        .iter()
        .map(|(memory, score)| item::Item {
            memory,
            flavor: Flavor::Platform,
            score: Some(*score),
        })
        .collect();
    if body.fields.as_ref().is_some_and(|f| !f.is_empty()) {
        let items = project(items.iter().map(|i| json!(i)).collect(), &body.fields);
        return Ok(if wrapped {
            axum::Json(json!({"results": items})).into_response()
        } else {
            axum::Json(items).into_response()
        });
    }
    // Straight to bytes: search is the hot route.
    Ok(if wrapped {
        axum::Json(Results { results: items }).into_response()
    } else {
        axum::Json(items).into_response()
    })
}

/// `{"results": [...]}`, serialized without an intermediate JSON value.
#[derive(serde::Serialize)]
pub(super) struct Results<'a> {
    pub(super) results: Vec<item::Item<'a>>,
}

async fn get_one(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let memory = state.service().get(&access, memory_id(&id)?).await?;
    Ok(axum::Json(item::memory_item(&memory, Flavor::Platform, None)).into_response())
}

/// A memory id from a path: not a UUID is "no such memory", as for a missing one.
fn memory_id(raw: &str) -> Result<MemoryId, ApiError> {
    parse_id(raw).map_err(|_| ApiError::memory_not_found(raw))
}

/// `PUT /v1/memories/{id}/`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "nullable")]
    expiration_date: Option<Option<String>>,
    #[serde(default)]
    timestamp: Option<Value>,
}

fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// The change an update asks for; metadata replaces the memory's own (its app stays).
pub(super) fn patch_for(
    current_metadata: &Map<String, Value>,
    text: Option<String>,
    metadata: Option<Map<String, Value>>,
    expiration_date: Option<Option<String>>,
) -> Result<MemoryPatch, ApiError> {
    let metadata = metadata.map(|mut given| {
        if let Some(app) = current_metadata.get(item::APP_ID) {
            given.insert(item::APP_ID.into(), app.clone());
        }
        given
    });
    let expires_at = expiration_date
        .map(|d| d.as_deref().map(item::expiry_from).transpose())
        .transpose()
        .map_err(ApiError::invalid)?;
    let patch = MemoryPatch {
        text,
        metadata,
        expires_at,
        ..MemoryPatch::default()
    };
    if patch.is_empty() {
        return Err(ApiError::invalid(
            "nothing to change: give text, metadata or expiration_date",
        ));
    }
    Ok(patch)
}

async fn update(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
    JsonBody(body): JsonBody<UpdateBody>,
) -> Result<Response, ApiError> {
    refuse_unsupported(&[("timestamp", &body.timestamp)])?;
    let id = memory_id(&id)?;
    let current = state.service().get(&access, id).await?;
    let patch = patch_for(
        &current.metadata,
        body.text,
        body.metadata,
        body.expiration_date,
    )?;
    let memory = state.service().update(&access, id, patch).await?;
    Ok(axum::Json(item::memory_item(&memory, Flavor::Platform, None)).into_response())
}

async fn delete_one(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["delete_linked"])?;
    // engram closes superseded memories instead of linking them: there is nothing to cascade.
    let _ = query.flag("delete_linked")?;
    state.service().delete(&access, memory_id(&id)?).await?;
    Ok(axum::Json(json!({"message": "Memory deleted successfully!"})).into_response())
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
        .map(|(i, e)| item::history_row(e, i, memory.as_ref(), Flavor::Platform))
        .collect();
    Ok(axum::Json(rows).into_response())
}

/// `DELETE /v1/memories/?user_id=...`: every memory of a scope.
async fn delete_all(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&[
        "user_id",
        "agent_id",
        "app_id",
        "run_id",
        "org_id",
        "project_id",
    ])?;
    let one = |key: &str| query.single(key).map(|v| v.map(str::to_string));
    let filters = scope_filter(
        one("user_id")?,
        one("agent_id")?,
        one("app_id")?,
        one("run_id")?,
    );
    if filters.is_empty() {
        return Err(ApiError::invalid(
            "name the scope to delete: user_id, agent_id, app_id or run_id",
        ));
    }
    let cond = filter::parse(&filters, Dialect::Platform)?;
    let deleted = state.delete_all(&access, &cond).await?;
    Ok(axum::Json(json!({
        "message": "Memories deleted successfully!",
        "deleted": deleted,
    }))
    .into_response())
}

/// One entry of a batch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchItem {
    memory_id: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    memories: Vec<BatchItem>,
}

/// Checks a batch and reads its ids; every memory must be one the caller may see, or nothing
/// is changed.
async fn batch_ids(
    state: &Mem0State,
    access: &Access,
    memories: &[BatchItem],
) -> Result<Vec<engram_core::Memory>, ApiError> {
    if memories.is_empty() {
        return Err(ApiError::invalid("memories is empty"));
    }
    if memories.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BATCH} memories in one batch, got {}",
            memories.len()
        )));
    }
    let mut found = Vec::with_capacity(memories.len());
    for (i, entry) in memories.iter().enumerate() {
        let id = memory_id(&entry.memory_id)
            .map_err(|e| ApiError::new(e.code, format!("memories[{i}]: {}", e.message)))?;
        let memory = state
            .service()
            .get(access, id)
            .await
            .map_err(|e| ApiError::new(e.code, format!("memories[{i}]: {}", e.message)))?;
        found.push(memory);
    }
    Ok(found)
}

async fn batch_update(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Response, ApiError> {
    let current = batch_ids(&state, &access, &body.memories).await?;
    let mut patches = Vec::with_capacity(current.len());
    for (i, (entry, memory)) in body.memories.into_iter().zip(&current).enumerate() {
        let patch = patch_for(&memory.metadata, entry.text, entry.metadata, None)
            .map_err(|e| ApiError::new(e.code, format!("memories[{i}]: {}", e.message)))?;
        patches.push((memory.id, patch));
    }
    let n = patches.len();
    for (id, patch) in patches {
        state.service().update(&access, id, patch).await?;
    }
    Ok(
        axum::Json(json!({"message": format!("Successfully updated {n} memories")}))
            .into_response(),
    )
}

async fn batch_delete(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Response, ApiError> {
    if body
        .memories
        .iter()
        .any(|m| m.text.is_some() || m.metadata.is_some())
    {
        return Err(ApiError::invalid(
            "a batch delete takes only memory_id for each memory",
        ));
    }
    let doomed = batch_ids(&state, &access, &body.memories).await?;
    for memory in &doomed {
        state.service().delete(&access, memory.id).await?;
    }
    Ok(
        axum::Json(json!({"message": format!("Successfully deleted {} memories", doomed.len())}))
            .into_response(),
    )
}

/// `GET /v1/entities/`: the users the caller may see, as Mem0 lists its entities.
async fn entities(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
) -> Result<Response, ApiError> {
    let users = state.service().users(&access).await?;
    let results: Vec<Value> = users
        .iter()
        .map(|u| {
            json!({
                "id": u.user_id, "name": u.user_id, "type": "user",
                "total_memories": u.memories, "owner": null, "organization": null,
                "metadata": null, "created_at": null, "updated_at": null,
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "count": results.len(), "next": null, "previous": null, "results": results,
    }))
    .into_response())
}

/// `DELETE /v2/entities/{type}/{name}/`: a user (all their memories and history, for good), or
/// every memory of an agent, app or run among the users the caller may see.
async fn delete_entity(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam((kind, name)): PathParam<(String, String)>,
) -> Result<Response, ApiError> {
    let key = match kind.as_str() {
        "user" => {
            state.forget(&access, &name).await?;
            return Ok(
                axum::Json(json!({"message": "Entity deleted successfully."})).into_response(),
            );
        }
        "agent" => "agent_id",
        "app" => "app_id",
        "run" => "run_id",
        other => {
            return Err(ApiError::invalid(format!(
                "unknown entity type '{other}' (expected user, agent, app or run)"
            )));
        }
    };
    let mut filters = Map::new();
    filters.insert(key.into(), Value::String(name));
    let cond = filter::parse(&filters, Dialect::Platform)?;
    state.delete_all(&access, &cond).await?;
    Ok(axum::Json(json!({"message": "Entity deleted successfully."})).into_response())
}

async fn event(
    State(state): State<Mem0State>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    state
        .events
        .get(&id, &access)
        .map(|e| axum::Json(e).into_response())
        .ok_or_else(|| {
            ApiError::new(
                crate::error::ErrorCode::NotFound,
                format!("no event with id {id}"),
            )
        })
}
