//! `/v1/memories` and `/v1/export`.

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use engram_core::store::MemoryPatch;
use engram_core::{
    AddOutcome, Filter, Importance, Kind, Memory, MemoryId, Message, MetaCondition, NewMemory,
    Scope, StoreError,
};
use engram_memory::{ScoreParts, SearchHit, SearchRequest};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use super::AppState;
use crate::auth::Access;
use crate::error::ApiError;
use crate::extract::{JsonBody, PathParam, QueryPairs};

/// Most memories in one batch.
pub const MAX_BATCH: usize = 10_000;
/// Most hits one search returns.
pub const MAX_SEARCH_LIMIT: usize = 1_000;
/// Most memories one page of a listing holds.
pub const MAX_PAGE: usize = 1_000;
/// Memories per page when the caller does not say.
pub const DEFAULT_PAGE: usize = 20;
/// The roles a message may have.
const ROLES: [&str; 4] = ["user", "assistant", "system", "tool"];

/// Reads a time as the API accepts it: RFC 3339, a date, or an age such as `7d` (read in UTC).
pub(crate) fn parse_time(field: &str, value: &str) -> Result<Timestamp, ApiError> {
    engram_core::time::parse_time(value, Timestamp::now(), &TimeZone::UTC)
        .map_err(|e| ApiError::invalid(format!("{field}: {e}")))
}

/// Reads a memory id from a path.
pub(crate) fn parse_id(raw: &str) -> Result<MemoryId, ApiError> {
    raw.parse()
        .map_err(|e: engram_core::memory::ParseIdError| ApiError::invalid(e.to_string()))
}

/// `Some(v)` for a value, `None` when absent; an explicit `null` is refused (for the fields that
/// `null` cannot clear).
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// `Some(None)` for an explicit `null`, `Some(Some(v))` for a value, `None` when absent.
fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// An optional count, which JSON may spell `10` or `10.0` (both integers to JSON Schema).
fn whole_number<'de, D>(deserializer: D) -> Result<Option<usize>, D::Error>
where
    D: Deserializer<'de>,
{
    let Some(n) = Option::<f64>::deserialize(deserializer)? else {
        return Ok(None);
    };
    // usize::MAX as f64 rounds up to 2^64, which is itself out of range: hence `<`.
    #[allow(clippy::cast_precision_loss)]
    let in_range = n >= 0.0 && n < usize::MAX as f64;
    if n.fract() != 0.0 || !in_range {
        return Err(serde::de::Error::custom(format!(
            "expected a whole number, got {n}"
        )));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Some(n as usize))
}

/// The fields of one memory to add, as the API takes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewMemoryBody {
    user_id: String,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    text: String,
    #[serde(default)]
    kind: Option<Kind>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    importance: Option<Importance>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
}

impl NewMemoryBody {
    fn into_new_memory(self) -> Result<NewMemory, ApiError> {
        build_memory(
            Scope {
                user_id: self.user_id,
                agent_id: self.agent_id,
                session_id: self.session_id,
            },
            self.text,
            Optional {
                kind: self.kind,
                category: self.category,
                importance: self.importance,
                metadata: self.metadata,
                created_at: self.created_at,
                expires_at: self.expires_at,
            },
        )
    }
}

/// The optional attributes of a memory to add.
struct Optional {
    kind: Option<Kind>,
    category: Option<String>,
    importance: Option<Importance>,
    metadata: Option<Map<String, Value>>,
    created_at: Option<String>,
    expires_at: Option<String>,
}

fn build_memory(scope: Scope, text: String, optional: Optional) -> Result<NewMemory, ApiError> {
    let mut memory = NewMemory::new(scope, text)
        .with_kind(optional.kind.unwrap_or(Kind::Episode))
        .with_importance(optional.importance.unwrap_or_default())
        .with_source("api");
    memory.category = optional.category;
    memory.metadata = optional.metadata.unwrap_or_default();
    memory.created_at = optional
        .created_at
        .as_deref()
        .map(|t| parse_time("created_at", t))
        .transpose()?;
    memory.expires_at = optional
        .expires_at
        .as_deref()
        .map(|t| parse_time("expires_at", t))
        .transpose()?;
    memory
        .validate()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(memory)
}

/// `POST /v1/memories`: one memory (`text`) or a conversation (`messages`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddBody {
    user_id: String,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    messages: Option<Vec<MessageBody>>,
    #[serde(default)]
    infer: Option<bool>,
    #[serde(default)]
    kind: Option<Kind>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    importance: Option<Importance>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
}

/// One message of a conversation to remember.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageBody {
    role: String,
    content: String,
}

/// What happened to one memory offered.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Outcome {
    Added { id: MemoryId, memory: Box<Memory> },
    Duplicate { id: MemoryId },
    Rejected { error: Value },
}

impl Outcome {
    fn from_result(result: Result<AddOutcome, StoreError>) -> Self {
        match result {
            Ok(AddOutcome::Added(memory)) => Outcome::Added {
                id: memory.id,
                memory: Box::new(memory),
            },
            Ok(AddOutcome::Duplicate(id)) => Outcome::Duplicate { id },
            Err(e) => Outcome::Rejected {
                error: ApiError::from(e).body()["error"].clone(),
            },
        }
    }

    fn rejected(error: &ApiError) -> Self {
        Outcome::Rejected {
            error: error.body()["error"].clone(),
        }
    }
}

pub(crate) async fn add(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<AddBody>,
) -> Result<Response, ApiError> {
    let scope = Scope {
        user_id: body.user_id,
        agent_id: body.agent_id,
        session_id: body.session_id,
    };
    let optional = Optional {
        kind: body.kind,
        category: body.category,
        importance: body.importance,
        metadata: body.metadata,
        created_at: body.created_at,
        expires_at: body.expires_at,
    };
    match (body.text, body.messages) {
        (Some(text), None) => {
            if body.infer.is_some() {
                return Err(ApiError::invalid(
                    "infer applies to messages; a text is always stored as given",
                ));
            }
            let memory = build_memory(scope, text, optional)?;
            let outcome = state.service.add(&access, memory).await?;
            Ok(match outcome {
                AddOutcome::Added(memory) => (
                    StatusCode::CREATED,
                    axum::Json(json!({"status": "added", "id": memory.id, "memory": memory})),
                )
                    .into_response(),
                AddOutcome::Duplicate(id) => {
                    axum::Json(json!({"status": "duplicate", "id": id})).into_response()
                }
            })
        }
        (None, Some(messages)) => {
            add_messages(state, access, scope, messages, body.infer, optional).await
        }
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "give either text (one memory) or messages (a conversation), not both",
        )),
        (None, None) => Err(ApiError::invalid(
            "give text (one memory) or messages (a conversation)",
        )),
    }
}

/// Messages: with `infer: true` (the default) the model extracts episodes, facts and
/// preferences and merges them with what is known; with `infer: false` each message is
/// stored verbatim as an episode.
async fn add_messages(
    state: AppState,
    access: Access,
    scope: Scope,
    messages: Vec<MessageBody>,
    infer: Option<bool>,
    optional: Optional,
) -> Result<Response, ApiError> {
    if infer.unwrap_or(true) {
        return extract_messages(state, access, scope, messages).await;
    }
    if messages.is_empty() {
        return Err(ApiError::invalid("messages is empty"));
    }
    if messages.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BATCH} messages at once, got {}",
            messages.len()
        )));
    }
    access.require(&scope.user_id)?;
    let mut prepared = Vec::with_capacity(messages.len());
    for (i, message) in messages.into_iter().enumerate() {
        if !ROLES.contains(&message.role.as_str()) {
            return Err(ApiError::invalid(format!(
                "messages[{i}].role: unknown role '{}' (expected one of: {})",
                message.role,
                ROLES.join(", ")
            )));
        }
        let each = Optional {
            kind: optional.kind,
            category: optional.category.clone(),
            importance: optional.importance,
            metadata: optional.metadata.clone(),
            created_at: optional.created_at.clone(),
            expires_at: optional.expires_at.clone(),
        };
        let mut memory = build_memory(scope.clone(), message.content, each)
            .map_err(|e| ApiError::invalid(format!("messages[{i}]: {}", e.message)))?;
        memory
            .metadata
            .insert("role".to_string(), Value::String(message.role));
        prepared.push(memory);
    }
    let outcomes = state.service.add_many(&access, prepared).await?;
    let results: Vec<Outcome> = outcomes.into_iter().map(Outcome::from_result).collect();
    let status = if results.iter().any(|r| matches!(r, Outcome::Added { .. })) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(json!({"results": results}))).into_response())
}

/// `infer: true`: the conversation goes through extraction and merging; the answer is what
/// that did (`{"extraction": {...}}`), 200 even when nothing was worth keeping.
async fn extract_messages(
    state: AppState,
    access: Access,
    scope: Scope,
    messages: Vec<MessageBody>,
) -> Result<Response, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages is empty"));
    }
    let mut conversation = Vec::with_capacity(messages.len());
    for (i, message) in messages.into_iter().enumerate() {
        conversation.push(match message.role.as_str() {
            "user" => Message::user(message.content),
            "assistant" => Message::assistant(message.content),
            "system" => Message::system(message.content),
            // Tool output is not conversation; extraction reads user and assistant words.
            "tool" => continue,
            other => {
                return Err(ApiError::invalid(format!(
                    "messages[{i}].role: unknown role '{other}' (expected one of: {})",
                    ROLES.join(", ")
                )));
            }
        });
    }
    let report = state
        .service
        .extract(&access, &scope, conversation, Timestamp::now())
        .await?;
    Ok((StatusCode::OK, axum::Json(json!({"extraction": report}))).into_response())
}

/// `POST /v1/memories/batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    memories: Vec<NewMemoryBody>,
}

pub(crate) async fn batch(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Response, ApiError> {
    if body.memories.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BATCH} memories in one batch, got {}",
            body.memories.len()
        )));
    }
    // Items that cannot be memories are rejected one by one; the rest go in one transaction.
    let mut slots: Vec<Result<usize, ApiError>> = Vec::with_capacity(body.memories.len());
    let mut good = Vec::with_capacity(body.memories.len());
    for item in body.memories {
        access.require(&item.user_id)?;
        match item.into_new_memory() {
            Ok(memory) => {
                slots.push(Ok(good.len()));
                good.push(memory);
            }
            Err(e) => slots.push(Err(e)),
        }
    }
    let mut stored: Vec<Option<Result<AddOutcome, StoreError>>> = state
        .service
        .add_many(&access, good)
        .await?
        .into_iter()
        .map(Some)
        .collect();
    let (mut added, mut duplicates, mut rejected) = (0u64, 0u64, 0u64);
    let mut results = Vec::with_capacity(slots.len());
    for slot in slots {
        let outcome = match slot {
            Ok(index) => match stored.get_mut(index).and_then(Option::take) {
                Some(result) => Outcome::from_result(result),
                None => {
                    Outcome::rejected(&ApiError::internal("the store returned too few outcomes"))
                }
            },
            Err(e) => Outcome::rejected(&e),
        };
        match &outcome {
            Outcome::Added { .. } => added += 1,
            Outcome::Duplicate { .. } => duplicates += 1,
            Outcome::Rejected { .. } => rejected += 1,
        }
        // The batch answer stays small: ids, not whole memories.
        results.push(match outcome {
            Outcome::Added { id, .. } => json!({"status": "added", "id": id}),
            other => serde_json::to_value(other).unwrap_or(Value::Null),
        });
    }
    Ok(axum::Json(json!({
        "added": added,
        "duplicates": duplicates,
        "rejected": rejected,
        "results": results,
    }))
    .into_response())
}

/// `POST /v1/memories/search`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchBody {
    user_id: String,
    query: String,
    #[serde(default, deserialize_with = "whole_number")]
    limit: Option<usize>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    kinds: Vec<Kind>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    min_importance: Option<Importance>,
    #[serde(default, rename = "where")]
    conditions: Option<Map<String, Value>>,
    #[serde(default)]
    include_closed: bool,
    #[serde(default)]
    explain: bool,
}

/// A hit as `engram search --json` prints it: the memory's fields, its score, and on request
/// how the score came about.
#[derive(Debug, Serialize)]
pub(crate) struct HitJson<'a> {
    #[serde(flatten)]
    memory: &'a Memory,
    score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<&'a ScoreParts>,
}

pub(crate) fn hits_json(hits: &[SearchHit], explain: bool) -> Vec<HitJson<'_>> {
    hits.iter()
        .map(|hit| HitJson {
            memory: &hit.memory,
            score: hit.score,
            explain: explain.then_some(&hit.parts),
        })
        .collect()
}

/// Metadata conditions from a JSON object: strings as they are, numbers and booleans by their
/// JSON spelling (`{"n": 3}` matches 3).
pub(crate) fn conditions_from(
    object: Option<Map<String, Value>>,
) -> Result<Vec<MetaCondition>, ApiError> {
    let mut conditions = Vec::new();
    for (key, value) in object.unwrap_or_default() {
        let value = match value {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(ApiError::invalid(format!(
                    "where.{key}: a condition's value must be a string, number or boolean"
                )));
            }
        };
        conditions.push(MetaCondition { key, value });
    }
    Ok(conditions)
}

pub(crate) async fn search(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Response, ApiError> {
    let limit = body.limit.unwrap_or(10);
    if !(1..=MAX_SEARCH_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_SEARCH_LIMIT}, got {limit}"
        )));
    }
    if body.query.trim().is_empty() {
        return Err(ApiError::invalid("query is empty"));
    }
    let filter = Filter {
        user_id: body.user_id,
        agent_id: body.agent_id,
        session_id: body.session_id,
        kinds: body.kinds,
        categories: body.categories,
        since: body
            .since
            .as_deref()
            .map(|t| parse_time("since", t))
            .transpose()?,
        until: body
            .until
            .as_deref()
            .map(|t| parse_time("until", t))
            .transpose()?,
        min_importance: body.min_importance,
        metadata: conditions_from(body.conditions)?,
        include_closed: body.include_closed,
    };
    let results = state
        .service
        .search(
            &access,
            SearchRequest {
                filter,
                query: body.query,
                limit,
            },
        )
        .await?;
    // Serialized once, straight to bytes: search is the hot route, and a detour through
    // serde_json::Value costs as much as writing the answer.
    let answer = SearchAnswer {
        results: hits_json(&results.hits, body.explain),
        notices: &results.notices,
    };
    Ok(axum::Json(answer).into_response())
}

/// The answer of `POST /v1/memories/search`.
#[derive(Debug, Serialize)]
struct SearchAnswer<'a> {
    results: Vec<HitJson<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    notices: &'a [String],
}

/// The query parameters of `GET /v1/memories`.
const LIST_PARAMS: [&str; 13] = [
    "user_id",
    "agent_id",
    "session_id",
    "kind",
    "category",
    "since",
    "until",
    "min_importance",
    "where",
    "include_closed",
    "limit",
    "offset",
    "cursor",
];

/// A filter from query parameters (shared with the sessions routes).
pub(crate) fn filter_from_query(query: &QueryPairs) -> Result<Filter, ApiError> {
    let user_id = query
        .single("user_id")?
        .ok_or_else(|| {
            ApiError::invalid("query parameter 'user_id' is required (whose memories?)")
        })?
        .to_string();
    let kinds = query
        .list("kind")
        .iter()
        .map(|k| {
            k.parse::<Kind>()
                .map_err(|e| ApiError::invalid(format!("kind: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let conditions = query
        .all("where")
        .into_iter()
        .map(|c| {
            c.parse::<MetaCondition>()
                .map_err(|e| ApiError::invalid(format!("where: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let min_importance = query
        .single("min_importance")?
        .map(|v| {
            v.parse::<Importance>()
                .map_err(|e| ApiError::invalid(format!("min_importance: {e}")))
        })
        .transpose()?;
    Ok(Filter {
        user_id,
        agent_id: query.single("agent_id")?.map(str::to_string),
        session_id: query.single("session_id")?.map(str::to_string),
        kinds,
        categories: query.list("category"),
        since: query
            .single("since")?
            .map(|t| parse_time("since", t))
            .transpose()?,
        until: query
            .single("until")?
            .map(|t| parse_time("until", t))
            .transpose()?,
        min_importance,
        metadata: conditions,
        include_closed: query.flag("include_closed")?,
    })
}

/// A page: `limit` and `offset` (or `cursor`, the opaque form of the offset in `next`).
pub(crate) fn page_from_query(query: &QueryPairs) -> Result<(usize, usize), ApiError> {
    let limit = query.number("limit", 1, MAX_PAGE)?.unwrap_or(DEFAULT_PAGE);
    let offset = match (query.single("offset")?, query.single("cursor")?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give offset or cursor, not both"));
        }
        (None, Some(cursor)) => decode_cursor(cursor)?,
        _ => query.number("offset", 0, usize::MAX)?.unwrap_or(0),
    };
    Ok((limit, offset))
}

/// Cursors are offsets in a form callers are not tempted to compute with.
pub(crate) fn encode_cursor(offset: usize) -> String {
    format!("o{offset:x}")
}

fn decode_cursor(cursor: &str) -> Result<usize, ApiError> {
    cursor
        .strip_prefix('o')
        .and_then(|hex| usize::from_str_radix(hex, 16).ok())
        .ok_or_else(|| {
            ApiError::invalid(format!("'{cursor}' is not a cursor this server gave out"))
        })
}

/// The link to the next page: the same query with the cursor moved on.
pub(crate) fn next_link(uri: &Uri, next_offset: usize) -> String {
    let pairs = QueryPairs::parse(uri.query());
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs.iter() {
        if key != "offset" && key != "cursor" {
            serializer.append_pair(key, value);
        }
    }
    serializer.append_pair("cursor", &encode_cursor(next_offset));
    format!("{}?{}", uri.path(), serializer.finish())
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&LIST_PARAMS)?;
    let filter = filter_from_query(&query)?;
    let (limit, offset) = page_from_query(&query)?;
    page_response(&state, &access, &uri, filter, limit, offset, json!({})).await
}

/// A page of memories with its `next` link; `extra` fields are added to the answer.
pub(crate) async fn page_response(
    state: &AppState,
    access: &Access,
    uri: &Uri,
    filter: Filter,
    limit: usize,
    offset: usize,
    extra: Value,
) -> Result<Response, ApiError> {
    let mut memories = state
        .service
        .list(access, filter, limit.saturating_add(1), offset)
        .await?;
    let more = memories.len() > limit;
    memories.truncate(limit);
    let next_offset = offset.saturating_add(limit);
    let mut body = json!({
        "memories": memories,
        "limit": limit,
        "offset": offset,
        "next_cursor": more.then(|| encode_cursor(next_offset)),
        "next": more.then(|| next_link(uri, next_offset)),
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    Ok(axum::Json(body).into_response())
}

pub(crate) async fn get_one(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let memory = state.service.get(&access, parse_id(&id)?).await?;
    Ok(axum::Json(memory).into_response())
}

/// `PATCH /v1/memories/{id}`: the fields to change; `null` clears category and expires_at.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateBody {
    #[serde(default, deserialize_with = "present")]
    text: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    category: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    importance: Option<Importance>,
    #[serde(default, deserialize_with = "present")]
    metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "nullable")]
    expires_at: Option<Option<String>>,
}

pub(crate) async fn update(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
    JsonBody(body): JsonBody<UpdateBody>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let patch = MemoryPatch {
        text: body.text,
        category: body.category,
        importance: body.importance,
        metadata: body.metadata,
        expires_at: body
            .expires_at
            .map(|e| {
                e.as_deref()
                    .map(|t| parse_time("expires_at", t))
                    .transpose()
            })
            .transpose()?,
    };
    if patch.is_empty() {
        return Err(ApiError::invalid(
            "nothing to change: give text, category, importance, metadata or expires_at",
        ));
    }
    let memory = state.service.update(&access, id, patch).await?;
    Ok(axum::Json(memory).into_response())
}

pub(crate) async fn invalidate(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let memory = state.service.invalidate(&access, parse_id(&id)?).await?;
    Ok(axum::Json(memory).into_response())
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let memory = state.service.delete(&access, parse_id(&id)?).await?;
    Ok(axum::Json(json!({"status": "deleted", "id": memory.id})).into_response())
}

pub(crate) async fn history(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    PathParam(id): PathParam<String>,
) -> Result<Response, ApiError> {
    let events = state.service.history(&access, parse_id(&id)?).await?;
    Ok(axum::Json(json!({"events": events})).into_response())
}

pub(crate) async fn export(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id"])?;
    let user_id = query
        .single("user_id")?
        .ok_or_else(|| {
            ApiError::invalid("query parameter 'user_id' is required (whose memories?)")
        })?
        .to_string();
    Scope::user(user_id.clone())
        .validate()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let receiver = state.service.export(&access, user_id).await?;
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    });
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )],
        Body::from_stream(stream),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_strangers() {
        assert_eq!(decode_cursor(&encode_cursor(12345)).unwrap(), 12345);
        assert!(decode_cursor("12").is_err());
        assert!(decode_cursor("oZZ").is_err());
    }

    #[test]
    fn next_links_keep_the_filters() {
        let uri: Uri = "/v1/memories?user_id=a%20b&kind=fact&offset=5&limit=5"
            .parse()
            .unwrap();
        let link = next_link(&uri, 10);
        assert_eq!(link, "/v1/memories?user_id=a+b&kind=fact&limit=5&cursor=oa");
    }

    #[test]
    fn conditions_take_scalars_only() {
        let mut map = Map::new();
        map.insert("n".into(), json!(3));
        map.insert("ok".into(), json!(true));
        map.insert("s".into(), json!("x"));
        let conditions = conditions_from(Some(map)).unwrap();
        let spelled: Vec<String> = conditions.iter().map(|c| c.to_string()).collect();
        assert_eq!(spelled, vec!["n=3", "ok=true", "s=x"]);
        let mut bad = Map::new();
        bad.insert("a".into(), json!([1]));
        assert!(conditions_from(Some(bad)).is_err());
    }
}
