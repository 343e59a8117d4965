//! `engram bench embed`: embedding throughput on chat-turn-sized texts and single-query latency
//! for the configured model (engram_embed::bench does the measuring).

use anyhow::{Result, anyhow};
use clap::Args;
use engram_embed::bench::{BenchOptions, run as measure};
use serde_json::json;

use crate::context::Context;
use crate::exit::Status;
use crate::output;
use crate::retrieval;

/// `engram bench embed`.
#[derive(Debug, Args)]
pub struct BenchEmbedArgs {
    /// Texts per throughput run.
    #[arg(long, default_value = "512")]
    pub texts: usize,
    /// Throughput runs after one warm-up.
    #[arg(long, default_value = "5")]
    pub runs: usize,
    /// Single queries timed.
    #[arg(long, default_value = "100")]
    pub queries: usize,
}

/// Runs `engram bench embed`.
pub fn run(ctx: &Context, args: BenchEmbedArgs) -> Result<Status> {
    let embedder = retrieval::embedder(ctx)?.ok_or_else(|| {
        anyhow!(
            "bench embed needs an embedding model: set ENGRAM_EMBED_MODEL or [embed] in config.toml"
        )
    })?;
    let options = BenchOptions {
        texts: args.texts.max(1),
        runs: args.runs.max(1),
        queries: args.queries.max(1),
    };
    let report = ctx.block_on(measure(&*embedder, options))??;
    if ctx.json {
        output::json(&json!({
            "model": report.model_id,
            "threads": report.threads,
            "texts": report.texts,
            "mean_words": report.mean_words,
            "texts_per_second": report.texts_per_second,
            "texts_per_second_runs": report.texts_per_second_runs,
            "query_median_ms": report.query_median.as_secs_f64() * 1e3,
            "query_p90_ms": report.query_p90.as_secs_f64() * 1e3,
        }))?;
    } else {
        println!("{report}");
    }
    Ok(Status::Success)
}
