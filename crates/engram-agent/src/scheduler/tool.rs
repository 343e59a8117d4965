//! The agent's `cron` tool: add, list and remove scheduled jobs, by the same rules as
//! `engram cron`.

use super::job::MissedPolicy;
use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use super::engine::Scheduler;
use super::schedule::{JobRequest, ScheduleInput};
use super::view::{job_line, job_view};
use crate::tools::parse_args;

/// The `cron` tool. Build it with [`CronTool::new`] and register it with the agent's
/// [`ToolRegistry`](crate::tools::ToolRegistry).
#[derive(Debug, Clone)]
pub struct CronTool {
    scheduler: Scheduler,
}

impl CronTool {
    /// A tool over this scheduler (its store, clock and default zone).
    pub fn new(scheduler: Scheduler) -> Self {
        Self { scheduler }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CronArgs {
    action: String,
    name: Option<String>,
    message: Option<String>,
    cron: Option<String>,
    every: Option<String>,
    at: Option<String>,
    tz: Option<String>,
    missed: Option<String>,
    id: Option<String>,
    all: Option<bool>,
}

#[async_trait]
impl Tool for CronTool {
    fn name(&self) -> &str {
        "cron"
    }

    fn description(&self) -> &str {
        "Schedule agent turns: action 'add' creates a job that later sends you `message` in \
         its own session, on a schedule given by exactly one of `cron` (5-field cron \
         expression, e.g. '0 9 * * 1-5', with optional `tz` such as 'Europe/Berlin'), `every` \
         (an interval such as '30m' or '1h30m') or `at` (one time: RFC 3339, a local time like \
         '2025-06-01 09:00', or 'in 20m'; the job is deleted after it runs). Action 'list' \
         shows jobs with their next run; 'remove' deletes the job with `id`. Bad schedules \
         are refused with the reason; fix them and try again."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "remove"]},
                "name": {"type": "string", "minLength": 1, "description": "add: a short name for the job."},
                "message": {"type": "string", "minLength": 1, "description": "add: what you will be asked to do when it runs, written as an instruction to yourself."},
                "cron": {"type": "string", "description": "add: a cron expression (minute hour day-of-month month day-of-week)."},
                "every": {"type": "string", "description": "add: an interval, e.g. 45m, 2h, 1d."},
                "at": {"type": "string", "description": "add: a single time, e.g. 2025-06-01T09:00:00+02:00, 2025-06-01 09:00, in 20m."},
                "tz": {"type": "string", "description": "add: IANA time zone for cron and local times (default: the configured zone)."},
                "missed": {"type": "string", "enum": ["run_once", "skip"], "description": "add: what to do about runs missed while the gateway was down (default run_once)."},
                "id": {"type": "string", "description": "remove: the job's id."},
                "all": {"type": "boolean", "description": "list: include disabled jobs."}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: CronArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let scheduler = &self.scheduler;
        match args.action.as_str() {
            "add" => add(scheduler, args).await,
            "list" => list(scheduler, args.all.unwrap_or(false)).await,
            "remove" => remove(scheduler, args.id).await,
            other => {
                ToolOutput::error(format!("unknown action '{other}'; use add, list or remove"))
            }
        }
    }
}

async fn add(scheduler: &Scheduler, args: CronArgs) -> ToolOutput {
    let (Some(name), Some(message)) = (args.name, args.message) else {
        return ToolOutput::error("action 'add' needs `name` and `message`");
    };
    let schedule = match ScheduleInput::one_of(args.cron, args.every, args.at) {
        Ok(schedule) => schedule,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let mut request = JobRequest::new(name, message, schedule);
    request.tz = args.tz;
    request.missed = match args.missed.as_deref() {
        None | Some("run_once") => MissedPolicy::RunOnce,
        Some("skip") => MissedPolicy::Skip,
        Some(other) => {
            return ToolOutput::error(format!(
                "unknown missed policy '{other}'; use run_once or skip"
            ));
        }
    };
    match scheduler.add(&request).await {
        Ok(job) => ToolOutput::ok(format!(
            "Scheduled job {}:\n{}\n{}",
            job.id,
            job_line(&job),
            serde_json::to_string(&job_view(&job)).unwrap_or_default()
        )),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

async fn list(scheduler: &Scheduler, all: bool) -> ToolOutput {
    match scheduler.list(all).await {
        Ok(jobs) if jobs.is_empty() => ToolOutput::ok("No scheduled jobs."),
        Ok(jobs) => ToolOutput::ok(jobs.iter().map(job_line).collect::<Vec<_>>().join("\n")),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

async fn remove(scheduler: &Scheduler, id: Option<String>) -> ToolOutput {
    let Some(id) = id else {
        return ToolOutput::error("action 'remove' needs the job's `id` (see action 'list')");
    };
    match scheduler.remove(id.trim()).await {
        Ok(job) => ToolOutput::ok(format!("Removed job {} ({}).", job.id, job.name)),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}
