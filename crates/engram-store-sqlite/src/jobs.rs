//! Scheduled jobs and their run history, in the same SQLite file as the memories.
//!
//! The command line and a running gateway share this table, so every change runs in an immediate
//! transaction, and a run is claimed before it starts: a claim only succeeds while the job still
//! has the due time the claimant saw and no other run in progress, so two processes never run the
//! same occurrence. A run is recorded twice, as started and as finished, each in its own
//! transaction; a run left "running" by a process that died is found by
//! [`JobStore::recover_interrupted`].
//!
//! The store keeps schedules as data and does not interpret them: the caller computes each
//! job's next run (see the scheduler in engram-agent) and hands it in. Times are milliseconds
//! since the Unix epoch, as the column names say.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use engram_core::StoreError;
use rusqlite::{Connection, OpenFlags, Row, Transaction, TransactionBehavior, params};

use crate::error::from_sqlite;
use crate::{SqliteStore, StoreOptions};

/// Longest output excerpt kept per run, in characters.
pub const RUN_OUTPUT_LIMIT: usize = 4_000;
/// How many runs are kept per job; older ones are pruned when a run finishes.
pub const RUNS_KEPT_PER_JOB: i64 = 200;

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
    /// At the times a cron expression names, read in a time zone.
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

/// What to do about runs that fell due while no gateway was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedPolicy {
    /// Run once when the gateway starts, however many runs were missed (the default).
    #[default]
    RunOnce,
    /// Skip them; run next at the next scheduled time.
    Skip,
}

impl MissedPolicy {
    /// The stored spelling: `run_once` or `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunOnce => "run_once",
            Self::Skip => "skip",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "run_once" => Some(Self::RunOnce),
            "skip" => Some(Self::Skip),
            _ => None,
        }
    }
}

/// What a job does when it runs: an agent turn with this message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobPayload {
    /// The message the agent receives.
    pub message: String,
    /// Whether the answer is delivered to a channel.
    pub deliver: bool,
    /// The channel to deliver to.
    pub channel: Option<String>,
    /// The recipient on that channel.
    pub to: Option<String>,
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

    fn parse(s: &str) -> Option<Self> {
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

    fn parse(s: &str) -> Option<Self> {
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

/// A scheduled job.
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
    /// What it does.
    pub payload: JobPayload,
    /// The agent session its turns run in (default `cron:<id>`).
    pub session_key: String,
    /// What to do about missed runs.
    pub missed: MissedPolicy,
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
    /// What it does.
    pub payload: JobPayload,
    /// The session its turns run in; `None` means `cron:<id>`.
    pub session_key: Option<String>,
    /// What to do about missed runs.
    pub missed: MissedPolicy,
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
    /// Its output (cut to [`RUN_OUTPUT_LIMIT`] characters).
    pub output: Option<String>,
    /// When it finished.
    pub finished_at_ms: i64,
}

/// The jobs table on one database file, with its own connection.
#[derive(Debug)]
pub struct JobStore {
    path: PathBuf,
    busy_timeout: Duration,
    conn: Mutex<Connection>,
}

const JOB_COLUMNS: &str = "id, name, enabled, schedule_kind, at_ms, every_ms, anchor_ms, \
     cron_expr, tz, message, deliver, channel, recipient, session_key, missed, delete_after_run, \
     next_run_at_ms, last_run_at_ms, last_status, last_error, running_run_id, created_at_ms, \
     updated_at_ms";

const RUN_COLUMNS: &str = "id, job_id, job_name, trigger, scheduled_at_ms, started_at_ms, \
     finished_at_ms, status, error, output, runner_pid";

impl JobStore {
    /// Opens the jobs of the database at `path` (created and migrated if needed).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JobError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens the jobs of the database at `path` with these options (only the busy timeout
    /// matters here; times come from the caller).
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, JobError> {
        let path = path.as_ref().to_path_buf();
        let busy_timeout = options.busy_timeout;
        // Opening the memory store creates the file, checks it is engram's and migrates it.
        drop(SqliteStore::open_with(&path, options)?);
        let map = |e| from_sqlite(e, &path, busy_timeout);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(map)?;
        conn.busy_timeout(busy_timeout).map_err(map)?;
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(map)?;
        Ok(Self {
            path,
            busy_timeout,
            conn: Mutex::new(conn),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> JobError {
        JobError::Store(from_sqlite(e, &self.path, self.busy_timeout))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // SQLite rolls back whatever a panicking holder left open.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` in an immediate write transaction, committing when it returns Ok.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let value = f(&tx)?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(value)
    }

    /// A number that changes whenever another connection (in any process) commits to the
    /// database; cheap enough to ask every second.
    pub fn data_version(&self) -> Result<i64, JobError> {
        self.lock()
            .pragma_query_value(None, "data_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Adds a job and returns it as stored.
    pub fn add(&self, new: NewJob, now_ms: i64) -> Result<Job, JobError> {
        if new.name.trim().is_empty() {
            return Err(JobError::Invalid("a job needs a name".into()));
        }
        if new.payload.message.trim().is_empty() {
            return Err(JobError::Invalid("a job needs a message".into()));
        }
        self.write(|tx| {
            let (at_ms, every_ms, anchor_ms, cron_expr) = match &new.schedule {
                ScheduleRecord::At { at_ms } => (Some(*at_ms), None, None, None),
                ScheduleRecord::Every {
                    every_ms,
                    anchor_ms,
                } => (None, Some(*every_ms), Some(*anchor_ms), None),
                ScheduleRecord::Cron { expr } => (None, None, None, Some(expr.as_str())),
            };
            for attempt in 0..16u64 {
                let id = new_job_id(&new.name, attempt);
                let session = new
                    .session_key
                    .clone()
                    .unwrap_or_else(|| format!("cron:{id}"));
                let inserted = tx.execute(
                    "INSERT OR IGNORE INTO jobs (id, name, enabled, schedule_kind, at_ms, every_ms, \
                     anchor_ms, cron_expr, tz, message, deliver, channel, recipient, session_key, \
                     missed, delete_after_run, next_run_at_ms, created_at_ms, updated_at_ms) \
                     VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
                     ?16, ?17, ?17)",
                    params![
                        id,
                        new.name,
                        new.schedule.kind(),
                        at_ms,
                        every_ms,
                        anchor_ms,
                        cron_expr,
                        new.tz,
                        new.payload.message,
                        new.payload.deliver,
                        new.payload.channel,
                        new.payload.to,
                        session,
                        new.missed.as_str(),
                        new.delete_after_run,
                        new.next_run_at_ms,
                        now_ms,
                    ],
                );
                match inserted {
                    Ok(1) => return get_job(tx, &id).map_err(|e| self.map_read(e, &id)),
                    Ok(_) => continue, // the id was taken; draw another
                    Err(e) => return Err(self.err(e)),
                }
            }
            Err(JobError::Invalid(
                "could not find a free job id after 16 attempts".into(),
            ))
        })
    }

    fn map_read(&self, e: ReadError, id: &str) -> JobError {
        match e {
            ReadError::Sql(rusqlite::Error::QueryReturnedNoRows) => {
                JobError::NotFound(id.to_string())
            }
            ReadError::Sql(e) => self.err(e),
            ReadError::Bad(detail) => JobError::Unreadable {
                id: id.to_string(),
                detail,
            },
        }
    }

    /// The job with this id.
    pub fn get(&self, id: &str) -> Result<Job, JobError> {
        get_job(&self.lock(), id).map_err(|e| self.map_read(e, id))
    }

    /// All jobs (only enabled ones unless `include_disabled`), soonest first; jobs with no
    /// next run come last.
    pub fn list(&self, include_disabled: bool) -> Result<Vec<Job>, JobError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled = 1 OR ?1 \
             ORDER BY next_run_at_ms IS NULL, next_run_at_ms, name, id"
        );
        self.query_jobs(&sql, params![include_disabled])
    }

    /// Enabled jobs whose next run is at or before `now_ms` and that are not running.
    pub fn due(&self, now_ms: i64) -> Result<Vec<Job>, JobError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled = 1 AND next_run_at_ms <= ?1 \
             AND running_run_id IS NULL ORDER BY next_run_at_ms, id"
        );
        self.query_jobs(&sql, params![now_ms])
    }

    fn query_jobs(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Job>, JobError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query(params).map_err(|e| self.err(e))?;
        let mut jobs = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let id: String = row.get(0).map_err(|e| self.err(e))?;
            jobs.push(job_from_row(row).map_err(|e| self.map_read(e, &id))?);
        }
        Ok(jobs)
    }

    /// The earliest next run of an enabled job that is not running.
    pub fn next_wake(&self) -> Result<Option<i64>, JobError> {
        self.lock()
            .query_row(
                "SELECT min(next_run_at_ms) FROM jobs WHERE enabled = 1 AND running_run_id IS NULL",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// Removes a job and its run history.
    pub fn remove(&self, id: &str) -> Result<Job, JobError> {
        self.write(|tx| {
            let job = get_job(tx, id).map_err(|e| self.map_read(e, id))?;
            tx.execute("DELETE FROM jobs WHERE id = ?1", [id])
                .and_then(|_| tx.execute("DELETE FROM job_runs WHERE job_id = ?1", [id]))
                .map_err(|e| self.err(e))?;
            Ok(job)
        })
    }

    /// Enables or disables a job. Enabling needs the job's next run, computed by the caller
    /// from `job` (which is read inside the same transaction).
    pub fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        now_ms: i64,
        next_run: impl FnOnce(&Job) -> Result<Option<i64>, JobError>,
    ) -> Result<Job, JobError> {
        self.write(|tx| {
            let job = get_job(tx, id).map_err(|e| self.map_read(e, id))?;
            let next = if enabled {
                next_run(&job)?
            } else {
                job.state.next_run_at_ms
            };
            tx.execute(
                "UPDATE jobs SET enabled = ?2, next_run_at_ms = ?3, updated_at_ms = ?4 WHERE id = ?1",
                params![id, enabled, next, now_ms],
            )
            .map_err(|e| self.err(e))?;
            get_job(tx, id).map_err(|e| self.map_read(e, id))
        })
    }

    /// Claims a run of `job_id` and records it as started. For a scheduled or missed run,
    /// `expected_next_run_ms` must still be the job's next run (so an occurrence is claimed
    /// once across processes) and the job must be enabled; a manual run passes `None`.
    /// Returns the run, or `None` when the occurrence was claimed elsewhere, the job changed,
    /// or it was removed.
    pub fn start_run(
        &self,
        job_id: &str,
        trigger: RunTrigger,
        expected_next_run_ms: Option<i64>,
        started_at_ms: i64,
        runner_pid: u32,
    ) -> Result<Option<JobRun>, JobError> {
        self.write(|tx| {
            let job = match get_job(tx, job_id) {
                Ok(job) => job,
                Err(ReadError::Sql(rusqlite::Error::QueryReturnedNoRows)) => {
                    return match trigger {
                        RunTrigger::Manual => Err(JobError::NotFound(job_id.to_string())),
                        _ => Ok(None),
                    };
                }
                Err(e) => return Err(self.map_read(e, job_id)),
            };
            if job.state.running_run_id.is_some() {
                return match trigger {
                    RunTrigger::Manual => Err(JobError::AlreadyRunning(job_id.to_string())),
                    _ => Ok(None),
                };
            }
            if trigger != RunTrigger::Manual
                && (!job.enabled || job.state.next_run_at_ms != expected_next_run_ms)
            {
                return Ok(None);
            }
            let scheduled = match trigger {
                RunTrigger::Manual => None,
                _ => expected_next_run_ms,
            };
            tx.execute(
                "INSERT INTO job_runs (job_id, job_name, trigger, scheduled_at_ms, started_at_ms, \
                 status, runner_pid) VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6)",
                params![
                    job_id,
                    job.name,
                    trigger.as_str(),
                    scheduled,
                    started_at_ms,
                    runner_pid
                ],
            )
            .map_err(|e| self.err(e))?;
            let run_id = tx.last_insert_rowid();
            tx.execute(
                "UPDATE jobs SET running_run_id = ?2 WHERE id = ?1",
                params![job_id, run_id],
            )
            .map_err(|e| self.err(e))?;
            get_run(tx, run_id).map(Some).map_err(|e| self.map_run(e))
        })
    }

    fn map_run(&self, e: ReadError) -> JobError {
        match e {
            ReadError::Sql(e) => self.err(e),
            ReadError::Bad(detail) => JobError::Store(StoreError::Backend(format!(
                "a job run is stored in an unreadable form: {detail}"
            ))),
        }
    }

    /// Records how a run ended and what becomes of its job, in one transaction. A job removed
    /// during its run stays removed.
    pub fn finish_run(&self, run: &JobRun, end: &RunEnd, after: AfterRun) -> Result<(), JobError> {
        let output = end.output.as_deref().map(excerpt);
        let error = end.error.as_deref().map(excerpt);
        self.write(|tx| {
            tx.execute(
                "UPDATE job_runs SET status = ?2, error = ?3, output = ?4, finished_at_ms = ?5 \
                 WHERE id = ?1",
                params![
                    run.id,
                    end.status.as_str(),
                    error,
                    output,
                    end.finished_at_ms
                ],
            )
            .map_err(|e| self.err(e))?;
            let common = "last_run_at_ms = ?2, last_status = ?3, last_error = ?4, \
                          running_run_id = NULL, updated_at_ms = ?5";
            let sql = match after {
                AfterRun::Reschedule(Some(_)) => {
                    format!("UPDATE jobs SET {common}, next_run_at_ms = ?6 WHERE id = ?1")
                }
                AfterRun::Reschedule(None) | AfterRun::Disable => format!(
                    "UPDATE jobs SET {common}, next_run_at_ms = NULL, enabled = 0 WHERE id = ?1"
                ),
                AfterRun::Keep => format!("UPDATE jobs SET {common} WHERE id = ?1"),
                AfterRun::Delete => "DELETE FROM jobs WHERE id = ?1".to_string(),
            };
            let next = match after {
                AfterRun::Reschedule(next) => next,
                _ => None,
            };
            let mut stmt = tx.prepare(&sql).map_err(|e| self.err(e))?;
            let expected = stmt.parameter_count();
            let values: [&dyn rusqlite::ToSql; 6] = [
                &run.job_id,
                &run.started_at_ms,
                &end.status.as_str(),
                &error,
                &end.finished_at_ms,
                &next,
            ];
            stmt.execute(&values[..expected]).map_err(|e| self.err(e))?;
            prune_runs(tx, &run.job_id, end.finished_at_ms).map_err(|e| self.err(e))
        })
    }

    /// Records that a missed occurrence was skipped, and moves the job to its next run. Does
    /// nothing if the job no longer has `scheduled_at_ms` as its next run.
    pub fn skip_missed(
        &self,
        job_id: &str,
        scheduled_at_ms: i64,
        now_ms: i64,
        after: AfterRun,
    ) -> Result<bool, JobError> {
        self.write(|tx| {
            let job = match get_job(tx, job_id) {
                Ok(job) => job,
                Err(ReadError::Sql(rusqlite::Error::QueryReturnedNoRows)) => return Ok(false),
                Err(e) => return Err(self.map_read(e, job_id)),
            };
            if job.state.running_run_id.is_some()
                || job.state.next_run_at_ms != Some(scheduled_at_ms)
            {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO job_runs (job_id, job_name, trigger, scheduled_at_ms, started_at_ms, \
                 finished_at_ms, status, error, runner_pid) \
                 VALUES (?1, ?2, 'missed', ?3, ?4, ?4, 'skipped', ?5, ?6)",
                params![
                    job_id,
                    job.name,
                    scheduled_at_ms,
                    now_ms,
                    "missed while no gateway was running; the job's policy is to skip",
                    std::process::id()
                ],
            )
            .map_err(|e| self.err(e))?;
            let changed = match after {
                AfterRun::Reschedule(Some(next)) => tx.execute(
                    "UPDATE jobs SET next_run_at_ms = ?2, updated_at_ms = ?3 WHERE id = ?1",
                    params![job_id, next, now_ms],
                ),
                AfterRun::Reschedule(None) | AfterRun::Disable => tx.execute(
                    "UPDATE jobs SET next_run_at_ms = NULL, enabled = 0, updated_at_ms = ?2 \
                     WHERE id = ?1",
                    params![job_id, now_ms],
                ),
                AfterRun::Delete => tx.execute("DELETE FROM jobs WHERE id = ?1", [job_id]),
                AfterRun::Keep => Ok(0),
            };
            changed.map_err(|e| self.err(e))?;
            Ok(true)
        })
    }

    /// Marks runs left "running" by processes that no longer exist as interrupted (`is_alive`
    /// says whether a process id still runs), frees their jobs, and returns those runs. Their
    /// jobs keep their due time, so the missed-run policy decides what happens next.
    pub fn recover_interrupted(
        &self,
        now_ms: i64,
        is_alive: impl Fn(i64) -> bool,
    ) -> Result<Vec<JobRun>, JobError> {
        self.write(|tx| {
            let mut stale = Vec::new();
            {
                let sql = format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE status = 'running'");
                let mut stmt = tx.prepare(&sql).map_err(|e| self.err(e))?;
                let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
                while let Some(row) = rows.next().map_err(|e| self.err(e))? {
                    let run = run_from_row(row).map_err(|e| self.map_run(e))?;
                    if !run.runner_pid.is_some_and(&is_alive) {
                        stale.push(run);
                    }
                }
            }
            let reason = "the process running it stopped before it finished";
            for run in &mut stale {
                tx.execute(
                    "UPDATE job_runs SET status = 'interrupted', error = ?2, finished_at_ms = ?3 \
                     WHERE id = ?1",
                    params![run.id, reason, now_ms],
                )
                .and_then(|_| {
                    tx.execute(
                        "UPDATE jobs SET running_run_id = NULL, last_run_at_ms = ?3, \
                         last_status = 'interrupted', last_error = ?4 \
                         WHERE id = ?1 AND running_run_id = ?2",
                        params![run.job_id, run.id, run.started_at_ms, reason],
                    )
                })
                .map_err(|e| self.err(e))?;
                run.status = RunStatus::Interrupted;
                run.error = Some(reason.to_string());
                run.finished_at_ms = Some(now_ms);
            }
            // A job pointing at a run that is no longer running (cannot normally happen) is freed.
            tx.execute(
                "UPDATE jobs SET running_run_id = NULL WHERE running_run_id IS NOT NULL AND \
                 running_run_id NOT IN (SELECT id FROM job_runs WHERE status = 'running')",
                [],
            )
            .map_err(|e| self.err(e))?;
            Ok(stale)
        })
    }

    /// A job's runs, newest first.
    pub fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, JobError> {
        let conn = self.lock();
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM job_runs WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows = stmt
            .query(params![job_id, limit])
            .map_err(|e| self.err(e))?;
        let mut runs = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            runs.push(run_from_row(row).map_err(|e| self.map_run(e))?);
        }
        if runs.is_empty() {
            let known: bool = conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1)",
                    [job_id],
                    |r| r.get(0),
                )
                .map_err(|e| self.err(e))?;
            if !known {
                return Err(JobError::NotFound(job_id.to_string()));
            }
        }
        Ok(runs)
    }

    /// One run.
    pub fn run(&self, run_id: i64) -> Result<JobRun, JobError> {
        get_run(&self.lock(), run_id).map_err(|e| match e {
            ReadError::Sql(rusqlite::Error::QueryReturnedNoRows) => {
                JobError::NotFound(format!("run {run_id}"))
            }
            e => self.map_run(e),
        })
    }
}

/// Cuts text to [`RUN_OUTPUT_LIMIT`] characters, marking the cut.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(RUN_OUTPUT_LIMIT) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

fn prune_runs(tx: &Transaction<'_>, job_id: &str, now_ms: i64) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM job_runs WHERE job_id = ?1 AND status <> 'running' AND id <= \
         (SELECT id FROM job_runs WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        params![job_id, RUNS_KEPT_PER_JOB],
    )?;
    // Runs of jobs that no longer exist are kept for 30 days, so a one-shot job's result can
    // still be looked up after it deleted itself.
    const ORPHAN_KEEP_MS: i64 = 30 * 24 * 3_600_000;
    tx.execute(
        "DELETE FROM job_runs WHERE started_at_ms < ?1 AND status <> 'running' AND \
         job_id NOT IN (SELECT id FROM jobs)",
        [now_ms - ORPHAN_KEEP_MS],
    )?;
    Ok(())
}

/// A fresh 8-hex-digit id. Random enough for a table of jobs; collisions are retried.
fn new_job_id(name: &str, attempt: u64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut hasher = blake3::Hasher::new();
    hasher.update(&nanos.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.update(&attempt.to_le_bytes());
    hasher.update(name.as_bytes());
    hasher.finalize().to_hex()[..8].to_string()
}

/// A row that could not be read: a database failure or data in a form we do not know.
enum ReadError {
    Sql(rusqlite::Error),
    Bad(String),
}

impl From<rusqlite::Error> for ReadError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

fn get_job(conn: &Connection, id: &str) -> Result<Job, ReadError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => job_from_row(row),
        None => Err(ReadError::Sql(rusqlite::Error::QueryReturnedNoRows)),
    }
}

fn get_run(conn: &Connection, id: i64) -> Result<JobRun, ReadError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => run_from_row(row),
        None => Err(ReadError::Sql(rusqlite::Error::QueryReturnedNoRows)),
    }
}

fn required<T>(value: Option<T>, what: &str) -> Result<T, ReadError> {
    value.ok_or_else(|| ReadError::Bad(format!("{what} is missing")))
}

fn job_from_row(row: &Row<'_>) -> Result<Job, ReadError> {
    let kind: String = row.get(3)?;
    let schedule = match kind.as_str() {
        "at" => ScheduleRecord::At {
            at_ms: required(row.get(4)?, "at_ms")?,
        },
        "every" => ScheduleRecord::Every {
            every_ms: required(row.get(5)?, "every_ms")?,
            anchor_ms: required(row.get(6)?, "anchor_ms")?,
        },
        "cron" => ScheduleRecord::Cron {
            expr: required(row.get(7)?, "cron_expr")?,
        },
        other => return Err(ReadError::Bad(format!("unknown schedule kind '{other}'"))),
    };
    let missed: String = row.get(14)?;
    let last_status: Option<String> = row.get(18)?;
    Ok(Job {
        id: row.get(0)?,
        name: row.get(1)?,
        enabled: row.get(2)?,
        schedule,
        tz: row.get(8)?,
        payload: JobPayload {
            message: row.get(9)?,
            deliver: row.get(10)?,
            channel: row.get(11)?,
            to: row.get(12)?,
        },
        session_key: row.get(13)?,
        missed: MissedPolicy::parse(&missed)
            .ok_or_else(|| ReadError::Bad(format!("unknown missed-run policy '{missed}'")))?,
        delete_after_run: row.get(15)?,
        state: JobState {
            next_run_at_ms: row.get(16)?,
            last_run_at_ms: row.get(17)?,
            last_status: last_status
                .map(|s| {
                    RunStatus::parse(&s)
                        .ok_or_else(|| ReadError::Bad(format!("unknown status '{s}'")))
                })
                .transpose()?,
            last_error: row.get(19)?,
            running_run_id: row.get(20)?,
        },
        created_at_ms: row.get(21)?,
        updated_at_ms: row.get(22)?,
    })
}

fn run_from_row(row: &Row<'_>) -> Result<JobRun, ReadError> {
    let trigger: String = row.get(3)?;
    let status: String = row.get(7)?;
    Ok(JobRun {
        id: row.get(0)?,
        job_id: row.get(1)?,
        job_name: row.get(2)?,
        trigger: RunTrigger::parse(&trigger)
            .ok_or_else(|| ReadError::Bad(format!("unknown trigger '{trigger}'")))?,
        scheduled_at_ms: row.get(4)?,
        started_at_ms: row.get(5)?,
        finished_at_ms: row.get(6)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| ReadError::Bad(format!("unknown status '{status}'")))?,
        error: row.get(8)?,
        output: row.get(9)?,
        runner_pid: row.get(10)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    fn store() -> (TempDir, JobStore) {
        let dir = TempDir::new().unwrap();
        let store = JobStore::open(dir.path().join("engram.db")).unwrap();
        (dir, store)
    }

    fn new_job(name: &str, next: i64) -> NewJob {
        NewJob {
            name: name.into(),
            schedule: ScheduleRecord::Every {
                every_ms: 60_000,
                anchor_ms: 0,
            },
            tz: "UTC".into(),
            payload: JobPayload {
                message: format!("do {name}"),
                ..JobPayload::default()
            },
            session_key: None,
            missed: MissedPolicy::RunOnce,
            delete_after_run: false,
            next_run_at_ms: next,
        }
    }

    #[test]
    fn a_job_round_trips_with_its_default_session() {
        let (_dir, store) = store();
        let job = store.add(new_job("water", 1_000), 500).unwrap();
        assert_eq!(job.id.len(), 8);
        assert_eq!(job.session_key, format!("cron:{}", job.id));
        assert_eq!(job.state.next_run_at_ms, Some(1_000));
        assert_eq!(store.get(&job.id).unwrap(), job);
        assert!(matches!(store.get("nope"), Err(JobError::NotFound(_))));
    }

    #[test]
    fn an_occurrence_is_claimed_once() {
        let (_dir, store) = store();
        let job = store.add(new_job("a", 1_000), 0).unwrap();
        let run = store
            .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 1)
            .unwrap()
            .unwrap();
        assert!(
            store
                .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_001, 1)
                .unwrap()
                .is_none()
        );
        assert!(
            store.due(5_000).unwrap().is_empty(),
            "a running job is not due"
        );
        let end = RunEnd {
            status: RunStatus::Ok,
            error: None,
            output: Some("done".into()),
            finished_at_ms: 1_500,
        };
        store
            .finish_run(&run, &end, AfterRun::Reschedule(Some(61_000)))
            .unwrap();
        let job = store.get(&job.id).unwrap();
        assert_eq!(job.state.next_run_at_ms, Some(61_000));
        assert_eq!(job.state.last_status, Some(RunStatus::Ok));
        assert_eq!(job.state.running_run_id, None);
        // The old occurrence cannot be claimed again.
        assert!(
            store
                .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 2_000, 1)
                .unwrap()
                .is_none()
        );
        let runs = store.runs(&job.id, 10).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].duration_ms(), Some(500));
        assert_eq!(runs[0].output.as_deref(), Some("done"));
    }

    #[test]
    fn dead_runners_leave_interrupted_runs() {
        let (_dir, store) = store();
        let job = store.add(new_job("a", 1_000), 0).unwrap();
        store
            .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 4242)
            .unwrap()
            .unwrap();
        assert!(
            store
                .recover_interrupted(2_000, |_| true)
                .unwrap()
                .is_empty()
        );
        let stale = store.recover_interrupted(2_000, |_| false).unwrap();
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].status, RunStatus::Interrupted);
        let job = store.get(&job.id).unwrap();
        assert_eq!(job.state.running_run_id, None);
        assert_eq!(job.state.next_run_at_ms, Some(1_000), "still due");
        assert_eq!(store.due(2_000).unwrap().len(), 1);
    }

    #[test]
    fn one_shot_jobs_are_deleted_but_their_runs_stay() {
        let (_dir, store) = store();
        let job = store.add(new_job("once", 1_000), 0).unwrap();
        let run = store
            .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 1)
            .unwrap()
            .unwrap();
        let end = RunEnd {
            status: RunStatus::Error,
            error: Some("x".repeat(RUN_OUTPUT_LIMIT + 10)),
            output: None,
            finished_at_ms: 1_100,
        };
        store.finish_run(&run, &end, AfterRun::Delete).unwrap();
        assert!(matches!(store.get(&job.id), Err(JobError::NotFound(_))));
        let runs = store.runs(&job.id, 10).unwrap();
        assert_eq!(runs[0].status, RunStatus::Error);
        assert_eq!(
            runs[0].error.as_ref().unwrap().chars().count(),
            RUN_OUTPUT_LIMIT + 1
        );
    }

    #[test]
    fn disabled_jobs_are_listed_only_when_asked() {
        let (_dir, store) = store();
        let a = store.add(new_job("a", 2_000), 0).unwrap();
        let b = store.add(new_job("b", 1_000), 0).unwrap();
        store.set_enabled(&a.id, false, 10, |_| Ok(None)).unwrap();
        let enabled: Vec<_> = store
            .list(false)
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(enabled, vec![b.id.clone()]);
        assert_eq!(store.list(true).unwrap().len(), 2);
        assert_eq!(store.next_wake().unwrap(), Some(1_000));
        let a = store
            .set_enabled(&a.id, true, 20, |_| Ok(Some(3_000)))
            .unwrap();
        assert!(a.enabled);
        assert_eq!(a.state.next_run_at_ms, Some(3_000));
        store.remove(&b.id).unwrap();
        assert_eq!(store.next_wake().unwrap(), Some(3_000));
    }

    #[test]
    fn other_connections_change_the_data_version() {
        let (dir, store) = store();
        let other = JobStore::open(dir.path().join("engram.db")).unwrap();
        let before = store.data_version().unwrap();
        store.add(new_job("mine", 1), 0).unwrap();
        assert_eq!(
            store.data_version().unwrap(),
            before,
            "own writes do not count"
        );
        other.add(new_job("theirs", 1), 0).unwrap();
        assert_ne!(store.data_version().unwrap(), before);
    }
}
