//! Scheduled jobs and their runs, as an engine stores them.
//!
//! The command line, the agent's `cron` tool and every running gateway share the jobs, so each
//! change is one transaction, and a run is claimed before it starts: a claim succeeds only
//! while the job still has the due time the claimant saw and no run in progress, so two
//! processes (or two hosts) never run the same occurrence. A run is recorded twice, as started
//! and as finished; a run left "running" by a process that died is found by
//! [`JobStore::recover_interrupted`].
//!
//! The store keeps schedules and payloads as data and interprets neither: the scheduler (in
//! engram-agent) validates a schedule, computes each next run and hands it in, and owns the
//! meaning of the payload (a JSON object) and of the missed-run policy (a word). Times are
//! milliseconds since the Unix epoch, as the field names say.

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::StoreError;

/// Longest output (and error) excerpt kept per run, in characters.
pub const RUN_OUTPUT_LIMIT: usize = 4_000;
/// How many runs are kept per job; older ones are pruned when a run finishes.
pub const RUNS_KEPT_PER_JOB: i64 = 200;
/// How long the runs of a job that no longer exists are kept, so that a one-shot job's result
/// can still be looked up after it deleted itself.
pub const ORPHAN_RUNS_KEPT_MS: i64 = 30 * 24 * 3_600_000;

/// Why a job operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// No job has this id.
    #[error("no job has the id '{0}' (see `engram cron list --all`)")]
    NotFound(String),
    /// The job is being run by this or another process.
    #[error("job '{0}' is already running")]
    AlreadyRunning(String),
    /// The new job is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// A stored row cannot be read back.
    #[error("job '{id}' is stored in a form this engram cannot read: {detail}")]
    Unreadable {
        /// The job.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// When a job runs, as stored. The scheduler validates and interprets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleRecord {
    /// Once, at this instant.
    At {
        /// The instant.
        at_ms: i64,
    },
    /// Every `every_ms`, on the grid `anchor_ms + k * every_ms`.
    Every {
        /// The interval.
        every_ms: i64,
        /// A point of the grid (the time the job was added), so runs never drift.
        anchor_ms: i64,
    },
    /// At the times a cron expression names, read in the job's time zone.
    Cron {
        /// The expression as given.
        expr: String,
    },
}

impl ScheduleRecord {
    /// `at`, `every` or `cron`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::At { .. } => "at",
            Self::Every { .. } => "every",
            Self::Cron { .. } => "cron",
        }
    }
}

/// How a run ended (or that it has not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Started and not yet finished.
    Running,
    /// Finished and succeeded.
    Ok,
    /// Finished with an error.
    Error,
    /// Stopped before finishing (the process was shut down or died).
    Interrupted,
    /// Not run: the time was missed and the job's policy is to skip.
    Skipped,
}

impl RunStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
            Self::Skipped => "skipped",
        }
    }

    /// Reads the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => Self::Running,
            "ok" => Self::Ok,
            "error" => Self::Error,
            "interrupted" => Self::Interrupted,
            "skipped" => Self::Skipped,
            _ => return None,
        })
    }
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTrigger {
    /// Its time came.
    Schedule,
    /// Its time passed while no gateway ran, and it runs once on start.
    Missed,
    /// Someone asked for it (`engram cron run`).
    Manual,
}

impl RunTrigger {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Missed => "missed",
            Self::Manual => "manual",
        }
    }

    /// Reads the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "schedule" => Self::Schedule,
            "missed" => Self::Missed,
            "manual" => Self::Manual,
            _ => return None,
        })
    }
}

/// The mutable part of a job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobState {
    /// When it runs next; `None` once it has nothing left to run.
    pub next_run_at_ms: Option<i64>,
    /// When its last run started.
    pub last_run_at_ms: Option<i64>,
    /// How its last run ended.
    pub last_status: Option<RunStatus>,
    /// The last run's error, if it failed.
    pub last_error: Option<String>,
    /// The run in progress, if any.
    pub running_run_id: Option<i64>,
}

/// A scheduled job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Short id, 8 hex digits.
    pub id: String,
    /// A name for people.
    pub name: String,
    /// Disabled jobs never run on their own.
    pub enabled: bool,
    /// When it runs.
    pub schedule: ScheduleRecord,
    /// The IANA time zone its schedule is read (and shown) in.
    pub tz: String,
    /// What it does, as the scheduler wrote it (a JSON object the store does not read).
    pub payload: Map<String, Value>,
    /// The agent session its turns run in (default `cron:<id>`).
    pub session_key: String,
    /// What to do about missed runs, as the scheduler spells its policy.
    pub missed: String,
    /// Delete a one-shot job after it ran (otherwise it is disabled).
    pub delete_after_run: bool,
    /// Its state.
    pub state: JobState,
    /// When it was added.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
}

/// A job to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// A name for people (not empty).
    pub name: String,
    /// When it runs.
    pub schedule: ScheduleRecord,
    /// The IANA time zone of the schedule.
    pub tz: String,
    /// What it does (a JSON object; the store keeps it as given).
    pub payload: Map<String, Value>,
    /// The session its turns run in; `None` means `cron:<id>`.
    pub session_key: Option<String>,
    /// What to do about missed runs, as the scheduler spells its policy.
    pub missed: String,
    /// Delete a one-shot job after it ran.
    pub delete_after_run: bool,
    /// Its first run, computed by the caller.
    pub next_run_at_ms: i64,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    /// The run's number (increasing).
    pub id: i64,
    /// The job.
    pub job_id: String,
    /// The job's name when it ran.
    pub job_name: String,
    /// Why it ran.
    pub trigger: RunTrigger,
    /// The scheduled time it ran for (none for manual runs).
    pub scheduled_at_ms: Option<i64>,
    /// When it started.
    pub started_at_ms: i64,
    /// When it finished.
    pub finished_at_ms: Option<i64>,
    /// How it ended.
    pub status: RunStatus,
    /// Its error, if it failed.
    pub error: Option<String>,
    /// The start of its output.
    pub output: Option<String>,
    /// The process that ran it.
    pub runner_pid: Option<i64>,
}

impl JobRun {
    /// How long it took, once finished.
    pub fn duration_ms(&self) -> Option<i64> {
        self.finished_at_ms.map(|f| f - self.started_at_ms)
    }
}

/// What becomes of a job after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// Runs next at this time, or never again (`None`: the job is disabled).
    Reschedule(Option<i64>),
    /// A finished one-shot job that is kept, disabled.
    Disable,
    /// A finished one-shot job that is deleted (its run history stays).
    Delete,
    /// Leave the schedule alone (a manual run).
    Keep,
}

/// How a run ended, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// How it ended (not `Running`).
    pub status: RunStatus,
    /// Its error.
    pub error: Option<String>,
    /// Its output (cut to [`RUN_OUTPUT_LIMIT`] characters by the store).
    pub output: Option<String>,
    /// When it finished.
    pub finished_at_ms: i64,
}

/// Computes a job's next run when it is enabled, from the job as read inside the enabling
/// transaction (see [`JobStore::set_enabled`]).
pub type NextRun = Box<dyn FnOnce(&Job) -> Result<Option<i64>, JobError> + Send>;

/// Says whether the process with this id (on this host) still runs (see
/// [`JobStore::recover_interrupted`]).
pub type IsAlive = Box<dyn Fn(i64) -> bool + Send + Sync>;

/// Cuts text to [`RUN_OUTPUT_LIMIT`] characters, marking the cut with `…`: what a store keeps
/// of a run's output and error.
pub fn run_excerpt(text: &str) -> String {
    match text.char_indices().nth(RUN_OUTPUT_LIMIT) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// The jobs and their runs.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Adds a job under a fresh id and returns it as stored. A job needs a name.
    async fn add(&self, new: NewJob, now_ms: i64) -> Result<Job, JobError>;

    /// The job with this id.
    async fn get(&self, id: &str) -> Result<Job, JobError>;

    /// All jobs (only enabled ones unless `include_disabled`), soonest first; jobs with no next
    /// run come last, then by name and id.
    async fn list(&self, include_disabled: bool) -> Result<Vec<Job>, JobError>;

    /// Enabled jobs whose next run is at or before `now_ms` and that are not running, soonest
    /// first.
    async fn due(&self, now_ms: i64) -> Result<Vec<Job>, JobError>;

    /// The earliest next run of an enabled job that is not running.
    async fn next_wake(&self) -> Result<Option<i64>, JobError>;

    /// Removes a job and its run history.
    async fn remove(&self, id: &str) -> Result<Job, JobError>;

    /// Enables or disables a job. Enabling needs the job's next run, computed by `next_run`
    /// from the job as read inside the same transaction.
    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        now_ms: i64,
        next_run: NextRun,
    ) -> Result<Job, JobError>;

    /// Claims a run of `job_id` and records it as started. For a scheduled or missed run,
    /// `expected_next_run_ms` must still be the job's next run (so an occurrence is claimed
    /// once across processes) and the job must be enabled; a manual run passes `None`.
    /// Returns the run, or `None` when the occurrence was claimed elsewhere, the job changed,
    /// or it was removed. A manual run of a missing or running job is an error.
    async fn start_run(
        &self,
        job_id: &str,
        trigger: RunTrigger,
        expected_next_run_ms: Option<i64>,
        started_at_ms: i64,
        runner_pid: u32,
    ) -> Result<Option<JobRun>, JobError>;

    /// Records how a run ended and what becomes of its job, in one transaction, and prunes old
    /// runs ([`RUNS_KEPT_PER_JOB`], [`ORPHAN_RUNS_KEPT_MS`]). A job removed during its run
    /// stays removed.
    async fn finish_run(&self, run: &JobRun, end: &RunEnd, after: AfterRun)
    -> Result<(), JobError>;

    /// Records that a missed occurrence was skipped (a `skipped` run), and moves the job on as
    /// `after` says. Does nothing and returns false if the job no longer has `scheduled_at_ms`
    /// as its next run, or is running.
    async fn skip_missed(
        &self,
        job_id: &str,
        scheduled_at_ms: i64,
        now_ms: i64,
        after: AfterRun,
    ) -> Result<bool, JobError>;

    /// Marks runs left "running" by processes that no longer exist as interrupted (`is_alive`
    /// says whether a process id still runs), frees their jobs, and returns those runs. Their
    /// jobs keep their due time, so the missed-run policy decides what happens next.
    async fn recover_interrupted(
        &self,
        now_ms: i64,
        is_alive: IsAlive,
    ) -> Result<Vec<JobRun>, JobError>;

    /// A job's runs, newest first; an unknown job with no runs is an error.
    async fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, JobError>;

    /// One run.
    async fn run(&self, run_id: i64) -> Result<JobRun, JobError>;

    /// A number that moves whenever jobs may have changed in another process (it may move more
    /// often); cheap enough to ask every second. A gateway looks at the jobs again when it moves.
    async fn change_version(&self) -> Result<i64, JobError>;
}
