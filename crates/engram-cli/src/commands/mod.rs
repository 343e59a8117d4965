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
pub mod search;
pub mod serve;
pub mod sessions;
pub mod skills;
pub mod token;

use anyhow::Result;
use engram_core::{Filter, Scope};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::cli::{FilterArgs, ScopeArgs};
use crate::exit::usage;

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
