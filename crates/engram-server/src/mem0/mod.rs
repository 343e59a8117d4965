//! Mem0-compatible routes: the open-source REST server's (`/memories`, `/search`, `/reset`)
//! and the hosted platform's as its `MemoryClient` (Python and TypeScript) calls them
//! (`/v1/ping/`, `/v3/memories/add/`, `/v3/memories/search/`, `/v1/memories/{id}/`, ...).
//!
//! They are thin adapters over the operations the native API uses ([`MemoryService`]), behind
//! the same tokens (sent as `Authorization: Token ...`, `Bearer ...` or `X-API-Key`): a memory of
//! another user is "not found" here too. Errors read as Mem0's clients expect them:
//! `{"detail": "...", "code": "not_found"}` with the native status and stable code. Routes of
//! Mem0's platform that engram has no counterpart for (organisations, projects, webhooks, ...)
//! answer 501 `not_supported`.
//!
//! Mapping: Mem0's `run_id` is engram's session; its `app_id` is kept in the memory's metadata
//! (`app_id`); its `categories` are engram's one category; `expiration_date` (a day) is the
//! expiry time at the end of that day (UTC).

pub mod events;
pub mod filter;
pub mod item;
mod oss;
mod platform;

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use engram_core::store::MemoryPatch;
use engram_core::{AddOutcome, Filter, Kind, Memory, Message, NewMemory, Scope};
use engram_memory::SearchRequest;
use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::api::AppState;
use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::service::MemoryService;
use events::Events;
use filter::Cond;
use item::APP_ID;

/// Most memories one page of a listing holds.
pub const MAX_PAGE_SIZE: usize = 1_000;
/// Most hits one search returns.
pub const MAX_TOP_K: usize = 1_000;
/// Most messages one add takes.
pub const MAX_MESSAGES: usize = 1_000;
/// Most memories one batch update or delete takes.
pub const MAX_BATCH: usize = 1_000;

/// What the Mem0 routes need besides the application's state.
#[derive(Clone)]
pub struct Mem0State {
    /// The application's state (service and authentication).
    pub app: AppState,
    /// The user a request acts for when it names none and its token has no user.
    pub default_user: Option<String>,
    /// Recent add events.
    pub events: Arc<Events>,
}

impl std::fmt::Debug for Mem0State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mem0State")
            .field("default_user", &self.default_user)
            .finish_non_exhaustive()
    }
}

impl Mem0State {
    fn service(&self) -> &MemoryService {
        &self.app.service
    }
}

/// The Mem0 routes, authenticated like the native API and answering errors in Mem0's shape.
pub fn router<S: Clone + Send + Sync + 'static>(state: Mem0State) -> Router<S> {
    let auth_state = state.app.clone();
    oss::routes()
        .merge(platform::routes())
        .route_layer(middleware::from_fn_with_state(
            auth_state,
            crate::api::authenticate,
        ))
        .layer(middleware::from_fn(mem0_errors))
        .with_state(state)
}

/// True for paths that belong to Mem0's APIs (their unknown routes and wrong methods answer
/// in Mem0's error shape too).
pub fn owns_path(path: &str) -> bool {
    path == "/memories"
        || path.starts_with("/memories/")
        || path == "/search"
        || path == "/reset"
        || path.starts_with("/api/v1/")
        || ((path.starts_with("/v1/") || path.starts_with("/v2/") || path.starts_with("/v3/"))
            && path.ends_with('/'))
}

/// An error as Mem0's clients read it: `detail` is what they show.
pub fn error_response(error: &ApiError) -> Response {
    let mut response = (
        error.code.status(),
        axum::Json(json!({"detail": error.message, "code": error.code.as_str()})),
    )
        .into_response();
    if error.code == ErrorCode::Busy {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// Rewrites native error bodies (from authentication, body parsing or the handlers) into
/// Mem0's shape.
async fn mem0_errors(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    match response.extensions_mut().remove::<ApiError>() {
        Some(error) => error_response(&error),
        None => response,
    }
}

/// A route of Mem0's platform with no engram counterpart.
async fn not_supported(request: Request) -> ApiError {
    ApiError::new(
        ErrorCode::NotSupported,
        format!(
            "{} {} is part of Mem0's hosted platform (organisations, projects, webhooks, \
             exports, profiles, feedback) and has no counterpart in engram",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Refuses Mem0 options engram cannot honour, rather than ignoring them silently.
fn refuse_unsupported(options: &[(&str, &Option<Value>)]) -> Result<(), ApiError> {
    for (name, value) in options {
        if value.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(ApiError::new(
                ErrorCode::NotSupported,
                format!("{name} is not supported by engram; leave it out"),
            ));
        }
    }
    Ok(())
}

/// A message as Mem0 takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageIn {
    role: String,
    content: String,
    /// Some clients name the speaker.
    #[serde(default)]
    name: Option<String>,
}

/// Messages: a list, one message, or a plain string (a user message), as the clients send them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum MessagesIn {
    /// A plain string.
    Text(String),
    /// One message.
    One(MessageIn),
    /// A list of messages.
    Many(Vec<MessageIn>),
}

impl MessagesIn {
    fn into_vec(self) -> Vec<MessageIn> {
        match self {
            MessagesIn::Text(content) => vec![MessageIn {
                role: "user".into(),
                content,
                name: None,
            }],
            MessagesIn::One(message) => vec![message],
            MessagesIn::Many(messages) => messages,
        }
    }
}

/// An add, as both APIs describe it.
#[derive(Debug, Default)]
pub(crate) struct AddInput {
    user_id: Option<String>,
    agent_id: Option<String>,
    app_id: Option<String>,
    run_id: Option<String>,
    messages: Vec<MessageIn>,
    metadata: Option<Map<String, Value>>,
    infer: bool,
    expiration_date: Option<String>,
    created_at: Option<Timestamp>,
}

/// What an add did: the owner and one `{"id", "memory", "event"}` per memory stored.
pub(crate) struct AddOutput {
    owner: String,
    results: Vec<Value>,
}

impl Mem0State {
    /// The user a request acts for: the one it names, else its token's first user, else the
    /// server's default user.
    fn owner(&self, access: &Access, named: Option<String>) -> Result<String, ApiError> {
        if named.as_ref().is_some_and(|u| u.trim().is_empty()) {
            return Err(ApiError::invalid("user_id is empty"));
        }
        let user = named
            .or_else(|| access.default_user().map(str::to_string))
            .or_else(|| self.default_user.clone())
            .ok_or_else(|| {
                ApiError::invalid(
                    "user_id is required: this server has no default user (start it with \
                     --user, or send user_id)",
                )
            })?;
        access.require(&user)?;
        Ok(user)
    }

    /// The users a request without a named user may see: its token's users, else (a local
    /// request without a token) every user with memories, as Mem0's admin sees them.
    async fn visible_users(&self, access: &Access) -> Result<Vec<String>, ApiError> {
        match access {
            Access::Token { users, .. } => Ok(users.clone()),
            Access::Local => Ok(self
                .service()
                .users(access)
                .await?
                .into_iter()
                .map(|u| u.user_id)
                .collect()),
        }
    }

    /// Stores messages: verbatim (`infer: false`), or through extraction and merging.
    async fn add(&self, access: &Access, input: AddInput) -> Result<AddOutput, ApiError> {
        if input.user_id.is_none()
            && input.agent_id.is_none()
            && input.app_id.is_none()
            && input.run_id.is_none()
        {
            return Err(ApiError::invalid(
                "at least one of user_id, agent_id, app_id or run_id is required",
            ));
        }
        if input.messages.is_empty() {
            return Err(ApiError::invalid("messages is empty"));
        }
        if input.messages.len() > MAX_MESSAGES {
            return Err(ApiError::invalid(format!(
                "at most {MAX_MESSAGES} messages at once, got {}",
                input.messages.len()
            )));
        }
        for (i, message) in input.messages.iter().enumerate() {
            if !["user", "assistant", "system"].contains(&message.role.as_str()) {
                return Err(ApiError::invalid(format!(
                    "messages[{i}].role: unknown role '{}' (expected user, assistant or system)",
                    message.role
                )));
            }
        }
        let owner = self.owner(access, input.user_id.clone())?;
        let scope = Scope {
            user_id: owner.clone(),
            agent_id: input.agent_id.clone(),
            session_id: input.run_id.clone(),
        };
        scope
            .validate()
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let expires_at = input
            .expiration_date
            .as_deref()
            .map(item::expiry_from)
            .transpose()
            .map_err(ApiError::invalid)?;
        let mut metadata = input.metadata.clone().unwrap_or_default();
        if let Some(app) = &input.app_id {
            metadata.insert(APP_ID.into(), Value::String(app.clone()));
        }
        let results = if input.infer {
            self.add_inferred(access, &scope, input, metadata, expires_at)
                .await?
        } else {
            self.add_verbatim(access, &scope, input, metadata, expires_at)
                .await?
        };
        Ok(AddOutput { owner, results })
    }

    async fn add_verbatim(
        &self,
        access: &Access,
        scope: &Scope,
        input: AddInput,
        metadata: Map<String, Value>,
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<Value>, ApiError> {
        let mut memories = Vec::with_capacity(input.messages.len());
        for (i, message) in input.messages.into_iter().enumerate() {
            let mut memory = NewMemory::new(scope.clone(), message.content)
                .with_kind(Kind::Episode)
                .with_source("api");
            memory.metadata = metadata.clone();
            memory
                .metadata
                .insert("role".into(), Value::String(message.role));
            if let Some(name) = message.name {
                memory.metadata.insert("name".into(), Value::String(name));
            }
            memory.expires_at = expires_at;
            memory.created_at = input.created_at;
            memory
                .validate()
                .map_err(|e| ApiError::invalid(format!("messages[{i}]: {e}")))?;
            memories.push(memory);
        }
        let outcomes = self.service().add_many(access, memories).await?;
        let mut results = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            match outcome {
                Ok(AddOutcome::Added(memory)) => results.push(add_result(&memory, "ADD")),
                // The same text is already stored in this scope: nothing changed.
                Ok(AddOutcome::Duplicate(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(results)
    }

    async fn add_inferred(
        &self,
        access: &Access,
        scope: &Scope,
        input: AddInput,
        metadata: Map<String, Value>,
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<Value>, ApiError> {
        let conversation: Vec<Message> = input
            .messages
            .into_iter()
            .map(|m| match m.role.as_str() {
                "assistant" => Message::assistant(m.content),
                "system" => Message::system(m.content),
                _ => Message::user(m.content),
            })
            .collect();
        // The store keeps microseconds: a time it can give back exactly.
        let now = Timestamp::now();
        let now = Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now);
        self.service()
            .extract(access, scope, conversation, now)
            .await?;
        // Everything the extraction stored carries its time: find it again.
        let filter = Filter {
            since: Some(now),
            until: now.checked_add(SignedDuration::from_micros(1)).ok(),
            ..Filter::user(scope.user_id.clone())
        };
        let stored = self
            .service()
            .list(access, filter, MAX_MESSAGES * 4, 0)
            .await?;
        let mut results = Vec::with_capacity(stored.len());
        for memory in stored.into_iter().filter(|m| m.created_at == now) {
            let memory = if metadata.is_empty() && expires_at.is_none() {
                memory
            } else {
                let mut merged = memory.metadata.clone();
                merged.extend(metadata.clone());
                let patch = MemoryPatch {
                    metadata: (!metadata.is_empty()).then_some(merged),
                    expires_at: expires_at.map(Some),
                    ..MemoryPatch::default()
                };
                self.service().update(access, memory.id, patch).await?
            };
            results.push(add_result(&memory, "ADD"));
        }
        Ok(results)
    }

    /// The users a filter reaches, each checked against the caller's access.
    async fn users_of(&self, access: &Access, cond: &Cond) -> Result<Vec<String>, ApiError> {
        match cond.users() {
            Some(users) => {
                for user in &users {
                    access.require(user)?;
                }
                Ok(users.into_iter().collect())
            }
            None => self.visible_users(access).await,
        }
    }

    /// The store filters for a Mem0 filter, one per user, and whether they say all of it.
    async fn plan(
        &self,
        access: &Access,
        cond: &Cond,
        show_expired: bool,
    ) -> Result<(Vec<Filter>, bool), ApiError> {
        let users = self.users_of(access, cond).await?;
        let mut exact = true;
        let mut filters = Vec::with_capacity(users.len());
        for user in users {
            let mut filter = Filter::user(user);
            exact &= cond.push_down(&mut filter);
            // Expired memories come with closed ones; the closed are dropped one by one.
            filter.include_closed = show_expired;
            filters.push(filter);
        }
        Ok((filters, exact && !show_expired))
    }

    /// Ranked search across the users a filter reaches.
    async fn search(
        &self,
        access: &Access,
        query: &str,
        cond: &Cond,
        top_k: usize,
        threshold: Option<f64>,
        show_expired: bool,
    ) -> Result<Vec<(Memory, f64)>, ApiError> {
        if query.trim().is_empty() {
            return Err(ApiError::invalid("query is empty"));
        }
        if !(1..=MAX_TOP_K).contains(&top_k) {
            return Err(ApiError::invalid(format!(
                "top_k must be between 1 and {MAX_TOP_K}, got {top_k}"
            )));
        }
        let (filters, exact) = self.plan(access, cond, show_expired).await?;
        let mut hits: Vec<(Memory, f64)> = Vec::new();
        for filter in filters {
            // When the store cannot apply the whole filter, ask for more and check each.
            let mut limit = if exact {
                top_k
            } else {
                (top_k * 5).clamp(100, MAX_TOP_K)
            };
            loop {
                let found = self
                    .service()
                    .search(
                        access,
                        SearchRequest {
                            filter: filter.clone(),
                            query: query.to_string(),
                            limit,
                        },
                    )
                    .await?;
                let returned = found.hits.len();
                let kept: Vec<(Memory, f64)> = found
                    .hits
                    .into_iter()
                    .filter(|h| exact || keep(&h.memory, cond, show_expired))
                    .map(|h| (h.memory, h.score))
                    .collect();
                if exact || kept.len() >= top_k || returned < limit || limit >= MAX_TOP_K {
                    hits.extend(kept);
                    break;
                }
                limit = (limit * 4).min(MAX_TOP_K);
            }
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1));
        if let Some(threshold) = threshold {
            hits.retain(|(_, score)| *score >= threshold);
        }
        hits.truncate(top_k);
        Ok(hits)
    }

    /// A page of the memories a filter reaches, newest first, and how many there are in all.
    async fn list(
        &self,
        access: &Access,
        cond: &Cond,
        show_expired: bool,
        offset: usize,
        limit: usize,
    ) -> Result<(u64, Vec<Memory>), ApiError> {
        let (filters, exact) = self.plan(access, cond, show_expired).await?;
        if let ([filter], true) = (filters.as_slice(), exact) {
            let total = self.service().count(access, filter.clone()).await?;
            let page = self
                .service()
                .list(access, filter.clone(), limit, offset)
                .await?;
            return Ok((total, page));
        }
        if exact {
            // Several users: each one's first pages, merged by time.
            let mut total = 0;
            let mut page = Vec::new();
            let wanted = offset.saturating_add(limit);
            for filter in filters.iter() {
                total += self.service().count(access, filter.clone()).await?;
                let mut memories = self
                    .service()
                    .list(access, filter.clone(), wanted, 0)
                    .await?;
                page.append(&mut memories);
            }
            page.sort_by_key(|m| std::cmp::Reverse(m.created_at));
            let page = page.into_iter().skip(offset).take(limit).collect();
            return Ok((total, page));
        }
        let mut all = self.scan(access, &filters, cond, show_expired).await?;
        all.sort_by_key(|m| std::cmp::Reverse(m.created_at));
        let total = all.len() as u64;
        Ok((total, all.into_iter().skip(offset).take(limit).collect()))
    }

    /// Every memory the filters reach that passes the filter.
    async fn scan(
        &self,
        access: &Access,
        filters: &[Filter],
        cond: &Cond,
        show_expired: bool,
    ) -> Result<Vec<Memory>, ApiError> {
        let mut all = Vec::new();
        for filter in filters {
            let mut offset = 0;
            loop {
                let page = self
                    .service()
                    .list(access, filter.clone(), MAX_PAGE_SIZE, offset)
                    .await?;
                let n = page.len();
                all.extend(page.into_iter().filter(|m| keep(m, cond, show_expired)));
                if n < MAX_PAGE_SIZE {
                    break;
                }
                offset += n;
            }
        }
        Ok(all)
    }

    /// Erases a user's memories and history.
    async fn forget(&self, access: &Access, user: &str) -> Result<u64, ApiError> {
        self.service().forget(access, user.to_string()).await
    }

    /// Deletes every memory a filter reaches; the history of each records the deletion.
    async fn delete_all(&self, access: &Access, cond: &Cond) -> Result<usize, ApiError> {
        let (filters, _) = self.plan(access, cond, true).await?;
        let doomed = self.scan(access, &filters, cond, true).await?;
        for memory in &doomed {
            self.service().delete(access, memory.id).await?;
        }
        Ok(doomed.len())
    }
}

/// The check on each memory: the filter, and (when expired memories are shown) that it was not
/// invalidated.
fn keep(memory: &Memory, cond: &Cond, show_expired: bool) -> bool {
    (!show_expired || memory.valid_to.is_none()) && cond.matches(memory)
}

/// One entry of an add's results, in the shape both APIs give.
fn add_result(memory: &Memory, event: &str) -> Value {
    let mut result = json!({
        "id": memory.id,
        "memory": memory.text,
        "event": event,
        "data": {"memory": memory.text},
    });
    if let (Some(object), Some(role)) = (result.as_object_mut(), memory.metadata.get("role")) {
        object.insert("role".into(), role.clone());
    }
    result
}

/// Keeps only the named fields of each item (Mem0's `fields`).
fn project(items: Vec<Value>, fields: &Option<Vec<String>>) -> Vec<Value> {
    let Some(fields) = fields.as_ref().filter(|f| !f.is_empty()) else {
        return items;
    };
    let wanted: BTreeSet<&str> = fields.iter().map(String::as_str).collect();
    items
        .into_iter()
        .map(|mut item| {
            if let Some(object) = item.as_object_mut() {
                object.retain(|k, _| wanted.contains(k.as_str()));
            }
            item
        })
        .collect()
}

/// A filter from the scope parameters of the open-source server and the v1 routes.
fn scope_filter(
    user_id: Option<String>,
    agent_id: Option<String>,
    app_id: Option<String>,
    run_id: Option<String>,
) -> Map<String, Value> {
    let mut filters = Map::new();
    for (key, value) in [
        ("user_id", user_id),
        ("agent_id", agent_id),
        ("app_id", app_id),
        ("run_id", run_id),
    ] {
        if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
            filters.insert(key.into(), Value::String(value));
        }
    }
    filters
}
