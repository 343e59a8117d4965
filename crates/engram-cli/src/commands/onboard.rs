//! `engram onboard`: a home with a commented config.toml and a workspace with templates.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use engram_agent::workspace::onboard;
use serde_json::json;

use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// `engram onboard`.
#[derive(Debug, Args)]
#[command(after_help = "\
Creates what is missing and never overwrites a file that exists, so it is safe to run again
(for example after an upgrade, to get templates added since).")]
pub struct OnboardArgs {
    /// Where the workspace goes (default: ENGRAM_HOME/workspace).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

/// Runs `engram onboard`.
pub fn run(ctx: &Context, args: OnboardArgs) -> Result<Status> {
    let home = ctx.home.dir().to_path_buf();
    let workspace = super::gateway::workspace_dir(ctx, args.workspace)?;
    let report =
        onboard(&home, &workspace).with_context(|| format!("cannot set up {}", home.display()))?;
    if ctx.json {
        output::json(&json!({
            "home": home,
            "workspace": workspace,
            "created": report.created,
            "kept": report.kept,
        }))?;
        return Ok(Status::Success);
    }
    println!("engram home: {}", home.display());
    println!("workspace:   {}", workspace.display());
    if report.created.is_empty() {
        println!("Nothing to create: everything is already there.");
    } else {
        println!("Created:");
        for path in &report.created {
            println!("  {}", path.display());
        }
    }
    if !report.kept.is_empty() {
        println!("Kept as they are:");
        for path in &report.kept {
            println!("  {}", path.display());
        }
    }
    println!(
        "\nNext: point engram at a model (ENGRAM_MODEL and OPENAI_API_KEY or ANTHROPIC_API_KEY), \
         edit USER.md and AGENTS.md in the workspace, then schedule with `engram cron add` and \
         start `engram gateway`."
    );
    Ok(Status::Success)
}
