//! `engram bench server`: the HTTP server under load. A real `engram serve` process, batch
//! ingest through `POST /v1/memories/batch`, then searches from a real load generator (wrk)
//! through `POST /v1/memories/search` (or, with `--route`, Mem0's search routes: the hosted
//! platform's `POST /v3/memories/search/` and the open-source server's `POST /search`), with a
//! token on every request. Several routes are measured in turns on the same server and data.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use engram_backend::{DATABASE_FILE, StoreConfig};
use serde::Serialize;
use serde_json::json;

use super::store::{SplitMix, Vocabulary};

mod faults;
use crate::context::Context;
use crate::exit::Status;
use crate::output;
use faults::{FaultReport, FaultRun, Faults, Target};

/// `engram bench server`.
#[derive(Debug, Args)]
#[command(after_help = "\
Needs wrk on the PATH (scripts/setup-bench-tools.sh installs it) or --wrk PATH. Run it on a
release build:
  cargo build --release --bin engram && ./target/release/engram bench server
Two servers on one PostgreSQL database, searched at once:
  ./target/release/engram bench server --database-url postgres://... --instances 2
Compare the native search route with Mem0's, in turns on the same data:
  ./target/release/engram bench server --route native,mem0,mem0-oss --rounds 3
Search while 2,000 connections stall, 50 clients trickle, 200 flood without a token and the
database's write lock is taken for 200 ms every second:
  ./target/release/engram bench server --faults stalled=2000,slow=50,flood=200,db-lock=200/1000")]
pub struct BenchServerArgs {
    /// Memories to ingest before searching.
    #[arg(long, default_value = "100000")]
    pub memories: usize,
    /// Users they are spread over.
    #[arg(long, default_value = "100")]
    pub users: usize,
    /// Memories per batch request.
    #[arg(long, default_value = "1000")]
    pub batch: usize,
    /// Batch requests in flight at once.
    #[arg(long, default_value = "2")]
    pub ingest_clients: usize,
    /// Store the memories in PostgreSQL: a database URL (a fresh schema of it,
    /// `engram_bench_server`, dropped first). Default: a SQLite file in --dir.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// `engram serve` processes on the one database, each on its own port: the ingest batches
    /// go to them in turns, and the searches to all of them at once (one wrk each, the
    /// connections split between them).
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub instances: u16,
    /// Seconds of search load (after 5 s of warm-up).
    #[arg(long, default_value = "30")]
    pub duration: u64,
    /// Open connections of the load generator (in all, split between the instances).
    #[arg(long, default_value = "32")]
    pub connections: usize,
    /// Threads of the load generator.
    #[arg(long, default_value = "1")]
    pub threads: usize,
    /// Hits per search.
    #[arg(long, default_value = "10")]
    pub limit: usize,
    /// The wrk binary.
    #[arg(long, default_value = "wrk")]
    pub wrk: PathBuf,
    /// The server's connection threads (`engram serve --workers`; default: one per core).
    #[arg(long)]
    pub workers: Option<u16>,
    /// The server's database operations at once (`engram serve --concurrency`).
    #[arg(long)]
    pub concurrency: Option<u16>,
    /// A sentence-transformers model folder for the server (hybrid search); lexical without.
    #[arg(long)]
    pub embed_model: Option<PathBuf>,
    /// Where to build the store (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Random seed for the synthetic data.
    #[arg(long, default_value = "7")]
    pub seed: u64,
    /// The search routes to load (comma-separated or repeated): native (`POST
    /// /v1/memories/search`), mem0 (the hosted platform's `POST /v3/memories/search/`, as Mem0's
    /// MemoryClient calls it) or mem0-oss (the open-source server's `POST /search`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "native")]
    pub route: Vec<SearchRoute>,
    /// Times each route is measured, in turns (figures are the medians).
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Misbehaving clients and a busy database during the searches, comma-separated:
    /// stalled=N (connections that send half a request and stall; reopened when the server
    /// closes them), slow=N (clients sending whole searches a byte every 20 ms), flood=N
    /// (clients searching without a token as fast as they are answered), db-lock=HOLD[/EVERY]
    /// (another connection holds SQLite's write lock HOLD ms every EVERY ms, default 1000).
    /// A well-behaved writer then also adds a memory every 20 ms. Error answers to the
    /// well-behaved clients are reported instead of ending the bench.
    #[arg(long, value_name = "FAULTS")]
    pub faults: Option<Faults>,
}

/// A search route of `engram serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchRoute {
    /// `POST /v1/memories/search`.
    Native,
    /// `POST /v3/memories/search/` (Mem0's hosted platform, as MemoryClient calls it).
    Mem0,
    /// `POST /search` (Mem0's open-source server).
    Mem0Oss,
}

impl SearchRoute {
    fn path(self) -> &'static str {
        match self {
            SearchRoute::Native => "/v1/memories/search",
            SearchRoute::Mem0 => "/v3/memories/search/",
            SearchRoute::Mem0Oss => "/search",
        }
    }

    /// The request body of one search, as that route's clients send it.
    fn body(self, user: &str, query: &str, limit: usize) -> serde_json::Value {
        match self {
            SearchRoute::Native => json!({"user_id": user, "query": query, "limit": limit}),
            SearchRoute::Mem0 | SearchRoute::Mem0Oss => {
                json!({"query": query, "filters": {"user_id": user}, "top_k": limit})
            }
        }
    }

    /// How that route's clients send the token.
    fn scheme(self) -> &'static str {
        match self {
            SearchRoute::Native => "Bearer",
            SearchRoute::Mem0 | SearchRoute::Mem0Oss => "Token",
        }
    }
}

/// A running `engram serve`; stopped (SIGTERM) when dropped.
pub(crate) struct ServerProcess {
    child: Child,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub(crate) url: String,
}

impl ServerProcess {
    fn start(
        home: &std::path::Path,
        args: &BenchServerArgs,
        database_url: Option<&str>,
    ) -> Result<Self> {
        let mut extra = Vec::new();
        if let Some(workers) = args.workers {
            extra.push(format!("--workers={workers}"));
        }
        if let Some(concurrency) = args.concurrency {
            extra.push(format!("--concurrency={concurrency}"));
        }
        let mut env = vec![("ENGRAM_LOG".to_string(), "warn".to_string())];
        let mut remove = vec!["ENGRAM_EMBED_MODEL"];
        if let Some(model) = &args.embed_model {
            env.push(("ENGRAM_EMBED_MODEL".into(), model.display().to_string()));
        }
        match database_url {
            Some(url) => env.push(("ENGRAM_DATABASE_URL".into(), url.to_string())),
            None => remove.push("ENGRAM_DATABASE_URL"),
        }
        Self::start_with(home, &extra, &env, &remove)
    }

    /// Starts `engram --home HOME serve --listen 127.0.0.1:0 EXTRA...` with `env` set and
    /// `remove` unset, and waits until it listens.
    pub(crate) fn start_with(
        home: &std::path::Path,
        extra: &[String],
        env: &[(String, String)],
        remove: &[&str],
    ) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find the engram binary")?;
        let mut command = Command::new(exe);
        command
            .arg("--home")
            .arg(home)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra);
        for name in remove {
            command.env_remove(name);
        }
        for (name, value) in env {
            command.env(name, value);
        }
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().context("cannot start engram serve")?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match line.strip_prefix("engram is listening on ") {
                    Some(rest) => {
                        let _ =
                            sender.send(rest.split_whitespace().next().unwrap_or("").to_string());
                    }
                    None => eprintln!("server: {line}"),
                }
            }
        });
        let url = receiver
            .recv_timeout(Duration::from_secs(120))
            .map_err(|_| anyhow!("engram serve did not start"))?;
        Ok(Self { child, url })
    }

    /// CPU time the server has used so far.
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.child.id())
    }

    /// The server's peak resident memory, from /proc (Linux).
    fn peak_rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// User plus system CPU time of a process (also of one exited but not yet waited for), from
/// /proc (Linux); 0 where that cannot be read.
fn cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_cpu_seconds(&stat))
        .unwrap_or(0.0)
}

/// User plus system CPU seconds from the text of /proc/PID/stat.
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    let ticks_per_second = 100.0; // USER_HZ, 100 on every Linux platform engram builds for
    // The fields after the command name, which may itself hold spaces and parentheses: utime
    // and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / ticks_per_second)
}

/// The `p` quantile (0..=1) of sorted durations, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// The 1, 5 and 15 minute load averages (Linux), to say how busy the shared machine was.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

#[derive(Debug, Clone, Default, Serialize)]
struct WrkFigures {
    requests_per_second: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    requests: u64,
    non_2xx: u64,
    socket_errors: u64,
}

/// Reads "1.23ms", "850.00us", "1.02s" as milliseconds.
fn wrk_ms(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}

fn parse_wrk(text: &str) -> Result<WrkFigures> {
    let mut figures = WrkFigures::default();
    for line in text.lines() {
        let line = line.trim();
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next()) {
            (Some("50%"), Some(v)) => figures.p50_ms = wrk_ms(v).unwrap_or(0.0),
            (Some("90%"), Some(v)) => figures.p90_ms = wrk_ms(v).unwrap_or(0.0),
            (Some("99%"), Some(v)) => figures.p99_ms = wrk_ms(v).unwrap_or(0.0),
            (Some("Requests/sec:"), Some(v)) => {
                figures.requests_per_second = v.parse().unwrap_or(0.0)
            }
            (Some("Non-2xx"), _) => {
                figures.non_2xx = line
                    .rsplit(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
            (Some("Socket"), Some("errors:")) => {
                figures.socket_errors = line
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse::<u64>().ok())
                    .sum();
            }
            (Some(n), Some("requests")) => figures.requests = n.parse().unwrap_or(0),
            _ => {}
        }
    }
    if figures.requests_per_second == 0.0 {
        bail!("cannot read wrk's report:\n{text}");
    }
    Ok(figures)
}

/// Several wrk runs at once, one per instance, as one: throughput, requests and errors summed,
/// latency percentiles the worst instance's (an upper bound of the combined percentile).
fn combine(parts: &[WrkFigures]) -> WrkFigures {
    let worst = |f: fn(&WrkFigures) -> f64| parts.iter().map(f).fold(0.0, f64::max);
    WrkFigures {
        requests_per_second: parts.iter().map(|p| p.requests_per_second).sum(),
        p50_ms: worst(|p| p.p50_ms),
        p90_ms: worst(|p| p.p90_ms),
        p99_ms: worst(|p| p.p99_ms),
        requests: parts.iter().map(|p| p.requests).sum(),
        non_2xx: parts.iter().map(|p| p.non_2xx).sum(),
        socket_errors: parts.iter().map(|p| p.socket_errors).sum(),
    }
}

/// One timed run of one route.
#[derive(Debug, Clone)]
struct Round {
    /// All instances together (see [`combine`]).
    searches: WrkFigures,
    /// Each instance's wrk figures.
    instances: Vec<WrkFigures>,
    /// CPU seconds all servers used.
    server_cpu: f64,
    /// CPU seconds all wrk processes used.
    wrk_cpu: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    /// `sqlite` or `postgresql`.
    engine: &'static str,
    /// `engram serve` processes on the one database.
    instances: u16,
    memories: usize,
    users: usize,
    search: &'static str,
    ingest_seconds: f64,
    ingest_per_second: f64,
    ingest_batch: usize,
    wrk_connections: usize,
    wrk_threads: usize,
    wrk_seconds: u64,
    search_limit: usize,
    rounds: u32,
    /// The first route's figures (as before routes could be chosen).
    searches: WrkFigures,
    server_cpu_ms_per_search: f64,
    wrk_cpu_ms_per_search: f64,
    /// Every route's figures: medians over the rounds.
    routes: Vec<RouteFigures>,
    /// With --faults: what the faults did and what the well-behaved writer saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    faults: Option<FaultReport>,
    server_peak_rss_mib: f64,
    load_average_before: String,
    load_average_after: String,
    cores: usize,
}

/// One route's search figures.
#[derive(Debug, Clone, Serialize)]
struct RouteFigures {
    route: SearchRoute,
    path: &'static str,
    /// Medians over the rounds (requests, errors: sums); with several instances, their sum
    /// (throughput) and worst (latency) in each round.
    searches: WrkFigures,
    /// Each instance's figures, medians over the rounds.
    instances: Vec<WrkFigures>,
    server_cpu_ms_per_search: f64,
    wrk_cpu_ms_per_search: f64,
    /// Requests per second of each round, in order.
    rounds_requests_per_second: Vec<f64>,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The medians of several rounds of one route.
fn summarise(route: SearchRoute, rounds: &[Round]) -> RouteFigures {
    let pick = |f: &dyn Fn(&Round) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(f).collect();
        median(&mut values)
    };
    let per_search = |w: &WrkFigures, cpu: f64| {
        if w.requests == 0 {
            0.0
        } else {
            cpu * 1000.0 / w.requests as f64
        }
    };
    let instances = rounds.first().map_or(0, |r| r.instances.len());
    RouteFigures {
        route,
        path: route.path(),
        searches: medians(rounds.iter().map(|r| &r.searches)),
        instances: (0..instances)
            .map(|i| medians(rounds.iter().filter_map(|r| r.instances.get(i))))
            .collect(),
        server_cpu_ms_per_search: pick(&|r| per_search(&r.searches, r.server_cpu)),
        wrk_cpu_ms_per_search: pick(&|r| per_search(&r.searches, r.wrk_cpu)),
        rounds_requests_per_second: rounds
            .iter()
            .map(|r| r.searches.requests_per_second)
            .collect(),
    }
}

/// The medians of several rounds' figures (requests and errors: sums).
fn medians<'a>(rounds: impl Iterator<Item = &'a WrkFigures> + Clone) -> WrkFigures {
    let pick = |f: fn(&WrkFigures) -> f64| {
        let mut values: Vec<f64> = rounds.clone().map(f).collect();
        median(&mut values)
    };
    WrkFigures {
        requests: rounds.clone().map(|r| r.requests).sum(),
        requests_per_second: pick(|r| r.requests_per_second),
        p50_ms: pick(|r| r.p50_ms),
        p90_ms: pick(|r| r.p90_ms),
        p99_ms: pick(|r| r.p99_ms),
        non_2xx: rounds.clone().map(|r| r.non_2xx).sum(),
        socket_errors: rounds.map(|r| r.socket_errors).sum(),
    }
}

/// The schema `--database-url` gets (dropped and made again on every run).
const PG_SCHEMA: &str = "engram_bench_server";

/// Runs `engram bench server`.
pub fn run(ctx: &Context, args: BenchServerArgs) -> Result<Status> {
    if args.memories == 0 || args.users == 0 || args.batch == 0 {
        return Err(crate::exit::usage(
            "--memories, --users and --batch must be positive",
        ));
    }
    if let Some(faults) = &args.faults {
        if args.instances > 1 {
            return Err(crate::exit::usage(
                "--faults runs against one server: leave out --instances",
            ));
        }
        if faults.db_lock.is_some() && args.database_url.is_some() {
            return Err(crate::exit::usage(
                "--faults db-lock takes SQLite's write lock: leave it out with --database-url",
            ));
        }
    }
    // A bad URL or a database that is down fails before anything is started.
    let database_url = match &args.database_url {
        Some(url) => Some(ctx.block_on(engram_backend::fresh_schema(url, PG_SCHEMA))??),
        None => None,
    };
    Command::new(&args.wrk)
        .arg("--version")
        .output()
        .with_context(|| {
            format!(
                "cannot run {} (scripts/setup-bench-tools.sh installs wrk; or pass --wrk PATH)",
                args.wrk.display()
            )
        })?;
    let temp;
    let home = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&home)?;
    let load_before = load_average();
    let users: Vec<String> = (0..args.users).map(|u| format!("user-{u}")).collect();
    let (engine, store) = match &database_url {
        Some(url) => ("postgresql", StoreConfig::postgres(url.clone())),
        None => ("sqlite", StoreConfig::sqlite(home.join(DATABASE_FILE))),
    };
    let backend = ctx.block_on(engram_backend::open(&store))??;
    let (_, token) = ctx.block_on(engram_server::tokens::create_token(
        backend.tokens.as_ref(),
        Some("bench"),
        &users,
        jiff::Timestamp::now(),
    ))??;
    drop(backend);
    let servers = (0..args.instances)
        .map(|_| ServerProcess::start(&home, &args, database_url.as_deref()))
        .collect::<Result<Vec<_>>>()?;
    let server_urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    eprintln!(
        "engram serve at {} on {} (load average {load_before})",
        server_urls.join(", "),
        store.location()
    );

    // The data and queries of `engram bench store`: chat-turn-like sentences over a Zipf
    // vocabulary with the common English words on top; queries of 2-6 words drawn alike.
    let mut rng = SplitMix(args.seed);
    let words = Vocabulary::new(20_000, &mut rng);
    let start = jiff::Timestamp::from_second(1_672_531_200)?; // 2023-01-01

    // Ingest: batches built ahead, sent by a few clients at once.
    let mut bodies = Vec::new();
    let mut made = 0;
    while made < args.memories {
        let n = args.batch.min(args.memories - made);
        let memories: Vec<serde_json::Value> = (made..made + n)
            .map(|i| {
                let at = start.checked_add(jiff::SignedDuration::from_secs(
                    (i as i64) * 63_072_000 / args.memories as i64,
                ))?;
                Ok(json!({
                    "user_id": users[i % users.len()],
                    "text": words.sentence(&mut rng),
                    "importance": rng.range(1, 5),
                    "created_at": at.to_string(),
                    "metadata": {"n": i},
                }))
            })
            .collect::<Result<_>>()?;
        bodies.push(serde_json::to_vec(&json!({"memories": memories}))?);
        made += n;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let added: usize = runtime.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..args.ingest_clients.max(1) {
            let (client, bodies, next, urls, token) = (
                client.clone(),
                bodies.clone(),
                next.clone(),
                server_urls
                    .iter()
                    .map(|url| format!("{url}/v1/memories/batch"))
                    .collect::<Vec<_>>(),
                token.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut added = 0usize;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    // The batches go to the instances in turns.
                    let response = client
                        .post(&urls[i % urls.len()])
                        .bearer_auth(&token)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .map_err(|e| anyhow!("batch {i}: {e}"))?;
                    let status = response.status();
                    let text = response
                        .text()
                        .await
                        .map_err(|e| anyhow!("batch {i}: {e}"))?;
                    if !status.is_success() {
                        bail!("batch {i} failed with {status}: {text}");
                    }
                    let answer: serde_json::Value = serde_json::from_str(&text)?;
                    added += answer["added"].as_u64().unwrap_or(0) as usize;
                }
                Ok::<usize, anyhow::Error>(added)
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await??;
        }
        Ok::<usize, anyhow::Error>(total)
    })?;
    let ingest_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "ingested {added} memories in {ingest_seconds:.1} s ({:.0}/s)",
        added as f64 / ingest_seconds
    );

    // Searches: the same queries and users for every route, a wrk script per route.
    let mut queries = Vec::with_capacity(4000);
    for _ in 0..4000 {
        let user = users[rng.range(0, users.len() as u64 - 1) as usize].clone();
        let query: Vec<&str> = (0..rng.range(2, 6))
            .map(|_| words.sample(&mut rng))
            .collect();
        queries.push((user, query.join(" ")));
    }
    let mut routes = args.route.clone();
    routes.dedup();
    if routes.is_empty() {
        routes.push(SearchRoute::Native);
    }
    let mut scripts = Vec::with_capacity(routes.len());
    for route in &routes {
        let mut script = String::from("local bodies = {\n");
        for (user, query) in &queries {
            let body = route.body(user, query, args.limit);
            writeln!(script, "  [==[{body}]==],")?;
        }
        write!(
            script,
            "}}\nlocal headers = {{[\"Content-Type\"] = \"application/json\", [\"Authorization\"] = \"{} {token}\"}}\n\
             local i = 0\n\
             request = function()\n  i = i % #bodies + 1\n  return wrk.format(\"POST\", \"{}\", headers, bodies[i])\nend\n",
            route.scheme(),
            route.path()
        )?;
        let script_path = home.join(format!("search-{:?}.lua", route).to_lowercase());
        std::fs::write(&script_path, script)?;
        scripts.push(script_path);
    }
    // One wrk per instance, all at once, the connections split between them: each one's report
    // and the CPU seconds it used.
    let instances = server_urls.len();
    let wrk = |script_path: &std::path::Path, seconds: u64| -> Result<Vec<(String, f64)>> {
        let mut children = Vec::with_capacity(instances);
        for (i, url) in server_urls.iter().enumerate() {
            let connections =
                args.connections / instances + usize::from(i < args.connections % instances);
            let child = Command::new(&args.wrk)
                .arg(format!("-t{}", args.threads.max(1)))
                .arg(format!("-c{}", connections.max(1)))
                .arg(format!("-d{seconds}s"))
                .arg("--latency")
                .arg("-s")
                .arg(script_path)
                .arg(url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("cannot run wrk")?;
            children.push(child);
        }
        let mut reports = Vec::with_capacity(instances);
        for mut child in children {
            let mut stdout = String::new();
            let mut stderr = String::new();
            if let Some(mut out) = child.stdout.take() {
                std::io::Read::read_to_string(&mut out, &mut stdout)?;
            }
            if let Some(mut err) = child.stderr.take() {
                std::io::Read::read_to_string(&mut err, &mut stderr)?;
            }
            // Its output is closed, so it has exited; until waited for, /proc still has its
            // times.
            let cpu = cpu_seconds(child.id());
            let status = child.wait()?;
            if !status.success() {
                bail!("wrk failed: {stderr}");
            }
            reports.push((stdout, cpu));
        }
        Ok(reports)
    };
    let servers_cpu = || servers.iter().map(ServerProcess::cpu_seconds).sum::<f64>();
    let fault_run = match &args.faults {
        Some(faults) => {
            let (user, query) = &queries[0];
            let run = FaultRun::start(
                faults,
                Target {
                    url: server_urls[0].clone(),
                    token: token.clone(),
                    user: user.clone(),
                    search_body: SearchRoute::Native
                        .body(user, query, args.limit)
                        .to_string(),
                    database: home.join(DATABASE_FILE),
                },
            )?;
            eprintln!(
                "faults on: {faults} ({} stalled connections pending)",
                run.stalled_open()
            );
            Some(run)
        }
        None => None,
    };
    for script in &scripts {
        wrk(script, 5)?;
    }
    // Routes in turns, so that a noisy moment of the machine does not fall on one route only.
    let mut measured: Vec<Vec<Round>> = vec![Vec::new(); routes.len()];
    // In fault mode this process runs only the misbehaving clients (and the writer) meanwhile.
    let own_cpu_before = cpu_seconds(std::process::id());
    let mut last_text = String::new();
    for round in 0..args.rounds {
        for (i, route) in routes.iter().enumerate() {
            let server_cpu_before = servers_cpu();
            let reports = wrk(&scripts[i], args.duration)?;
            let server_cpu = servers_cpu() - server_cpu_before;
            let parts = reports
                .iter()
                .map(|(text, _)| parse_wrk(text))
                .collect::<Result<Vec<_>>>()?;
            let figures = combine(&parts);
            eprintln!(
                "round {} {:?}: {:.0} searches/s, p99 {:.2} ms{}",
                round + 1,
                route,
                figures.requests_per_second,
                figures.p99_ms,
                if parts.len() > 1 {
                    " (sum of the instances; the worst one's p99)"
                } else {
                    ""
                }
            );
            if figures.non_2xx > 0 && fault_run.is_none() {
                bail!(
                    "{} answered {} searches with an error status",
                    route.path(),
                    figures.non_2xx
                );
            }
            measured[i].push(Round {
                searches: figures,
                instances: parts,
                server_cpu,
                wrk_cpu: reports.iter().map(|(_, cpu)| cpu).sum(),
            });
            last_text = reports
                .into_iter()
                .map(|(text, _)| text)
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
    let figures: Vec<RouteFigures> = routes
        .iter()
        .zip(&measured)
        .map(|(route, rounds)| summarise(*route, rounds))
        .collect();
    let fault_clients_cpu = cpu_seconds(std::process::id()) - own_cpu_before;
    let fault_report = fault_run
        .map(|run| run.stop(fault_clients_cpu))
        .transpose()?;
    let first = figures[0].clone();
    let text = last_text;
    let report = Report {
        engine,
        instances: args.instances,
        memories: added,
        users: args.users,
        search: if args.embed_model.is_some() {
            "hybrid"
        } else {
            "lexical"
        },
        ingest_seconds,
        ingest_per_second: added as f64 / ingest_seconds,
        ingest_batch: args.batch,
        wrk_connections: args.connections,
        wrk_threads: args.threads,
        wrk_seconds: args.duration,
        search_limit: args.limit,
        rounds: args.rounds,
        server_cpu_ms_per_search: first.server_cpu_ms_per_search,
        wrk_cpu_ms_per_search: first.wrk_cpu_ms_per_search,
        searches: first.searches.clone(),
        routes: figures,
        faults: fault_report,
        server_peak_rss_mib: servers
            .iter()
            .map(ServerProcess::peak_rss_mib)
            .fold(0.0, f64::max),
        load_average_before: load_before,
        load_average_after: load_average(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
    };
    if ctx.json {
        output::json(&report)?;
    } else {
        println!("{text}");
        println!(
            "{} engram serve on {}; {} memories over {} users ({} search); {} cores; load average before {} / after {}",
            report.instances,
            report.engine,
            report.memories,
            report.users,
            report.search,
            report.cores,
            report.load_average_before,
            report.load_average_after
        );
        println!(
            "batch ingest   {:.0} memories/s ({} per request, {} clients, {:.1} s)",
            report.ingest_per_second,
            report.ingest_batch,
            args.ingest_clients,
            report.ingest_seconds
        );
        for route in &report.routes {
            println!(
                "search {:<8} {:.0} requests/s, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, {} requests, {} non-2xx, {} socket errors ({}; wrk -t{} -c{} -d{}s, limit {}, median of {} rounds)",
                format!("{:?}", route.route).to_lowercase(),
                route.searches.requests_per_second,
                route.searches.p50_ms,
                route.searches.p90_ms,
                route.searches.p99_ms,
                route.searches.requests,
                route.searches.non_2xx,
                route.searches.socket_errors,
                route.path,
                report.wrk_threads,
                report.wrk_connections,
                report.wrk_seconds,
                report.search_limit,
                report.rounds
            );
            println!(
                "  CPU per search: server {:.3} ms, wrk {:.3} ms (a bound of {:.0} searches/s on {} idle cores)",
                route.server_cpu_ms_per_search,
                route.wrk_cpu_ms_per_search,
                if route.server_cpu_ms_per_search + route.wrk_cpu_ms_per_search > 0.0 {
                    report.cores as f64 * 1000.0
                        / (route.server_cpu_ms_per_search + route.wrk_cpu_ms_per_search)
                } else {
                    0.0
                },
                report.cores
            );
            if route.instances.len() > 1 {
                for (i, one) in route.instances.iter().enumerate() {
                    println!(
                        "  instance {}: {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms, {} requests, {} non-2xx, {} socket errors",
                        i + 1,
                        one.requests_per_second,
                        one.p50_ms,
                        one.p99_ms,
                        one.requests,
                        one.non_2xx,
                        one.socket_errors
                    );
                }
                println!(
                    "  (requests/s is the instances' sum, p50/p90/p99 the worst instance's; CPU: all servers and wrk processes)"
                );
            }
        }
        if report.engine == "postgresql" {
            println!("(the PostgreSQL server's own CPU is not counted in CPU per search)");
        }
        if let Some(f) = &report.faults {
            print_faults(f);
        }
        println!("server peak RSS {:.0} MiB", report.server_peak_rss_mib);
    }
    Ok(Status::Success)
}

/// The fault lines of the text report.
fn print_faults(f: &FaultReport) {
    println!("faults {}:", f.faults);
    println!(
        "  stalled: {} pending before the warm-up, {} at the end; {} opened in all, {} closed by the server, {} refused busy",
        f.stalled_open_at_start,
        f.stalled_open_at_end,
        f.stalled_opened,
        f.stalled_closed_by_server,
        f.stalled_refused_busy
    );
    println!(
        "  slow: {} requests answered ({} with 200), {} cut off",
        f.slow_answered, f.slow_ok, f.slow_cut_off
    );
    println!(
        "  flood: {} requests answered ({} 401, {} 503 busy), {} failed unanswered",
        f.flood_requests, f.flood_unauthorized, f.flood_busy, f.flood_errors
    );
    println!(
        "  db-lock: {} write locks held, {:.1} s in all; {} failed connects over the misbehaving clients",
        f.db_locks, f.db_locked_seconds, f.connect_errors
    );
    println!(
        "  well-behaved writes: {} ({} errors), p50 {:.2} ms, p99 {:.2} ms",
        f.writes, f.write_errors, f.write_p50_ms, f.write_p99_ms
    );
    println!(
        "  the fault clients used {:.1} CPU seconds during the searches (on the server's cores)",
        f.clients_cpu_seconds
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_reports_are_read() {
        let text = "Running 30s test @ http://127.0.0.1:1\n  1 threads and 32 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     2.10ms    1.00ms  30.00ms   90.00%\n  Latency Distribution\n     50%    1.90ms\n     75%    2.50ms\n     90%    3.10ms\n     99%  850.00us\n  150000 requests in 30.00s, 200.00MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\n  Non-2xx or 3xx responses: 4\nRequests/sec:   5000.12\nTransfer/sec:      6.67MB\n";
        let f = parse_wrk(text).unwrap();
        assert_eq!(f.requests, 150_000);
        assert!((f.requests_per_second - 5000.12).abs() < 1e-9);
        assert!((f.p50_ms - 1.9).abs() < 1e-9 && (f.p99_ms - 0.85).abs() < 1e-9);
        assert_eq!((f.non_2xx, f.socket_errors), (4, 3));
        assert_eq!(wrk_ms("1.02s"), Some(1020.0));
    }

    #[test]
    fn instances_add_up_and_report_the_worst_latency() {
        let one = |rps: f64, p99: f64, requests: u64, non_2xx: u64| WrkFigures {
            requests_per_second: rps,
            p50_ms: p99 / 3.0,
            p90_ms: p99 / 2.0,
            p99_ms: p99,
            requests,
            non_2xx,
            socket_errors: 1,
        };
        let both = combine(&[one(1000.0, 30.0, 15_000, 0), one(1300.0, 25.0, 19_500, 2)]);
        assert!((both.requests_per_second - 2300.0).abs() < 1e-9);
        assert!((both.p99_ms - 30.0).abs() < 1e-9 && (both.p50_ms - 10.0).abs() < 1e-9);
        assert_eq!(
            (both.requests, both.non_2xx, both.socket_errors),
            (34_500, 2, 2)
        );

        // Over rounds: medians of the rates and latencies, sums of the counts, per instance too.
        let round = |rps: [f64; 2]| {
            let instances = vec![one(rps[0], 20.0, 100, 0), one(rps[1], 40.0, 100, 0)];
            Round {
                searches: combine(&instances),
                instances,
                server_cpu: 1.0,
                wrk_cpu: 0.1,
            }
        };
        let rounds = [
            round([900.0, 1100.0]),
            round([1000.0, 1200.0]),
            round([100.0, 1300.0]),
        ];
        let figures = summarise(SearchRoute::Native, &rounds);
        assert!((figures.searches.requests_per_second - 2000.0).abs() < 1e-9);
        assert_eq!(figures.searches.requests, 600);
        assert!((figures.instances[0].requests_per_second - 900.0).abs() < 1e-9);
        assert!((figures.instances[1].requests_per_second - 1200.0).abs() < 1e-9);
        assert!((figures.server_cpu_ms_per_search - 5.0).abs() < 1e-9);
        assert_eq!(figures.rounds_requests_per_second, [2000.0, 2200.0, 1400.0]);
    }

    #[test]
    fn cpu_times_are_read_past_odd_command_names() {
        let stat = "4242 (wrk (x) 2) Z 1 4242 4242 0 -1 4194308 100 0 0 0 250 50 0 0 20 0 2 0";
        assert_eq!(stat_cpu_seconds(stat), Some(3.0));
        assert_eq!(stat_cpu_seconds("4242 (wrk) Z 1"), None);
        assert!(cpu_seconds(std::process::id()) >= 0.0);
    }
}
