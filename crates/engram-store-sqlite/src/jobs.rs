//! Scheduled jobs and their run history, in the same SQLite file as the memories (see
//! [`engram_core::store::jobs`] for the rules every engine keeps).
//!
//! Every change runs in an immediate transaction on the database's one writer, so a claim
//! ([`Jobs::start_run`]) sees every other process's claims. The payload is kept as the JSON the
//! scheduler wrote. Times are milliseconds since the Unix epoch, as the column names say.

use std::sync::atomic::{AtomicU64, Ordering};

use engram_core::StoreError;
use engram_core::store::jobs::{
    AfterRun, Job, JobError, JobRun, JobState, NewJob, ORPHAN_RUNS_KEPT_MS, RUNS_KEPT_PER_JOB,
    RunEnd, RunStatus, RunTrigger, ScheduleRecord, run_excerpt,
};
use rusqlite::{Connection, Row, Transaction, params};
use serde_json::Value;

use crate::store::Database;

/// The jobs of one database.
#[derive(Debug, Clone, Copy)]
pub struct Jobs<'a> {
    db: &'a Database,
}

impl Database {
    /// The jobs and their runs.
    pub fn jobs(&self) -> Jobs<'_> {
        Jobs { db: self }
    }
}

pub(crate) const JOB_COLUMNS: &str = "id, name, enabled, schedule_kind, at_ms, every_ms, anchor_ms, \
     cron_expr, tz, payload, session_key, missed, delete_after_run, next_run_at_ms, \
     last_run_at_ms, last_status, last_error, running_run_id, created_at_ms, updated_at_ms";

pub(crate) const RUN_COLUMNS: &str = "id, job_id, job_name, trigger, scheduled_at_ms, started_at_ms, \
     finished_at_ms, status, error, output, runner_pid";

impl Jobs<'_> {
    fn err(&self, e: rusqlite::Error) -> JobError {
        JobError::Store(self.db.err(e))
    }

    /// Runs `f` in an immediate write transaction, committing when it returns Ok.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        self.db.transaction(f)
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, JobError>) -> Result<T, JobError> {
        self.db.reading(f)
    }

    /// Adds a job and returns it as stored.
    pub fn add(&self, new: NewJob, now_ms: i64) -> Result<Job, JobError> {
        if new.name.trim().is_empty() {
            return Err(JobError::Invalid("a job needs a name".into()));
        }
        let payload = Value::Object(new.payload.clone()).to_string();
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
                     anchor_ms, cron_expr, tz, payload, session_key, missed, delete_after_run, \
                     next_run_at_ms, created_at_ms, updated_at_ms) \
                     VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14)",
                    params![
                        id,
                        new.name,
                        new.schedule.kind(),
                        at_ms,
                        every_ms,
                        anchor_ms,
                        cron_expr,
                        new.tz,
                        payload,
                        session,
                        new.missed,
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
        self.read(|conn| get_job(conn, id).map_err(|e| self.map_read(e, id)))
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
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
            let mut rows = stmt.query(params).map_err(|e| self.err(e))?;
            let mut jobs = Vec::new();
            while let Some(row) = rows.next().map_err(|e| self.err(e))? {
                let id: String = row.get(0).map_err(|e| self.err(e))?;
                jobs.push(job_from_row(row).map_err(|e| self.map_read(e, &id))?);
            }
            Ok(jobs)
        })
    }

    /// The earliest next run of an enabled job that is not running.
    pub fn next_wake(&self) -> Result<Option<i64>, JobError> {
        self.read(|conn| {
            conn.query_row(
                "SELECT min(next_run_at_ms) FROM jobs WHERE enabled = 1 AND running_run_id IS NULL",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
        })
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
        let output = end.output.as_deref().map(run_excerpt);
        let error = end.error.as_deref().map(run_excerpt);
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
        self.read(|conn| self.runs_in(conn, job_id, limit))
    }

    fn runs_in(
        &self,
        conn: &Connection,
        job_id: &str,
        limit: usize,
    ) -> Result<Vec<JobRun>, JobError> {
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
        self.read(|conn| {
            get_run(conn, run_id).map_err(|e| match e {
                ReadError::Sql(rusqlite::Error::QueryReturnedNoRows) => {
                    JobError::NotFound(format!("run {run_id}"))
                }
                e => self.map_run(e),
            })
        })
    }
}

fn prune_runs(tx: &Transaction<'_>, job_id: &str, now_ms: i64) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM job_runs WHERE job_id = ?1 AND status <> 'running' AND id <= \
         (SELECT id FROM job_runs WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        params![job_id, RUNS_KEPT_PER_JOB],
    )?;
    // Runs of jobs that no longer exist are kept a while, so a one-shot job's result can still
    // be looked up after it deleted itself.
    tx.execute(
        "DELETE FROM job_runs WHERE started_at_ms < ?1 AND status <> 'running' AND \
         job_id NOT IN (SELECT id FROM jobs)",
        [now_ms - ORPHAN_RUNS_KEPT_MS],
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

/// A job read for a copy (see transfer.rs): a row in a form this engram cannot read is an
/// error of the row.
pub(crate) fn job_for_copy(row: &Row<'_>) -> rusqlite::Result<Job> {
    job_from_row(row).map_err(ReadError::into_sqlite)
}

/// A run read for a copy (see transfer.rs).
pub(crate) fn run_for_copy(row: &Row<'_>) -> rusqlite::Result<JobRun> {
    run_from_row(row).map_err(ReadError::into_sqlite)
}

impl ReadError {
    fn into_sqlite(self) -> rusqlite::Error {
        match self {
            ReadError::Sql(e) => e,
            ReadError::Bad(detail) => rusqlite::Error::FromSqlConversionFailure(
                0,
                rusqlite::types::Type::Text,
                Box::new(StoreError::Backend(format!(
                    "a job is stored in a form this engram cannot read: {detail}"
                ))),
            ),
        }
    }
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
    let payload: String = row.get(9)?;
    let payload = match serde_json::from_str(&payload) {
        Ok(Value::Object(payload)) => payload,
        Ok(_) => {
            return Err(ReadError::Bad(
                "the payload is not a JSON object".to_string(),
            ));
        }
        Err(e) => return Err(ReadError::Bad(format!("the payload is not JSON: {e}"))),
    };
    let last_status: Option<String> = row.get(15)?;
    Ok(Job {
        id: row.get(0)?,
        name: row.get(1)?,
        enabled: row.get(2)?,
        schedule,
        tz: row.get(8)?,
        payload,
        session_key: row.get(10)?,
        missed: row.get(11)?,
        delete_after_run: row.get(12)?,
        state: JobState {
            next_run_at_ms: row.get(13)?,
            last_run_at_ms: row.get(14)?,
            last_status: last_status
                .map(|s| {
                    RunStatus::parse(&s)
                        .ok_or_else(|| ReadError::Bad(format!("unknown status '{s}'")))
                })
                .transpose()?,
            last_error: row.get(16)?,
            running_run_id: row.get(17)?,
        },
        created_at_ms: row.get(18)?,
        updated_at_ms: row.get(19)?,
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
    use serde_json::Map;
    use tempfile::TempDir;

    fn store() -> (TempDir, Database) {
        let dir = TempDir::new().unwrap();
        let store = Database::open(dir.path().join("engram.db")).unwrap();
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
            payload: Map::from_iter([("message".to_string(), Value::from(format!("do {name}")))]),
            session_key: None,
            missed: "run_once".into(),
            delete_after_run: false,
            next_run_at_ms: next,
        }
    }

    #[test]
    fn dead_runners_leave_interrupted_runs() {
        let (_dir, store) = store();
        let job = store.jobs().add(new_job("a", 1_000), 0).unwrap();
        store
            .jobs()
            .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 4242)
            .unwrap()
            .unwrap();
        assert!(
            store
                .jobs()
                .recover_interrupted(2_000, |_| true)
                .unwrap()
                .is_empty()
        );
        let stale = store.jobs().recover_interrupted(2_000, |_| false).unwrap();
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].status, RunStatus::Interrupted);
        let job = store.jobs().get(&job.id).unwrap();
        assert_eq!(job.state.running_run_id, None);
        assert_eq!(job.state.next_run_at_ms, Some(1_000), "still due");
        assert_eq!(store.jobs().due(2_000).unwrap().len(), 1);
    }

    #[test]
    fn every_commit_moves_the_data_version() {
        let (dir, store) = store();
        let other = Database::open(dir.path().join("engram.db")).unwrap();
        let before = store.data_version().unwrap();
        other.jobs().add(new_job("theirs", 1), 0).unwrap();
        let after = store.data_version().unwrap();
        assert_ne!(after, before);
        store.jobs().add(new_job("mine", 1), 0).unwrap();
        assert_ne!(store.data_version().unwrap(), after, "own writes count too");
        assert_eq!(store.try_data_version(), store.data_version().ok());
    }
}
