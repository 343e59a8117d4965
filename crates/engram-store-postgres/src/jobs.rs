//! [`JobStore`] on PostgreSQL: jobs shared by every gateway and command on any host.
//!
//! A run is claimed in one transaction that locks the job's row: a scheduled claim skips a row
//! another process has locked (`FOR UPDATE SKIP LOCKED`: that process is claiming it) and
//! succeeds only while the job is enabled, still due at the time the claimant saw and not
//! running, so two gateways never run the same occurrence. A run records its process's runner
//! lock (see notify.rs); [`JobStore::recover_interrupted`] treats a running run whose lock
//! nobody holds as left by a process that died, on whichever host it ran.

use async_trait::async_trait;
use engram_core::StoreError;
use engram_core::store::jobs::{
    AfterRun, IsAlive, Job, JobError, JobRun, JobState, JobStore, NewJob, NextRun,
    ORPHAN_RUNS_KEPT_MS, RUNS_KEPT_PER_JOB, RunEnd, RunStatus, RunTrigger, ScheduleRecord,
    run_excerpt,
};
use serde_json::{Map, Value};
use tokio_postgres::Row;

use crate::PgStore;
use crate::rows::{RawJson, check_storable, clamp_i64};

pub(crate) const JOB_COLUMNS: &str = "id, name, enabled, schedule_kind, at_ms, every_ms, anchor_ms, \
     cron_expr, tz, payload::text, session_key, missed, delete_after_run, next_run_at_ms, \
     last_run_at_ms, last_status, last_error, running_run_id, created_at_ms, updated_at_ms";

pub(crate) const RUN_COLUMNS: &str = "id, job_id, job_name, trigger, scheduled_at_ms, started_at_ms, \
     finished_at_ms, status, error, output, runner_pid";

impl PgStore {
    fn job_err(&self, e: tokio_postgres::Error) -> JobError {
        JobError::Store(self.err(e))
    }

    async fn job_in(
        &self,
        client: &impl tokio_postgres::GenericClient,
        id: &str,
        lock: &str,
    ) -> Result<Option<Job>, JobError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1{lock}");
        match client
            .query_opt(&sql, &[&id])
            .await
            .map_err(|e| self.job_err(e))?
        {
            Some(row) => job_from_row(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn query_jobs(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Job>, JobError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.job_err(e))?;
        client
            .query(&statement, params)
            .await
            .map_err(|e| self.job_err(e))?
            .iter()
            .map(job_from_row)
            .collect()
    }
}

#[async_trait]
impl JobStore for PgStore {
    async fn add(&self, new: NewJob, now_ms: i64) -> Result<Job, JobError> {
        if new.name.trim().is_empty() {
            return Err(JobError::Invalid("a job needs a name".into()));
        }
        for (what, text) in [
            ("name", &new.name),
            ("time zone", &new.tz),
            ("policy", &new.missed),
        ] {
            check_storable(&format!("the job's {what}"), text)?;
        }
        let (at_ms, every_ms, anchor_ms, cron_expr) = match &new.schedule {
            ScheduleRecord::At { at_ms } => (Some(*at_ms), None, None, None),
            ScheduleRecord::Every {
                every_ms,
                anchor_ms,
            } => (None, Some(*every_ms), Some(*anchor_ms), None),
            ScheduleRecord::Cron { expr } => (None, None, None, Some(expr.as_str())),
        };
        let payload = Value::Object(new.payload.clone()).to_string();
        let client = self.client().await?;
        for _ in 0..16 {
            // 32 random bits: a clash is rare, and simply retried.
            let id = format!("{:08x}", uuid::Uuid::now_v7().as_u128() as u32);
            let session = new
                .session_key
                .clone()
                .unwrap_or_else(|| format!("cron:{id}"));
            let row = client
                .query_opt(
                    &format!(
                        "INSERT INTO jobs (id, name, enabled, schedule_kind, at_ms, every_ms, \
                         anchor_ms, cron_expr, tz, payload, session_key, missed, \
                         delete_after_run, next_run_at_ms, created_at_ms, updated_at_ms) \
                         VALUES ($1, $2, true, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                         $14, $14) ON CONFLICT (id) DO NOTHING RETURNING {JOB_COLUMNS}"
                    ),
                    &[
                        &id,
                        &new.name,
                        &new.schedule.kind(),
                        &at_ms,
                        &every_ms,
                        &anchor_ms,
                        &cron_expr,
                        &new.tz,
                        &RawJson(&payload),
                        &session,
                        &new.missed,
                        &new.delete_after_run,
                        &new.next_run_at_ms,
                        &now_ms,
                    ],
                )
                .await
                .map_err(|e| self.job_err(e))?;
            if let Some(row) = row {
                return job_from_row(&row);
            }
        }
        Err(JobError::Invalid(
            "could not find a free job id after 16 attempts".into(),
        ))
    }

    async fn get(&self, id: &str) -> Result<Job, JobError> {
        let client = self.client().await?;
        self.job_in(&**client, id, "")
            .await?
            .ok_or_else(|| JobError::NotFound(id.to_string()))
    }

    async fn list(&self, include_disabled: bool) -> Result<Vec<Job>, JobError> {
        self.query_jobs(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled OR $1 \
                 ORDER BY next_run_at_ms IS NULL, next_run_at_ms, name, id"
            ),
            &[&include_disabled],
        )
        .await
    }

    async fn due(&self, now_ms: i64) -> Result<Vec<Job>, JobError> {
        self.query_jobs(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled AND next_run_at_ms <= $1 \
                 AND running_run_id IS NULL ORDER BY next_run_at_ms, id"
            ),
            &[&now_ms],
        )
        .await
    }

    async fn next_wake(&self) -> Result<Option<i64>, JobError> {
        let client = self.client().await?;
        Ok(client
            .query_one(
                "SELECT min(next_run_at_ms) FROM jobs WHERE enabled AND running_run_id IS NULL",
                &[],
            )
            .await
            .map_err(|e| self.job_err(e))?
            .get(0))
    }

    async fn remove(&self, id: &str) -> Result<Job, JobError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.job_err(e))?;
        let job = self
            .job_in(&*tx, id, " FOR UPDATE")
            .await?
            .ok_or_else(|| JobError::NotFound(id.to_string()))?;
        tx.execute("DELETE FROM jobs WHERE id = $1", &[&id])
            .await
            .map_err(|e| self.job_err(e))?;
        tx.execute("DELETE FROM job_runs WHERE job_id = $1", &[&id])
            .await
            .map_err(|e| self.job_err(e))?;
        tx.commit().await.map_err(|e| self.job_err(e))?;
        Ok(job)
    }

    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        now_ms: i64,
        next_run: NextRun,
    ) -> Result<Job, JobError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.job_err(e))?;
        let job = self
            .job_in(&*tx, id, " FOR UPDATE")
            .await?
            .ok_or_else(|| JobError::NotFound(id.to_string()))?;
        let next = if enabled {
            next_run(&job)?
        } else {
            job.state.next_run_at_ms
        };
        let row = tx
            .query_one(
                &format!(
                    "UPDATE jobs SET enabled = $2, next_run_at_ms = $3, updated_at_ms = $4 \
                     WHERE id = $1 RETURNING {JOB_COLUMNS}"
                ),
                &[&id, &enabled, &next, &now_ms],
            )
            .await
            .map_err(|e| self.job_err(e))?;
        let job = job_from_row(&row)?;
        tx.commit().await.map_err(|e| self.job_err(e))?;
        Ok(job)
    }

    async fn start_run(
        &self,
        job_id: &str,
        trigger: RunTrigger,
        expected_next_run_ms: Option<i64>,
        started_at_ms: i64,
        runner_pid: u32,
    ) -> Result<Option<JobRun>, JobError> {
        // The run is recorded with this process's runner lock, which must be held first.
        if !self
            .notices
            .ready(self.options.connect_timeout + std::time::Duration::from_secs(1))
            .await
        {
            return Err(JobError::Store(StoreError::Unavailable {
                location: self.location.clone(),
                detail: "the connection that marks this process's runs as alive is down".into(),
            }));
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.job_err(e))?;
        // A manual run waits for a job another process is changing; a scheduled claim leaves
        // it to whoever holds it.
        let lock = match trigger {
            RunTrigger::Manual => " FOR UPDATE",
            _ => " FOR UPDATE SKIP LOCKED",
        };
        let Some(job) = self.job_in(&*tx, job_id, lock).await? else {
            return match trigger {
                RunTrigger::Manual => Err(JobError::NotFound(job_id.to_string())),
                _ => Ok(None),
            };
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
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO job_runs (job_id, job_name, trigger, scheduled_at_ms, \
                     started_at_ms, status, runner_pid, runner_lock) \
                     VALUES ($1, $2, $3, $4, $5, 'running', $6, $7) RETURNING {RUN_COLUMNS}"
                ),
                &[
                    &job_id,
                    &job.name,
                    &trigger.as_str(),
                    &scheduled,
                    &started_at_ms,
                    &i64::from(runner_pid),
                    &self.notices.runner_lock(),
                ],
            )
            .await
            .map_err(|e| self.job_err(e))?;
        let run = run_from_row(&row)?;
        tx.execute(
            "UPDATE jobs SET running_run_id = $2 WHERE id = $1",
            &[&job_id, &run.id],
        )
        .await
        .map_err(|e| self.job_err(e))?;
        tx.commit().await.map_err(|e| self.job_err(e))?;
        Ok(Some(run))
    }

    async fn finish_run(
        &self,
        run: &JobRun,
        end: &RunEnd,
        after: AfterRun,
    ) -> Result<(), JobError> {
        let output = end.output.as_deref().map(run_excerpt);
        let error = end.error.as_deref().map(run_excerpt);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.job_err(e))?;
        tx.execute(
            "UPDATE job_runs SET status = $2, error = $3, output = $4, finished_at_ms = $5 \
             WHERE id = $1",
            &[
                &run.id,
                &end.status.as_str(),
                &error,
                &output,
                &end.finished_at_ms,
            ],
        )
        .await
        .map_err(|e| self.job_err(e))?;
        let common = "last_run_at_ms = $2, last_status = $3, last_error = $4, \
                      running_run_id = NULL, updated_at_ms = $5";
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &run.job_id,
            &run.started_at_ms,
            &end.status.as_str(),
            &error,
            &end.finished_at_ms,
        ];
        let changed = match after {
            AfterRun::Reschedule(Some(next)) => {
                tx.execute(
                    &format!("UPDATE jobs SET {common}, next_run_at_ms = $6 WHERE id = $1"),
                    &[params[0], params[1], params[2], params[3], params[4], &next],
                )
                .await
            }
            AfterRun::Reschedule(None) | AfterRun::Disable => {
                tx.execute(
                    &format!(
                        "UPDATE jobs SET {common}, next_run_at_ms = NULL, enabled = false \
                         WHERE id = $1"
                    ),
                    &params,
                )
                .await
            }
            AfterRun::Keep => {
                tx.execute(&format!("UPDATE jobs SET {common} WHERE id = $1"), &params)
                    .await
            }
            AfterRun::Delete => {
                tx.execute("DELETE FROM jobs WHERE id = $1", &[&run.job_id])
                    .await
            }
        };
        changed.map_err(|e| self.job_err(e))?;
        // Old runs go: beyond the newest RUNS_KEPT_PER_JOB of the job, and those of jobs that
        // no longer exist once they are old enough.
        tx.execute(
            "DELETE FROM job_runs WHERE job_id = $1 AND status <> 'running' AND id <= \
             (SELECT id FROM job_runs WHERE job_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
            &[&run.job_id, &RUNS_KEPT_PER_JOB],
        )
        .await
        .map_err(|e| self.job_err(e))?;
        tx.execute(
            "DELETE FROM job_runs r WHERE r.started_at_ms < $1 AND r.status <> 'running' AND \
             NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id)",
            &[&(end.finished_at_ms - ORPHAN_RUNS_KEPT_MS)],
        )
        .await
        .map_err(|e| self.job_err(e))?;
        tx.commit().await.map_err(|e| self.job_err(e))
    }

    async fn skip_missed(
        &self,
        job_id: &str,
        scheduled_at_ms: i64,
        now_ms: i64,
        after: AfterRun,
    ) -> Result<bool, JobError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.job_err(e))?;
        let Some(job) = self.job_in(&*tx, job_id, " FOR UPDATE SKIP LOCKED").await? else {
            return Ok(false);
        };
        if job.state.running_run_id.is_some() || job.state.next_run_at_ms != Some(scheduled_at_ms) {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO job_runs (job_id, job_name, trigger, scheduled_at_ms, started_at_ms, \
             finished_at_ms, status, error, runner_pid) \
             VALUES ($1, $2, 'missed', $3, $4, $4, 'skipped', $5, $6)",
            &[
                &job_id,
                &job.name,
                &scheduled_at_ms,
                &now_ms,
                &"missed while no gateway was running; the job's policy is to skip",
                &i64::from(std::process::id()),
            ],
        )
        .await
        .map_err(|e| self.job_err(e))?;
        let changed = match after {
            AfterRun::Reschedule(Some(next)) => {
                tx.execute(
                    "UPDATE jobs SET next_run_at_ms = $2, updated_at_ms = $3 WHERE id = $1",
                    &[&job_id, &next, &now_ms],
                )
                .await
            }
            AfterRun::Reschedule(None) | AfterRun::Disable => {
                tx.execute(
                    "UPDATE jobs SET next_run_at_ms = NULL, enabled = false, updated_at_ms = $2 \
                     WHERE id = $1",
                    &[&job_id, &now_ms],
                )
                .await
            }
            AfterRun::Delete => {
                tx.execute("DELETE FROM jobs WHERE id = $1", &[&job_id])
                    .await
            }
            AfterRun::Keep => Ok(0),
        };
        changed.map_err(|e| self.job_err(e))?;
        tx.commit().await.map_err(|e| self.job_err(e))?;
        Ok(true)
    }

    async fn recover_interrupted(
        &self,
        now_ms: i64,
        is_alive: IsAlive,
    ) -> Result<Vec<JobRun>, JobError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.job_err(e))?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS}, runner_lock FROM job_runs WHERE status = 'running' \
                     ORDER BY id FOR UPDATE"
                ),
                &[],
            )
            .await
            .map_err(|e| self.job_err(e))?;
        let mut stale = Vec::new();
        for row in &rows {
            let run = run_from_row(row)?;
            let lock: Option<i64> = row.get(11);
            let alive = match lock {
                // The lock is free (this transaction gets it, until it ends): its process died.
                Some(key) => {
                    let free: bool = tx
                        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&key])
                        .await
                        .map_err(|e| self.job_err(e))?
                        .get(0);
                    !free
                }
                // A run recorded without a lock (copied from another engine): its process id
                // is all there is, and it means something on this host only.
                None => run.runner_pid.is_some_and(&is_alive),
            };
            if !alive {
                stale.push(run);
            }
        }
        let reason = "the process running it stopped before it finished";
        for run in &mut stale {
            tx.execute(
                "UPDATE job_runs SET status = 'interrupted', error = $2, finished_at_ms = $3 \
                 WHERE id = $1",
                &[&run.id, &reason, &now_ms],
            )
            .await
            .map_err(|e| self.job_err(e))?;
            tx.execute(
                "UPDATE jobs SET running_run_id = NULL, last_run_at_ms = $3, \
                 last_status = 'interrupted', last_error = $4 \
                 WHERE id = $1 AND running_run_id = $2",
                &[&run.job_id, &run.id, &run.started_at_ms, &reason],
            )
            .await
            .map_err(|e| self.job_err(e))?;
            run.status = RunStatus::Interrupted;
            run.error = Some(reason.to_string());
            run.finished_at_ms = Some(now_ms);
        }
        // A job pointing at a run that is no longer running (cannot normally happen) is freed.
        tx.execute(
            "UPDATE jobs SET running_run_id = NULL WHERE running_run_id IS NOT NULL AND \
             running_run_id NOT IN (SELECT id FROM job_runs WHERE status = 'running')",
            &[],
        )
        .await
        .map_err(|e| self.job_err(e))?;
        tx.commit().await.map_err(|e| self.job_err(e))?;
        Ok(stale)
    }

    async fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, JobError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM job_runs WHERE job_id = $1 ORDER BY id DESC LIMIT $2"
                ),
                &[&job_id, &clamp_i64(limit)],
            )
            .await
            .map_err(|e| self.job_err(e))?;
        if rows.is_empty() {
            let known: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)",
                    &[&job_id],
                )
                .await
                .map_err(|e| self.job_err(e))?
                .get(0);
            if !known {
                return Err(JobError::NotFound(job_id.to_string()));
            }
        }
        rows.iter().map(run_from_row).collect()
    }

    async fn run(&self, run_id: i64) -> Result<JobRun, JobError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE id = $1"),
                &[&run_id],
            )
            .await
            .map_err(|e| self.job_err(e))?
            .ok_or_else(|| JobError::NotFound(format!("run {run_id}")))?;
        run_from_row(&row)
    }

    async fn change_version(&self) -> Result<i64, JobError> {
        Ok(self
            .notices
            .jobs_version(self.options.connect_timeout)
            .await)
    }
}

pub(crate) fn job_from_row(row: &Row) -> Result<Job, JobError> {
    let id: String = row.get(0);
    let bad = |detail: String| JobError::Unreadable {
        id: id.clone(),
        detail,
    };
    let required =
        |value: Option<i64>, what: &str| value.ok_or_else(|| bad(format!("{what} is missing")));
    let kind: &str = row.get(3);
    let schedule = match kind {
        "at" => ScheduleRecord::At {
            at_ms: required(row.get(4), "at_ms")?,
        },
        "every" => ScheduleRecord::Every {
            every_ms: required(row.get(5), "every_ms")?,
            anchor_ms: required(row.get(6), "anchor_ms")?,
        },
        "cron" => ScheduleRecord::Cron {
            expr: row
                .get::<_, Option<String>>(7)
                .ok_or_else(|| bad("cron_expr is missing".into()))?,
        },
        other => return Err(bad(format!("unknown schedule kind '{other}'"))),
    };
    let payload: &str = row.get(9);
    let payload: Map<String, Value> = serde_json::from_str(payload)
        .map_err(|e| bad(format!("its payload is not a JSON object: {e}")))?;
    let last_status: Option<&str> = row.get(15);
    let last_status = last_status
        .map(|s| RunStatus::parse(s).ok_or_else(|| bad(format!("unknown status '{s}'"))))
        .transpose()?;
    Ok(Job {
        id: id.clone(),
        name: row.get(1),
        enabled: row.get(2),
        schedule,
        tz: row.get(8),
        payload,
        session_key: row.get(10),
        missed: row.get(11),
        delete_after_run: row.get(12),
        state: JobState {
            next_run_at_ms: row.get(13),
            last_run_at_ms: row.get(14),
            last_status,
            last_error: row.get(16),
            running_run_id: row.get(17),
        },
        created_at_ms: row.get(18),
        updated_at_ms: row.get(19),
    })
}

pub(crate) fn run_from_row(row: &Row) -> Result<JobRun, JobError> {
    let bad = |detail: String| {
        JobError::Store(StoreError::Backend(format!(
            "a job run is stored in an unreadable form: {detail}"
        )))
    };
    let trigger: &str = row.get(3);
    let status: &str = row.get(7);
    Ok(JobRun {
        id: row.get(0),
        job_id: row.get(1),
        job_name: row.get(2),
        trigger: RunTrigger::parse(trigger)
            .ok_or_else(|| bad(format!("unknown trigger '{trigger}'")))?,
        scheduled_at_ms: row.get(4),
        started_at_ms: row.get(5),
        finished_at_ms: row.get(6),
        status: RunStatus::parse(status)
            .ok_or_else(|| bad(format!("unknown status '{status}'")))?,
        error: row.get(8),
        output: row.get(9),
        runner_pid: row.get(10),
    })
}
