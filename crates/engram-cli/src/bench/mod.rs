//! `engram bench`: speed and quality measurements recorded in BENCHMARKS.md.

pub mod agent;
pub mod context;
pub mod embed;
pub mod extraction;
pub mod hybrid;
pub mod locomo;
pub mod mcp;
pub mod scheduler;
pub mod server;
pub mod store;
pub mod vectors;

use anyhow::Result;
use clap::Subcommand;

use crate::context::Context;
use crate::exit::Status;

/// `engram bench ...`: the benchmarks, each with its arguments.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Store speed: import throughput, search latency, one-shot search time, size, peak RSS.
    Store(store::BenchStoreArgs),
    /// Retrieval quality: evidence recall@k on the LoCoMo benchmark, per question category.
    Locomo(locomo::BenchLocomoArgs),
    /// Hybrid search latency with the configured embedding model, query embedding included.
    Hybrid(hybrid::BenchHybridArgs),
    /// Embedding speed of the configured model: texts per second and one query's latency.
    Embed(embed::BenchEmbedArgs),
    /// Agent loop: overhead per step, streamed token to output, `engram run` start to first request.
    Agent(agent::BenchAgentArgs),
    /// The memory manager: context block at scale, a turn's added latency, tokens per turn.
    Context(context::BenchContextArgs),
    /// Scheduler: next-run computation for many jobs, gateway idle CPU, due-job start lag.
    Scheduler(scheduler::BenchSchedulerArgs),
    /// Server: search and batch-ingest throughput over HTTP with a real load generator (wrk).
    Server(server::BenchServerArgs),
    /// MCP: the same LoCoMo conversation in engram and in the reference memory server.
    Mcp(mcp::BenchMcpArgs),
    /// Vector search: exact vs approximate latency and recall@k by scope size, index build time,
    /// RSS.
    Vectors(vectors::BenchVectorsArgs),
    /// Extraction quality with the configured model: recall, precision, stale, invented and
    /// assistant-only facts on a labelled set of conversations, through `POST /v1/memories`.
    Extraction(extraction::BenchExtractionArgs),
}

/// Runs a benchmark.
pub fn run(ctx: &Context, command: BenchCommand) -> Result<Status> {
    match command {
        BenchCommand::Store(args) => store::run(ctx, args),
        BenchCommand::Locomo(args) => locomo::run(ctx, args),
        BenchCommand::Hybrid(args) => hybrid::run(ctx, args),
        BenchCommand::Embed(args) => embed::run(ctx, args),
        BenchCommand::Agent(args) => agent::run(ctx, args),
        BenchCommand::Context(args) => context::run(ctx, args),
        BenchCommand::Scheduler(args) => scheduler::run(ctx, args),
        BenchCommand::Server(args) => server::run(ctx, args),
        BenchCommand::Mcp(args) => mcp::run(ctx, args),
        BenchCommand::Vectors(args) => vectors::run(ctx, args),
        BenchCommand::Extraction(args) => extraction::run(ctx, args),
    }
}
