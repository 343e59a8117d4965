//! `engram bench vectors`: vector search at growing scope sizes — exact search in SQL and in
//! memory, the approximate index (latency and recall@k against exact search, with and without
//! a filter), the index's build time and the process's memory.
//!
//! Each size gets its own database (kept with `--dir`, and reused when it is already complete),
//! and is measured in a fresh child process so the memory figures are that size's alone.
//!
//! The vectors are synthetic but shaped like sentence embeddings, not uniform noise (on which
//! nearest-neighbour search is both meaningless and unusually hard): every vector shares a
//! common direction (real embeddings are anisotropic), belongs to one of 2,000 topics and one of
//! 8 subtopics within it, and has noise mostly in a 48-dimensional subspace. The figures printed
//! with the results (similarity of random pairs, of each query's best and tenth-best match) let
//! a reader compare them with real embeddings; all-MiniLM-L6-v2 on chat turns gives roughly
//! 0.05-0.15 for random pairs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Args;
use engram_backend::{IndexBuild, SqliteOptions, StoreConfig, VectorIndexOptions};
use engram_core::DenseTuning;
use engram_core::{Filter, Kind, MemoryStore, NewMemory, Scope, StoredVector, VectorHit};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

use crate::bench::store::{peak_rss_mib, percentile};
use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// `engram bench vectors`.
#[derive(Debug, Args)]
pub struct BenchVectorsArgs {
    /// Scope sizes to measure (memories, all in one user's scope), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10000,50000,100000,1000000"
    )]
    pub sizes: Vec<usize>,
    /// Vector length.
    #[arg(long, default_value = "384")]
    pub dimension: usize,
    /// Queries per size.
    #[arg(long, default_value = "200")]
    pub queries: usize,
    /// Results per query (recall is measured at this k).
    #[arg(long, default_value = "10")]
    pub k: usize,
    /// Search list lengths of the approximate index to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "32,64,128")]
    pub ef: Vec<usize>,
    /// Queries timed on the exact SQL path at sizes above 100,000 (it takes about a second
    /// each there); smaller sizes time all of them.
    #[arg(long, default_value = "10")]
    pub sql_queries_large: usize,
    /// Keep the generated databases here (and reuse them on the next run).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Random seed for the synthetic vectors.
    #[arg(long, default_value = "7")]
    pub seed: u64,
    /// Measure this one database in this process and print the figures as JSON (used by the
    /// benchmark itself, one child process per size).
    #[arg(long, hide = true)]
    pub measure: Option<PathBuf>,
    /// The size of the database given with --measure.
    #[arg(long, hide = true, default_value = "0")]
    pub measure_size: usize,
}

/// The user all benchmark memories belong to.
const USER: &str = "bench";
/// Sessions the memories are spread over (a session filter selects 1 in this many).
const SESSIONS: usize = 1000;

fn model_id(dimension: usize) -> String {
    format!("bench:synthetic-{dimension}")
}

/// SplitMix64: repeatable, fast, good enough for synthetic data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn gaussian(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

fn random_unit(rng: &mut Rng, dimension: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dimension).map(|_| rng.gaussian()).collect();
    normalise(&mut v);
    v
}

/// `count` random unit vectors of `dimension`, one after another.
fn unit_table(rng: &mut Rng, count: usize, dimension: usize) -> Vec<f32> {
    let mut table = Vec::with_capacity(count * dimension);
    for _ in 0..count {
        table.extend(random_unit(rng, dimension));
    }
    table
}

/// Synthetic embedding-like vectors (see the module documentation).
struct Synthetic {
    dimension: usize,
    common: Vec<f32>,
    /// The topic directions one after another, then the subtopics': one allocation each, so
    /// that dropping them gives the memory back to the system (thousands of small vectors
    /// would stay in the allocator's heap and count in the resident memory measured later).
    topics: Vec<f32>,
    subtopics: Vec<f32>,
    noise_basis: Vec<Vec<f32>>,
}

const TOPICS: usize = 2000;
const SUBTOPICS: usize = 8;
const NOISE_RANK: usize = 48;

impl Synthetic {
    fn new(dimension: usize, seed: u64) -> Self {
        let mut rng = Rng(seed ^ 0xA5A5_5A5A);
        Self {
            dimension,
            common: random_unit(&mut rng, dimension),
            topics: unit_table(&mut rng, TOPICS, dimension),
            subtopics: unit_table(&mut rng, TOPICS * SUBTOPICS, dimension),
            noise_basis: (0..NOISE_RANK)
                .map(|_| random_unit(&mut rng, dimension))
                .collect(),
        }
    }

    /// One vector; `rng` decides its topic, subtopic and noise.
    fn sample(&self, rng: &mut Rng) -> Vec<f32> {
        let topic = rng.below(TOPICS);
        let sub = topic * SUBTOPICS + rng.below(SUBTOPICS);
        let mut v: Vec<f32> = self.common.iter().map(|x| 0.3 * x).collect();
        for ((x, t), s) in v
            .iter_mut()
            .zip(
                self.topics
                    .chunks_exact(self.dimension)
                    .nth(topic)
                    .unwrap_or(&[]),
            )
            .zip(
                self.subtopics
                    .chunks_exact(self.dimension)
                    .nth(sub)
                    .unwrap_or(&[]),
            )
        {
            *x += 0.55 * t + 0.45 * s;
        }
        let scale = 0.5 / (NOISE_RANK as f32).sqrt();
        for basis in &self.noise_basis {
            let z = rng.gaussian() * scale;
            for (x, b) in v.iter_mut().zip(basis) {
                *x += z * b;
            }
        }
        let iso = 0.3 / (self.dimension as f32).sqrt();
        for x in v.iter_mut() {
            *x += iso * rng.gaussian();
        }
        normalise(&mut v);
        v
    }

    fn data_rng(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 1)
    }

    fn queries(&self, n: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9) ^ 0xFEED);
        (0..n).map(|_| self.sample(&mut rng)).collect()
    }
}

/// The kind of memory `i` (a kind filter keeps a quarter).
fn kind_of(i: usize) -> Kind {
    Kind::ALL[i % 4]
}

/// Creates (or reuses) the database for `size` memories.
fn ensure_database(
    runtime: &Runtime,
    path: &Path,
    size: usize,
    synthetic: &Synthetic,
    seed: u64,
) -> Result<()> {
    let model = model_id(synthetic.dimension);
    if path.exists() {
        let store = open(path, SqliteOptions::default())?;
        let complete = runtime.block_on(store.count(&Filter {
            include_closed: true,
            ..Filter::user(USER)
        }))? == size as u64
            && runtime
                .block_on(store.vector_models())?
                .iter()
                .any(|m| m.model == model && m.vectors == size as u64);
        if complete {
            eprintln!("[{size}] reusing {}", path.display());
            return Ok(());
        }
        drop(store);
        std::fs::remove_file(path)?;
        let _ = std::fs::remove_file(path.with_extension("db-wal"));
        let _ = std::fs::remove_file(path.with_extension("db-shm"));
    }
    eprintln!(
        "[{size}] writing {size} memories and vectors to {}",
        path.display()
    );
    let started = Instant::now();
    let store = open(path, SqliteOptions::default())?;
    let mut rng = Synthetic::data_rng(seed);
    let start = jiff::Timestamp::from_second(1_672_531_200)?; // 2023-01-01
    const BATCH: usize = 10_000;
    let mut i = 0;
    while i < size {
        let end = (i + BATCH).min(size);
        let memories: Vec<NewMemory> = (i..end)
            .map(|n| {
                let at = start
                    .checked_add(jiff::SignedDuration::from_secs(
                        (n as i64) * 63_072_000 / size.max(1) as i64,
                    ))
                    .unwrap_or(start);
                NewMemory::new(
                    Scope::user(USER).with_session(format!("session-{}", n % SESSIONS)),
                    format!("vector memory {n}"),
                )
                .with_kind(kind_of(n))
                .at(at)
            })
            .collect();
        let outcomes = runtime.block_on(store.add_many(memories, "bench"))?;
        let mut vectors = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            let engram_core::AddOutcome::Added(memory) = outcome? else {
                anyhow::bail!("a generated memory was a duplicate");
            };
            vectors.push(StoredVector {
                content_hash: memory.content_hash,
                vector: synthetic.sample(&mut rng),
                truncated: false,
            });
        }
        runtime.block_on(store.put_vectors(&model, synthetic.dimension, vectors))?;
        i = end;
    }
    eprintln!(
        "[{size}] written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Figures for one size (printed as JSON by the child process).
#[derive(Debug, Serialize, Deserialize)]
struct SizeFigures {
    size: usize,
    /// Mean similarity of 2,000 random pairs of stored vectors.
    random_pair_similarity: f64,
    /// Mean exact similarity of each query's best match, and of its k-th.
    top1_similarity: f64,
    topk_similarity: f64,
    load_seconds: f64,
    link_seconds: f64,
    index_mib: f64,
    rss_before_mib: f64,
    rss_after_build_mib: f64,
    rss_serving_mib: f64,
    /// Of the serving figure: private memory (the index, heaps) and mapped file pages.
    rss_serving_anon_mib: f64,
    rss_serving_file_mib: f64,
    peak_rss_mib: f64,
    memory_exact_p50_ms: f64,
    memory_exact_p95_ms: f64,
    sql_exact_queries: usize,
    sql_exact_p50_ms: f64,
    sql_exact_p95_ms: f64,
    /// SQL exact results identical (ids and scores) to the in-memory exact ones.
    sql_agrees: usize,
    approximate: Vec<ApproximateFigures>,
    /// Searches within one session (1 in 1,000 memories), as `vector_search` chooses.
    session_p50_ms: f64,
    session_path: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ApproximateFigures {
    ef: usize,
    filter: String,
    p50_ms: f64,
    p95_ms: f64,
    recall: f64,
}

/// A line of /proc/self/status in MiB (Linux; 0 elsewhere).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Resident memory of this process.
fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// Runs `queries` through `vector_search`, returning latencies (sorted) and results.
fn run_queries(
    runtime: &Runtime,
    store: &dyn MemoryStore,
    model: &str,
    filter: &Filter,
    queries: &[Vec<f32>],
    k: usize,
) -> Result<(Vec<Duration>, Vec<Vec<VectorHit>>)> {
    let mut latencies = Vec::with_capacity(queries.len());
    let mut results = Vec::with_capacity(queries.len());
    for q in queries {
        let started = Instant::now();
        let hits = runtime.block_on(store.vector_search(model, filter, q, k))?;
        latencies.push(started.elapsed());
        results.push(hits);
    }
    latencies.sort();
    Ok((latencies, results))
}

fn recall(truth: &[Vec<VectorHit>], found: &[Vec<VectorHit>]) -> f64 {
    let mut hits = 0usize;
    let mut total = 0usize;
    for (t, f) in truth.iter().zip(found) {
        total += t.len();
        hits += t
            .iter()
            .filter(|h| f.iter().any(|x| x.memory.id == h.memory.id))
            .count();
    }
    hits as f64 / total.max(1) as f64
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    sum / n.max(1) as f64
}

/// Measures one database (in the child process).
/// The memories of the SQLite database at `path`, opened with `options`.
fn open(path: &Path, options: SqliteOptions) -> Result<Arc<dyn MemoryStore>> {
    let config = StoreConfig::sqlite(path).with_sqlite_options(options);
    Ok(engram_backend::open_blocking(&config)?.memories)
}

/// Dense search from now on: exact up to `exact_max_scope` memories in scope, else the index
/// with a list of `ef_search`.
fn tune(store: &dyn MemoryStore, exact_max_scope: usize, ef_search: usize) {
    store.tune_dense_search(DenseTuning {
        exact_max_scope,
        ef_search,
    });
}

fn measure(runtime: &Runtime, path: &Path, args: &BenchVectorsArgs) -> Result<SizeFigures> {
    let size = args.measure_size;
    let model = model_id(args.dimension);
    // The generator's topic tables take 28 MB at 384 dimensions: they are the benchmark's, not
    // the index's, so they are dropped before any memory is measured and made again at the end.
    let queries = Synthetic::new(args.dimension, args.seed).queries(args.queries, args.seed);
    let rss_before = rss_mib();
    let options = SqliteOptions {
        vector_index: VectorIndexOptions {
            build: IndexBuild::Blocking,
            ..VectorIndexOptions::default()
        },
        ..SqliteOptions::default()
    };
    let threshold = options.vector_index.exact_max_scope;
    let store = open(path, options)?;
    eprintln!("[{size}] building the index");
    let stats = runtime
        .block_on(store.warm_dense_index(&model))?
        .ok_or_else(|| anyhow::anyhow!("the store keeps no in-process vector index"))?;
    anyhow::ensure!(
        stats.vectors == size,
        "the index holds {} vectors",
        stats.vectors
    );
    let rss_after_build = rss_mib();
    eprintln!(
        "[{size}] built: {} vectors, index {:.0} MiB, RSS {rss_after_build:.0} MiB (load {:.1} s, link {:.1} s)",
        stats.vectors,
        stats.heap_bytes as f64 / 1_048_576.0,
        stats.load_time.as_secs_f64(),
        stats.link_time.as_secs_f64()
    );

    eprintln!("[{size}] exact search in memory (the ground truth)");
    let all = Filter::user(USER);
    let facts = Filter {
        kinds: vec![Kind::Fact],
        ..all.clone()
    };
    tune(&*store, usize::MAX, 64);
    let (exact_latencies, truth_all) =
        run_queries(runtime, &*store, &model, &all, &queries, args.k)?;
    let (_, truth_facts) = run_queries(runtime, &*store, &model, &facts, &queries, args.k)?;

    let mut approximate = Vec::new();
    for &ef in &args.ef {
        eprintln!("[{size}] approximate search, ef {ef}");
        // Threshold 0: the graph even for scopes small enough to be searched exactly.
        tune(&*store, 0, ef);
        for (name, filter, truth) in [
            ("none", &all, &truth_all),
            ("kind=fact (1/4)", &facts, &truth_facts),
        ] {
            let (latencies, found) =
                run_queries(runtime, &*store, &model, filter, &queries, args.k)?;
            approximate.push(ApproximateFigures {
                ef,
                filter: name.to_string(),
                p50_ms: percentile(&latencies, 0.5),
                p95_ms: percentile(&latencies, 0.95),
                recall: recall(truth, &found),
            });
        }
    }
    tune(&*store, threshold, VectorIndexOptions::default().ef_search);
    let before = store.dense_search_counts();
    let mut session_latencies = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let filter = Filter {
            session_id: Some(format!("session-{}", i % SESSIONS)),
            ..all.clone()
        };
        let started = Instant::now();
        std::hint::black_box(runtime.block_on(store.vector_search(&model, &filter, q, args.k))?);
        session_latencies.push(started.elapsed());
    }
    session_latencies.sort();
    let after = store.dense_search_counts();
    let session_path = if after.approximate > before.approximate {
        "approximate"
    } else {
        "exact (in memory)"
    };
    let rss_serving = rss_mib();
    let rss_serving_anon = status_mib("RssAnon:");
    let rss_serving_file = status_mib("RssFile:");
    let peak = peak_rss_mib();

    // Exact SQL search, as `vector_search` does without an index.
    let sql_queries = if size > 100_000 {
        args.sql_queries_large.min(queries.len())
    } else {
        queries.len()
    };
    eprintln!("[{size}] exact search in SQL ({sql_queries} queries)");
    let sql_store = open(
        path,
        SqliteOptions {
            vector_index: VectorIndexOptions {
                build: IndexBuild::Never,
                ..VectorIndexOptions::default()
            },
            ..SqliteOptions::default()
        },
    )?;
    let (sql_latencies, sql_results) = run_queries(
        runtime,
        &*sql_store,
        &model,
        &all,
        &queries[..sql_queries],
        args.k,
    )?;
    let sql_agrees = sql_results
        .iter()
        .zip(&truth_all)
        .filter(|(s, t)| s == t)
        .count();

    let random_pairs = {
        let synthetic = Synthetic::new(args.dimension, args.seed);
        let mut rng = Rng(99);
        let mut data = Synthetic::data_rng(args.seed);
        let sample: Vec<Vec<f32>> = (0..200).map(|_| synthetic.sample(&mut data)).collect();
        mean((0..2000).map(|_| {
            let (a, b) = (rng.below(200), rng.below(200));
            if a == b {
                return 0.0;
            }
            f64::from(engram_core::embed::dot(&sample[a], &sample[b]))
        }))
    };
    Ok(SizeFigures {
        size,
        random_pair_similarity: random_pairs,
        top1_similarity: mean(
            truth_all
                .iter()
                .filter_map(|t| t.first().map(|h| f64::from(h.similarity))),
        ),
        topk_similarity: mean(
            truth_all
                .iter()
                .filter_map(|t| t.last().map(|h| f64::from(h.similarity))),
        ),
        load_seconds: stats.load_time.as_secs_f64(),
        link_seconds: stats.link_time.as_secs_f64(),
        index_mib: stats.heap_bytes as f64 / 1_048_576.0,
        rss_before_mib: rss_before,
        rss_after_build_mib: rss_after_build,
        rss_serving_mib: rss_serving,
        rss_serving_anon_mib: rss_serving_anon,
        rss_serving_file_mib: rss_serving_file,
        peak_rss_mib: peak,
        memory_exact_p50_ms: percentile(&exact_latencies, 0.5),
        memory_exact_p95_ms: percentile(&exact_latencies, 0.95),
        sql_exact_queries: sql_queries,
        sql_exact_p50_ms: percentile(&sql_latencies, 0.5),
        sql_exact_p95_ms: percentile(&sql_latencies, 0.95),
        sql_agrees,
        approximate,
        session_p50_ms: percentile(&session_latencies, 0.5),
        session_path: session_path.to_string(),
    })
}

/// Runs `engram bench vectors`.
pub fn run(ctx: &Context, args: BenchVectorsArgs) -> Result<Status> {
    anyhow::ensure!(args.dimension > 0, "--dimension must be at least 1");
    anyhow::ensure!(args.queries > 0, "--queries must be at least 1");
    if let Some(path) = &args.measure {
        let figures = measure(ctx.runtime()?, path, &args)?;
        println!("{}", serde_json::to_string(&figures)?);
        return Ok(Status::Success);
    }
    let temp;
    let root: PathBuf = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let synthetic = Synthetic::new(args.dimension, args.seed);
    let exe = std::env::current_exe().context("cannot find the engram executable")?;
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let path = root.join(format!(
            "vectors-{size}-{}-{}.db",
            args.dimension, args.seed
        ));
        ensure_database(ctx.runtime()?, &path, size, &synthetic, args.seed)?;
        let ef: Vec<String> = args.ef.iter().map(|e| e.to_string()).collect();
        let output = Command::new(&exe)
            .args(["bench", "vectors", "--measure"])
            .arg(&path)
            .args(["--measure-size", &size.to_string()])
            .args(["--dimension", &args.dimension.to_string()])
            .args(["--queries", &args.queries.to_string()])
            .args(["--k", &args.k.to_string()])
            .args(["--ef", &ef.join(",")])
            .args(["--sql-queries-large", &args.sql_queries_large.to_string()])
            .args(["--seed", &args.seed.to_string()])
            .stderr(Stdio::inherit())
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "measuring {size} vectors failed ({})",
            output.status
        );
        let figures: SizeFigures = serde_json::from_slice(&output.stdout)
            .context("the measuring process printed no figures")?;
        rows.push(figures);
        if args.dir.is_none() {
            std::fs::remove_file(&path)?;
        }
    }
    if ctx.json {
        output::json(&rows)?;
        return Ok(Status::Success);
    }
    print_table(&rows, &args);
    Ok(Status::Success)
}

fn print_table(rows: &[SizeFigures], args: &BenchVectorsArgs) {
    println!(
        "exact search, top-{} in one scope ({} queries; SQL: all queries up to 100k, {} above):",
        args.k, args.queries, args.sql_queries_large
    );
    println!(
        "{:>9}  {:>12} {:>9}  {:>12} {:>9}  {:>10}",
        "scope", "SQL p50", "p95", "memory p50", "p95", "SQL = mem"
    );
    for r in rows {
        println!(
            "{:>9}  {:>10.2}ms {:>7.2}ms  {:>10.2}ms {:>7.2}ms  {:>6}/{:<3}",
            r.size,
            r.sql_exact_p50_ms,
            r.sql_exact_p95_ms,
            r.memory_exact_p50_ms,
            r.memory_exact_p95_ms,
            r.sql_agrees,
            r.sql_exact_queries
        );
    }
    println!();
    println!(
        "approximate index (HNSW, int8), recall@{} against exact search:",
        args.k
    );
    println!(
        "{:>9}  {:>4}  {:<16} {:>9} {:>9}  {:>7}",
        "scope", "ef", "filter", "p50", "p95", "recall"
    );
    for r in rows {
        for a in &r.approximate {
            println!(
                "{:>9}  {:>4}  {:<16} {:>7.2}ms {:>7.2}ms  {:>7.4}",
                r.size, a.ef, a.filter, a.p50_ms, a.p95_ms, a.recall
            );
        }
    }
    println!();
    println!("index build and memory:");
    println!(
        "{:>9}  {:>8} {:>8}  {:>9}  {:>10} {:>10} {:>10} {:>13} {:>9}  {:>13}",
        "scope",
        "load",
        "link",
        "index",
        "RSS before",
        "built",
        "serving",
        "(anon+file)",
        "peak",
        "session p50"
    );
    for r in rows {
        println!(
            "{:>9}  {:>7.1}s {:>7.1}s  {:>6.0}MiB  {:>7.0}MiB {:>7.0}MiB {:>7.0}MiB  ({:>4.0}+{:<4.0}) {:>6.0}MiB  {:>7.2}ms ({})",
            r.size,
            r.load_seconds,
            r.link_seconds,
            r.index_mib,
            r.rss_before_mib,
            r.rss_after_build_mib,
            r.rss_serving_mib,
            r.rss_serving_anon_mib,
            r.rss_serving_file_mib,
            r.peak_rss_mib,
            r.session_p50_ms,
            r.session_path
        );
    }
    println!();
    for r in rows {
        println!(
            "data at {}: random pairs {:.3}, best match {:.3}, {}th match {:.3}",
            r.size, r.random_pair_similarity, r.top1_similarity, args.k, r.topk_similarity
        );
    }
}
