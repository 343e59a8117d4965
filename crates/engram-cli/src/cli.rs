//! The command line: the commands, composed from the arguments each command module defines
//! (cli.rs imports them; none imports cli.rs back).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands::{
    chat, copy, cron, gateway, graph, import_export, mcp, memory, memory_admin, model, onboard,
    reindex, run, search, serve, sessions, skills, token,
};

const AFTER_HELP: &str = "\
Exit status: 0 success; 1 failure (storage, I/O); 2 bad usage or invalid input; \
3 no such memory; 4 conflict (duplicate text, already invalidated); \
5 finished, but some input lines were rejected.

All state lives in ENGRAM_HOME (default ~/.engram): the database engram.db, config.toml, models.";

/// engram: durable, layered memory for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "engram", version, about, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// Directory holding all of engram's state.
    #[arg(long, global = true, env = "ENGRAM_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Remember one thing.
    #[command(
        after_help = "Example:\n  engram add --user alice --kind fact --category user_info \"Alice is a backend developer\""
    )]
    Add(memory::AddArgs),
    /// Import memories from a JSONL file (one JSON object a line; `-` reads standard input).
    #[command(after_help = "\
Each line: {\"user_id\": \"alice\", \"text\": \"...\"} plus optional agent_id, session_id, kind,
category, importance (1-5), created_at (RFC 3339), metadata (object), and the other fields that
`engram export` writes (id, updated_at, valid_from, valid_to, expires_at, source). Blank lines are
skipped. Bad lines are reported with their number and reason; the good ones are still imported,
and the exit status is 5 if any line was rejected.")]
    Import(import_export::ImportArgs),
    /// Search one user's memories (best first).
    #[command(after_help = "\
Examples:
  engram search --user alice python version
  engram search --user alice --kind fact --since 30d --explain editor
  engram search --batch queries.jsonl --limit 10 --json   (lines: {\"user_id\": ..., \"query\": ...})")]
    Search(search::SearchArgs),
    /// List one user's memories, newest first.
    List(memory::ListArgs),
    /// Show one memory.
    Get(memory::IdArgs),
    /// Change a memory's text or attributes (the old text stays in its history).
    Update(memory::UpdateArgs),
    /// Close a memory: it is kept, with its history, but no longer found by search.
    Invalidate(memory::IdArgs),
    /// Remove a memory (its history keeps a record of the deletion).
    Delete(memory::IdArgs),
    /// Show a memory's audit trail: every add, update, invalidate and delete.
    History(memory::IdArgs),
    /// Erase every memory of a user, and their history.
    Forget(memory::ForgetArgs),
    /// Write a user's memories as JSONL that `engram import` reads back identically.
    Export(import_export::ExportArgs),
    /// Totals: memories, users, kinds, database size.
    Stats,
    /// Give every memory a vector from the configured embedding model (after adding memories
    /// without a model, or switching models).
    Reindex(reindex::ReindexArgs),
    /// Embedding models: fetch one from the Hugging Face hub, list installed ones, compare what
    /// the known ones cost and gain.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Talk with the agent: line editing, history, Markdown answers, /help for commands.
    Chat(chat::ChatArgs),
    /// Give the agent one task; the answer goes to stdout, tool activity to stderr.
    Run(run::RunArgs),
    /// Conversations kept by `engram chat` and `engram run`: list, show, delete.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// Long-term memory maintenance: cleanup of old unimportant episodes and expired memories,
    /// compaction of a long profile.
    #[command(subcommand)]
    Memory(memory_admin::MemoryCommand),
    /// Measure engram's speed.
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
    /// Scheduled jobs: agent turns at set times, run by `engram gateway`.
    #[command(subcommand)]
    Cron(cron::CronCommand),
    /// The daemon that runs scheduled jobs and the heartbeat (until SIGTERM or Ctrl-C).
    Gateway(gateway::GatewayArgs),
    /// Skills the agent can use.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// Set up ENGRAM_HOME: a commented config.toml and a workspace with template files.
    Onboard(onboard::OnboardArgs),
    /// Serve the REST API and the MCP server over HTTP (until Ctrl-C or SIGTERM).
    Serve(serve::ServeArgs),
    /// Serve MCP over standard input and output (for MCP clients that start their servers).
    Mcp(mcp::McpArgs),
    /// Bearer tokens for `engram serve`: create, list, revoke.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Import the JSONL file of the reference MCP memory server into a user's knowledge graph.
    ImportGraph(graph::ImportGraphArgs),
    /// Copy a whole store to another engine (SQLite <-> PostgreSQL), into an empty target.
    Copy(copy::CopyArgs),
}
