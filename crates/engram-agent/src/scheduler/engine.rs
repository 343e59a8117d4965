//! [`Scheduler`]: jobs in the store, checked schedules, and runs recorded from start to finish.
//!
//! Everything that changes a job goes through here, so the command line, the agent's `cron`
//! tool and the gateway apply the same rules. Time comes from an injected [`Clock`], so tests
//! can travel.

use std::sync::Arc;

use engram_core::Clock;
use engram_core::store::jobs::{
    AfterRun, Job, JobError, JobRun, JobStore, RunEnd, RunStatus, RunTrigger,
};
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

use super::job::{JobPayload, MissedPolicy};
use super::runner::{Turn, TurnError, TurnOrigin, TurnRunner};
use super::schedule::{
    JobRequest, Schedule, ScheduleError, ZonedSchedule, after_scheduled_run, millis,
};

/// A run that was due longer ago than this when the gateway started was missed (the gateway
/// was not running); its job's missed-run policy decides. Runs due more recently just run.
pub const MISSED_GRACE: SignedDuration = SignedDuration::from_secs(60);

/// Why a scheduler operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The schedule was refused.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// The job store failed or has no such job.
    #[error(transparent)]
    Job(#[from] JobError),
}

/// What to do with a due job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueAction {
    /// Run it.
    Run(RunTrigger),
    /// Skip the missed occurrence (the job's policy), moving on to its next run.
    Skip,
}

/// Decides about a due job, given when the gateway started: an occurrence due more than
/// [`MISSED_GRACE`] before the start was missed, and the job's policy applies.
pub fn due_action(job: &Job, gateway_started: Timestamp) -> DueAction {
    let missed = job.state.next_run_at_ms.is_some_and(|due| {
        due < gateway_started.as_millisecond() - MISSED_GRACE.as_millis() as i64
    });
    // A policy this build cannot read falls back to the default.
    match (missed, MissedPolicy::of(job).unwrap_or_default()) {
        (false, _) => DueAction::Run(RunTrigger::Schedule),
        (true, MissedPolicy::RunOnce) => DueAction::Run(RunTrigger::Missed),
        (true, MissedPolicy::Skip) => DueAction::Skip,
    }
}

/// A finished run, with the whole output (the store keeps only its start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    /// The run as recorded.
    pub run: JobRun,
    /// Everything the agent answered.
    pub output: Option<String>,
}

/// The jobs, their schedules and their runs.
#[derive(Clone)]
pub struct Scheduler {
    store: Arc<dyn JobStore>,
    clock: Arc<dyn Clock>,
    default_zone: Option<String>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("default_zone", &self.default_zone)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler over `store`, telling time by `clock`; schedules without a zone use
    /// `default_zone` (from `[scheduler] timezone`), else the system's zone.
    pub fn new(
        store: Arc<dyn JobStore>,
        clock: Arc<dyn Clock>,
        default_zone: Option<String>,
    ) -> Self {
        Self {
            store,
            clock,
            default_zone,
        }
    }

    /// The job store.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The zone used when a job names none (`None`: the system's).
    pub fn default_zone(&self) -> Option<&str> {
        self.default_zone.as_deref()
    }

    /// Now, by the scheduler's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn now_ms(&self) -> i64 {
        self.now().as_millisecond()
    }

    /// Checks a request and adds the job.
    pub async fn add(&self, request: &JobRequest) -> Result<Job, SchedulerError> {
        let now = self.now();
        let (new, _) = request.prepare(now, self.default_zone.as_deref())?;
        Ok(self.store.add(new, now.as_millisecond()).await?)
    }

    /// One job.
    pub async fn get(&self, id: &str) -> Result<Job, SchedulerError> {
        Ok(self.store.get(id).await?)
    }

    /// Jobs, soonest first (disabled ones too if `all`).
    pub async fn list(&self, all: bool) -> Result<Vec<Job>, SchedulerError> {
        Ok(self.store.list(all).await?)
    }

    /// Removes a job and its history.
    pub async fn remove(&self, id: &str) -> Result<Job, SchedulerError> {
        Ok(self.store.remove(id).await?)
    }

    /// Enables a job (computing its next run from now) or disables it.
    pub async fn set_enabled(&self, id: &str, enabled: bool) -> Result<Job, SchedulerError> {
        let now = self.now();
        let next_run = Box::new(move |job: &Job| {
            ZonedSchedule::of_job(job)
                .and_then(|zoned| zoned.first_run(now))
                .map(|next| Some(next.as_millisecond()))
                .map_err(|e| JobError::Invalid(e.to_string()))
        });
        Ok(self
            .store
            .set_enabled(id, enabled, now.as_millisecond(), next_run)
            .await?)
    }

    /// A job's runs, newest first.
    pub async fn runs(&self, id: &str, limit: usize) -> Result<Vec<JobRun>, SchedulerError> {
        Ok(self.store.runs(id, limit).await?)
    }

    /// Marks runs left behind by processes that died as interrupted, and returns them. Their
    /// jobs are due again, so the missed-run policy applies when the gateway looks at them.
    pub async fn recover_interrupted(&self) -> Result<Vec<JobRun>, SchedulerError> {
        Ok(self
            .store
            .recover_interrupted(self.now_ms(), Box::new(process_is_alive))
            .await?)
    }

    /// Enabled jobs due now that are not running.
    pub async fn due(&self) -> Result<Vec<Job>, SchedulerError> {
        Ok(self.store.due(self.now_ms()).await?)
    }

    /// The earliest next run of an enabled job that is not running.
    pub async fn next_wake(&self) -> Result<Option<Timestamp>, SchedulerError> {
        Ok(self.store.next_wake().await?.map(millis))
    }

    /// Skips a missed occurrence of `job` (recorded in its history) and moves it to its next
    /// run; one-shot jobs end as after a run. False if the job changed meanwhile.
    pub async fn skip_missed(&self, job: &Job) -> Result<bool, SchedulerError> {
        let Some(due) = job.state.next_run_at_ms else {
            return Ok(false);
        };
        let now = self.now();
        let after = after_scheduled_run(job, now);
        Ok(self
            .store
            .skip_missed(&job.id, due, now.as_millisecond(), after)
            .await?)
    }

    /// Claims and records the start of a run of `job`. `None` when the occurrence was taken by
    /// another process or the job changed since it was read. A manual run fails if the job is
    /// already running.
    pub async fn start(
        &self,
        job: &Job,
        trigger: RunTrigger,
    ) -> Result<Option<JobRun>, SchedulerError> {
        let expected = match trigger {
            RunTrigger::Manual => None,
            _ => job.state.next_run_at_ms,
        };
        Ok(self
            .store
            .start_run(
                &job.id,
                trigger,
                expected,
                self.now_ms(),
                std::process::id(),
            )
            .await?)
    }

    /// Runs a started run's turn and records how it ended and what becomes of the job. If
    /// `cancel` turns true first, the turn is dropped and the run recorded as interrupted.
    pub async fn execute(
        &self,
        job: &Job,
        run: &JobRun,
        runner: &dyn TurnRunner,
        cancel: Option<watch::Receiver<bool>>,
    ) -> Result<FinishedRun, SchedulerError> {
        let outcome = match JobPayload::of(job) {
            // A payload this build cannot read fails the run, and says why.
            Err(e) => Some(Err(TurnError(e.to_string()))),
            Ok(payload) => {
                let turn = Turn {
                    session_key: job.session_key.clone(),
                    message: payload.message,
                    history_limit: None,
                    origin: TurnOrigin::Job {
                        id: job.id.clone(),
                        name: job.name.clone(),
                    },
                };
                match cancel {
                    Some(mut cancel) => tokio::select! {
                        result = runner.run_turn(turn) => Some(result),
                        _ = cancel.wait_for(|stop| *stop) => None,
                    },
                    None => Some(runner.run_turn(turn).await),
                }
            }
        };
        let finished = self.now();
        let (status, output, error) = match outcome {
            Some(Ok(answer)) => (RunStatus::Ok, Some(answer), None),
            Some(Err(e)) => (RunStatus::Error, None, Some(e.to_string())),
            None => (
                RunStatus::Interrupted,
                None,
                Some("the gateway shut down before the turn finished".to_string()),
            ),
        };
        let after = match (run.trigger, status) {
            (RunTrigger::Manual, _) => AfterRun::Keep,
            // An interrupted scheduled run stays due, so the missed-run policy decides at the
            // next start.
            (_, RunStatus::Interrupted) => AfterRun::Keep,
            _ => after_scheduled_run(job, finished),
        };
        let end = RunEnd {
            status,
            error,
            output: output.clone(),
            finished_at_ms: finished.as_millisecond(),
        };
        self.store.finish_run(run, &end, after).await?;
        let recorded = match self.store.run(run.id).await {
            Ok(recorded) => recorded,
            // Removed with its job meanwhile: report what was recorded.
            Err(_) => JobRun {
                finished_at_ms: Some(end.finished_at_ms),
                status: end.status,
                error: end.error.clone(),
                output: output.clone(),
                ..run.clone()
            },
        };
        Ok(FinishedRun {
            run: recorded,
            output,
        })
    }

    /// Runs a job now (`engram cron run`), leaving its schedule alone.
    pub async fn run_now(
        &self,
        id: &str,
        runner: &dyn TurnRunner,
    ) -> Result<FinishedRun, SchedulerError> {
        let job = self.store.get(id).await?;
        let run = self
            .start(&job, RunTrigger::Manual)
            .await?
            .ok_or_else(|| JobError::AlreadyRunning(id.to_string()))?;
        self.execute(&job, &run, runner, None).await
    }

    /// Handles every job due now, one after another: missed occurrences are skipped or run
    /// per policy (relative to `gateway_started`), the rest run. The gateway does the same
    /// concurrently; this form is for tests and one-shot use.
    pub async fn run_due(
        &self,
        runner: &dyn TurnRunner,
        gateway_started: Timestamp,
    ) -> Result<Vec<FinishedRun>, SchedulerError> {
        let mut finished = Vec::new();
        for job in self.due().await? {
            match due_action(&job, gateway_started) {
                DueAction::Skip => {
                    self.skip_missed(&job).await?;
                }
                DueAction::Run(trigger) => {
                    if let Some(run) = self.start(&job, trigger).await? {
                        finished.push(self.execute(&job, &run, runner, None).await?);
                    }
                }
            }
        }
        Ok(finished)
    }

    /// How a job's schedule reads, with its next run in its zone.
    pub fn describe(&self, job: &Job) -> String {
        match ZonedSchedule::of_job(job) {
            Ok(zoned) => zoned.describe(),
            Err(e) => format!("unreadable schedule ({e})"),
        }
    }
}

/// Whether a process id still runs (a run recorded by it may still be in progress).
pub fn process_is_alive(pid: i64) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // It exists but belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// True for a one-shot schedule.
pub fn is_one_shot(job: &Job) -> bool {
    matches!(
        ZonedSchedule::of_job(job).map(|z| z.schedule),
        Ok(Schedule::At(_))
    )
}
