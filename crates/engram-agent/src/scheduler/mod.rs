//! The scheduler: jobs that run agent turns at set times, the heartbeat, and the gateway that
//! runs both.
//!
//! - [`cron`]: cron expressions (validated when added; DST rules in its documentation).
//! - [`schedule`]: `at` / `every` / `cron` schedules, time zones, and [`JobRequest`], the one
//!   way a job is described by the command line and by the agent's tool.
//! - [`job`]: what a job does ([`JobPayload`]) and its [`MissedPolicy`], as the store keeps them.
//! - [`engine`]: [`Scheduler`], over any job store ([`engram_core::store::jobs::JobStore`])
//!   with an injected clock.
//! - [`daemon`]: [`Gateway`], the long-running loop.
//! - [`heartbeat`]: when HEARTBEAT.md has tasks.
//! - [`runner`]: [`TurnRunner`], how a turn is run without knowing the agent.
//! - [`tool`]: the agent's `cron` tool.
//! - [`view`]: jobs and runs as JSON and text.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use engram_agent::scheduler::*;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! # let jobs: Arc<dyn engram_core::store::jobs::JobStore> = unimplemented!();
//! // `jobs`: the backend's job store, opened once by the program.
//! let scheduler = Scheduler::new(jobs, Arc::new(engram_core::SystemClock), None);
//! let request = JobRequest::new("standup", "Summarise yesterday's commits",
//!     ScheduleInput::Cron("0 9 * * mon-fri".into()));
//! let job = scheduler.add(&request).await?;
//! let gateway = Gateway::new(scheduler, Arc::new(EchoRunner), GatewayOptions::default(),
//!     Arc::new(|event: &GatewayEvent| eprintln!("{event:?}")));
//! gateway.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

pub mod cron;
pub mod daemon;
pub mod engine;
pub mod heartbeat;
pub mod job;
pub mod runner;
pub mod schedule;
pub mod tool;
pub mod view;

use serde::Deserialize;

pub use cron::{CronError, CronExpr};
pub use daemon::{
    EventLog, Gateway, GatewayEvent, GatewayLock, GatewayOptions, HeartbeatOptions, LockError,
};
pub use engine::{DueAction, FinishedRun, MISSED_GRACE, Scheduler, SchedulerError, due_action};
pub use heartbeat::{
    DEFAULT_HEARTBEAT_MINUTES, HEARTBEAT_FILE, HEARTBEAT_HISTORY_LIMIT, HEARTBEAT_SESSION,
};
pub use job::{JobPayload, MissedPolicy};
pub use runner::{EchoRunner, Turn, TurnError, TurnOrigin, TurnRunner};
pub use schedule::{JobRequest, Schedule, ScheduleError, ScheduleInput, ZonedSchedule};
pub use tool::CronTool;

/// The `[scheduler]` section of config.toml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// IANA zone for schedules that name none (default: the system's zone).
    pub timezone: Option<String>,
    /// Minutes between heartbeats; 0 turns the heartbeat off.
    pub heartbeat_minutes: u64,
    /// How many turns the gateway runs at once.
    pub max_concurrent_runs: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            timezone: None,
            heartbeat_minutes: DEFAULT_HEARTBEAT_MINUTES,
            max_concurrent_runs: 4,
        }
    }
}
