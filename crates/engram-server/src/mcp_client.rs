//! The MCP client for the agent: other MCP servers' tools offered to the model as
//! `mcp_<server>_<tool>`, each an [`engram_core::Tool`].
//!
//! Servers come from `[mcp.servers.<name>]` in config.toml: a command to start (stdio) or a URL
//! (streamable HTTP). Connecting and listing tools has a time limit, and so does every call. A
//! server that cannot be reached at start is left out with a warning (the agent works without
//! it); a server that stops answering later makes its tools answer with an error that says so,
//! and the next call tries to reconnect.
//!
//! The connections run on a small runtime of their own, so the tools work from any caller
//! (`engram chat`, `engram run`, the gateway) and are shut down when the last tool is dropped.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::runtime::{Handle, Runtime};

use crate::config::{McpServerSettings, McpSettings};

/// How long connecting and listing a server's tools may take, unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one tool call may take, unless configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest tool name the model providers accept.
const MAX_TOOL_NAME: usize = 64;
/// Lines of a stdio server's standard error kept to explain its failures.
const STDERR_LINES: usize = 20;

/// Owns the client runtime; shuts it down without blocking, wherever it is dropped.
struct RuntimeGuard(Option<Runtime>);

impl Drop for RuntimeGuard {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The runtime the connections live on, shared by every server and tool.
struct ClientRuntime {
    handle: Handle,
    _guard: RuntimeGuard,
}

type Connection = RunningService<RoleClient, ()>;

/// One configured server and its current connection.
struct RemoteServer {
    name: String,
    settings: McpServerSettings,
    connect_timeout: Duration,
    call_timeout: Duration,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    runtime: Arc<ClientRuntime>,
}

impl RemoteServer {
    /// The last lines the server wrote to standard error, for error messages.
    fn stderr_note(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        match tail.back() {
            Some(last) => format!(" (its last message: {last})"),
            None => String::new(),
        }
    }

    /// Starts the server (stdio) or opens the session (HTTP), within the connect timeout.
    async fn connect(&self) -> Result<Arc<Connection>, String> {
        let attempt = async {
            if let Some(url) = &self.settings.url {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(var) = &self.settings.bearer_token_env {
                    let token = std::env::var(var).map_err(|_| {
                        format!("the environment variable {var} (bearer_token_env) is not set")
                    })?;
                    config = config.auth_header(token);
                }
                // reqwest wants a TLS provider even for plain http.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let transport = StreamableHttpClientTransport::from_config(config);
                ().serve(transport).await.map_err(|e| e.to_string())
            } else {
                let program = self.settings.command.clone().unwrap_or_default();
                let mut command = tokio::process::Command::new(&program);
                command.args(&self.settings.args).envs(&self.settings.env);
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start '{program}': {e}"))?;
                if let Some(stderr) = stderr {
                    let tail = self.stderr_tail.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                            if tail.len() == STDERR_LINES {
                                tail.pop_front();
                            }
                            tail.push_back(line);
                        }
                    });
                }
                ().serve(transport).await.map_err(|e| e.to_string())
            }
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(running)) => Ok(Arc::new(running)),
            Ok(Err(e)) => Err(format!("{e}{}", self.stderr_note())),
            Err(_) => Err(format!(
                "no answer within {} s{}",
                self.connect_timeout.as_secs(),
                self.stderr_note()
            )),
        }
    }

    /// The live connection, reconnecting when the last one closed.
    async fn live(&self) -> Result<Arc<Connection>, String> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref()
            && !connection.is_closed()
        {
            return Ok(connection.clone());
        }
        *slot = None;
        let connection = self.connect().await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    async fn forget(&self, connection: &Arc<Connection>) {
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            *slot = None;
        }
    }

    /// Calls one of the server's tools, on the client runtime.
    async fn call(self: Arc<Self>, tool: String, arguments: Map<String, Value>) -> ToolOutput {
        let server = self.clone();
        let task = self.runtime.handle.spawn(async move {
            let connection = match server.live().await {
                Ok(connection) => connection,
                Err(e) => {
                    return ToolOutput::error(format!(
                        "the MCP server '{}' is unavailable, so its tool '{tool}' cannot run now: {e}",
                        server.name
                    ));
                }
            };
            let request = CallToolRequestParams::new(tool.clone()).with_arguments(arguments);
            match tokio::time::timeout(server.call_timeout, connection.call_tool(request)).await {
                Ok(Ok(result)) => output_of(result),
                Ok(Err(e)) => {
                    // A JSON-RPC error is the server's answer; anything else means the
                    // connection is broken, and the next call starts a new one.
                    if !matches!(e, rmcp::ServiceError::McpError(_)) || connection.is_closed() {
                        server.forget(&connection).await;
                    }
                    ToolOutput::error(format!(
                        "the MCP server '{}' failed while running its tool '{tool}': {e}{}",
                        server.name,
                        server.stderr_note()
                    ))
                }
                Err(_) => {
                    server.forget(&connection).await;
                    ToolOutput::error(format!(
                    "the MCP server '{}' did not finish its tool '{tool}' within {} s",
                    server.name,
                    server.call_timeout.as_secs()
                    ))
                }
            }
        });
        task.await.unwrap_or_else(|e| {
            ToolOutput::error(format!(
                "the call to the MCP server '{}' stopped unexpectedly: {e}",
                self.name
            ))
        })
    }
}

/// A tool's result as text for the model: its text blocks, or its structured content.
fn output_of(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => parts.push(format!("[image, {}]", image.mime_type)),
            ContentBlock::Audio(audio) => parts.push(format!("[audio, {}]", audio.mime_type)),
            ContentBlock::Resource(_) => parts.push("[embedded resource]".to_string()),
            ContentBlock::ResourceLink(link) => parts.push(format!("[resource {}]", link.uri)),
            _ => parts.push("[content of a kind engram does not show]".to_string()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        ToolOutput::error(if text.is_empty() {
            "the tool reported an error without details".to_string()
        } else {
            text
        })
    } else {
        ToolOutput::ok(text)
    }
}

/// `mcp_<server>_<tool>`, with characters the providers refuse turned into `_`, and cut to
/// their length limit.
pub fn tool_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp_{server}_{tool}");
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(MAX_TOOL_NAME);
    name
}

/// One remote tool, as the agent sees it.
pub struct McpTool {
    name: String,
    remote_name: String,
    description: String,
    parameters: Value,
    server: Arc<RemoteServer>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("server", &self.server.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return ToolOutput::error(format!("arguments must be a JSON object, got {other}"));
            }
        };
        self.server
            .clone()
            .call(self.remote_name.clone(), arguments)
            .await
    }
}

/// The tools of every configured MCP server that answered, and what went wrong with the rest.
pub struct McpClients {
    /// The tools, named `mcp_<server>_<tool>`, in server then tool order.
    pub tools: Vec<Arc<dyn Tool>>,
    /// One sentence per server (or tool) left out, and why.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for McpClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClients")
            .field("tools", &self.tools.len())
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl McpClients {
    /// Connects every enabled server (at the same time) and lists its tools. Never fails: a
    /// server that cannot be reached becomes a warning. Call from blocking code; from async
    /// code use [`McpClients::connect_async`].
    pub fn connect(settings: &McpSettings) -> Self {
        let runtime = match client_runtime() {
            Ok(runtime) => runtime,
            Err(e) => return Self::unavailable(settings, &e),
        };
        let copy = settings.clone();
        // On a thread of its own, so this works even when the caller is inside a runtime.
        let waited = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let handle = runtime.handle.clone();
                    handle.block_on(connect_all(runtime, copy))
                })
                .join()
        });
        waited.unwrap_or_else(|_| Self::unavailable(settings, "connecting failed unexpectedly"))
    }

    /// [`McpClients::connect`] for async callers.
    pub async fn connect_async(settings: &McpSettings) -> Self {
        match client_runtime() {
            Ok(runtime) => {
                let handle = runtime.handle.clone();
                let settings_copy = settings.clone();
                match handle.spawn(connect_all(runtime, settings_copy)).await {
                    Ok(clients) => clients,
                    Err(e) => Self::unavailable(settings, &e.to_string()),
                }
            }
            Err(e) => Self::unavailable(settings, &e),
        }
    }

    fn unavailable(settings: &McpSettings, why: &str) -> Self {
        Self {
            tools: Vec::new(),
            warnings: settings
                .servers
                .keys()
                .map(|name| format!("the MCP server '{name}' is not used: {why}"))
                .collect(),
        }
    }
}

fn client_runtime() -> Result<Arc<ClientRuntime>, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("engram-mcp-client")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the MCP client runtime: {e}"))?;
    Ok(Arc::new(ClientRuntime {
        handle: runtime.handle().clone(),
        _guard: RuntimeGuard(Some(runtime)),
    }))
}

async fn connect_all(runtime: Arc<ClientRuntime>, settings: McpSettings) -> McpClients {
    let servers: Vec<Arc<RemoteServer>> = settings
        .servers
        .into_iter()
        .filter(|(_, s)| s.enabled != Some(false))
        .map(|(name, settings)| {
            Arc::new(RemoteServer {
                connect_timeout: settings
                    .connect_timeout_secs
                    .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs),
                call_timeout: settings
                    .call_timeout_secs
                    .map_or(DEFAULT_CALL_TIMEOUT, Duration::from_secs),
                name,
                settings,
                connection: tokio::sync::Mutex::new(None),
                stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
                runtime: runtime.clone(),
            })
        })
        .collect();
    let listings = futures::future::join_all(servers.iter().map(|server| async move {
        let listing = async {
            let connection = server.live().await?;
            tokio::time::timeout(server.connect_timeout, connection.peer().list_all_tools())
                .await
                .map_err(|_| {
                    format!(
                        "its tool list did not arrive within {} s",
                        server.connect_timeout.as_secs()
                    )
                })?
                .map_err(|e| e.to_string())
        };
        (server.clone(), listing.await)
    }))
    .await;

    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut warnings = Vec::new();
    for (server, listing) in listings {
        let listed = match listing {
            Ok(listed) => listed,
            Err(e) => {
                warnings.push(format!(
                    "the MCP server '{}' is unavailable, so its tools are not offered: {e}",
                    server.name
                ));
                continue;
            }
        };
        for remote in listed {
            let name = tool_name(&server.name, &remote.name);
            if let Some(other) = names.get(&name) {
                warnings.push(format!(
                    "the tool '{}' of the MCP server '{}' is left out: its name {name} is taken by {other}",
                    remote.name, server.name
                ));
                continue;
            }
            names.insert(
                name.clone(),
                format!("'{}' of '{}'", remote.name, server.name),
            );
            let mut parameters = Value::Object((*remote.input_schema).clone());
            if let Some(object) = parameters.as_object_mut() {
                object
                    .entry("type")
                    .or_insert_with(|| Value::String("object".to_string()));
            }
            let description = format!(
                "[from the MCP server '{}'] {}",
                server.name,
                remote
                    .description
                    .as_deref()
                    .unwrap_or("(the server gives no description)")
            );
            tools.push(Arc::new(McpTool {
                name,
                remote_name: remote.name.to_string(),
                description,
                parameters,
                server: server.clone(),
            }));
        }
    }
    McpClients { tools, warnings }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_what_providers_accept() {
        assert_eq!(tool_name("files", "read_file"), "mcp_files_read_file");
        assert_eq!(tool_name("web", "fetch.url v2"), "mcp_web_fetch_url_v2");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn results_become_text_or_errors() {
        let ok = output_of(CallToolResult::success(vec![
            ContentBlock::text("one"),
            ContentBlock::text("two"),
        ]));
        assert_eq!((ok.success, ok.content.as_str()), (true, "one\ntwo"));
        let structured = output_of(CallToolResult::structured(serde_json::json!({"a": 1})));
        assert!(structured.content.contains("\"a\":1"));
        let failed = output_of(CallToolResult::error(vec![ContentBlock::text("boom")]));
        assert_eq!(
            (failed.success, failed.error.as_deref()),
            (false, Some("boom"))
        );
    }

    #[test]
    fn a_server_that_cannot_start_is_a_warning() {
        let mut settings = McpSettings::default();
        settings.servers.insert(
            "ghost".to_string(),
            McpServerSettings {
                command: Some("/nonexistent/engram-test-mcp-server".to_string()),
                connect_timeout_secs: Some(5),
                ..McpServerSettings::default()
            },
        );
        let clients = McpClients::connect(&settings);
        assert!(clients.tools.is_empty());
        assert_eq!(clients.warnings.len(), 1);
        assert!(
            clients.warnings[0].contains("'ghost' is unavailable"),
            "{:?}",
            clients.warnings
        );
        assert!(
            clients.warnings[0].contains("cannot start"),
            "{:?}",
            clients.warnings
        );
    }
}
