//! One module per group of commands, and what only they share: the user, times, scopes and
//! filters named by flags. main.rs dispatches to them.

pub mod agent_common;
pub mod chat;
pub mod copy;
pub mod cron;
pub mod gateway;
pub mod graph;
pub mod import_export;
pub mod mcp;
pub mod memory;
pub mod memory_admin;
pub mod model;
pub mod onboard;
pub mod reindex;
pub mod run;
pub mod scheduler;
pub mod search;
pub mod serve;
pub mod sessions;
pub mod skills;
pub mod token;

use anyhow::Result;
use clap::Args;
use engram_core::{Filter, Importance, Kind, MetaCondition, Scope};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::exit::usage;

/// Which memories: one user, optionally narrowed.
#[derive(Debug, Clone, Args)]
pub struct ScopeArgs {
    /// The user whose memories these are (required).
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
    /// Narrow to one agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Narrow to one session.
    #[arg(long)]
    pub session: Option<String>,
}

/// Filters shared by search and list.
#[derive(Debug, Clone, Args)]
pub struct FilterArgs {
    /// Only these kinds (repeat, or separate with commas).
    #[arg(long, value_delimiter = ',')]
    pub kind: Vec<Kind>,
    /// Only these categories (repeat, or separate with commas).
    #[arg(long, value_delimiter = ',')]
    pub category: Vec<String>,
    /// Only memories created at or after this time (RFC 3339, a date, today, or an age like 7d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only memories created before this time.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only memories at least this important (1-5).
    #[arg(long, value_name = "N")]
    pub min_importance: Option<Importance>,
    /// Only memories whose metadata has key=value (repeatable; all must hold).
    #[arg(long = "where", value_name = "KEY=VALUE")]
    pub conditions: Vec<MetaCondition>,
    /// Include invalidated and expired memories.
    #[arg(long)]
    pub all: bool,
}

/// A count that must be 1 or more (`--limit 0` would silently show nothing).
pub fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
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
