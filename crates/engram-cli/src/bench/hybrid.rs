//! `engram bench hybrid`: hybrid search latency (query embedding included) on a synthetic store
//! whose memories all have vectors from the configured model.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};
use clap::Args;
use engram_backend::{DATABASE_FILE, StoreConfig};
use engram_core::store::transfer::copy;
use engram_core::{Filter, MemoryStore};
use engram_memory::Searcher;
use engram_memory::indexing::embed_pending;
use indicatif::ProgressBar;
use serde::Serialize;

use super::server::load_average;
use super::store::{SplitMix, Vocabulary, percentile, time_searches, write_dataset};
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
    /// Also measure PostgreSQL: a database URL. The embedded SQLite store is copied into a
    /// fresh schema of it (`engram_bench_hybrid`, dropped first) and searched with the same
    /// queries after SQLite.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

/// One engine's figures.
#[derive(Debug, Serialize)]
struct EngineRow {
    /// `sqlite` or `postgresql`.
    engine: String,
    /// How the engine runs dense search (`engram stats`' "dense" line).
    dense_search: String,
    /// How the timed hybrid searches' dense candidates were found (searches per path).
    dense_exact_in_database: u64,
    dense_exact_in_memory: u64,
    dense_approximate: u64,
    memories: u64,
    user_memories: u64,
    hybrid_p50_ms: f64,
    hybrid_p95_ms: f64,
    hybrid_p99_ms: f64,
    lexical_p50_ms: f64,
}

#[derive(Debug, Serialize)]
struct HybridReport {
    model: String,
    embedded_now: u64,
    embed_per_second: Option<f64>,
    query_embedding_p50_ms: f64,
    /// SQLite first, then PostgreSQL with `--database-url`.
    engines: Vec<EngineRow>,
    load_average_before: String,
    load_average_after: String,
}

/// The schema `--database-url` gets (dropped and made again on every run).
const PG_SCHEMA: &str = "engram_bench_hybrid";

/// Runs `engram bench hybrid`.
pub fn run(ctx: &Context, args: BenchHybridArgs) -> Result<Status> {
    let load_before = load_average();
    // A bad URL or a database that is down fails now, not after minutes of embedding.
    let pg_url = match &args.database_url {
        Some(url) => Some(ctx.block_on(engram_backend::fresh_schema(url, PG_SCHEMA))??),
        None => None,
    };
    let embedder = retrieval::embedder(ctx)?.ok_or_else(|| {
        anyhow!("bench hybrid needs an embedding model: set ENGRAM_EMBED_MODEL or [embed] in config.toml")
    })?;
    let temp = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let sqlite = engram_backend::open_blocking(&StoreConfig::sqlite(dir.join(DATABASE_FILE)))?;
    let store: Arc<dyn MemoryStore> = sqlite.memories.clone();
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
    let measure = |engine: &str, store: Arc<dyn MemoryStore>| -> Result<EngineRow> {
        eprintln!("{engine}: searching");
        let hybrid = Searcher::new(store.clone()).with_embedder(Some(embedder.clone()));
        let lexical = Searcher::new(store.clone());
        let time = |searcher: &Searcher| time_searches(runtime, searcher, &filter, &queries);
        // Warm up once so the first query's page faults do not count.
        let _ = time(&hybrid)?;
        let before = store.dense_search_counts();
        let hybrid_times = time(&hybrid)?;
        let after = store.dense_search_counts();
        let lexical_times = time(&lexical)?;
        let stats = runtime.block_on(store.stats())?;
        Ok(EngineRow {
            engine: engine.to_string(),
            dense_search: stats.dense_search,
            dense_exact_in_database: after.exact_in_database - before.exact_in_database,
            dense_exact_in_memory: after.exact_in_memory - before.exact_in_memory,
            dense_approximate: after.approximate - before.approximate,
            memories: stats.memories,
            user_memories: runtime.block_on(store.count(&filter))?,
            hybrid_p50_ms: percentile(&hybrid_times, 0.5),
            hybrid_p95_ms: percentile(&hybrid_times, 0.95),
            hybrid_p99_ms: percentile(&hybrid_times, 0.99),
            lexical_p50_ms: percentile(&lexical_times, 0.5),
        })
    };
    let mut engines = vec![measure("sqlite", store.clone())?];
    if let Some(url) = pg_url {
        eprintln!("copying the store into PostgreSQL (schema {PG_SCHEMA})");
        let postgres = runtime.block_on(engram_backend::open(&StoreConfig::postgres(url)))?;
        let started = Instant::now();
        runtime.block_on(copy(&*sqlite.transfer, &*postgres.transfer, &mut |_, _| {}))?;
        eprintln!("  copied in {:.0} s", started.elapsed().as_secs_f64());
        engines.push(measure("postgresql", postgres.memories.clone())?);
    }
    let mut embed_times = Vec::with_capacity(queries.len());
    for query in &queries {
        let started = Instant::now();
        std::hint::black_box(runtime.block_on(embedder.embed_one(query))?);
        embed_times.push(started.elapsed());
    }
    embed_times.sort();

    let report = HybridReport {
        model: embedder.model_id().to_string(),
        embedded_now: embedded,
        embed_per_second: (embedded > 0).then(|| embedded as f64 / embed_seconds.max(1e-9)),
        query_embedding_p50_ms: percentile(&embed_times, 0.5),
        engines,
        load_average_before: load_before,
        load_average_after: load_average(),
    };
    if ctx.json {
        output::json(&report)?;
        return Ok(Status::Success);
    }
    println!("model {}", report.model);
    if let Some(rate) = report.embed_per_second {
        println!(
            "embedded {} texts at {rate:.0} texts/s",
            report.embedded_now
        );
    }
    for row in &report.engines {
        println!(
            "{}: {} memories ({} in the searched user's scope); dense search {} (timed searches: {} exact in the database, {} exact in memory, {} approximate)",
            row.engine,
            row.memories,
            row.user_memories,
            row.dense_search,
            row.dense_exact_in_database,
            row.dense_exact_in_memory,
            row.dense_approximate
        );
        println!(
            "  hybrid search p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms (lexical alone p50 {:.2} ms)",
            row.hybrid_p50_ms, row.hybrid_p95_ms, row.hybrid_p99_ms, row.lexical_p50_ms
        );
    }
    println!(
        "query embedding alone p50 {:.2} ms; load average before {} / after {}",
        report.query_embedding_p50_ms, report.load_average_before, report.load_average_after
    );
    Ok(Status::Success)
}
