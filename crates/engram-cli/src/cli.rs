//! The command line: every command, flag and help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use engram_core::{Importance, Kind, MetaCondition};

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
    Add(AddArgs),
    /// Import memories from a JSONL file (one JSON object a line; `-` reads standard input).
    #[command(after_help = "\
Each line: {\"user_id\": \"alice\", \"text\": \"...\"} plus optional agent_id, session_id, kind,
category, importance (1-5), created_at (RFC 3339), metadata (object), and the other fields that
`engram export` writes (id, updated_at, valid_from, valid_to, expires_at, source). Blank lines are
skipped. Bad lines are reported with their number and reason; the good ones are still imported,
and the exit status is 5 if any line was rejected.")]
    Import(ImportArgs),
    /// Search one user's memories (best first).
    #[command(after_help = "\
Examples:
  engram search --user alice python version
  engram search --user alice --kind fact --since 30d --explain editor
  engram search --batch queries.jsonl --limit 10 --json   (lines: {\"user_id\": ..., \"query\": ...})")]
    Search(SearchArgs),
    /// List one user's memories, newest first.
    List(ListArgs),
    /// Show one memory.
    Get(IdArgs),
    /// Change a memory's text or attributes (the old text stays in its history).
    Update(UpdateArgs),
    /// Close a memory: it is kept, with its history, but no longer found by search.
    Invalidate(IdArgs),
    /// Remove a memory (its history keeps a record of the deletion).
    Delete(IdArgs),
    /// Show a memory's audit trail: every add, update, invalidate and delete.
    History(IdArgs),
    /// Erase every memory of a user, and their history.
    Forget(ForgetArgs),
    /// Write a user's memories as JSONL that `engram import` reads back identically.
    Export(ExportArgs),
    /// Totals: memories, users, kinds, database size.
    Stats,
    /// Give every memory a vector from the configured embedding model (after adding memories
    /// without a model, or switching models).
    Reindex(ReindexArgs),
    /// Embedding models: fetch one from the Hugging Face hub, list installed ones, compare what
    /// the known ones cost and gain.
    #[command(subcommand)]
    Model(crate::commands::model::ModelCommand),
    /// Talk with the agent: line editing, history, Markdown answers, /help for commands.
    Chat(crate::commands::chat::ChatArgs),
    /// Give the agent one task; the answer goes to stdout, tool activity to stderr.
    Run(crate::commands::run::RunArgs),
    /// Conversations kept by `engram chat` and `engram run`: list, show, delete.
    #[command(subcommand)]
    Sessions(crate::commands::sessions::SessionsCommand),
    /// Long-term memory maintenance: cleanup of old unimportant episodes and expired memories,
    /// compaction of a long profile.
    #[command(subcommand)]
    Memory(crate::commands::memory_admin::MemoryCommand),
    /// Measure engram's speed.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Scheduled jobs: agent turns at set times, run by `engram gateway`.
    #[command(subcommand)]
    Cron(crate::commands::cron::CronCommand),
    /// The daemon that runs scheduled jobs and the heartbeat (until SIGTERM or Ctrl-C).
    Gateway(crate::commands::gateway::GatewayArgs),
    /// Skills the agent can use.
    #[command(subcommand)]
    Skills(crate::commands::skills::SkillsCommand),
    /// Set up ENGRAM_HOME: a commented config.toml and a workspace with template files.
    Onboard(crate::commands::onboard::OnboardArgs),
    /// Serve the REST API and the MCP server over HTTP (until Ctrl-C or SIGTERM).
    Serve(crate::commands::serve::ServeArgs),
    /// Serve MCP over standard input and output (for MCP clients that start their servers).
    Mcp(crate::commands::mcp::McpArgs),
    /// Bearer tokens for `engram serve`: create, list, revoke.
    #[command(subcommand)]
    Token(crate::commands::token::TokenCommand),
    /// Import the JSONL file of the reference MCP memory server into a user's knowledge graph.
    ImportGraph(crate::commands::graph::ImportGraphArgs),
    /// Copy a whole store to another engine (SQLite <-> PostgreSQL), into an empty target.
    Copy(crate::commands::copy::CopyArgs),
}

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

/// `engram import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The JSONL file, or `-` for standard input.
    pub file: PathBuf,
    /// Lines per transaction.
    #[arg(
        long,
        default_value_t = crate::import::DEFAULT_BATCH_SIZE,
        value_parser = clap::value_parser!(u64).range(1..=100_000)
    )]
    pub batch_size: u64,
}

/// `engram search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// How many hits at most (1 or more).
    #[arg(long, short = 'k', default_value = "10", value_parser = at_least_one())]
    pub limit: usize,
    /// Show how each score came about.
    #[arg(long)]
    pub explain: bool,
    /// Ranking profile: balanced (default; chosen by cross-validation on LoCoMo: no recency,
    /// time boosts, neighbouring turns), recent (balanced plus 0.1 recency), reference (0.6
    /// similarity, 0.2 recency, 0.2 importance), relevance (no recency or importance) or rrf
    /// (rank fusion). `[search]` in config.toml can change the default and the weights.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Run many searches: a JSONL file of {"user_id", "query"} lines (`-` for stdin); prints one
    /// JSON array of hits per line, in the same order.
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    pub batch: Option<PathBuf>,
    /// What to look for.
    #[arg(required_unless_present = "batch", num_args = 1..)]
    pub query: Vec<String>,
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

/// `engram export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The user to export.
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
    /// Write to this file (atomically) instead of standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
}

/// `engram bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Store speed: import throughput, search latency, one-shot search time, size, peak RSS.
    Store(BenchStoreArgs),
    /// Retrieval quality: evidence recall@k on the LoCoMo benchmark, per question category.
    Locomo(BenchLocomoArgs),
    /// Hybrid search latency with the configured embedding model, query embedding included.
    Hybrid(crate::bench::hybrid::BenchHybridArgs),
    /// Embedding speed of the configured model: texts per second and one query's latency.
    Embed(crate::bench::embed::BenchEmbedArgs),
    /// Agent loop: overhead per step, streamed token to output, `engram run` start to first request.
    Agent(crate::bench::agent::BenchAgentArgs),
    /// The memory manager: context block at scale, a turn's added latency, tokens per turn.
    Context(crate::bench::context::BenchContextArgs),
    /// Scheduler: next-run computation for many jobs, gateway idle CPU, due-job start lag.
    Scheduler(crate::bench::scheduler::BenchSchedulerArgs),
    /// Server: search and batch-ingest throughput over HTTP with a real load generator (wrk).
    Server(crate::bench::server::BenchServerArgs),
    /// MCP: the same LoCoMo conversation in engram and in the reference memory server.
    Mcp(crate::bench::mcp::BenchMcpArgs),
    /// Vector search: exact vs approximate latency and recall@k by scope size, index build time,
    /// RSS.
    Vectors(crate::bench::vectors::BenchVectorsArgs),
    /// Extraction quality with the configured model: recall, precision, stale, invented and
    /// assistant-only facts on a labelled set of conversations, through `POST /v1/memories`.
    Extraction(crate::bench::extraction::BenchExtractionArgs),
}

/// Which retrieval a benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RetrievalMode {
    /// BM25 only.
    Lexical,
    /// Embeddings only.
    Dense,
    /// Both, fused.
    Hybrid,
}

impl RetrievalMode {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            RetrievalMode::Lexical => "lexical",
            RetrievalMode::Dense => "dense",
            RetrievalMode::Hybrid => "hybrid",
        }
    }
}

/// `engram bench locomo`.
#[derive(Debug, Args)]
pub struct BenchLocomoArgs {
    /// The LoCoMo JSON file (a list of samples, as in snap-research/LoCoMo data/locomo10.json).
    #[arg(long)]
    pub data: PathBuf,
    /// lexical, dense or hybrid (default: hybrid when an embedding model is configured).
    #[arg(long)]
    pub mode: Option<RetrievalMode>,
    /// Ranking profile (see `engram search --help`).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Recall cut-offs (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "5,10,20")]
    pub k: Vec<usize>,
    /// Keep the benchmark's store in DIR and reuse it when it already holds the data (saves
    /// re-embedding between runs that only change ranking).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Also choose ranking settings by leave-one-conversation-out cross-validation: every
    /// setting of a grid (fusion, lexical share, recency, time boosts, neighbours) is scored on
    /// all conversations but one, the best is measured on the one left out, in turn for each.
    #[arg(long)]
    pub cv: bool,
    /// With --cv: the values one parameter of the grid takes, e.g. `--grid neighbours=0,0.2,0.4`
    /// (repeatable). Parameters: fusion (weighted, minmax, rrf), share, recency, window, when,
    /// neighbours.
    #[arg(long, value_name = "NAME=V1,V2,...")]
    pub grid: Vec<String>,
}

/// `engram reindex`.
#[derive(Debug, Args)]
pub struct ReindexArgs {}

/// `engram bench store`.
#[derive(Debug, Args)]
pub struct BenchStoreArgs {
    /// Store sizes to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub sizes: Vec<usize>,
    /// How many users the memories are spread over.
    #[arg(long, default_value = "100")]
    pub users: usize,
    /// Searches per size.
    #[arg(long, default_value = "1000")]
    pub queries: usize,
    /// Runs of the one-shot `engram search` process per size.
    #[arg(long, default_value = "20")]
    pub process_runs: usize,
    /// Where to build the benchmark stores (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Random seed for the synthetic data.
    #[arg(long, default_value = "7")]
    pub seed: u64,
    /// Also measure PostgreSQL: a database URL (each size gets a fresh schema in it,
    /// `engram_bench_store_<size>`), measured after SQLite on the same data.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Size of the common-word case: one user's memories in which each query word is in about a
    /// quarter of them (0 skips it).
    #[arg(long, default_value = "100000")]
    pub common_words: usize,
}

/// A count that must be 1 or more (`--limit 0` would silently show nothing).
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}
