//! `engram memory cleanup|compact`: maintenance of a user's long-term memory. Cleanup
//! invalidates old unimportant episodes and expired memories (they stay in history); compact has
//! the model condense a bloated profile (the old entries stay in history).

use anyhow::Result;
use clap::{Args, Subcommand};
use engram_core::time::parse_duration;
use engram_llm::process_env;
use engram_memory::maintenance::{self, CleanupReason, CleanupRule};
use jiff::Timestamp;

use crate::commands::agent_common;
use crate::config::Config;
use crate::context::Context;
use crate::exit::{Failure, Status, usage};
use crate::output;

/// The history actor for maintenance done from the command line.
const ACTOR: &str = "cli:maintenance";

/// `engram memory ...`.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Invalidate episodes older than --older-than with importance below --below-importance, and
    /// memories whose expiry has passed. They are kept in history; --dry-run only lists them.
    #[command(after_help = "\
Examples:
  engram memory cleanup --user alice --dry-run
  engram memory cleanup --user alice --older-than 30d --below-importance 2")]
    Cleanup(CleanupArgs),
    /// Have the model condense a long profile (facts and preferences) into fewer entries; the
    /// old entries are invalidated and stay in history.
    Compact(CompactArgs),
}

/// `engram memory cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Whose memories (default: [agent] user in config.toml, else the OS user name).
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
    /// Episodes older than this (e.g. 90d, 12w, 36h).
    #[arg(long, default_value = "90d", value_name = "AGE")]
    pub older_than: String,
    /// ...with importance below this (1-6; importance at or above it is kept).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=6))]
    pub below_importance: u8,
    /// Only list what would be invalidated.
    #[arg(long)]
    pub dry_run: bool,
}

/// `engram memory compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Whose profile (required).
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
}

/// Runs a memory maintenance command.
pub fn run(ctx: &Context, command: MemoryCommand) -> Result<Status> {
    match command {
        MemoryCommand::Cleanup(args) => cleanup(ctx, args),
        MemoryCommand::Compact(args) => compact(ctx, args),
    }
}

fn default_user(ctx: &Context, user: Option<String>) -> Result<String> {
    if let Some(user) = user.filter(|u| !u.trim().is_empty()) {
        return Ok(user);
    }
    let config = Config::load(ctx.home.dir())?;
    Ok(agent_common::default_user(&config, None))
}

fn cleanup(ctx: &Context, args: CleanupArgs) -> Result<Status> {
    let user = default_user(ctx, args.user)?;
    let older_than =
        parse_duration(&args.older_than).map_err(|e| usage(format!("--older-than: {e}")))?;
    let rule = CleanupRule {
        older_than,
        below_importance: args.below_importance,
    };
    let store = ctx.memories()?;
    let report = ctx.block_on(maintenance::cleanup(
        store.as_ref(),
        &user,
        &rule,
        Timestamp::now(),
        args.dry_run,
        ACTOR,
    ))??;
    if ctx.json {
        output::json(&report)?;
        return Ok(Status::Success);
    }
    for item in &report.items {
        let why = match item.reason {
            CleanupReason::OldAndUnimportant => "old, importance below threshold",
            CleanupReason::Expired => "expired",
        };
        println!("{}  ({why})", output::memory_line(&item.memory));
    }
    if report.dry_run {
        println!(
            "Would invalidate {} memories of {user} (dry run: nothing changed).",
            report.items.len()
        );
    } else {
        println!(
            "Invalidated {} memories of {user}; they stay in history (engram history ID).",
            report.invalidated
        );
    }
    Ok(Status::Success)
}

fn compact(ctx: &Context, args: CompactArgs) -> Result<Status> {
    let user = crate::commands::require_user(args.user)?;
    let config = Config::load(ctx.home.dir())?;
    for warning in &config.warnings {
        eprintln!("warning: {warning}");
    }
    let model = engram_llm::from_config(&config.llm, &process_env).map_err(|e| Failure {
        status: Status::Usage,
        message: e.in_file(&config.path).to_string(),
    })?;
    let store = ctx.memories()?;
    let report = ctx.block_on(maintenance::compact_profile(
        store.as_ref(),
        model.as_ref(),
        &user,
        Timestamp::now(),
        ACTOR,
    ))??;
    if ctx.json {
        output::json(&report)?;
        return Ok(Status::Success);
    }
    match &report.skipped {
        Some(why) => println!(
            "Profile of {user} unchanged ({} entries): {why}.",
            report.before
        ),
        None => println!(
            "Profile of {user} condensed from {} to {} entries ({} invalidated, kept in history; {} added).",
            report.before, report.after, report.invalidated, report.added
        ),
    }
    Ok(Status::Success)
}
