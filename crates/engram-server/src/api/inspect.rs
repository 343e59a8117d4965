//! What the memory inspector (and anyone else) needs to look at a user's memory as a whole:
//! who may be seen (`/v1/users`), the profile with what each entry replaced (`/v1/profile`),
//! memories per day (`/v1/timeline`) and the knowledge graph (`/v1/graph`).

use std::collections::HashMap;

use axum::Extension;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use engram_core::{Filter, Kind, Memory};
use jiff::tz::TimeZone;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::memories::{encode_cursor, filter_from_query, next_link, page_from_query};
use crate::auth::Access;
use crate::error::ApiError;
use crate::extract::QueryPairs;
use crate::knowledge::{ENTITY_CATEGORY, MAX_SEARCH_ENTITIES, OBSERVATION_CATEGORY};

/// Profile memories of each kind searched for the earlier values of the entries shown, newest
/// first.
pub const SUPERSEDED_SCAN: usize = 10_000;

/// `GET /v1/users`: the users the caller may see, with their memory counts, and how the caller
/// is signed in.
pub(crate) async fn users(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    QueryPairs::parse(uri.query()).only(&[])?;
    let users = state.service.users(&access).await?;
    let (kind, token_id) = match &access {
        Access::Local => ("local", None),
        Access::Token { id, .. } => ("token", Some(id.clone())),
    };
    Ok(axum::Json(json!({"access": kind, "token_id": token_id, "users": users})).into_response())
}

fn required_user(query: &QueryPairs) -> Result<String, ApiError> {
    let user = query
        .single("user_id")?
        .ok_or_else(|| ApiError::invalid("query parameter 'user_id' is required (whose memory?)"))?
        .to_string();
    engram_core::Scope::user(user.clone())
        .validate()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(user)
}

/// A profile entry: the memory's fields, and the earlier values it replaced.
#[derive(Debug, Serialize)]
struct ProfileEntry<'a> {
    #[serde(flatten)]
    memory: &'a Memory,
    supersedes: Vec<&'a Memory>,
}

/// The key a profile entry is known by, compared case-insensitively (as merging does).
fn profile_key(memory: &Memory) -> Option<String> {
    memory
        .metadata
        .get("key")
        .and_then(Value::as_str)
        .map(|k| k.trim().to_lowercase())
        .filter(|k| !k.is_empty())
}

/// True for the search memories the knowledge graph keeps of its entities and observations.
fn is_graph(memory: &Memory) -> bool {
    matches!(
        memory.category.as_deref(),
        Some(ENTITY_CATEGORY | OBSERVATION_CATEGORY)
    )
}

/// `GET /v1/profile?user_id=U`: the current facts and preferences (not the knowledge graph's),
/// newest first, a page at a time; each with the closed entries of the same key it replaced,
/// latest first.
pub(crate) async fn profile(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id", "limit", "offset", "cursor"])?;
    let user = required_user(&query)?;
    let (limit, offset) = page_from_query(&query)?;
    let wanted = offset.saturating_add(limit).saturating_add(1);
    // One listing per kind follows the store's per-kind index; both kinds at once would walk
    // every memory of the user.
    let mut current = Vec::new();
    let mut total = 0;
    let mut earlier: HashMap<String, Vec<Memory>> = HashMap::new();
    for kind in [Kind::Fact, Kind::Preference] {
        let filter = Filter {
            kinds: vec![kind],
            ..Filter::user(user.clone())
        };
        // The knowledge graph's search memories are the graph's (its view shows them), not
        // beliefs about the user: left out, and listed past so a page stays full.
        let graph = Filter {
            categories: vec![
                ENTITY_CATEGORY.to_string(),
                OBSERVATION_CATEGORY.to_string(),
            ],
            ..filter.clone()
        };
        let graph_count = state.service.count(&access, graph).await?;
        total += state
            .service
            .count(&access, filter.clone())
            .await?
            .saturating_sub(graph_count);
        let listed = state
            .service
            .list(
                &access,
                filter,
                wanted.saturating_add(graph_count as usize),
                0,
            )
            .await?;
        current.extend(listed.into_iter().filter(|m| !is_graph(m)));
    }
    current.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    let more = current.len() > offset.saturating_add(limit);
    let page: Vec<Memory> = current.into_iter().skip(offset).take(limit).collect();
    let keys: std::collections::HashSet<String> = page.iter().filter_map(profile_key).collect();
    if !keys.is_empty() {
        for kind in [Kind::Fact, Kind::Preference] {
            let filter = Filter {
                kinds: vec![kind],
                include_closed: true,
                ..Filter::user(user.clone())
            };
            for memory in state
                .service
                .list(&access, filter, SUPERSEDED_SCAN, 0)
                .await?
            {
                if memory.valid_to.is_none() || is_graph(&memory) {
                    continue;
                }
                if let Some(key) = profile_key(&memory).filter(|k| keys.contains(k)) {
                    earlier.entry(key).or_default().push(memory);
                }
            }
        }
        for list in earlier.values_mut() {
            list.sort_by(|a, b| b.valid_to.cmp(&a.valid_to).then(b.id.cmp(&a.id)));
        }
    }
    let entries: Vec<ProfileEntry<'_>> = page
        .iter()
        .map(|memory| ProfileEntry {
            memory,
            supersedes: profile_key(memory)
                .and_then(|k| earlier.get(&k))
                .map(|list| list.iter().collect())
                .unwrap_or_default(),
        })
        .collect();
    let next_offset = offset.saturating_add(limit);
    Ok(axum::Json(json!({
        "user_id": user,
        "entries": entries,
        "total": total,
        "limit": limit,
        "offset": offset,
        "next_cursor": more.then(|| encode_cursor(next_offset)),
        "next": more.then(|| next_link(&uri, next_offset)),
    }))
    .into_response())
}

/// The query parameters of `GET /v1/timeline`: the filters of a listing and a time zone.
const TIMELINE_PARAMS: [&str; 11] = [
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
    "tz",
];

/// Reads a time zone: an IANA name (`Europe/Lisbon`) or `UTC`.
pub(crate) fn parse_time_zone(name: &str) -> Result<TimeZone, ApiError> {
    if name.eq_ignore_ascii_case("utc") || name == "Etc/UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| {
        ApiError::invalid(format!(
            "tz: unknown time zone '{name}' (give an IANA name such as Europe/Lisbon, or UTC)"
        ))
    })
}

/// `GET /v1/timeline?user_id=U&tz=Z`: how many memories match the filters per day (days cut in
/// the time zone `tz`, UTC by default) and kind, oldest day first.
pub(crate) async fn timeline(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&TIMELINE_PARAMS)?;
    let zone_name = query.single("tz")?.unwrap_or("UTC").to_string();
    let time_zone = parse_time_zone(&zone_name)?;
    let filter = filter_from_query(&query)?;
    let user = filter.user_id.clone();
    let counts = state
        .service
        .count_by_day(&access, filter, time_zone)
        .await?;
    let mut days: Vec<Value> = Vec::new();
    let mut total = 0u64;
    let mut current: Option<(jiff::civil::Date, u64, Map<String, Value>)> = None;
    let flush = |days: &mut Vec<Value>,
                 day: Option<(jiff::civil::Date, u64, Map<String, Value>)>| {
        if let Some((day, total, kinds)) = day {
            days.push(json!({"day": day.to_string(), "total": total, "kinds": kinds}));
        }
    };
    for count in counts {
        total += count.count;
        if current
            .as_ref()
            .is_some_and(|(day, _, _)| *day != count.day)
        {
            flush(&mut days, current.take());
        }
        let entry = current.get_or_insert_with(|| (count.day, 0, Map::new()));
        entry.1 += count.count;
        entry
            .2
            .insert(count.kind.to_string(), Value::from(count.count));
    }
    flush(&mut days, current.take());
    Ok(axum::Json(json!({
        "user_id": user,
        "time_zone": zone_name,
        "total": total,
        "days": days,
    }))
    .into_response())
}

/// `GET /v1/graph?user_id=U`: the user's knowledge graph (entities with their observations,
/// and relations), or with `query` the entities that best match it and their relations.
pub(crate) async fn graph(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = QueryPairs::parse(uri.query());
    query.only(&["user_id", "query", "limit"])?;
    let user = required_user(&query)?;
    let search = query.single("query")?.map(str::to_string);
    let limit = query
        .number("limit", 1, MAX_SEARCH_ENTITIES)?
        .unwrap_or(crate::knowledge::DEFAULT_SEARCH_ENTITIES);
    if search.is_none() && query.single("limit")?.is_some() {
        return Err(ApiError::invalid(
            "limit applies to a search: give query too",
        ));
    }
    let kb = state.service.graph(&access, &user)?;
    let graph = match search {
        Some(q) => kb.search_nodes(&user, &q, limit).await?,
        None => kb.read_graph(&user).await?,
    };
    Ok(axum::Json(graph).into_response())
}
