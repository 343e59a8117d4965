//! `engram bench`: speed measurements recorded in BENCHMARKS.md.

use anyhow::Result;

use crate::cli::BenchCommand;
use crate::commands::Context;
use crate::exit::Status;

pub fn run(_ctx: &Context, command: BenchCommand) -> Result<Status> {
    match command {
        BenchCommand::Store(_) => anyhow::bail!("not yet"),
    }
}
