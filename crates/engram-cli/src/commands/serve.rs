//! `engram serve`: the REST API and the MCP server (streamable HTTP at /mcp) on one port.

use std::io::IsTerminal;

use anyhow::{Context as _, Result};
use clap::Args;
use engram_llm::process_env;
use engram_server::config::{DEFAULT_LISTEN, ServerSettings, parse_listen};
use engram_server::service::Extraction;
use engram_server::{ServeOptions, Server, Stores, shutdown_signal};

use super::gateway::GatewayArgs;
use crate::config::Config;
use crate::context::Context;
use crate::exit::{Status, usage};
use crate::retrieval;

/// `engram serve`.
#[derive(Debug, Args)]
#[command(after_help = "\
Serves the REST API under /v1 (described at /openapi.json), /health, and the MCP server at /mcp.
Listens on 127.0.0.1:8420 unless --listen or [server] listen in config.toml says otherwise.

Authentication: with no token at all (see `engram token`), requests from this machine need none.
Once a token exists, every request needs `Authorization: Bearer <token>`, and may touch only the
users the token is bound to. Listening on an address other machines can reach is refused until
a token exists. Stop with Ctrl-C or SIGTERM: requests in flight are finished first.

Logs go to standard error; set ENGRAM_LOG (e.g. ENGRAM_LOG=debug) for one line per request.")]
pub struct ServeArgs {
    /// Where to listen, as ADDR:PORT (e.g. 127.0.0.1:8420, [::1]:9000, 0.0.0.0:8420).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The user MCP tools act for when a client names none and its token is not bound to one
    /// (default: [server] user, else [agent] user in config.toml, else your login name).
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
    /// Threads serving connections (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: Option<u16>,
    /// Database operations run at once, each on a thread of its own (default: two per core,
    /// at most 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: Option<u16>,
    /// Also run the gateway in this process: scheduled jobs and the heartbeat, as `engram
    /// gateway` runs them (needs a language model; one gateway per ENGRAM_HOME).
    #[arg(long)]
    pub gateway: bool,
}

/// `[server]` from config.toml, checked.
pub fn server_settings(ctx: &Context) -> Result<ServerSettings> {
    let config = Config::load(ctx.home.dir())?;
    for warning in &config.warnings {
        eprintln!("warning: {warning}");
    }
    let settings: ServerSettings = config.section("server")?;
    settings
        .validate()
        .map_err(|e| usage(format!("{}: {e}", config.path.display())))?;
    Ok(settings)
}

/// The stores of ENGRAM_HOME, searched the way `engram search` searches (with the configured
/// embedder and ranking profile).
pub fn open_stores(ctx: &Context) -> Result<Stores> {
    let backend = ctx.backend()?;
    let searcher = retrieval::searcher(ctx, backend.memories.clone(), None, None)?;
    Ok(Stores::new(&backend, searcher))
}

/// Extraction for `infer: true`, when a language model is configured ([llm] in config.toml or
/// the environment, as for `engram run`); without one such requests answer 501 and the rest of
/// the server works.
fn extraction(ctx: &Context) -> Result<Option<Extraction>> {
    let config = Config::load(ctx.home.dir())?;
    let model = match engram_llm::from_config(&config.llm, &process_env) {
        Ok(model) => model,
        Err(e) => {
            tracing::info!("extraction from messages (infer: true) is off: {e}");
            return Ok(None);
        }
    };
    Ok(Some(Extraction {
        model,
        workspace: {
            let dir = super::gateway::workspace_dir(ctx, None)?;
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the workspace {}", dir.display()))?;
            engram_agent::tools::Workspace::confined(&dir)
                .with_context(|| format!("cannot use the workspace {}", dir.display()))?
        },
        config: config.memory.manager(),
    }))
}

/// Structured logs on standard error, filtered by ENGRAM_LOG (default: info).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ENGRAM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// Runs `engram serve` until Ctrl-C or SIGTERM.
pub fn run(ctx: &Context, args: ServeArgs) -> Result<Status> {
    init_logging();
    // One worker per core by default: the handlers are light, and the store's blocking work
    // runs on the blocking pool.
    let runtime = ctx.start_runtime(args.workers.map(usize::from))?;
    let settings = server_settings(ctx)?;
    let listen = args
        .listen
        .clone()
        .or_else(|| settings.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    let listen = parse_listen(&listen).map_err(|e| usage(format!("--listen: {e}")))?;
    let stores = open_stores(ctx)?;
    let mut options = ServeOptions::new(listen, settings);
    // The same user `engram mcp` and `engram chat` default to, for calls that name none.
    options.default_user = Some(super::agent_common::default_user(
        &Config::load(ctx.home.dir())?,
        args.user.or(options.default_user),
    ));
    if let Some(concurrency) = args.concurrency {
        options.concurrency = usize::from(concurrency);
    }
    options.extraction = extraction(ctx)?;
    options.transcripts = Some(ctx.sessions()?);
    let gateway = if args.gateway {
        Some(super::gateway::build(
            ctx,
            GatewayArgs {
                workspace: None,
                heartbeat: None,
                shutdown_grace: 10,
            },
        )?)
    } else {
        None
    };
    runtime.block_on(async move {
        let server = Server::bind(&stores, options).await.map_err(|e| match e {
            engram_server::ServeError::NoTokens(_) => usage(e.to_string()),
            other => anyhow::Error::new(other),
        })?;
        let addr = server.local_addr()?;
        tracing::info!(%addr, "engram serve: REST API at /v1, MCP at /mcp, OpenAPI at /openapi.json");
        eprintln!("engram is listening on http://{addr} (Ctrl-C to stop)");
        // One signal stops both the server and the gateway.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop.send(true);
        });
        let until_stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        let scheduled = gateway.map(|(gateway, lock)| {
            let stop = until_stopped();
            tokio::spawn(async move {
                let result = gateway.run(stop).await;
                drop(lock);
                result
            })
        });
        let served = server
            .run(until_stopped())
            .await
            .context("the server stopped with an error");
        if let Some(task) = scheduled {
            task.await
                .context("the gateway task failed")?
                .context("the gateway stopped with an error")?;
        }
        served
    })?;
    eprintln!("engram serve stopped");
    Ok(Status::Success)
}
