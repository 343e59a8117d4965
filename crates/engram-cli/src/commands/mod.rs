//! One module per group of commands; [`run`] dispatches.

pub mod agent_common;
pub mod chat;
pub mod copy;
pub mod cron;
pub mod gateway;
pub mod graph;
pub mod import_export;
pub mod markdown;
pub mod mcp;
mod memory;
pub mod memory_admin;
pub mod model;
pub mod onboard;
pub mod retrieval;
pub mod run;
mod search;
pub mod serve;
pub mod sessions;
pub mod skills;
pub mod token;

use std::future::Future;
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, Result};
use engram_backend::StoreConfig;
use engram_core::{Backend, Filter, MemoryStore, Scope};
use engram_memory::session::SessionStore;
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::cli::{Cli, Command, FilterArgs, ScopeArgs};
use crate::exit::{Status, usage};
use crate::home::Home;

/// The sessions directory inside ENGRAM_HOME.
pub const SESSIONS_DIR: &str = "sessions";

/// What every command gets: where state lives, how to print, the async runtime and the
/// store. The runtime and the store are made on first use, once per process: this is the
/// program's composition root for storage.
#[derive(Debug, Clone)]
pub struct Context {
    /// ENGRAM_HOME.
    pub home: Home,
    /// Print JSON instead of text.
    pub json: bool,
    runtime: Arc<OnceLock<tokio::runtime::Runtime>>,
    backend: Arc<OnceLock<Backend>>,
}

impl Context {
    /// A context for `home`, printing JSON when `json`.
    pub fn new(home: Home, json: bool) -> Self {
        Self {
            home,
            json,
            runtime: Arc::default(),
            backend: Arc::default(),
        }
    }

    /// The process's async runtime (multi-threaded, one worker per core), started on first
    /// use.
    pub fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        self.start_runtime(None)
    }

    /// Starts the process's runtime with `workers` worker threads (default: one per core);
    /// a command that wants a number calls this before anything else uses the runtime.
    pub fn start_runtime(&self, workers: Option<usize>) -> Result<&tokio::runtime::Runtime> {
        if let Some(runtime) = self.runtime.get() {
            return Ok(runtime);
        }
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(workers) = workers {
            builder.worker_threads(workers.max(1));
        }
        let runtime = builder
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        Ok(self.runtime.get_or_init(|| runtime))
    }

    /// Runs `future` to completion on the process's runtime. Not for use inside async code.
    pub fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        Ok(self.runtime()?.block_on(future))
    }

    /// Where the store is: the PostgreSQL database of ENGRAM_DATABASE_URL or `[store] url`,
    /// else ENGRAM_HOME/engram.db.
    pub fn store_config(&self) -> Result<StoreConfig> {
        let settings = crate::config::StoreSettings::load(self.home.dir())?;
        let Some(url) = settings.url else {
            return Ok(StoreConfig::in_home(self.home.dir()));
        };
        let mut options = engram_backend::PgOptions {
            ca_file: settings.ca_file,
            ..engram_backend::PgOptions::default()
        };
        if let Some(size) = settings.pool_size {
            options.pool_size = size.max(1);
        }
        Ok(StoreConfig::postgres(url).with_postgres_options(options))
    }

    /// The store, opened (created and migrated if needed) on first use and shared by
    /// everything this process does. Not for use inside async code.
    pub fn backend(&self) -> Result<Backend> {
        if let Some(backend) = self.backend.get() {
            return Ok(backend.clone());
        }
        self.home.ensure()?;
        let config = self.store_config()?;
        let backend = self.block_on(engram_backend::open(&config))??;
        Ok(self.backend.get_or_init(|| backend).clone())
    }

    /// The agent's sessions: in the engine when it is shared by several machines, else files
    /// under ENGRAM_HOME/sessions (without opening the database).
    pub fn sessions(&self) -> Result<SessionStore> {
        let config = self.store_config()?;
        if !config.shares_sessions() {
            return Ok(SessionStore::files(self.home.dir().join(SESSIONS_DIR)));
        }
        let logs = self.backend()?.sessions.ok_or_else(|| {
            anyhow::anyhow!("the store {} keeps no session logs", config.location())
        })?;
        Ok(SessionStore::new(logs))
    }

    /// The memories of [`Context::backend`].
    pub fn memories(&self) -> Result<Arc<dyn MemoryStore>> {
        Ok(self.backend()?.memories)
    }
}

/// Runs the command line, returning the exit status.
pub fn run(cli: Cli) -> Result<Status> {
    let ctx = Context::new(Home::resolve(cli.home)?, cli.json);
    match cli.command {
        Command::Add(args) => memory::add(&ctx, args),
        Command::Import(args) => import_export::import(&ctx, args),
        Command::Export(args) => import_export::export(&ctx, args),
        Command::Search(args) => search::search(&ctx, args),
        Command::List(args) => memory::list(&ctx, args),
        Command::Get(args) => memory::get(&ctx, args),
        Command::Update(args) => memory::update(&ctx, args),
        Command::Invalidate(args) => memory::invalidate(&ctx, args),
        Command::Delete(args) => memory::delete(&ctx, args),
        Command::History(args) => memory::history(&ctx, args),
        Command::Forget(args) => memory::forget(&ctx, args),
        Command::Stats => memory::stats(&ctx),
        Command::Reindex(args) => retrieval::reindex(&ctx, args),
        Command::Model(command) => model::run(&ctx, command),
        Command::Chat(args) => chat::chat(&ctx, args),
        Command::Run(args) => run::run(&ctx, args),
        Command::Sessions(command) => sessions::run(&ctx, command),
        Command::Memory(command) => memory_admin::run(&ctx, command),
        Command::Bench(command) => crate::bench::run(&ctx, command),
        Command::Cron(command) => cron::run(&ctx, command),
        Command::Gateway(args) => gateway::run(&ctx, args),
        Command::Skills(command) => skills::run(&ctx, command),
        Command::Onboard(args) => onboard::run(&ctx, args),
        Command::Serve(args) => serve::run(&ctx, args),
        Command::Mcp(args) => mcp::run(&ctx, args),
        Command::Token(command) => token::run(&ctx, command),
        Command::Copy(args) => copy::run(&ctx, args),
        Command::ImportGraph(args) => graph::import_graph(&ctx, args),
    }
}

/// The user, which every memory command needs.
pub fn require_user(user: Option<String>) -> Result<String> {
    match user {
        Some(user) if !user.trim().is_empty() => Ok(user),
        _ => Err(usage(
            "--user is required (whose memories?); pass --user NAME or set ENGRAM_USER",
        )),
    }
}

/// Reads a time given on the command line, in the local zone.
pub fn parse_cli_time(flag: &str, value: &str) -> Result<Timestamp> {
    engram_core::time::parse_time(value, Timestamp::now(), &TimeZone::system())
        .map_err(|e| usage(format!("{flag}: {e}")))
}

/// The scope named by `--user/--agent/--session`.
pub fn scope_from(args: &ScopeArgs) -> Result<Scope> {
    Ok(Scope {
        user_id: require_user(args.user.clone())?,
        agent_id: args.agent.clone(),
        session_id: args.session.clone(),
    })
}

/// The filter named by the scope and filter flags.
pub fn filter_from(scope: &ScopeArgs, args: &FilterArgs) -> Result<Filter> {
    let scope = scope_from(scope)?;
    Ok(Filter {
        user_id: scope.user_id,
        agent_id: scope.agent_id,
        session_id: scope.session_id,
        kinds: args.kind.clone(),
        categories: args.category.clone(),
        since: args
            .since
            .as_deref()
            .map(|s| parse_cli_time("--since", s))
            .transpose()?,
        until: args
            .until
            .as_deref()
            .map(|s| parse_cli_time("--until", s))
            .transpose()?,
        min_importance: args.min_importance,
        metadata: args.conditions.clone(),
        include_closed: args.all,
    })
}
