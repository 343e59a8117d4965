//! `engram bench scheduler`: next-run computation over many jobs, the gateway's idle cost, and
//! how late due jobs start.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use engram_agent::scheduler::{JobRequest, ScheduleInput, Scheduler, ZonedSchedule};
use engram_backend::{DATABASE_FILE, StoreConfig};
use engram_core::store::jobs::RunStatus;
use engram_core::{Clock, SystemClock};
use jiff::SignedDuration;
use serde::Serialize;

use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// `engram bench scheduler`.
#[derive(Debug, Args)]
pub struct BenchSchedulerArgs {
    /// How many jobs.
    #[arg(long, default_value = "10000")]
    pub jobs: usize,
    /// Rounds of next-run computation (the median and the slowest are reported).
    #[arg(long, default_value = "20")]
    pub rounds: usize,
    /// Seconds the gateway sits idle while its CPU time is measured (0 skips the gateway parts).
    #[arg(long, default_value = "60")]
    pub idle_secs: u64,
    /// One-shot jobs whose start lag is measured.
    #[arg(long, default_value = "20")]
    pub lag_jobs: usize,
    /// Where to build the benchmark homes (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Tokyo",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Sao_Paulo",
];

const CRONS: &[&str] = &[
    "0 9 * * *",
    "*/15 * * * *",
    "30 2 * * *",
    "0 9 * * mon-fri",
    "0 0 1 * *",
    "0 0 29 2 *",
    "15,45 8-18 * * 1-5",
    "0 12 13 * fri",
    "@hourly",
    "0 30 9 * * *",
    "0 0 1 1 *",
    "5 4 * * sun",
];

/// The i-th job of the mixed set: 60% cron over several zones, 30% every, 10% at.
fn mixed_request(i: usize) -> JobRequest {
    let schedule = match i % 10 {
        0..=5 => ScheduleInput::Cron(CRONS[i % CRONS.len()].to_string()),
        6..=8 => ScheduleInput::Every(format!("{}m", 1 + i % 240)),
        _ => ScheduleInput::At(format!("in {}h", 1 + i % 500)),
    };
    let mut request = JobRequest::new(format!("job {i}"), format!("task {i}"), schedule);
    request.tz = Some(ZONES[i % ZONES.len()].to_string());
    request
}

/// The i-th job of the idle set: nothing due for at least a day.
fn idle_request(i: usize) -> JobRequest {
    let schedule = match i % 3 {
        0 => ScheduleInput::Every(format!("{}d", 1 + i % 7)),
        1 => ScheduleInput::At(format!("in {}h", 25 + i % 100)),
        _ => ScheduleInput::Cron("0 0 1 1 *".to_string()),
    };
    let mut request = JobRequest::new(format!("idle {i}"), "idle", schedule);
    request.tz = Some(ZONES[i % ZONES.len()].to_string());
    request
}

#[derive(Debug, Serialize)]
struct Report {
    jobs: usize,
    validate_all_ms: f64,
    insert_all_ms: f64,
    load_all_ms: f64,
    next_run_all_median_ms: f64,
    next_run_all_max_ms: f64,
    idle: Option<IdleReport>,
}

#[derive(Debug, Serialize)]
struct IdleReport {
    seconds: f64,
    cpu_ms: f64,
    cpu_percent: f64,
    wakeups_per_second: f64,
    lag_ms_p50: f64,
    lag_ms_max: f64,
    lag_samples: usize,
    pickup_ms_p50: f64,
    pickup_ms_max: f64,
    pickup_samples: usize,
}

/// Jobs added while the gateway runs, due at once, whose pickup is timed.
const PICKUP_SAMPLES: usize = 8;

/// Runs the benchmark.
pub fn run(ctx: &Context, args: BenchSchedulerArgs) -> Result<Status> {
    let temp;
    let root = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);

    eprintln!("validating {} schedules", args.jobs);
    let requests: Vec<JobRequest> = (0..args.jobs).map(mixed_request).collect();
    let now = clock.now();
    let started = Instant::now();
    let prepared = requests
        .iter()
        .map(|r| r.prepare(now, None).map(|(job, _)| job))
        .collect::<Result<Vec<_>, _>>()?;
    let validate_all_ms = ms(started.elapsed());

    eprintln!("storing them");
    let home = root.join("mixed");
    std::fs::create_dir_all(&home)?;
    let runtime = ctx.runtime()?;
    let store = engram_backend::open_blocking(&StoreConfig::sqlite(home.join(DATABASE_FILE)))?.jobs;
    let started = Instant::now();
    for job in prepared {
        runtime.block_on(store.add(job, now.as_millisecond()))?;
    }
    let insert_all_ms = ms(started.elapsed());

    eprintln!("computing next runs, {} rounds", args.rounds);
    let started = Instant::now();
    let jobs = runtime.block_on(store.list(true))?;
    let load_all_ms = ms(started.elapsed());
    let mut rounds = Vec::with_capacity(args.rounds);
    for _ in 0..args.rounds.max(1) {
        let at = clock.now();
        let started = Instant::now();
        let mut computed = 0usize;
        for job in &jobs {
            let zoned = ZonedSchedule::of_job(job)?;
            if zoned.next_after(at).is_some() {
                computed += 1;
            }
        }
        rounds.push(started.elapsed());
        if computed + jobs.len() / 10 < jobs.len() {
            bail!("only {computed} of {} jobs have a next run", jobs.len());
        }
    }
    rounds.sort();
    let next_run_all_median_ms = ms(rounds[rounds.len() / 2]);
    let next_run_all_max_ms = ms(rounds[rounds.len() - 1]);

    let idle = if args.idle_secs > 0 {
        Some(gateway_phase(runtime, &root, &args)?)
    } else {
        None
    };

    let report = Report {
        jobs: args.jobs,
        validate_all_ms,
        insert_all_ms,
        load_all_ms,
        next_run_all_median_ms,
        next_run_all_max_ms,
        idle,
    };
    if ctx.json {
        output::json(&report)?;
        return Ok(Status::Success);
    }
    println!("jobs                                   {}", report.jobs);
    println!(
        "validate + first run, all jobs         {:.1} ms",
        report.validate_all_ms
    );
    println!(
        "store all (one transaction each)       {:.0} ms",
        report.insert_all_ms
    );
    println!(
        "load all from the store                {:.1} ms",
        report.load_all_ms
    );
    println!(
        "next run, all jobs (median / slowest)  {:.1} / {:.1} ms",
        report.next_run_all_median_ms, report.next_run_all_max_ms
    );
    if let Some(idle) = &report.idle {
        println!(
            "gateway idle {:.0} s with {} jobs       {:.0} ms CPU ({:.3}%), {:.1} wakeups/s",
            idle.seconds, report.jobs, idle.cpu_ms, idle.cpu_percent, idle.wakeups_per_second
        );
        println!(
            "due job start lag ({} jobs)            p50 {:.0} ms, max {:.0} ms",
            idle.lag_samples, idle.lag_ms_p50, idle.lag_ms_max
        );
        println!(
            "job added while running, due at once   p50 {:.0} ms, max {:.0} ms ({} jobs)",
            idle.pickup_ms_p50, idle.pickup_ms_max, idle.pickup_samples
        );
    }
    Ok(Status::Success)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Kills the gateway when dropped, so a failed benchmark leaves nothing running.
struct GatewayChild(Child);

impl Drop for GatewayChild {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gateway_phase(
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    args: &BenchSchedulerArgs,
) -> Result<IdleReport> {
    let home = root.join("idle");
    std::fs::create_dir_all(&home)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let db = home.join(DATABASE_FILE);
    let jobs = engram_backend::open_blocking(&StoreConfig::sqlite(&db))?.jobs;
    let scheduler = Scheduler::new(jobs, clock.clone(), None);
    eprintln!("storing {} jobs that are not due for a day", args.jobs);
    for i in 0..args.jobs {
        runtime.block_on(scheduler.add(&idle_request(i)))?;
    }

    let exe = std::env::current_exe().context("cannot find the engram executable")?;
    let mut child = Command::new(exe)
        .arg("--home")
        .arg(&home)
        .args(["gateway", "--heartbeat", "0"])
        .env("ENGRAM_GATEWAY_RUNNER", "echo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start engram gateway")?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no gateway output"))?;
    let child = GatewayChild(child);
    let pid = child.0.id();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = lines_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .context("the gateway did not start within 30 s")?;
        if line.contains("gateway started") {
            break;
        }
    }

    eprintln!("gateway idle for {} s", args.idle_secs);
    let cpu_before = cpu_ticks(pid)?;
    let switches_before = context_switches(pid)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(args.idle_secs));
    let seconds = started.elapsed().as_secs_f64();
    let cpu_ticks_used = cpu_ticks(pid)? - cpu_before;
    let wakeups = context_switches(pid)? - switches_before;
    let ticks_per_second = clock_ticks_per_second();
    let cpu_ms = cpu_ticks_used as f64 * 1000.0 / ticks_per_second;

    eprintln!("measuring start lag of {} one-shot jobs", args.lag_jobs);
    // Added through this process's own connection: the gateway sees them only through the
    // database, as it would see `engram cron add`.
    let first = clock.now().checked_add(SignedDuration::from_secs(2))?;
    let mut lag_ids = Vec::new();
    for i in 0..args.lag_jobs {
        let at = first.checked_add(SignedDuration::from_millis(250 * i as i64))?;
        let request = JobRequest::new(format!("lag {i}"), "lag", ScheduleInput::At(at.to_string()));
        lag_ids.push(runtime.block_on(scheduler.add(&request))?.id);
    }
    let wait_until = Instant::now() + Duration::from_secs(30 + args.lag_jobs as u64);
    let mut lags = Vec::new();
    while Instant::now() < wait_until {
        lags.clear();
        for id in &lag_ids {
            if let Some(run) = runtime
                .block_on(scheduler.runs(id, 1))?
                .into_iter()
                .find(|r| r.status == RunStatus::Ok)
            {
                let scheduled = run.scheduled_at_ms.unwrap_or(run.started_at_ms);
                lags.push((run.started_at_ms - scheduled) as f64);
            }
        }
        if lags.len() == lag_ids.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    eprintln!("measuring pickup of {PICKUP_SAMPLES} jobs added due at once");
    // Jobs due the moment they are added are found by the gateway's change check, which runs
    // once a second: the wait is spread over 0-1 s. Samples are spaced so they fall at
    // different points of that second.
    let mut pickups = Vec::new();
    for i in 0..PICKUP_SAMPLES {
        std::thread::sleep(Duration::from_millis(1_000 + 137 * i as u64));
        let added = clock.now();
        let job = runtime.block_on(scheduler.add(&JobRequest::new(
            format!("pickup {i}"),
            "pickup",
            ScheduleInput::At("now".into()),
        )))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(run) = runtime.block_on(scheduler.runs(&job.id, 1))?.first() {
                pickups.push((run.started_at_ms - added.as_millisecond()) as f64);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    drop(child);
    if lags.len() < lag_ids.len() {
        bail!("only {} of {} lag jobs ran", lags.len(), lag_ids.len());
    }
    if pickups.len() < PICKUP_SAMPLES {
        bail!(
            "only {} of {PICKUP_SAMPLES} jobs added at run time ran",
            pickups.len()
        );
    }
    lags.sort_by(f64::total_cmp);
    pickups.sort_by(f64::total_cmp);
    Ok(IdleReport {
        seconds,
        cpu_ms,
        cpu_percent: cpu_ms / (seconds * 1000.0) * 100.0,
        wakeups_per_second: wakeups as f64 / seconds,
        lag_ms_p50: lags[lags.len() / 2],
        lag_ms_max: lags[lags.len() - 1],
        lag_samples: lags.len(),
        pickup_ms_p50: pickups[pickups.len() / 2],
        pickup_ms_max: pickups[pickups.len() - 1],
        pickup_samples: pickups.len(),
    })
}

/// User plus system CPU time of a process, in clock ticks (/proc/PID/stat fields 14 and 15).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; fields after it follow the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        fields
            .get(n - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat"))
    };
    Ok(field(14)? + field(15)?)
}

/// Context switches of all the process's threads: how often it woke up.
fn context_switches(pid: u32) -> Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let status = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(n) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += n.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(total)
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
