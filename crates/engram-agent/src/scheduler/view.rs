//! Jobs and runs as JSON (the reference design's field names) and as lines of text; times are
//! shown in each job's own zone.

use engram_core::store::jobs::{Job, JobRun, ScheduleRecord};

use super::job::JobPayload;
use jiff::tz::TimeZone;
use serde::Serialize;

use super::schedule::{ZonedSchedule, friendly_duration, millis};

/// A job for `--json` output and the agent's tool.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Whether it runs on its own.
    pub enabled: bool,
    /// When it runs.
    pub schedule: ScheduleView,
    /// What it does.
    pub payload: PayloadView,
    /// Its state.
    pub state: StateView,
    /// The session its turns run in.
    pub session_key: String,
    /// `run_once` or `skip`.
    pub missed: String,
    /// Whether a one-shot job is deleted after running.
    pub delete_after_run: bool,
    /// When it was added (ms since the epoch).
    pub created_at_ms: i64,
    /// When it last changed (ms since the epoch).
    pub updated_at_ms: i64,
}

/// A schedule, tagged by kind.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScheduleView {
    /// Once.
    At {
        /// The instant (ms).
        at_ms: i64,
        /// The instant in the job's zone.
        at: String,
        /// The zone.
        tz: String,
    },
    /// On an interval grid.
    Every {
        /// The interval (ms).
        every_ms: i64,
        /// The interval as people write it.
        every: String,
        /// A grid point (ms).
        anchor_ms: i64,
        /// The zone times are shown in.
        tz: String,
    },
    /// A cron expression.
    Cron {
        /// The expression.
        expr: String,
        /// Its zone.
        tz: String,
    },
}

/// The payload: an agent turn.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadView {
    /// Always `agent_turn`.
    pub kind: &'static str,
    /// The message.
    pub message: String,
    /// Whether the answer is delivered.
    pub deliver: bool,
    /// Delivery channel.
    pub channel: Option<String>,
    /// Delivery recipient.
    pub to: Option<String>,
}

/// A job's state.
#[derive(Debug, Clone, Serialize)]
pub struct StateView {
    /// Next run (ms), if any.
    pub next_run_at_ms: Option<i64>,
    /// Next run in the job's zone (RFC 9557, e.g. `2025-06-02T09:00:00+02:00[Europe/Berlin]`).
    pub next_run_at: Option<String>,
    /// When the last run started (ms).
    pub last_run_at_ms: Option<i64>,
    /// `ok`, `error`, `interrupted` or `skipped`.
    pub last_status: Option<&'static str>,
    /// The last run's error.
    pub last_error: Option<String>,
    /// Whether a run is in progress.
    pub running: bool,
}

/// A run for `--json` output.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    /// Run number.
    pub id: i64,
    /// The job.
    pub job_id: String,
    /// The job's name then.
    pub job_name: String,
    /// `schedule`, `missed` or `manual`.
    pub trigger: &'static str,
    /// The scheduled time it ran for (ms).
    pub scheduled_at_ms: Option<i64>,
    /// Start (ms).
    pub started_at_ms: i64,
    /// Start in the job's zone, if known.
    pub started_at: String,
    /// End (ms).
    pub finished_at_ms: Option<i64>,
    /// Duration (ms).
    pub duration_ms: Option<i64>,
    /// `running`, `ok`, `error`, `interrupted` or `skipped`.
    pub status: &'static str,
    /// Error.
    pub error: Option<String>,
    /// The start of the output.
    pub output: Option<String>,
}

fn zone(name: &str) -> TimeZone {
    TimeZone::get(name).unwrap_or(TimeZone::UTC)
}

/// The JSON view of a job.
pub fn job_view(job: &Job) -> JobView {
    let tz = zone(&job.tz);
    // A payload this build cannot read is shown as the reason, not hidden.
    let payload = JobPayload::of(job).unwrap_or_else(|e| JobPayload {
        message: format!("({e})"),
        ..JobPayload::default()
    });
    let schedule = match &job.schedule {
        ScheduleRecord::At { at_ms } => ScheduleView::At {
            at_ms: *at_ms,
            at: millis(*at_ms).to_zoned(tz.clone()).to_string(),
            tz: job.tz.clone(),
        },
        ScheduleRecord::Every {
            every_ms,
            anchor_ms,
        } => ScheduleView::Every {
            every_ms: *every_ms,
            every: friendly_duration(jiff::SignedDuration::from_millis(*every_ms)),
            anchor_ms: *anchor_ms,
            tz: job.tz.clone(),
        },
        ScheduleRecord::Cron { expr } => ScheduleView::Cron {
            expr: expr.clone(),
            tz: job.tz.clone(),
        },
    };
    JobView {
        id: job.id.clone(),
        name: job.name.clone(),
        enabled: job.enabled,
        schedule,
        payload: PayloadView {
            kind: "agent_turn",
            message: payload.message,
            deliver: payload.deliver,
            channel: payload.channel,
            to: payload.to,
        },
        state: StateView {
            next_run_at_ms: job.state.next_run_at_ms,
            next_run_at: job
                .state
                .next_run_at_ms
                .map(|ms| millis(ms).to_zoned(tz.clone()).to_string()),
            last_run_at_ms: job.state.last_run_at_ms,
            last_status: job.state.last_status.map(|s| s.as_str()),
            last_error: job.state.last_error.clone(),
            running: job.state.running_run_id.is_some(),
        },
        session_key: job.session_key.clone(),
        missed: job.missed.clone(),
        delete_after_run: job.delete_after_run,
        created_at_ms: job.created_at_ms,
        updated_at_ms: job.updated_at_ms,
    }
}

/// The JSON view of a run; `tz` is the job's zone when known.
pub fn run_view(run: &JobRun, tz: Option<&str>) -> RunView {
    RunView {
        id: run.id,
        job_id: run.job_id.clone(),
        job_name: run.job_name.clone(),
        trigger: run.trigger.as_str(),
        scheduled_at_ms: run.scheduled_at_ms,
        started_at_ms: run.started_at_ms,
        started_at: millis(run.started_at_ms)
            .to_zoned(zone(tz.unwrap_or("UTC")))
            .to_string(),
        finished_at_ms: run.finished_at_ms,
        duration_ms: run.duration_ms(),
        status: run.status.as_str(),
        error: run.error.clone(),
        output: run.output.clone(),
    }
}

/// A time in a zone to the minute with the zone's abbreviation: `2025-06-02 09:00 CEST`.
pub fn local(ms: i64, tz: &str) -> String {
    millis(ms)
        .to_zoned(zone(tz))
        .strftime("%Y-%m-%d %H:%M %Z")
        .to_string()
}

/// One line per job for listings.
pub fn job_line(job: &Job) -> String {
    let schedule = match ZonedSchedule::of_job(job) {
        Ok(zoned) => zoned.describe(),
        Err(e) => format!("unreadable schedule ({e})"),
    };
    let next = match (job.enabled, job.state.next_run_at_ms) {
        (false, _) => "disabled".to_string(),
        (true, Some(ms)) => format!("next {}", local(ms, &job.tz)),
        (true, None) => "no next run".to_string(),
    };
    let last = match (job.state.running_run_id, job.state.last_status) {
        (Some(_), _) => "  [running]".to_string(),
        (None, Some(status)) => format!("  last {}", status.as_str()),
        (None, None) => String::new(),
    };
    format!(
        "{}  {}  {}  {}{}",
        job.id,
        one_line(&job.name),
        schedule,
        next,
        last
    )
}

/// One line per run for histories.
pub fn run_line(run: &JobRun, tz: &str) -> String {
    let duration = run
        .duration_ms()
        .map(|ms| format!(" in {:.1}s", ms as f64 / 1000.0))
        .unwrap_or_default();
    let detail = match (&run.error, &run.output) {
        (Some(error), _) => format!(": {}", one_line(error)),
        (None, Some(output)) => format!(": {}", one_line(output)),
        _ => String::new(),
    };
    let mut detail: String = detail.chars().take(160).collect();
    if detail.chars().count() == 160 {
        detail.push('…');
    }
    format!(
        "#{}  {}  {:<11} {:<8}{}{}",
        run.id,
        local(run.started_at_ms, tz),
        run.status.as_str(),
        run.trigger.as_str(),
        duration,
        detail
    )
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
