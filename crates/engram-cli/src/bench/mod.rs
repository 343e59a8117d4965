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

use crate::cli::BenchCommand;
use crate::context::Context;
use crate::exit::Status;

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
