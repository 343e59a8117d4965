//! engram's MCP server (the official Rust SDK, rmcp): memory tools and the reference server's
//! knowledge-graph tools, over stdio (`engram mcp`) or streamable HTTP (`/mcp` in `engram
//! serve`, behind the same tokens as the REST API).
//!
//! Which user a call acts for: the tool's `user_id` argument; else, over HTTP, the
//! `X-Engram-User` header or the `user` query parameter of the MCP URL; else the token's first
//! user; else the server's default user (`engram mcp --user`, `engram serve --user` or
//! `[server] user`). A call for a user the token is not bound to fails.

pub mod tools;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::request::Parts;
use engram_core::store::MemoryPatch;
use engram_core::store::graph::{Entity, ObservationDeletion, ObservationInput, Relation};
use engram_core::{AddOutcome, Filter, Importance, Kind, MemoryId, NewMemory, Scope};
use engram_memory::SearchRequest;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListResourcesResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::AppState;
use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::knowledge::DEFAULT_SEARCH_ENTITIES;
use crate::service::MemoryService;

/// The header naming the user an HTTP MCP connection acts for.
pub const USER_HEADER: &str = "x-engram-user";

/// The `_meta` key of a failed tool call's stable error: `{"code": "not_found", "message": ...}`.
pub const ERROR_META: &str = "engram/error";

/// The knowledge graph as a resource, under the reference memory server's URI.
pub const GRAPH_RESOURCE_URI: &str = "memory://knowledge-graph";

/// The graph tools that change the graph (subscribers of the resource hear of their calls).
const GRAPH_CHANGES: [&str; 6] = [
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
];

/// Instructions sent to clients when they connect.
const INSTRUCTIONS: &str = "engram is the user's long-term memory. Search it (memory_search) \
before answering anything that may depend on what the user told you before; store lasting facts, \
preferences and events (memory_add) as self-contained sentences; correct (memory_update) or \
forget (memory_delete) what changed. The knowledge-graph tools (create_entities, search_nodes, \
...) keep entities, observations and relations.";

/// The MCP server: one per connection (stdio) or session (HTTP).
#[derive(Clone)]
pub struct McpServer {
    service: MemoryService,
    default_user: Option<String>,
    /// The access of a stdio connection; HTTP requests bring their own.
    fixed_access: Option<Access>,
    tools: Arc<Vec<Tool>>,
    /// True once the client subscribed to the knowledge-graph resource (one server per
    /// connection or HTTP session, so this is per client).
    graph_subscribed: Arc<AtomicBool>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("default_user", &self.default_user)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server acting with `fixed_access` (stdio), or with each HTTP request's own access
    /// when `None`.
    pub fn new(
        service: MemoryService,
        default_user: Option<String>,
        fixed_access: Option<Access>,
    ) -> Self {
        Self {
            service,
            default_user,
            fixed_access,
            tools: Arc::new(tools::all()),
            graph_subscribed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The knowledge graph of the user this connection acts for, as the resource's text.
    async fn graph_resource(&self, parts: Option<&Parts>) -> Result<String, ApiError> {
        let access = self.access(parts)?;
        let user = self.user(None, &access, parts)?;
        let graph = self
            .service
            .graph(&access, &user)?
            .read_graph(&user)
            .await?;
        Ok(pretty(&to_value(&graph)?))
    }

    fn access(&self, parts: Option<&Parts>) -> Result<Access, ApiError> {
        if let Some(access) = &self.fixed_access {
            return Ok(access.clone());
        }
        parts
            .and_then(|p| p.extensions.get::<Access>())
            .cloned()
            .ok_or_else(|| {
                ApiError::new(ErrorCode::Unauthorized, "the request is not authenticated")
            })
    }

    /// The user a call acts for (see the module documentation).
    fn user(
        &self,
        explicit: Option<String>,
        access: &Access,
        parts: Option<&Parts>,
    ) -> Result<String, ApiError> {
        let from_request = parts.and_then(|p| {
            p.headers
                .get(USER_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .or_else(|| {
                    form_urlencoded::parse(p.uri.query().unwrap_or("").as_bytes())
                        .find(|(k, _)| k == "user")
                        .map(|(_, v)| v.into_owned())
                })
        });
        let user = explicit
            .or(from_request)
            .or_else(|| access.default_user().map(str::to_string))
            .or_else(|| self.default_user.clone())
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "user_id is required: this connection has no default user (start the server \
                     with --user, or pass user_id)",
                )
            })?;
        access.require(&user)?;
        Ok(user)
    }

    /// Calls a tool directly, as a client of this server would (the server's own access,
    /// as over stdio): the tool's JSON answer, or the error a client would see.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<Value, ApiError> {
        self.dispatch(name, arguments, None).await
    }

    async fn dispatch(
        &self,
        name: &str,
        arguments: Value,
        parts: Option<&Parts>,
    ) -> Result<Value, ApiError> {
        let access = self.access(parts)?;
        match name {
            "memory_add" => self.memory_add(args(arguments)?, &access, parts).await,
            "memory_search" => self.memory_search(args(arguments)?, &access, parts).await,
            "memory_get" => {
                let a: IdArgs = args(arguments)?;
                let memory = self.service.get(&access, parse_id(&a.id)?).await?;
                to_value(&memory)
            }
            "memory_list" => self.memory_list(args(arguments)?, &access, parts).await,
            "memory_update" => {
                let a: UpdateArgs = args(arguments)?;
                let patch = MemoryPatch {
                    text: a.text,
                    category: a.category.map(Some),
                    importance: a.importance,
                    ..MemoryPatch::default()
                };
                if patch.is_empty() {
                    return Err(ApiError::invalid(
                        "nothing to change: give text, importance or category",
                    ));
                }
                let memory = self
                    .service
                    .update(&access, parse_id(&a.id)?, patch)
                    .await?;
                to_value(&memory)
            }
            "memory_delete" => {
                let a: IdArgs = args(arguments)?;
                let memory = self.service.delete(&access, parse_id(&a.id)?).await?;
                Ok(json!({"status": "deleted", "id": memory.id}))
            }
            "memory_history" => {
                let a: IdArgs = args(arguments)?;
                let events = self.service.history(&access, parse_id(&a.id)?).await?;
                Ok(json!({"events": events}))
            }
            _ => self.graph(name, arguments, &access, parts).await,
        }
    }

    async fn memory_add(
        &self,
        a: AddArgs,
        access: &Access,
        parts: Option<&Parts>,
    ) -> Result<Value, ApiError> {
        let scope = Scope {
            user_id: self.user(a.user_id, access, parts)?,
            agent_id: a.agent_id,
            session_id: a.session_id,
        };
        let mut memory = NewMemory::new(scope, a.text)
            .with_kind(a.kind.unwrap_or(Kind::Episode))
            .with_importance(a.importance.unwrap_or_default())
            .with_source("mcp");
        memory.category = a.category;
        memory.metadata = a.metadata.unwrap_or_default();
        memory
            .validate()
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(match self.service.add(access, memory).await? {
            AddOutcome::Added(memory) => {
                json!({"status": "added", "id": memory.id, "memory": memory})
            }
            AddOutcome::Duplicate(id) => json!({"status": "duplicate", "id": id}),
        })
    }

    async fn memory_search(
        &self,
        a: SearchArgs,
        access: &Access,
        parts: Option<&Parts>,
    ) -> Result<Value, ApiError> {
        let limit = a.limit.unwrap_or(10);
        if !(1..=100).contains(&limit) {
            return Err(ApiError::invalid(format!(
                "limit must be between 1 and 100, got {limit}"
            )));
        }
        let filter = Filter {
            user_id: self.user(a.user_id, access, parts)?,
            agent_id: a.agent_id,
            session_id: a.session_id,
            kinds: a.kinds,
            categories: a.categories,
            since: a
                .since
                .as_deref()
                .map(|t| crate::api::parse_time("since", t))
                .transpose()?,
            until: a
                .until
                .as_deref()
                .map(|t| crate::api::parse_time("until", t))
                .transpose()?,
            include_closed: a.include_closed,
            ..Filter::default()
        };
        let results = self
            .service
            .search(
                access,
                SearchRequest {
                    filter,
                    query: a.query,
                    limit,
                },
            )
            .await?;
        Ok(json!({"results": crate::api::hits_json(&results.hits, false)}))
    }

    async fn memory_list(
        &self,
        a: ListArgs,
        access: &Access,
        parts: Option<&Parts>,
    ) -> Result<Value, ApiError> {
        let limit = a.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(ApiError::invalid(format!(
                "limit must be between 1 and 100, got {limit}"
            )));
        }
        let offset = a.offset.unwrap_or(0);
        let filter = Filter {
            user_id: self.user(a.user_id, access, parts)?,
            agent_id: a.agent_id,
            session_id: a.session_id,
            kinds: a.kinds,
            categories: a.categories,
            include_closed: a.include_closed,
            ..Filter::default()
        };
        let mut memories = self.service.list(access, filter, limit + 1, offset).await?;
        let more = memories.len() > limit;
        memories.truncate(limit);
        Ok(json!({"memories": memories, "next_offset": more.then_some(offset + limit)}))
    }

    async fn graph(
        &self,
        name: &str,
        arguments: Value,
        access: &Access,
        parts: Option<&Parts>,
    ) -> Result<Value, ApiError> {
        let user_of = |value: &Value| {
            let explicit = value
                .get("user_id")
                .and_then(Value::as_str)
                .map(str::to_string);
            self.user(explicit, access, parts)
        };
        let user = user_of(&arguments)?;
        let service = &self.service;
        match name {
            "create_entities" => {
                let a: CreateEntities = args(arguments)?;
                let created = service
                    .graph(access, &user)?
                    .create_entities(&user, &a.entities)
                    .await?;
                Ok(json!({"entities": created}))
            }
            "create_relations" => {
                let a: CreateRelations = args(arguments)?;
                let created = service
                    .graph(access, &user)?
                    .create_relations(&user, &a.relations)
                    .await?;
                Ok(json!({"relations": created}))
            }
            "add_observations" => {
                let a: AddObservations = args(arguments)?;
                let results = service
                    .graph(access, &user)?
                    .add_observations(&user, &a.observations)
                    .await?;
                Ok(json!({"results": results}))
            }
            "delete_entities" => {
                let a: DeleteEntities = args(arguments)?;
                service
                    .graph(access, &user)?
                    .delete_entities(&user, &a.entity_names)
                    .await?;
                Ok(json!({"success": true, "message": "Entities deleted successfully"}))
            }
            "delete_observations" => {
                let a: DeleteObservations = args(arguments)?;
                service
                    .graph(access, &user)?
                    .delete_observations(&user, &a.deletions)
                    .await?;
                Ok(json!({"success": true, "message": "Observations deleted successfully"}))
            }
            "delete_relations" => {
                let a: CreateRelations = args(arguments)?;
                service
                    .graph(access, &user)?
                    .delete_relations(&user, &a.relations)
                    .await?;
                Ok(json!({"success": true, "message": "Relations deleted successfully"}))
            }
            "read_graph" => {
                let graph = service.graph(access, &user)?.read_graph(&user).await?;
                to_value(&graph)
            }
            "search_nodes" => {
                let a: SearchNodes = args(arguments)?;
                let limit = a.limit.unwrap_or(DEFAULT_SEARCH_ENTITIES);
                let graph = service
                    .graph(access, &user)?
                    .search_nodes(&user, &a.query, limit)
                    .await?;
                to_value(&graph)
            }
            "open_nodes" => {
                let a: OpenNodes = args(arguments)?;
                let graph = service
                    .graph(access, &user)?
                    .open_nodes(&user, &a.names)
                    .await?;
                to_value(&graph)
            }
            other => Err(ApiError::new(
                ErrorCode::NotFound,
                format!("no tool named '{other}'"),
            )),
        }
    }
}

/// Text for the model and the same value as structured content. Graph tools answer like the
/// reference server: pretty JSON of the result, or its message for deletions.
fn tool_result(name: &str, value: Value) -> CallToolResult {
    let text = match name {
        "create_entities" => pretty(&value["entities"]),
        "create_relations" => pretty(&value["relations"]),
        "add_observations" => pretty(&value["results"]),
        "delete_entities" | "delete_observations" | "delete_relations" => {
            value["message"].as_str().unwrap_or("done").to_string()
        }
        "read_graph" | "search_nodes" | "open_nodes" => pretty(&value),
        _ => value.to_string(),
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::internal(e.to_string()))
}

fn parse_id(raw: &str) -> Result<MemoryId, ApiError> {
    crate::api::parse_id(raw)
}

/// Reads a tool's arguments. engram's own tools refuse unknown fields (their types say so), so
/// a model learns its mistake; the graph tools ignore them, as the reference server does.
fn args<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::invalid(format!("invalid arguments: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddArgs {
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
    agent_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    user_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    kinds: Vec<Kind>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    include_closed: bool,
    #[serde(default)]
    user_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    kinds: Vec<Kind>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    include_closed: bool,
    #[serde(default)]
    user_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    id: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    importance: Option<Importance>,
    #[serde(default)]
    category: Option<String>,
}

#[derive(Deserialize)]
struct CreateEntities {
    entities: Vec<Entity>,
}

#[derive(Deserialize)]
struct CreateRelations {
    relations: Vec<Relation>,
}

#[derive(Deserialize)]
struct AddObservations {
    observations: Vec<ObservationInput>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteEntities {
    entity_names: Vec<String>,
}

#[derive(Deserialize)]
struct DeleteObservations {
    deletions: Vec<ObservationDeletion>,
}

#[derive(Deserialize)]
struct SearchNodes {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct OpenNodes {
    names: Vec<String>,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("engram", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(GRAPH_RESOURCE_URI, "knowledge-graph")
                .with_title("Knowledge Graph")
                .with_description("The full knowledge graph with all entities and relations")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != GRAPH_RESOURCE_URI {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource '{}' (this server has {GRAPH_RESOURCE_URI})",
                    request.uri
                ),
                None,
            ));
        }
        let text = self
            .graph_resource(context.extensions.get::<Parts>())
            .await
            .map_err(|e| match e.code {
                ErrorCode::Internal | ErrorCode::Busy | ErrorCode::StorageFull => {
                    ErrorData::internal_error(e.message, None)
                }
                _ => ErrorData::invalid_params(e.message, None),
            })?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, GRAPH_RESOURCE_URI).with_mime_type("application/json"),
        ])
        .into())
    }

    // The reference server answers the legacy subscription requests; so does engram.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if request.uri != GRAPH_RESOURCE_URI {
            return Err(ErrorData::resource_not_found(
                format!("no resource '{}' to subscribe to", request.uri),
                None,
            ));
        }
        self.graph_subscribed.store(true, Ordering::Relaxed);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if request.uri == GRAPH_RESOURCE_URI {
            self.graph_subscribed.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tools.iter().any(|t| t.name == name) {
            return Err(ErrorData::invalid_params(
                format!("no tool named '{name}'"),
                None,
            ));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let parts = context.extensions.get::<Parts>();
        let started = std::time::Instant::now();
        let outcome = self.dispatch(&name, arguments, parts).await;
        let micros = started.elapsed().as_micros() as u64;
        Ok(match outcome {
            Ok(value) => {
                tracing::debug!(tool = name, micros, "mcp tool call");
                if GRAPH_CHANGES.contains(&name.as_str())
                    && self.graph_subscribed.load(Ordering::Relaxed)
                    && let Err(e) = context
                        .peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(
                            GRAPH_RESOURCE_URI,
                        ))
                        .await
                {
                    tracing::debug!(error = %e, "cannot tell the client the graph changed");
                }
                tool_result(&name, value).into()
            }
            Err(error) => {
                tracing::debug!(
                    tool = name,
                    micros,
                    code = error.code.as_str(),
                    "mcp tool call failed"
                );
                // The text for the model, as the reference server words it; the stable code for
                // programs in `_meta` (not as structured content: clients check that against
                // the tool's output schema even on errors).
                let mut result =
                    CallToolResult::error(vec![ContentBlock::text(error.message.clone())]);
                let mut meta = JsonObject::new();
                meta.insert(ERROR_META.into(), error.body()["error"].clone());
                result.meta = Some(MetaObject(meta));
                result.into()
            }
        })
    }
}

/// Serves MCP over standard input and output until the client disconnects.
pub async fn serve_stdio(
    service: MemoryService,
    default_user: Option<String>,
) -> Result<(), String> {
    let server = McpServer::new(service, default_user, Some(Access::Local));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP client did not start a session: {e}"))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| format!("the MCP server stopped unexpectedly: {e}"))
}

/// Settings of the streamable HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The user tools act for when a request names none and its token has no user.
    pub default_user: Option<String>,
    /// Ends every MCP session and stream when cancelled (at shutdown).
    pub shutdown: CancellationToken,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// True when the server listens on loopback only: then `Host` must name this machine.
    pub loopback: bool,
}

/// The `/mcp` route: MCP over streamable HTTP, for [`crate::api::router`].
pub fn http_router(service: MemoryService, options: HttpOptions) -> Router<AppState> {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(options.shutdown)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    if !options.loopback {
        // Tokens guard a server reachable from elsewhere; its host names are the operator's.
        config = config.disable_allowed_hosts();
    }
    let default_user = options.default_user;
    let sessions = Arc::new(LocalSessionManager::default());
    let owners = Arc::new(SessionOwners::new(sessions.clone()));
    let mcp = StreamableHttpService::new(
        move || Ok(McpServer::new(service.clone(), default_user.clone(), None)),
        sessions,
        config,
    );
    Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn_with_state(owners, bind_session))
}

/// Which caller started each MCP session: a session is used (streamed, posted to, ended) only
/// with the token that started it.
#[derive(Debug)]
struct SessionOwners {
    owners: std::sync::Mutex<std::collections::HashMap<String, String>>,
    sessions: Arc<LocalSessionManager>,
}

/// Sessions started between two sweeps of ended sessions out of [`SessionOwners`].
const SWEEP_EVERY: usize = 256;

impl SessionOwners {
    fn new(sessions: Arc<LocalSessionManager>) -> Self {
        Self {
            owners: std::sync::Mutex::new(std::collections::HashMap::new()),
            sessions,
        }
    }

    fn owner(&self, session: &str) -> Option<String> {
        self.lock().get(session).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, String>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new session's owner; now and then forgets sessions that have ended (closed
    /// by their client or by the idle timeout).
    async fn record(&self, session: String, owner: String) {
        let sweep = {
            let mut owners = self.lock();
            owners.insert(session, owner);
            owners.len().is_multiple_of(SWEEP_EVERY)
        };
        if sweep {
            let known: Vec<String> = self.lock().keys().cloned().collect();
            let mut ended = Vec::new();
            for id in known {
                if !self
                    .sessions
                    .has_session(&id.as_str().into())
                    .await
                    .unwrap_or(true)
                {
                    ended.push(id);
                }
            }
            let mut owners = self.lock();
            for id in ended {
                owners.remove(&id);
            }
        }
    }

    fn forget(&self, session: &str) {
        self.lock().remove(session);
    }
}

/// Who a request is, for session ownership.
fn owner_of(access: &Access) -> String {
    match access {
        Access::Local => "local".to_string(),
        Access::Token { id, .. } => format!("token:{id}"),
    }
}

/// Lets a request that names an MCP session through only when its caller started that session;
/// any other caller gets the answer an unknown session gets (404), so one token can neither
/// read, post to nor end another's session.
async fn bind_session(
    axum::extract::State(owners): axum::extract::State<Arc<SessionOwners>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let caller = request.extensions().get::<Access>().map(owner_of);
    let named = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let deleting = request.method() == axum::http::Method::DELETE;
    if let Some(session) = &named
        && owners.owner(session) != caller
    {
        return (
            axum::http::StatusCode::NOT_FOUND,
            "Not Found: Session not found",
        )
            .into_response();
    }
    let response = next.run(request).await;
    match (named, caller) {
        (None, Some(caller)) => {
            if let Some(started) = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                owners.record(started.to_string(), caller).await;
            }
        }
        (Some(session), _) if deleting && response.status().is_success() => owners.forget(&session),
        _ => {}
    }
    response
}

/// The header carrying the MCP session id.
const SESSION_HEADER: &str = "mcp-session-id";
