//! `engram bench store`: import throughput, search latency, one-shot process time, size, RSS.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Args;
use engram_backend::{DATABASE_FILE, StoreConfig};
use engram_core::Filter;
use engram_memory::{SearchRequest, Searcher};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::context::Context;
use crate::exit::Status;
use crate::import::{DEFAULT_BATCH_SIZE, import_reader};
use crate::output;

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

/// A small, fast, deterministic generator (SplitMix64); benchmarks need repeatable data, not
/// cryptographic randomness.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi].
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// The most frequent English words, in rough frequency order; the long tail is synthesised.
const COMMON_WORDS: &[&str] = &[
    "the",
    "i",
    "to",
    "and",
    "a",
    "you",
    "it",
    "of",
    "that",
    "in",
    "is",
    "my",
    "for",
    "was",
    "me",
    "on",
    "so",
    "we",
    "have",
    "but",
    "with",
    "this",
    "just",
    "be",
    "are",
    "at",
    "it's",
    "what",
    "not",
    "do",
    "your",
    "like",
    "all",
    "can",
    "they",
    "been",
    "about",
    "really",
    "when",
    "had",
    "how",
    "out",
    "up",
    "get",
    "one",
    "know",
    "time",
    "going",
    "would",
    "there",
    "if",
    "great",
    "good",
    "love",
    "new",
    "think",
    "some",
    "from",
    "will",
    "more",
    "day",
    "now",
    "lately",
    "work",
    "people",
    "week",
    "family",
    "friends",
    "kids",
    "feel",
    "thanks",
    "also",
    "today",
    "made",
    "yesterday",
    "trip",
    "book",
    "project",
    "music",
    "painting",
    "job",
    "team",
    "dog",
    "home",
    "school",
    "weekend",
    "city",
    "coffee",
    "garden",
    "movie",
    "class",
    "game",
];

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ra", "te", "su", "no", "vi", "pe", "da", "ri", "mo", "ta", "ne", "lu",
    "bar", "ton", "ling", "ver", "sha", "gel", "dor", "fin", "qua", "zen", "wick", "port", "stan",
    "mar", "cel",
];

/// A vocabulary with Zipf-distributed word frequencies, like real text.
pub(crate) struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocabulary {
    pub(crate) fn new(size: usize, rng: &mut SplitMix) -> Self {
        let mut words: Vec<String> = COMMON_WORDS.iter().map(|w| w.to_string()).collect();
        let mut seen: std::collections::HashSet<String> = words.iter().cloned().collect();
        while words.len() < size {
            let parts = rng.range(2, 4);
            let word: String = (0..parts)
                .map(|_| SYLLABLES[rng.range(0, SYLLABLES.len() as u64 - 1) as usize])
                .collect();
            if seen.insert(word.clone()) {
                words.push(word);
            }
        }
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(1.07);
                total
            })
            .collect();
        Self { words, cumulative }
    }

    pub(crate) fn sample(&self, rng: &mut SplitMix) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let target = rng.unit() * total;
        let index = self.cumulative.partition_point(|&c| c < target);
        &self.words[index.min(self.words.len() - 1)]
    }

    /// A chat-turn-like sentence: 4 to 60 words, most between 8 and 30.
    pub(crate) fn sentence(&self, rng: &mut SplitMix) -> String {
        let length = (4.0 + 14.0 * -(1.0 - rng.unit()).ln()).min(60.0) as usize;
        let mut text = String::with_capacity(length * 7);
        for i in 0..length {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(self.sample(rng));
        }
        text.push('.');
        text
    }
}

#[derive(Debug, Serialize)]
struct StoreBenchRow {
    /// `sqlite` or `postgresql`.
    engine: String,
    memories: usize,
    users: usize,
    import_seconds: f64,
    import_per_second: f64,
    /// CPU time (user + system, both import threads) the import took: on a shared machine,
    /// memories per CPU second says what the import costs when the cores are not contended.
    import_cpu_seconds: f64,
    search_p50_ms: f64,
    search_p95_ms: f64,
    search_p99_ms: f64,
    search_user_memories: u64,
    one_shot_p50_ms: f64,
    one_shot_p95_ms: f64,
    database_mib: f64,
    peak_rss_mib: f64,
}

/// Times `searcher` on each query in `filter`'s scope (limit 10), one after another; the
/// durations come back sorted.
pub fn time_searches(
    runtime: &tokio::runtime::Runtime,
    searcher: &Searcher,
    filter: &Filter,
    queries: &[String],
) -> Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(queries.len());
    for query in queries {
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
}

/// The `p` quantile (0..=1) of sorted durations, in milliseconds.
pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// Peak resident memory of this process so far, from /proc (Linux); 0 where unavailable.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU time (user + system) this process has used so far, from /proc (Linux); 0 elsewhere.
pub fn process_cpu_seconds() -> f64 {
    // Fields 14 and 15 of /proc/self/stat, after the parenthesised command name, in clock
    // ticks (100 per second on Linux).
    stat_seconds(11)
}

/// CPU seconds (user + system) of this process's children that have been waited for (fields 16
/// and 17 of /proc/self/stat); 0 where unavailable.
pub fn children_cpu_seconds() -> f64 {
    stat_seconds(13)
}

/// The sum of two consecutive tick fields of /proc/self/stat, counted from the first field
/// after the command name, in seconds.
fn stat_seconds(first: usize) -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let user = fields.get(first)?.parse::<f64>().ok()?;
            let system = fields.get(first + 1)?.parse::<f64>().ok()?;
            Some((user + system) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Restarts the peak-RSS counter so each size reports its own peak (Linux; ignored elsewhere).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub(crate) fn write_dataset(
    path: &Path,
    n: usize,
    users: usize,
    vocab: &Vocabulary,
    seed: u64,
) -> Result<()> {
    let mut rng = SplitMix(seed);
    let mut out = BufWriter::new(File::create(path)?);
    let start = jiff::Timestamp::from_second(1_672_531_200)?; // 2023-01-01
    for i in 0..n {
        let user = i % users;
        let at = start.checked_add(jiff::SignedDuration::from_secs(
            (i as i64) * 63_072_000 / n.max(1) as i64,
        ))?;
        let line = serde_json::json!({
            "user_id": format!("user-{user}"),
            "text": vocab.sentence(&mut rng),
            "importance": rng.range(1, 5),
            "created_at": at.to_string(),
            "metadata": {"n": i},
        });
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// One store to measure, and what to measure it with.
struct Measure<'a> {
    engine: &'static str,
    size: usize,
    users: usize,
    dir: &'a Path,
    data: &'a Path,
    queries: &'a [String],
    process_runs: usize,
}

/// Imports the data into the store `config` names, then times searches in-process and as
/// one-shot `engram search` processes.
fn measure(ctx: &Context, config: &StoreConfig, m: Measure<'_>) -> Result<StoreBenchRow> {
    let Measure {
        engine,
        size,
        users,
        dir,
        data,
        queries,
        process_runs,
    } = m;
    let exe = std::env::current_exe().context("cannot find the engram executable")?;
    reset_peak_rss();
    eprintln!("[{size}] {engine}: importing");
    let runtime = ctx.runtime()?;
    let store = runtime.block_on(engram_backend::open(config))?.memories;
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let summary = runtime.block_on(import_reader(
        &*store,
        File::open(data)?,
        DEFAULT_BATCH_SIZE as usize,
        &ProgressBar::hidden(),
    ))?;
    let import_seconds = started.elapsed().as_secs_f64();
    let import_cpu_seconds = process_cpu_seconds() - cpu_before;
    anyhow::ensure!(
        summary.rejected.is_empty(),
        "the generated data had rejected lines"
    );

    eprintln!("[{size}] {engine}: searching");
    let searcher = Searcher::new(store.clone());
    let filter = Filter::user("user-0");
    let user_memories = runtime.block_on(store.count(&filter))?;
    let latencies = time_searches(runtime, &searcher, &filter, queries)?;
    let peak = peak_rss_mib();

    eprintln!("[{size}] {engine}: one-shot processes");
    let mut one_shot = Vec::with_capacity(process_runs);
    for query in queries.iter().cycle().take(process_runs) {
        let started = Instant::now();
        let mut command = Command::new(&exe);
        if let StoreConfig::Postgres { url, .. } = config {
            command.env("ENGRAM_DATABASE_URL", url);
        } else {
            command.env_remove("ENGRAM_DATABASE_URL");
        }
        let status = command
            .arg("--home")
            .arg(dir)
            .args(["search", "--user", "user-0", "--limit", "10", query])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        one_shot.push(started.elapsed());
        anyhow::ensure!(status.success(), "engram search exited with {status}");
    }
    one_shot.sort();
    drop(searcher);
    let stats = runtime.block_on(store.stats())?;
    drop(store);

    Ok(StoreBenchRow {
        engine: engine.to_string(),
        memories: size,
        users,
        import_seconds,
        import_per_second: summary.added as f64 / import_seconds.max(1e-9),
        import_cpu_seconds,
        search_p50_ms: percentile(&latencies, 0.50),
        search_p95_ms: percentile(&latencies, 0.95),
        search_p99_ms: percentile(&latencies, 0.99),
        search_user_memories: user_memories,
        one_shot_p50_ms: percentile(&one_shot, 0.50),
        one_shot_p95_ms: percentile(&one_shot, 0.95),
        database_mib: stats.size_bytes.unwrap_or(0) as f64 / 1_048_576.0,
        peak_rss_mib: peak,
    })
}

/// Runs `engram bench store`.
pub fn run(ctx: &Context, args: BenchStoreArgs) -> Result<Status> {
    let temp;
    let root: PathBuf = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let users = args.users.max(1);
    let mut rng = SplitMix(args.seed);
    let vocab = Vocabulary::new(20_000, &mut rng);
    let queries: Vec<String> = (0..args.queries)
        .map(|_| {
            let words = rng.range(2, 6) as usize;
            (0..words)
                .map(|_| vocab.sample(&mut rng).to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let dir = root.join(format!("store-{size}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let data = dir.join("memories.jsonl");
        eprintln!("[{size}] generating {size} memories for {users} users");
        write_dataset(&data, size, users, &vocab, args.seed ^ size as u64)?;

        let mut engines = vec![("sqlite", StoreConfig::sqlite(dir.join(DATABASE_FILE)))];
        if let Some(url) = &args.database_url {
            let schema = format!("engram_bench_store_{size}");
            let url = ctx.block_on(engram_backend::fresh_schema(url, &schema))??;
            engines.push(("postgresql", StoreConfig::postgres(url)));
        }
        for (engine, config) in engines {
            rows.push(measure(
                ctx,
                &config,
                Measure {
                    engine,
                    size,
                    users,
                    dir: &dir,
                    data: &data,
                    queries: &queries,
                    process_runs: args.process_runs,
                },
            )?);
        }
        std::fs::remove_file(&data)?;
        if args.dir.is_none() {
            std::fs::remove_dir_all(&dir)?;
        }
    }
    let common = if args.common_words > 0 {
        let exe = std::env::current_exe().context("cannot find the engram executable")?;
        Some(common_words(ctx, &root, &exe, &args)?)
    } else {
        None
    };
    if ctx.json {
        output::json(&serde_json::json!({"sizes": rows, "common_words": common}))?;
        return Ok(Status::Success);
    }
    println!(
        "{:>10}  {:>9}  {:>9} {:>10}  {:>8} {:>8} {:>8}  {:>9} {:>9}  {:>9}  {:>8}",
        "engine",
        "memories",
        "import/s",
        "/CPU-s",
        "srch p50",
        "p95",
        "p99",
        "1shot p50",
        "p95",
        "db MiB",
        "peak RSS"
    );
    for r in &rows {
        println!(
            "{:>10}  {:>9}  {:>9.0} {:>10.0}  {:>6.2}ms {:>6.2}ms {:>6.2}ms  {:>7.1}ms {:>7.1}ms  {:>9.1}  {:>5.0}MiB",
            r.engine,
            r.memories,
            r.import_per_second,
            r.memories as f64 / r.import_cpu_seconds.max(1e-9),
            r.search_p50_ms,
            r.search_p95_ms,
            r.search_p99_ms,
            r.one_shot_p50_ms,
            r.one_shot_p95_ms,
            r.database_mib,
            r.peak_rss_mib
        );
    }
    println!(
        "(searches: {} queries of 2-6 Zipf-sampled words in one user's scope of {} users; limit 10)",
        args.queries, users
    );
    if args.database_url.is_some() {
        println!(
            "(postgresql: CPU seconds, peak RSS and size are engram's process and the store's \
             relations; the server's own CPU and memory are not counted)"
        );
    }
    if let Some(c) = &common {
        println!();
        println!(
            "common words: {} memories of one user; query words in {:.0}% of them on average",
            c.memories,
            c.query_word_share * 100.0
        );
        println!(
            "  search p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms (in one process, as `search --batch` runs them)",
            c.search_p50_ms, c.search_p95_ms, c.search_p99_ms
        );
        println!(
            "  `search --batch` of {} queries: {:.2} ms CPU per query, start and exit included",
            c.batch_queries, c.batch_cpu_ms_per_query
        );
        println!(
            "  one-shot `engram search`: p50 {:.1} ms, p95 {:.1} ms",
            c.one_shot_p50_ms, c.one_shot_p95_ms
        );
    }
    Ok(Status::Success)
}

/// Words every memory of the common-word case may carry, each with probability one in four: a
/// user's own name and words of every day.
const EVERYDAY_WORDS: [&str; 6] = ["anna", "work", "today", "evening", "family", "plans"];

#[derive(Debug, Serialize)]
struct CommonWordsRow {
    memories: usize,
    /// Average share of the memories holding a query word.
    query_word_share: f64,
    search_p50_ms: f64,
    search_p95_ms: f64,
    search_p99_ms: f64,
    batch_queries: usize,
    batch_cpu_ms_per_query: f64,
    one_shot_p50_ms: f64,
    one_shot_p95_ms: f64,
}

/// One user's memories from the Zipf vocabulary, each also carrying every word of
/// [`EVERYDAY_WORDS`] with probability 1/4; queries of 2-4 of those words, half of them with one
/// Zipf word too.
fn common_words(
    ctx: &Context,
    root: &Path,
    exe: &Path,
    args: &BenchStoreArgs,
) -> Result<CommonWordsRow> {
    let size = args.common_words;
    let dir = root.join(format!("common-{size}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut rng = SplitMix(args.seed ^ 0xC0FFEE);
    let vocab = Vocabulary::new(20_000, &mut rng);
    let data = dir.join("memories.jsonl");
    eprintln!("[common {size}] generating");
    {
        let mut out = BufWriter::new(File::create(&data)?);
        let start = jiff::Timestamp::from_second(1_672_531_200)?; // 2023-01-01
        for i in 0..size {
            let mut text = vocab.sentence(&mut rng);
            text.pop(); // the full stop
            for word in EVERYDAY_WORDS {
                if rng.range(0, 3) == 0 {
                    text.push(' ');
                    text.push_str(word);
                }
            }
            let at = start.checked_add(jiff::SignedDuration::from_secs(
                (i as i64) * 63_072_000 / size.max(1) as i64,
            ))?;
            let line = serde_json::json!({
                "user_id": "anna",
                "text": text,
                "importance": rng.range(1, 5),
                "created_at": at.to_string(),
            });
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
    let runtime = ctx.runtime()?;
    let store =
        engram_backend::open_blocking(&StoreConfig::sqlite(dir.join(DATABASE_FILE)))?.memories;
    eprintln!("[common {size}] importing");
    let summary = runtime.block_on(import_reader(
        &*store,
        File::open(&data)?,
        DEFAULT_BATCH_SIZE as usize,
        &ProgressBar::hidden(),
    ))?;
    anyhow::ensure!(
        summary.rejected.is_empty(),
        "the generated data had rejected lines"
    );
    std::fs::remove_file(&data)?;
    let queries: Vec<String> = (0..args.queries)
        .map(|_| {
            let n = rng.range(2, 4) as usize;
            let mut words: Vec<&str> = Vec::with_capacity(n + 1);
            while words.len() < n {
                let word = EVERYDAY_WORDS[rng.range(0, EVERYDAY_WORDS.len() as u64 - 1) as usize];
                if !words.contains(&word) {
                    words.push(word);
                }
            }
            if rng.range(0, 1) == 0 {
                words.push(vocab.sample(&mut rng));
            }
            words.join(" ")
        })
        .collect();

    let filter = Filter::user("anna");
    let mut share = 0.0;
    for word in EVERYDAY_WORDS {
        let mut f = filter.clone();
        f.include_closed = true;
        share += runtime
            .block_on(store.search_lexical(&f, word, size))?
            .len() as f64
            / size as f64;
    }
    let searcher = Searcher::new(store.clone());
    eprintln!("[common {size}] searching");
    let latencies = time_searches(runtime, &searcher, &filter, &queries)?;
    drop(searcher);
    drop(store);

    eprintln!("[common {size}] `search --batch`");
    let batch = dir.join("queries.jsonl");
    {
        let mut out = BufWriter::new(File::create(&batch)?);
        for query in &queries {
            writeln!(
                out,
                "{}",
                serde_json::json!({"user_id": "anna", "query": query})
            )?;
        }
        out.flush()?;
    }
    let before = children_cpu_seconds();
    let status = Command::new(exe)
        .arg("--home")
        .arg(&dir)
        .args(["search", "--batch"])
        .arg(&batch)
        .args(["--limit", "10", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(
        status.success(),
        "engram search --batch exited with {status}"
    );
    let batch_cpu = children_cpu_seconds() - before;

    eprintln!("[common {size}] one-shot processes");
    let mut one_shot = Vec::with_capacity(args.process_runs);
    for query in queries.iter().cycle().take(args.process_runs) {
        let started = Instant::now();
        let status = Command::new(exe)
            .arg("--home")
            .arg(&dir)
            .args(["search", "--user", "anna", "--limit", "10", query])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        one_shot.push(started.elapsed());
        anyhow::ensure!(status.success(), "engram search exited with {status}");
    }
    one_shot.sort();
    if args.dir.is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(CommonWordsRow {
        memories: size,
        query_word_share: share / EVERYDAY_WORDS.len() as f64,
        search_p50_ms: percentile(&latencies, 0.50),
        search_p95_ms: percentile(&latencies, 0.95),
        search_p99_ms: percentile(&latencies, 0.99),
        batch_queries: queries.len(),
        batch_cpu_ms_per_query: batch_cpu * 1000.0 / queries.len().max(1) as f64,
        one_shot_p50_ms: percentile(&one_shot, 0.50),
        one_shot_p95_ms: percentile(&one_shot, 0.95),
    })
}
