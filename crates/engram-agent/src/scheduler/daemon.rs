//! The gateway: a long-running loop that runs due jobs and the heartbeat.
//!
//! One timer is armed for the earliest of: the next job run, the next heartbeat, and a cheap
//! change check a second away. The change check asks SQLite whether another connection wrote
//! to the database (`PRAGMA data_version`, no disk read), so a job added from the command
//! line is seen within a second while an idle gateway wakes once a second and does nothing
//! else. Runs happen in their own tasks (a few at once), each recorded as started and as
//! finished. On shutdown no new run starts; running turns get a grace period, after which
//! they are recorded as interrupted.
//!
//! Every few seconds (and at the start) the gateway also looks for runs left "running" by a
//! process that died (another gateway killed with -9, possibly on another host, or an
//! `engram cron run` cut off): the store marks them interrupted and frees their jobs, which
//! are then due again, so a surviving gateway takes over without a restart.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::future::Future;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engram_core::store::jobs::JobRun;
use engram_workspace::Workspace;
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::engine::{DueAction, FinishedRun, Scheduler, SchedulerError, due_action};
use super::heartbeat::{
    HEARTBEAT_FILE, HEARTBEAT_HISTORY_LIMIT, HEARTBEAT_SESSION, heartbeat_message,
    tasks as heartbeat_tasks,
};
use super::runner::{Turn, TurnOrigin, TurnRunner};
use super::schedule::next_on_grid;

/// How the gateway behaves.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// How often to look for changes made by other processes.
    pub poll_interval: Duration,
    /// How many turns may run at once.
    pub max_concurrent_runs: usize,
    /// How long running turns may take to finish after a shutdown request.
    pub shutdown_grace: Duration,
    /// How often to look for runs left behind by processes that died.
    pub recovery_interval: Duration,
    /// The heartbeat, if on.
    pub heartbeat: Option<HeartbeatOptions>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            max_concurrent_runs: 4,
            shutdown_grace: Duration::from_secs(10),
            recovery_interval: Duration::from_secs(3),
            heartbeat: None,
        }
    }
}

/// The heartbeat's settings.
#[derive(Debug, Clone)]
pub struct HeartbeatOptions {
    /// Time between heartbeats (the first comes one interval after the start).
    pub every: Duration,
    /// The HEARTBEAT.md to read.
    pub file: PathBuf,
    /// History kept in the heartbeat session.
    pub history_limit: usize,
    /// The workspace `file` must stay inside (checked at every read: a HEARTBEAT.md that is a
    /// symbolic link to somewhere outside is not read).
    pub workspace: Option<Workspace>,
}

impl HeartbeatOptions {
    /// A heartbeat every `every` over `file`, with the default history cap.
    pub fn new(every: Duration, file: impl Into<PathBuf>) -> Self {
        Self {
            every,
            file: file.into(),
            history_limit: HEARTBEAT_HISTORY_LIMIT,
            workspace: None,
        }
    }

    /// The heartbeat of `workspace`: its HEARTBEAT.md, read only while it leads inside.
    pub fn in_workspace(every: Duration, workspace: Workspace) -> Self {
        Self {
            workspace: Some(workspace.clone()),
            ..Self::new(every, workspace.root().join(HEARTBEAT_FILE))
        }
    }
}

/// What the gateway reports as it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayEvent {
    /// The loop is running.
    Started {
        /// Enabled jobs at the start.
        jobs: usize,
        /// Whether the heartbeat is on.
        heartbeat: bool,
    },
    /// A run left behind by a process that died was marked interrupted.
    Recovered(JobRun),
    /// A missed occurrence was skipped (the job's policy).
    Skipped {
        /// The job.
        job_id: String,
        /// Its name.
        job_name: String,
    },
    /// A run started.
    RunStarted(JobRun),
    /// A run finished (ok, error or interrupted), with its whole output.
    RunFinished(FinishedRun),
    /// The heartbeat file had no tasks; no turn ran.
    HeartbeatIdle,
    /// A heartbeat turn finished.
    HeartbeatFinished {
        /// The answer, or why the turn failed.
        result: Result<String, String>,
    },
    /// Something went wrong that the gateway survives (it tries again later).
    Problem(String),
    /// Shutting down; this many turns are still running.
    Stopping {
        /// Turns still running.
        running: usize,
    },
    /// The loop ended.
    Stopped,
}

/// Receives the gateway's events (to log them).
pub type EventLog = Arc<dyn Fn(&GatewayEvent) + Send + Sync>;

/// The daemon.
pub struct Gateway {
    scheduler: Scheduler,
    runner: Arc<dyn TurnRunner>,
    options: GatewayOptions,
    log: EventLog,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("scheduler", &self.scheduler)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

enum Done {
    Job {
        job_id: String,
        result: Result<Option<Box<FinishedRun>>, SchedulerError>,
    },
    Heartbeat,
}

impl Gateway {
    /// A gateway running `scheduler`'s jobs through `runner`, reporting to `log`.
    pub fn new(
        scheduler: Scheduler,
        runner: Arc<dyn TurnRunner>,
        options: GatewayOptions,
        log: EventLog,
    ) -> Self {
        Self {
            scheduler,
            runner,
            options,
            log,
        }
    }

    /// Runs until `shutdown` completes, then stops cleanly. Fails only if the store cannot be
    /// used at the start; later store failures are reported and retried.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), SchedulerError> {
        let started = self.scheduler.now();
        for run in self.scheduler.recover_interrupted().await? {
            (self.log)(&GatewayEvent::Recovered(run));
        }
        let store = self.scheduler.store().clone();
        let mut version = store.change_version().await?;
        (self.log)(&GatewayEvent::Started {
            jobs: store.list(false).await?.len(),
            heartbeat: self.options.heartbeat.is_some(),
        });

        let (cancel_tx, cancel_rx) = watch::channel(false);
        let mut tasks: JoinSet<Done> = JoinSet::new();
        let mut in_flight: HashSet<String> = HashSet::new();
        let mut heartbeat_running = false;
        let heartbeat_every = self
            .options
            .heartbeat
            .as_ref()
            .and_then(|h| SignedDuration::try_from(h.every).ok())
            .filter(|every| !every.is_zero());
        let mut next_heartbeat =
            heartbeat_every.and_then(|every| next_on_grid(started, every, started));
        // Whether the job table must be read again before sleeping.
        let mut look = true;
        let mut recovered_at = tokio::time::Instant::now();
        let mut planned_wake: Option<Timestamp> = None;

        tokio::pin!(shutdown);
        loop {
            let now = self.scheduler.now();
            if planned_wake.is_some_and(|wake| wake <= now) {
                look = true;
            }
            if look {
                self.start_due_jobs(started, &mut tasks, &mut in_flight, &cancel_rx)
                    .await;
                planned_wake = if tasks.len() < self.options.max_concurrent_runs {
                    match self.scheduler.next_wake().await {
                        // A due job that could not start (claimed elsewhere a moment ago)
                        // is looked at again at the next change check, not in a busy loop.
                        Ok(wake) => wake.filter(|wake| *wake > now),
                        Err(e) => {
                            (self.log)(&GatewayEvent::Problem(e.to_string()));
                            None
                        }
                    }
                } else {
                    None // full: a finishing run wakes the loop
                };
                look = false;
            }
            if let (Some(due), Some(every)) = (next_heartbeat, heartbeat_every)
                && due <= now
            {
                if !heartbeat_running {
                    heartbeat_running = true;
                    self.spawn_heartbeat(&mut tasks);
                }
                next_heartbeat = next_on_grid(started, every, now);
            }

            let mut wake = now
                .checked_add(self.options.poll_interval)
                .unwrap_or(Timestamp::MAX);
            for candidate in [planned_wake, next_heartbeat].into_iter().flatten() {
                wake = wake.min(candidate);
            }
            let sleep = wake
                .duration_since(self.scheduler.now())
                .try_into()
                .unwrap_or(Duration::ZERO)
                .min(self.options.poll_interval);

            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    match done {
                        Ok(Done::Job { job_id, result }) => {
                            in_flight.remove(&job_id);
                            match result {
                                Ok(Some(finished)) => {
                                    (self.log)(&GatewayEvent::RunFinished(*finished));
                                }
                                Ok(None) => {}
                                Err(e) => (self.log)(&GatewayEvent::Problem(format!(
                                    "job {job_id}: {e}"
                                ))),
                            }
                        }
                        Ok(Done::Heartbeat) => heartbeat_running = false,
                        Err(e) => (self.log)(&GatewayEvent::Problem(format!(
                            "a run task stopped unexpectedly: {e}"
                        ))),
                    }
                    look = true;
                }
                () = tokio::time::sleep(sleep) => {
                    if recovered_at.elapsed() >= self.options.recovery_interval {
                        recovered_at = tokio::time::Instant::now();
                        look |= self.recover().await;
                    }
                    match store.change_version().await {
                        Ok(v) if v != version => {
                            version = v;
                            look = true;
                        }
                        Ok(_) => {}
                        Err(e) => (self.log)(&GatewayEvent::Problem(e.to_string())),
                    }
                }
            }
        }

        (self.log)(&GatewayEvent::Stopping {
            running: tasks.len(),
        });
        let drained = tokio::time::timeout(self.options.shutdown_grace, async {
            while let Some(done) = tasks.join_next().await {
                self.report(done);
            }
        })
        .await;
        if drained.is_err() {
            // Out of patience: running turns are dropped and recorded as interrupted.
            let _ = cancel_tx.send(true);
            let recorded = tokio::time::timeout(Duration::from_secs(5), async {
                while let Some(done) = tasks.join_next().await {
                    self.report(done);
                }
            })
            .await;
            if recorded.is_err() {
                tasks.abort_all();
                (self.log)(&GatewayEvent::Problem(
                    "some runs could not be recorded before exit; they will be marked \
                     interrupted at the next start"
                        .into(),
                ));
            }
        }
        (self.log)(&GatewayEvent::Stopped);
        Ok(())
    }

    /// Marks runs of processes that died as interrupted; true when there were any (their jobs
    /// are due again). A failure is reported and tried again at the next interval.
    async fn recover(&self) -> bool {
        match self.scheduler.recover_interrupted().await {
            Ok(runs) => {
                for run in &runs {
                    (self.log)(&GatewayEvent::Recovered(run.clone()));
                }
                !runs.is_empty()
            }
            Err(e) => {
                (self.log)(&GatewayEvent::Problem(e.to_string()));
                false
            }
        }
    }

    fn report(&self, done: Result<Done, tokio::task::JoinError>) {
        match done {
            Ok(Done::Job {
                result: Ok(Some(finished)),
                ..
            }) => (self.log)(&GatewayEvent::RunFinished(*finished)),
            Ok(Done::Job {
                job_id,
                result: Err(e),
            }) => (self.log)(&GatewayEvent::Problem(format!("job {job_id}: {e}"))),
            Ok(_) => {}
            Err(e) => (self.log)(&GatewayEvent::Problem(format!(
                "a run task stopped unexpectedly: {e}"
            ))),
        }
    }

    async fn start_due_jobs(
        &self,
        started: Timestamp,
        tasks: &mut JoinSet<Done>,
        in_flight: &mut HashSet<String>,
        cancel: &watch::Receiver<bool>,
    ) {
        let due = match self.scheduler.due().await {
            Ok(due) => due,
            Err(e) => {
                (self.log)(&GatewayEvent::Problem(e.to_string()));
                return;
            }
        };
        for job in due {
            if in_flight.contains(&job.id) {
                continue;
            }
            let trigger = match due_action(&job, started) {
                DueAction::Skip => {
                    match self.scheduler.skip_missed(&job).await {
                        Ok(true) => (self.log)(&GatewayEvent::Skipped {
                            job_id: job.id.clone(),
                            job_name: job.name.clone(),
                        }),
                        Ok(false) => {}
                        Err(e) => {
                            (self.log)(&GatewayEvent::Problem(format!("job {}: {e}", job.id)))
                        }
                    }
                    continue;
                }
                DueAction::Run(trigger) => trigger,
            };
            if tasks.len() >= self.options.max_concurrent_runs {
                break;
            }
            // Claimed here, before the task starts, so the next look cannot start it twice.
            let run = match self.scheduler.start(&job, trigger).await {
                Ok(Some(run)) => run,
                Ok(None) => continue,
                Err(e) => {
                    (self.log)(&GatewayEvent::Problem(format!("job {}: {e}", job.id)));
                    continue;
                }
            };
            (self.log)(&GatewayEvent::RunStarted(run.clone()));
            in_flight.insert(job.id.clone());
            let scheduler = self.scheduler.clone();
            let runner = self.runner.clone();
            let cancel = cancel.clone();
            tasks.spawn(async move {
                let result = scheduler
                    .execute(&job, &run, runner.as_ref(), Some(cancel))
                    .await
                    .map(|finished| Some(Box::new(finished)));
                Done::Job {
                    job_id: job.id,
                    result,
                }
            });
        }
    }

    fn spawn_heartbeat(&self, tasks: &mut JoinSet<Done>) {
        let Some(options) = self.options.heartbeat.clone() else {
            return;
        };
        let runner = self.runner.clone();
        let log = self.log.clone();
        tasks.spawn(async move {
            if let Some(workspace) = &options.workspace
                && let Err(e) = workspace.resolve(&options.file.to_string_lossy())
            {
                log(&GatewayEvent::Problem(format!(
                    "{} is not read: {e}",
                    options.file.display()
                )));
                return Done::Heartbeat;
            }
            let content = match tokio::fs::read_to_string(&options.file).await {
                Ok(content) => content,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => {
                    log(&GatewayEvent::Problem(format!(
                        "cannot read {}: {e}",
                        options.file.display()
                    )));
                    return Done::Heartbeat;
                }
            };
            if heartbeat_tasks(&content).is_empty() {
                log(&GatewayEvent::HeartbeatIdle);
                return Done::Heartbeat;
            }
            let turn = Turn {
                session_key: HEARTBEAT_SESSION.to_string(),
                message: heartbeat_message(&options.file, &content),
                history_limit: Some(options.history_limit),
                origin: TurnOrigin::Heartbeat,
            };
            let result = runner.run_turn(turn).await.map_err(|e| e.to_string());
            log(&GatewayEvent::HeartbeatFinished { result });
            Done::Heartbeat
        });
    }
}

/// Holds the one-gateway-per-home lock until dropped.
#[derive(Debug)]
pub struct GatewayLock {
    _file: File,
    path: PathBuf,
}

/// Why the gateway lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another gateway holds it.
    #[error("another engram gateway is already running for this home{pid} (lock file {path})")]
    Held {
        /// The lock file.
        path: String,
        /// ` (pid N)` when known.
        pid: String,
    },
    /// The lock file cannot be used.
    #[error("cannot use the gateway lock file {path}: {source}")]
    Io {
        /// The lock file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
}

impl GatewayLock {
    /// Takes the lock at `path` (created if needed) without waiting, and writes our pid in it.
    pub fn acquire(path: &Path) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let pid = holder.trim();
                return Err(LockError::Held {
                    path: path.display().to_string(),
                    pid: if pid.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {pid})")
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
