//! `engram bench hybrid`: hybrid search latency (query embedding included) on a synthetic store
//! whose memories all have vectors from the configured model.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use clap::Args;
use engram_backend::{DATABASE_FILE, StoreConfig};
use engram_core::{Filter, MemoryStore};
use engram_memory::indexing::embed_pending;
use engram_memory::{SearchRequest, Searcher};
use indicatif::ProgressBar;
use serde::Serialize;

use super::store::{SplitMix, Vocabulary, percentile, write_dataset};
use crate::context::Context;
use crate::exit::Status;
use crate::import::import_reader;
use crate::output;
use crate::retrieval;

/// `engram bench hybrid`.
#[derive(Debug, Args)]
pub struct BenchHybridArgs {
    /// Memories in the store.
    #[arg(long, default_value = "100000")]
    pub size: usize,
    /// Users they are spread over.
    #[arg(long, default_value = "100")]
    pub users: usize,
    /// Searches to time.
    #[arg(long, default_value = "300")]
    pub queries: usize,
    /// Keep the embedded store in DIR and reuse it on later runs (embedding 100k texts takes
    /// minutes).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Random seed for the synthetic data.
    #[arg(long, default_value = "7")]
    pub seed: u64,
}

#[derive(Debug, Serialize)]
struct HybridReport {
    model: String,
    memories: u64,
    user_memories: u64,
    embedded_now: u64,
    embed_per_second: Option<f64>,
    query_embedding_p50_ms: f64,
    hybrid_p50_ms: f64,
    hybrid_p95_ms: f64,
    hybrid_p99_ms: f64,
    lexical_p50_ms: f64,
}

/// Runs `engram bench hybrid`.
pub fn run(ctx: &Context, args: BenchHybridArgs) -> Result<Status> {
    let embedder = retrieval::embedder(ctx)?.ok_or_else(|| {
        anyhow!("bench hybrid needs an embedding model: set ENGRAM_EMBED_MODEL or [embed] in config.toml")
    })?;
    let temp = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let store: Arc<dyn MemoryStore> =
        engram_backend::open_blocking(&StoreConfig::sqlite(dir.join(DATABASE_FILE)))?.memories;
    let runtime = ctx.runtime()?;
    let mut rng = SplitMix(args.seed);
    let vocab = Vocabulary::new(20_000, &mut rng);

    if runtime.block_on(store.stats())?.memories == 0 {
        eprintln!("generating and importing {} memories", args.size);
        let data = dir.join("memories.jsonl");
        write_dataset(&data, args.size, args.users.max(1), &vocab, args.seed)?;
        runtime.block_on(import_reader(
            &*store,
            File::open(&data)?,
            2000,
            &ProgressBar::hidden(),
        ))?;
        std::fs::remove_file(&data)?;
    }
    eprintln!("embedding what has no vector yet");
    let started = Instant::now();
    let embedded = runtime.block_on(embed_pending(&store, &embedder, &mut |done, total| {
        if done % 5120 == 0 || done == total {
            eprintln!("  {done}/{total}");
        }
    }))?;
    let embed_seconds = started.elapsed().as_secs_f64();

    let queries: Vec<String> = (0..args.queries)
        .map(|_| {
            let words = rng.range(2, 6) as usize;
            (0..words)
                .map(|_| vocab.sample(&mut rng).to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let filter = Filter::user("user-0");
    let hybrid = Searcher::new(store.clone()).with_embedder(Some(embedder.clone()));
    let lexical = Searcher::new(store.clone());
    let time = |searcher: &Searcher| -> Result<Vec<Duration>> {
        let mut out = Vec::with_capacity(queries.len());
        for query in &queries {
            let request = SearchRequest {
                filter: filter.clone(),
                query: query.clone(),
                limit: 10,
            };
            let started = Instant::now();
            std::hint::black_box(runtime.block_on(searcher.search(&request))?);
            out.push(started.elapsed());
        }
        out.sort();
        Ok(out)
    };
    // Warm up once so the first query's page faults do not count.
    let _ = time(&hybrid)?;
    let hybrid_times = time(&hybrid)?;
    let lexical_times = time(&lexical)?;
    let mut embed_times = Vec::with_capacity(queries.len());
    for query in &queries {
        let started = Instant::now();
        std::hint::black_box(runtime.block_on(embedder.embed_one(query))?);
        embed_times.push(started.elapsed());
    }
    embed_times.sort();

    let report = HybridReport {
        model: embedder.model_id().to_string(),
        memories: runtime.block_on(store.stats())?.memories,
        user_memories: runtime.block_on(store.count(&filter))?,
        embedded_now: embedded,
        embed_per_second: (embedded > 0).then(|| embedded as f64 / embed_seconds.max(1e-9)),
        query_embedding_p50_ms: percentile(&embed_times, 0.5),
        hybrid_p50_ms: percentile(&hybrid_times, 0.5),
        hybrid_p95_ms: percentile(&hybrid_times, 0.95),
        hybrid_p99_ms: percentile(&hybrid_times, 0.99),
        lexical_p50_ms: percentile(&lexical_times, 0.5),
    };
    if ctx.json {
        output::json(&report)?;
    } else {
        println!(
            "{} memories ({} in the searched user's scope), model {}",
            report.memories, report.user_memories, report.model
        );
        if let Some(rate) = report.embed_per_second {
            println!(
                "embedded {} texts at {rate:.0} texts/s",
                report.embedded_now
            );
        }
        println!(
            "hybrid search p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms (query embedding alone p50 {:.2} ms; lexical alone p50 {:.2} ms)",
            report.hybrid_p50_ms,
            report.hybrid_p95_ms,
            report.hybrid_p99_ms,
            report.query_embedding_p50_ms,
            report.lexical_p50_ms
        );
    }
    Ok(Status::Success)
}
