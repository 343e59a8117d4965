//! `engram cron ...`: scheduled jobs, shared with a running `engram gateway` through the
//! database.

use anyhow::Result;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use engram_agent::scheduler::MissedPolicy;
use engram_agent::scheduler::view::{job_line, job_view, local, run_line, run_view};
use engram_agent::scheduler::{JobRequest, ScheduleInput, Scheduler, SchedulerError};
use engram_core::store::jobs::{JobError, RunStatus};
use serde_json::json;

use super::gateway::turn_runner;
use super::scheduler::open_scheduler;
use crate::context::Context;
use crate::exit::{Failure, Status};
use crate::output;

const CRON_HELP: &str = "\
Schedules:
  --cron EXPR   5 fields: minute hour day-of-month month day-of-week (or 6, seconds first);
                names (mon-fri, jan), ranges, steps (*/15) and lists; @hourly, @daily,
                @weekly, @monthly, @yearly. Read in --tz (default: [scheduler] timezone in
                config.toml, else the system zone). A time skipped by a daylight-saving jump
                runs once right after the jump; a repeated time runs once.
  --every DUR   seconds (90) or a duration (10m, 1h30m, 1d); runs stay on their grid.
  --at TIME     once: RFC 3339 (2025-06-01T09:00:00+02:00), a local time read in --tz
                (2025-06-01 09:00), now, or in 20m. Deleted after running unless --keep.

Jobs run as agent turns in session cron:<id> (or --session) while `engram gateway` runs.

Examples:
  engram cron add --name standup --message \"Summarise yesterday's commits\" --cron \"0 9 * * mon-fri\" --tz Europe/Berlin
  engram cron add --name water --message \"Remind me to water the plants\" --every 2d
  engram cron add --name call --message \"Remind me to call Sam\" --at \"in 20m\"";

/// `engram cron ...`.
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Add a job (the schedule is checked at once; a bad one is refused with the reason).
    #[command(after_help = CRON_HELP)]
    Add(CronAddArgs),
    /// List jobs, soonest first; times are shown in each job's zone.
    List(CronListArgs),
    /// Remove a job and its run history.
    Remove(JobIdArgs),
    /// Enable a job; its next run is computed from now.
    Enable(JobIdArgs),
    /// Disable a job: it stays, but never runs on its own.
    Disable(JobIdArgs),
    /// Run a job now, in this process (its schedule is unchanged); prints the agent's answer.
    Run(JobIdArgs),
    /// Show a job's runs, newest first: start, status, duration, error or output.
    Runs(CronRunsArgs),
}

/// `engram cron add`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("schedule").required(true).args(["cron", "every", "at"])))]
pub struct CronAddArgs {
    /// A name for people.
    #[arg(long)]
    pub name: String,
    /// What the agent is asked to do when the job runs.
    #[arg(long, short = 'm')]
    pub message: String,
    /// A cron expression.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// An interval.
    #[arg(long, value_name = "DUR")]
    pub every: Option<String>,
    /// A single time.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    /// IANA time zone for --cron and local --at times, e.g. Europe/Berlin.
    #[arg(long, value_name = "TZ")]
    pub tz: Option<String>,
    /// The session its turns run in (default cron:<id>).
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
    /// Runs missed while no gateway was running: run once at start, or skip them.
    #[arg(long, value_enum, default_value = "run-once")]
    pub missed: MissedArg,
    /// Keep an --at job (disabled) after it ran, instead of deleting it.
    #[arg(long)]
    pub keep: bool,
}

/// The missed-run policy on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MissedArg {
    /// Run once when the gateway starts.
    RunOnce,
    /// Skip to the next scheduled time.
    Skip,
}

/// `engram cron list`.
#[derive(Debug, Args)]
pub struct CronListArgs {
    /// Include disabled jobs.
    #[arg(long)]
    pub all: bool,
}

/// A command on one job.
#[derive(Debug, Args)]
pub struct JobIdArgs {
    /// The job's id (see `engram cron list`).
    pub id: String,
}

/// `engram cron runs`.
#[derive(Debug, Args)]
pub struct CronRunsArgs {
    /// The job's id.
    pub id: String,
    /// How many runs at most.
    #[arg(long, short = 'n', default_value = "20")]
    pub limit: usize,
}

/// Runs `engram cron ...`.
pub fn run(ctx: &Context, command: CronCommand) -> Result<Status> {
    let scheduler = open_scheduler(ctx)?;
    match command {
        CronCommand::Add(args) => add(ctx, &scheduler, args),
        CronCommand::List(args) => list(ctx, &scheduler, args.all),
        CronCommand::Remove(args) => {
            let job = ctx
                .block_on(scheduler.remove(args.id.trim()))?
                .map_err(failure)?;
            if ctx.json {
                output::json(&json!({"removed": job_view(&job)}))?;
            } else {
                println!("Removed job {} ({}).", job.id, job.name);
            }
            Ok(Status::Success)
        }
        CronCommand::Enable(args) => set_enabled(ctx, &scheduler, &args.id, true),
        CronCommand::Disable(args) => set_enabled(ctx, &scheduler, &args.id, false),
        CronCommand::Run(args) => run_now(ctx, &scheduler, &args.id),
        CronCommand::Runs(args) => runs(ctx, &scheduler, &args.id, args.limit),
    }
}

/// A scheduler error with the exit status it deserves.
pub fn failure(err: SchedulerError) -> anyhow::Error {
    let status = match &err {
        SchedulerError::Schedule(_) => Status::Usage,
        SchedulerError::Job(JobError::NotFound(_)) => Status::NotFound,
        SchedulerError::Job(JobError::AlreadyRunning(_)) => Status::Conflict,
        SchedulerError::Job(JobError::Invalid(_)) => Status::Usage,
        SchedulerError::Job(_) => Status::Failure,
    };
    Failure {
        status,
        message: err.to_string(),
    }
    .into()
}

fn add(ctx: &Context, scheduler: &Scheduler, args: CronAddArgs) -> Result<Status> {
    let schedule = ScheduleInput::one_of(args.cron, args.every, args.at)
        .map_err(|e| failure(SchedulerError::Schedule(e)))?;
    let mut request = JobRequest::new(args.name, args.message, schedule);
    request.tz = args.tz;
    request.session_key = args.session;
    request.missed = match args.missed {
        MissedArg::RunOnce => MissedPolicy::RunOnce,
        MissedArg::Skip => MissedPolicy::Skip,
    };
    request.keep_after_run = args.keep;
    let job = ctx.block_on(scheduler.add(&request))?.map_err(failure)?;
    if ctx.json {
        output::json(&job_view(&job))?;
    } else {
        let next = job
            .state
            .next_run_at_ms
            .map(|ms| local(ms, &job.tz))
            .unwrap_or_else(|| "never".into());
        println!(
            "Added job {} ({}): {}; next run {next}.",
            job.id,
            job.name,
            scheduler.describe(&job)
        );
    }
    Ok(Status::Success)
}

fn list(ctx: &Context, scheduler: &Scheduler, all: bool) -> Result<Status> {
    let jobs = ctx.block_on(scheduler.list(all))?.map_err(failure)?;
    if ctx.json {
        let views: Vec<_> = jobs.iter().map(job_view).collect();
        output::json(&views)?;
    } else if jobs.is_empty() {
        println!(
            "No {}jobs. Add one with `engram cron add` (see --help).",
            if all { "" } else { "enabled " }
        );
    } else {
        for job in &jobs {
            println!("{}", job_line(job));
        }
    }
    Ok(Status::Success)
}

fn set_enabled(ctx: &Context, scheduler: &Scheduler, id: &str, enabled: bool) -> Result<Status> {
    let job = ctx
        .block_on(scheduler.set_enabled(id.trim(), enabled))?
        .map_err(failure)?;
    if ctx.json {
        output::json(&job_view(&job))?;
    } else if enabled {
        let next = job
            .state
            .next_run_at_ms
            .map(|ms| local(ms, &job.tz))
            .unwrap_or_else(|| "never".into());
        println!("Enabled job {} ({}); next run {next}.", job.id, job.name);
    } else {
        println!("Disabled job {} ({}).", job.id, job.name);
    }
    Ok(Status::Success)
}

fn run_now(ctx: &Context, scheduler: &Scheduler, id: &str) -> Result<Status> {
    let job = ctx.block_on(scheduler.get(id.trim()))?.map_err(failure)?;
    let runner = turn_runner(ctx, None)?;
    let finished = ctx
        .block_on(scheduler.run_now(&job.id, runner.as_ref()))?
        .map_err(failure)?;
    let ok = finished.run.status == RunStatus::Ok;
    if ctx.json {
        let mut view = serde_json::to_value(run_view(&finished.run, Some(&job.tz)))?;
        view["output"] = json!(finished.output);
        output::json(&view)?;
    } else if let Some(text) = &finished.output {
        println!("{text}");
    }
    if ok {
        Ok(Status::Success)
    } else {
        Err(anyhow::anyhow!(
            "job {} failed: {}",
            job.id,
            finished.run.error.as_deref().unwrap_or("no reason given")
        ))
    }
}

fn runs(ctx: &Context, scheduler: &Scheduler, id: &str, limit: usize) -> Result<Status> {
    let id = id.trim();
    let runs = ctx.block_on(scheduler.runs(id, limit))?.map_err(failure)?;
    let tz = ctx
        .block_on(scheduler.get(id))?
        .map(|job| job.tz)
        .unwrap_or_else(|_| "UTC".into());
    if ctx.json {
        let views: Vec<_> = runs.iter().map(|r| run_view(r, Some(&tz))).collect();
        output::json(&views)?;
    } else if runs.is_empty() {
        println!("Job {id} has not run yet.");
    } else {
        for run in &runs {
            println!("{}", run_line(run, &tz));
        }
    }
    Ok(Status::Success)
}
