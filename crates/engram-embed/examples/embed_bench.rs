//! Embedding throughput and query latency of a local model.
//!
//! Usage: cargo run --release -p engram-embed --example embed_bench -- [MODEL_DIR] [TEXTS] [RUNS]
//! MODEL_DIR defaults to $ENGRAM_EMBED_MODEL, then $ENGRAM_TEST_MODEL_DIR.

use std::path::PathBuf;

use engram_embed::LocalEmbedder;
use engram_embed::bench::{self, BenchOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .or_else(|| std::env::var("ENGRAM_EMBED_MODEL").ok())
        .or_else(|| std::env::var("ENGRAM_TEST_MODEL_DIR").ok())
        .ok_or("give a model folder (or set ENGRAM_EMBED_MODEL); scripts/fetch-test-model.sh fetches one")?;
    let mut options = BenchOptions::default();
    if let Some(texts) = args.next() {
        options.texts = texts.parse()?;
    }
    if let Some(runs) = args.next() {
        options.runs = runs.parse()?;
    }
    let start = std::time::Instant::now();
    let model = LocalEmbedder::load(&PathBuf::from(dir))?;
    println!(
        "load time        {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let report = bench::run(&model, options).await?;
    println!("{report}");
    Ok(())
}
