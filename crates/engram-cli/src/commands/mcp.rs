//! `engram mcp`: the MCP server over standard input and output, for MCP clients that start
//! their servers as child processes.

use anyhow::{Result, anyhow};
use clap::Args;

use super::serve::{init_logging, open_stores, server_settings};
use crate::context::Context;
use crate::exit::Status;

/// `engram mcp`.
#[derive(Debug, Args)]
#[command(after_help = "\
Speaks MCP on standard input and output (logs go to standard error). Tools: memory_add,
memory_search, memory_get, memory_list, memory_update, memory_delete, memory_history, and the
knowledge-graph tools of the reference memory server (create_entities, create_relations,
add_observations, delete_entities, delete_observations, delete_relations, read_graph,
search_nodes, open_nodes), and the resource memory://knowledge-graph. Tools act for the user
of --user (or ENGRAM_USER), else [server] user, else [agent] user in config.toml, else your
login name (the user `engram chat` remembers for), unless a call names another user_id.

Example client configuration (where the reference memory server was configured):
  {\"command\": \"engram\", \"args\": [\"mcp\"]}")]
pub struct McpArgs {
    /// The user tools act for when a call names none (default: [server] user, else [agent]
    /// user in config.toml, else your login name).
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
}

/// Serves MCP on stdio until the client disconnects.
pub fn run(ctx: &Context, args: McpArgs) -> Result<Status> {
    init_logging();
    let settings = server_settings(ctx)?;
    let stores = open_stores(ctx)?;
    let service = stores.service(engram_server::service::default_concurrency());
    let config = crate::config::Config::load(ctx.home.dir())?;
    let user = super::agent_common::default_user(&config, args.user.or(settings.user));
    ctx.block_on(engram_server::mcp::serve_stdio(service, Some(user)))?
        .map_err(|e| anyhow!(e))?;
    Ok(Status::Success)
}
