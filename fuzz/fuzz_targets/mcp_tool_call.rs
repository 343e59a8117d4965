//! MCP tool calls: any tool name (mostly real ones) with any arguments, through the server's
//! own dispatch over a real store. Errors are answers; a panic or an internal error is a bug.
#![no_main]

use std::sync::OnceLock;

use engram_server::ErrorCode;
use engram_server::Stores;
use engram_server::auth::Access;
use engram_server::mcp::McpServer;
use engram_server::mcp::tools;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn server() -> &'static (McpServer, Vec<String>) {
    static SERVER: OnceLock<(McpServer, Vec<String>)> = OnceLock::new();
    SERVER.get_or_init(|| {
        let stores = engram_store_sqlite::SqliteStore::open(engram_fuzz::scratch().join("mcp.db"))
            .map(|store| Stores::lexical(&store.into_backend()))
            .unwrap_or_else(|e| panic!("cannot open the stores: {e}"));
        let server = McpServer::new(stores.service(2), Some("u".into()), Some(Access::Local));
        let names = tools::all().iter().map(|t| t.name.to_string()).collect();
        (server, names)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (server, names) = server();
    let name = names
        .get(usize::from(selector) % (names.len() + 1))
        .cloned()
        .unwrap_or_else(|| "no_such_tool".into());
    let Ok(arguments) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let outcome = engram_fuzz::runtime().block_on(server.call(&name, arguments.clone()));
    if let Err(error) = outcome {
        assert!(
            error.code != ErrorCode::Internal,
            "{name} {arguments}: internal error {}",
            error.message
        );
    }
});
