//! `engram skills ...`: the skills the agent can use.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use engram_agent::skills::{SkillSet, SkillSource, SystemProbe};
use serde_json::json;

use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// `engram skills ...`.
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// List skills: built-in and workspace ones, whether each is available and why not.
    #[command(after_help = "\
Skills live in <workspace>/skills/<name>/SKILL.md (YAML front matter: name, description,
requires: {bins, env}, always). Workspace skills shadow built-in ones of the same name.
A SKILL.md that cannot be read is reported on standard error; the others still load.")]
    List(SkillsListArgs),
}

/// `engram skills list`.
#[derive(Debug, Args)]
pub struct SkillsListArgs {
    /// The agent's workspace (default: ENGRAM_HOME/workspace).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

/// Runs `engram skills ...`.
pub fn run(ctx: &Context, command: SkillsCommand) -> Result<Status> {
    match command {
        SkillsCommand::List(args) => list(ctx, args),
    }
}

fn list(ctx: &Context, args: SkillsListArgs) -> Result<Status> {
    let dir = super::gateway::workspace_dir(ctx, args.workspace)?;
    // No workspace yet: the built-in skills only.
    let set = if dir.exists() {
        let workspace = engram_agent::tools::Workspace::confined(&dir)
            .with_context(|| format!("cannot use the workspace {}", dir.display()))?;
        SkillSet::load(&workspace)
    } else {
        SkillSet::load_with(None, &SystemProbe)
    };
    if ctx.json {
        let skills: Vec<_> = set
            .skills()
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "description": s.description,
                    "available": s.is_available(),
                    "missing": s.missing,
                    "always": s.always,
                    "source": match s.source { SkillSource::Builtin => "builtin", SkillSource::Workspace(_) => "workspace" },
                    "location": s.location(),
                    "requires": {"bins": s.requires.bins, "env": s.requires.env},
                })
            })
            .collect();
        let errors: Vec<_> = set
            .errors()
            .iter()
            .map(|e| json!({"file": e.file, "error": e.message}))
            .collect();
        output::json(&json!({"skills": skills, "errors": errors}))?;
    } else {
        let width = set.skills().iter().map(|s| s.name.len()).max().unwrap_or(0);
        for skill in set.skills() {
            let state = match skill.unavailable_reason() {
                None if skill.always => "available, always loaded".to_string(),
                None => "available".to_string(),
                Some(reason) => format!("unavailable: {reason}"),
            };
            println!(
                "{:<width$}  {}  [{}]  {}",
                skill.name,
                skill
                    .description
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
                state,
                skill.location()
            );
        }
    }
    for error in set.errors() {
        eprintln!("warning: {error}");
    }
    Ok(Status::Success)
}
