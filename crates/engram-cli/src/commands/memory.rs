//! Commands on single memories and listings: add, get, update, invalidate, delete, history,
//! list, forget, stats.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::Result;
use clap::Args;
use engram_core::store::MemoryPatch;
use engram_core::{AddOutcome, Importance, Kind, MetaCondition, NewMemory};
use serde_json::{Value, json};

use super::{
    FilterArgs, ScopeArgs, at_least_one, filter_from, parse_cli_time, require_user, scope_from,
};
use crate::context::Context;
use crate::exit::{Status, usage};
use crate::output;

/// `engram add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// What sort of memory.
    #[arg(long, default_value = "episode")]
    pub kind: Kind,
    /// Free-text category, e.g. user_info, decision, task_result.
    #[arg(long)]
    pub category: Option<String>,
    /// How much it matters, 1-5.
    #[arg(long, default_value = "3")]
    pub importance: Importance,
    /// When it happened (default now): RFC 3339, a date, or an age like 2d.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    /// Forget it on its own at this time (or after this long, e.g. 30d).
    #[arg(long, value_name = "TIME")]
    pub expires: Option<String>,
    /// Metadata entry (repeatable). Values that are JSON (numbers, true, {...}) are kept as JSON.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<MetaCondition>,
    /// Where it came from.
    #[arg(long, default_value = "cli")]
    pub source: String,
    /// The text to remember (several words are joined with spaces).
    #[arg(required = true, num_args = 1..)]
    pub text: Vec<String>,
}

/// `engram list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// How many memories at most (1 or more).
    #[arg(long, short = 'n', default_value = "20", value_parser = at_least_one())]
    pub limit: usize,
    /// Skip this many (for paging).
    #[arg(long, default_value = "0")]
    pub offset: usize,
}

/// A command on one memory.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The memory's id.
    pub id: engram_core::MemoryId,
}

/// `engram update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The memory's id.
    pub id: engram_core::MemoryId,
    /// The new text (several words are joined with spaces).
    pub text: Vec<String>,
    /// New importance.
    #[arg(long)]
    pub importance: Option<Importance>,
    /// New category.
    #[arg(long)]
    pub category: Option<String>,
}

/// `engram forget`.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The user to erase.
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
    /// Do not ask for confirmation (needed when not on a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// A `--meta` value: JSON when it reads as JSON (3, true, {"a":1}), else a string.
fn meta_value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

pub fn add(ctx: &Context, args: AddArgs) -> Result<Status> {
    let mut memory = NewMemory::new(scope_from(&args.scope)?, args.text.join(" "))
        .with_kind(args.kind)
        .with_importance(args.importance)
        .with_source(args.source);
    memory.category = args.category;
    memory.created_at = args
        .at
        .as_deref()
        .map(|s| parse_cli_time("--at", s))
        .transpose()?;
    if let Some(expires) = args.expires.as_deref() {
        memory.expires_at = Some(match engram_core::time::parse_duration(expires) {
            // A bare duration means "from now".
            Ok(after) if !expires.trim().chars().all(|c| c.is_ascii_digit()) => {
                jiff::Timestamp::now()
                    .checked_add(after)
                    .map_err(|e| usage(format!("--expires: {e}")))?
            }
            _ => parse_cli_time("--expires", expires)?,
        });
    }
    for entry in args.meta {
        memory.metadata.insert(entry.key, meta_value(&entry.value));
    }
    memory.validate().map_err(|e| usage(e.to_string()))?;
    let store = ctx.memories()?;
    let embedder = crate::retrieval::embedder(ctx)?;
    let outcome = ctx.block_on(engram_memory::indexing::add_with_vector(
        &store,
        embedder.as_ref(),
        memory,
        "cli",
    ))??;
    match outcome {
        AddOutcome::Added(memory) => {
            if ctx.json {
                output::json(&json!({"status": "added", "id": memory.id, "memory": memory}))?;
            } else {
                println!("added {}", memory.id);
            }
        }
        AddOutcome::Duplicate(id) => {
            // A conflict (exit 4, as the README says), reported the way the first add was, so
            // scripts learn the id either way.
            if ctx.json {
                output::json(&json!({"status": "duplicate", "id": id}))?;
            } else {
                println!("already stored as {id} (same text in the same scope)");
            }
            return Ok(Status::Conflict);
        }
    }
    Ok(Status::Success)
}

pub fn get(ctx: &Context, args: IdArgs) -> Result<Status> {
    let memory = ctx.block_on(ctx.memories()?.get(args.id))??;
    if ctx.json {
        output::json(&memory)?;
    } else {
        println!("{}", output::memory_detail(&memory));
    }
    Ok(Status::Success)
}

pub fn update(ctx: &Context, args: UpdateArgs) -> Result<Status> {
    let patch = MemoryPatch {
        text: (!args.text.is_empty()).then(|| args.text.join(" ")),
        category: args.category.map(Some),
        importance: args.importance,
        ..MemoryPatch::default()
    };
    if patch.is_empty() {
        return Err(usage(
            "nothing to change: give the new text, --importance or --category",
        ));
    }
    let memory = ctx.block_on(ctx.memories()?.update(args.id, patch, "cli"))??;
    if ctx.json {
        output::json(&memory)?;
    } else {
        println!("updated {}", memory.id);
    }
    Ok(Status::Success)
}

pub fn invalidate(ctx: &Context, args: IdArgs) -> Result<Status> {
    let memory = ctx.block_on(ctx.memories()?.invalidate(args.id, "cli"))??;
    if ctx.json {
        output::json(&memory)?;
    } else {
        println!("invalidated {} (kept in history)", memory.id);
    }
    Ok(Status::Success)
}

pub fn delete(ctx: &Context, args: IdArgs) -> Result<Status> {
    let memory = ctx.block_on(ctx.memories()?.delete(args.id, "cli"))??;
    if ctx.json {
        output::json(&json!({"status": "deleted", "id": memory.id}))?;
    } else {
        println!("deleted {}", memory.id);
    }
    Ok(Status::Success)
}

pub fn history(ctx: &Context, args: IdArgs) -> Result<Status> {
    let events = ctx.block_on(ctx.memories()?.history(args.id))??;
    if ctx.json {
        output::json(&events)?;
    } else {
        for event in &events {
            println!("{}", output::history_line(event));
        }
    }
    Ok(Status::Success)
}

pub fn list(ctx: &Context, args: ListArgs) -> Result<Status> {
    let filter = filter_from(&args.scope, &args.filter)?;
    let memories = ctx.block_on(ctx.memories()?.list(&filter, args.limit, args.offset))??;
    if ctx.json {
        output::json(&memories)?;
    } else if memories.is_empty() {
        eprintln!("no memories match");
    } else {
        for memory in &memories {
            println!("{}", output::memory_line(memory));
        }
    }
    Ok(Status::Success)
}

pub fn forget(ctx: &Context, args: ForgetArgs) -> Result<Status> {
    let user = require_user(args.user)?;
    let store = ctx.memories()?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(usage(format!(
                "refusing to erase {user}'s memories without confirmation; pass --yes"
            )));
        }
        let filter = engram_core::Filter {
            include_closed: true,
            ..engram_core::Filter::user(user.clone())
        };
        let count = ctx.block_on(store.count(&filter))??;
        eprint!(
            "Erase all {count} memories of {user}, and their history? This cannot be undone. [y/N] "
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            eprintln!("nothing erased");
            return Ok(Status::Failure);
        }
    }
    let removed = ctx.block_on(store.forget_user(&user))??;
    if ctx.json {
        output::json(&json!({"status": "forgotten", "user_id": user, "memories": removed}))?;
    } else {
        println!("erased {removed} memories of {user}");
    }
    Ok(Status::Success)
}

pub fn stats(ctx: &Context) -> Result<Status> {
    let stats = ctx.block_on(ctx.memories()?.stats())??;
    if ctx.json {
        output::json(&stats)?;
        return Ok(Status::Success);
    }
    println!("database    {} ({})", stats.location, stats.engine);
    println!("schema      v{}", stats.schema_version);
    if let Some(bytes) = stats.size_bytes {
        println!("size        {:.1} MiB", bytes as f64 / 1048576.0);
    }
    println!("dense       {}", stats.dense_search);
    for (name, value) in &stats.details {
        println!("{name:<12}{value}");
    }
    println!("users       {}", stats.users);
    println!(
        "memories    {} ({} current, {} closed or expired)",
        stats.memories,
        stats.memories.saturating_sub(stats.closed),
        stats.closed
    );
    for (kind, n) in &stats.by_kind {
        println!("  {:<10}{n}", kind.as_str());
    }
    println!("history     {} rows", stats.history_rows);
    Ok(Status::Success)
}
