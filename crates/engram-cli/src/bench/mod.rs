//! `engram bench`: speed and quality measurements recorded in BENCHMARKS.md.

pub mod agent;
pub mod locomo;
pub mod scheduler;
pub mod store;

use anyhow::Result;

use crate::cli::BenchCommand;
use crate::commands::Context;
use crate::exit::Status;

/// Runs a benchmark.
pub fn run(ctx: &Context, command: BenchCommand) -> Result<Status> {
    match command {
        BenchCommand::Store(args) => store::run(ctx, args),
        BenchCommand::Locomo(args) => locomo::run(ctx, args),
        BenchCommand::Agent(args) => agent::run(ctx, args),
        BenchCommand::Scheduler(args) => scheduler::run(ctx, args),
    }
}
