//! The agent's MCP client against engram's own MCP server over streamable HTTP (a real server
//! on 127.0.0.1): tools listed as mcp_<server>_<tool>, registered in the agent's registry and
//! called through it; a server that goes away gives tool errors that say so, and the client
//! reconnects when it is back. A server that accepts connections but never answers, and a tool
//! that never finishes, are cut off by the connect and call timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::TestServer;
use engram_agent::tools::ToolRegistry;
use engram_server::config::{McpServerSettings, McpSettings, ServerSettings};
use engram_server::mcp_client::McpClients;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};

fn settings_for(url: String) -> McpSettings {
    let mut settings = McpSettings::default();
    settings.servers.insert(
        "engram".to_string(),
        McpServerSettings {
            url: Some(url),
            connect_timeout_secs: Some(5),
            call_timeout_secs: Some(10),
            ..McpServerSettings::default()
        },
    );
    settings.servers.insert(
        "down".to_string(),
        McpServerSettings {
            url: Some("http://127.0.0.1:9/mcp".to_string()),
            connect_timeout_secs: Some(2),
            ..McpServerSettings::default()
        },
    );
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_uses_engrams_own_mcp_server_and_survives_it_going_away() {
    let settings = ServerSettings {
        user: Some("alice".to_string()),
        ..ServerSettings::default()
    };
    let mut server = TestServer::start_with(settings.clone()).await;
    let addr = server.addr;
    let clients = McpClients::connect_async(&settings_for(server.url("/mcp"))).await;

    // The server that is down is left out with a warning; the other's tools are all there.
    assert_eq!(clients.warnings.len(), 1, "{:?}", clients.warnings);
    assert!(
        clients.warnings[0].contains("'down' is unavailable"),
        "{:?}",
        clients.warnings
    );
    let mut registry = ToolRegistry::new();
    registry.register_all(clients.tools).unwrap();
    let names = registry.names();
    assert_eq!(names.len(), 16, "{names:?}");
    assert!(names.contains(&"mcp_engram_memory_add") && names.contains(&"mcp_engram_search_nodes"));
    let add = registry.get("mcp_engram_memory_add").unwrap();
    assert!(
        add.description()
            .starts_with("[from the MCP server 'engram']")
    );

    let added = registry
        .call(
            "mcp_engram_memory_add",
            json!({"text": "Alice keeps bees on her roof"}),
        )
        .await;
    assert!(added.success, "{added:?}");
    let added: Value = serde_json::from_str(&added.content).unwrap();
    assert_eq!(added["status"], "added");
    let found = registry
        .call("mcp_engram_memory_search", json!({"query": "bees"}))
        .await;
    assert!(
        found.success && found.content.contains("Alice keeps bees"),
        "{found:?}"
    );
    // Arguments the schema refuses are caught before the call; errors of the tool come back.
    let refused = registry
        .call("mcp_engram_memory_get", json!({"id": "nope"}))
        .await;
    assert!(
        !refused.success && refused.to_model_text().contains("is not a memory id"),
        "{refused:?}"
    );

    // The server goes away: the tool says so, and nothing panics.
    let dir = {
        server.stop().await.unwrap();
        std::mem::replace(&mut server.dir, tempfile::TempDir::new().unwrap())
    };
    let failed = registry
        .call("mcp_engram_memory_search", json!({"query": "bees"}))
        .await;
    assert!(!failed.success, "{failed:?}");
    let text = failed.to_model_text();
    assert!(text.contains("MCP server 'engram'"), "{text}");

    // It comes back on the same port with the same data: the next call reconnects.
    let _back = TestServer::start_on(dir, settings, addr).await;
    let found = registry
        .call("mcp_engram_memory_search", json!({"query": "bees"}))
        .await;
    assert!(
        found.success && found.content.contains("Alice keeps bees"),
        "{found:?}"
    );
}

/// An MCP server with two tools: `ping` answers at once, `nap` never finishes.
#[derive(Clone)]
struct Sleepy;

impl ServerHandler for Sleepy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = Arc::new(serde_json::Map::from_iter([(
            "type".to_string(),
            json!("object"),
        )]));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("ping", "Answers pong.", schema.clone()),
            Tool::new("nap", "Never finishes.", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "nap" {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("pong")]).into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_do_not_answer_are_cut_off_by_the_timeouts() {
    // A port that accepts connections and then says nothing.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    // A real MCP server whose `nap` tool never returns.
    let sleepy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sleepy_addr = sleepy.local_addr().unwrap();
    let service = StreamableHttpService::new(
        || Ok(Sleepy),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(sleepy, app).await });

    let mut settings = McpSettings::default();
    settings.servers.insert(
        "silent".to_string(),
        McpServerSettings {
            url: Some(format!("http://{silent_addr}/mcp")),
            connect_timeout_secs: Some(1),
            ..McpServerSettings::default()
        },
    );
    settings.servers.insert(
        "sleepy".to_string(),
        McpServerSettings {
            url: Some(format!("http://{sleepy_addr}/mcp")),
            connect_timeout_secs: Some(5),
            call_timeout_secs: Some(1),
            ..McpServerSettings::default()
        },
    );
    let started = Instant::now();
    let clients = McpClients::connect_async(&settings).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "connecting waited {:?}",
        started.elapsed()
    );
    assert_eq!(clients.warnings.len(), 1, "{:?}", clients.warnings);
    assert!(
        clients.warnings[0].contains("'silent' is unavailable")
            && clients.warnings[0].contains("no answer within 1 s"),
        "{:?}",
        clients.warnings
    );
    let mut registry = ToolRegistry::new();
    registry.register_all(clients.tools).unwrap();
    let mut names = registry.names();
    names.sort();
    assert_eq!(names, vec!["mcp_sleepy_nap", "mcp_sleepy_ping"]);

    let started = Instant::now();
    let napped = registry.call("mcp_sleepy_nap", json!({})).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!napped.success, "{napped:?}");
    let text = napped.to_model_text();
    assert!(
        text.contains("'sleepy' did not finish its tool 'nap' within 1 s"),
        "{text}"
    );
    // The server itself is fine: the next call goes through.
    let pinged = registry.call("mcp_sleepy_ping", json!({})).await;
    assert!(pinged.success && pinged.content == "pong", "{pinged:?}");
}
