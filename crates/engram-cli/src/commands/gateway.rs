//! `engram gateway`: the daemon that runs scheduled jobs and the heartbeat.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use engram_agent::scheduler::view::run_view;
use engram_agent::scheduler::{
    EchoRunner, EventLog, Gateway, GatewayEvent, GatewayLock, GatewayOptions, HEARTBEAT_FILE,
    HeartbeatOptions, TurnRunner,
};
use engram_agent::scheduler::{Turn, TurnError};
use engram_agent::tools::ToolRegistry;
use engram_agent::workspace::DEFAULT_WORKSPACE_DIR;
use engram_agent::{Agent, AgentEvent, CancelToken, RunEnd, RunState, StoredRunState, TurnHooks};
use engram_core::{Message, SystemClock};
use engram_memory::manager::MemoryManager;
use engram_memory::session::{SessionKey, SessionStore};
use engram_memory::working::{ModelSummarizer, WorkingConfig};
use jiff::Timestamp;
use serde_json::json;

use super::agent_common::{AgentArgs, memory_block, prepare_with_memory};
use super::scheduler::{open_scheduler, scheduler_config};
use crate::config::Config;
use crate::context::Context;
use crate::exit::{Failure, Status};

/// The environment variable that swaps the agent for a stand-in (a test hook): `echo` answers
/// every turn with `echo: <message>` (see `EchoRunner` for its `sleep:`/`fail:` prefixes).
pub const RUNNER_ENV: &str = "ENGRAM_GATEWAY_RUNNER";

/// The lock file that keeps one gateway per home.
const LOCK_FILE: &str = "gateway.lock";

/// `engram gateway`.
#[derive(Debug, Args)]
#[command(after_help = "\
Runs until SIGTERM or Ctrl-C; a turn still running then gets --shutdown-grace seconds to finish,
after which it is recorded as interrupted. One gateway runs per ENGRAM_HOME. Jobs added, removed, enabled
or disabled with `engram cron` are picked up within a second. Each run is logged with its
output (JSON lines with --json); its history is in `engram cron runs ID`.

Runs missed while no gateway was running (more than a minute late at start) are run once or
skipped, as each job's --missed policy says; a run cut off by a crash counts as missed.")]
pub struct GatewayArgs {
    /// The agent's workspace (default: ENGRAM_HOME/workspace); HEARTBEAT.md is read from it.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Time between heartbeats, e.g. 30m or 2h; 0 turns the heartbeat off (default:
    /// [scheduler] heartbeat_minutes, else 30 minutes).
    #[arg(long, value_name = "DUR")]
    pub heartbeat: Option<String>,
    /// Seconds a running turn may take to finish after SIGTERM before it is recorded as
    /// interrupted.
    #[arg(long, value_name = "SECS", default_value = "10")]
    pub shutdown_grace: u64,
}

/// The workspace: `--workspace`, else `[agent] workspace` (relative to ENGRAM_HOME), else
/// ENGRAM_HOME/workspace.
pub fn workspace_dir(ctx: &Context, flag: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(dir);
    }
    let config = Config::load(ctx.home.dir())?;
    Ok(match config.agent.workspace {
        Some(dir) => ctx.home.dir().join(dir),
        None => ctx.home.dir().join(DEFAULT_WORKSPACE_DIR),
    })
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The runner scheduled turns go through: the agent as `engram run` builds it (model from
/// config.toml and the environment, workspace, tools), or the echo stand-in when
/// `ENGRAM_GATEWAY_RUNNER=echo` (a test hook). Fails with what to set when no model is
/// configured.
pub fn turn_runner(ctx: &Context, workspace: Option<PathBuf>) -> Result<Arc<dyn TurnRunner>> {
    match std::env::var(RUNNER_ENV).ok().as_deref() {
        Some("echo") => return Ok(Arc::new(EchoRunner)),
        Some(other) if !other.is_empty() => {
            return Err(Failure {
                status: Status::Usage,
                message: format!(
                    "{RUNNER_ENV}={other} is not a runner engram knows (only 'echo', for tests)"
                ),
            }
            .into());
        }
        _ => {}
    }
    let args = AgentArgs {
        workspace,
        max_steps: None,
        user: None,
    };
    // The memory block before each turn, as in `engram chat`; scheduled turns are the
    // agent talking to itself, so nothing is extracted from them.
    let (setup, memory) = prepare_with_memory(ctx, &args, SessionKey::default_cli())?;
    let agent = setup
        .agent
        .with_hooks(Arc::new(ContextHooks(memory.manager.clone())));
    Ok(Arc::new(AgentRunner {
        agent,
        tools: setup.tools,
        sessions: ctx.sessions()?,
        user: setup.user,
        summarizer: Arc::new(ModelSummarizer::new(memory.model.clone())),
        working: memory.working,
    }))
}

/// The memory block before each scheduled turn; no extraction after it.
struct ContextHooks(Arc<MemoryManager>);

#[async_trait::async_trait]
impl TurnHooks for ContextHooks {
    async fn context(&self, input: &str, _state: &dyn RunState) -> Vec<Message> {
        memory_block(&self.0, input).await
    }
}

/// Scheduled turns through the agent, each in its job's session (`cron:<id>`, or
/// `gateway:heartbeat`), kept in a session file like a chat's, with working memory on the
/// configured budget.
struct AgentRunner {
    agent: Agent,
    tools: Arc<ToolRegistry>,
    sessions: SessionStore,
    user: String,
    summarizer: Arc<ModelSummarizer>,
    working: WorkingConfig,
}

impl AgentRunner {
    /// The turn's session; when it holds more than `history_limit` messages, the file is set
    /// aside (replacing the one set aside before) and the session starts afresh, so a session
    /// fed forever (the heartbeat) keeps at most two files' worth.
    async fn open_state(&self, turn: &Turn) -> Result<StoredRunState, TurnError> {
        let key = session_key_for(&turn.session_key)?;
        if let Some(limit) = turn.history_limit {
            let over = self
                .sessions
                .load(&key)
                .await
                .map_err(|e| TurnError(e.to_string()))?
                .is_some_and(|log| log.messages().len() > limit);
            if over {
                self.sessions
                    .set_aside(&key)
                    .await
                    .map_err(|e| TurnError(format!("cannot set the session {key} aside: {e}")))?;
            }
        }
        let mut metadata = serde_json::Map::new();
        metadata.insert("user".into(), self.user.clone().into());
        let session = self.sessions.session(key, metadata);
        let state = StoredRunState::open(session, self.tools.clone(), Arc::new(SystemClock))
            .await
            .map_err(|e| TurnError(e.to_string()))?
            .with_summarizer(self.summarizer.clone(), self.working);
        for warning in state.warnings() {
            eprintln!("warning: {warning}");
        }
        Ok(state)
    }
}

/// The session key of a scheduled turn: `cron:<id>` as it is; a bare name (the heartbeat's)
/// goes under the `gateway` channel.
fn session_key_for(name: &str) -> Result<SessionKey, TurnError> {
    let text = if name.contains(':') {
        name.to_string()
    } else {
        format!("gateway:{name}")
    };
    SessionKey::parse(&text).map_err(|e| TurnError(e.to_string()))
}

// Written out rather than through #[async_trait] to keep the trait's lifetimes visible.
impl TurnRunner for AgentRunner {
    fn run_turn<'a, 'b>(
        &'a self,
        turn: Turn,
    ) -> Pin<Box<dyn Future<Output = Result<String, TurnError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let mut state = self.open_state(&turn).await?;
            let cancel = CancelToken::new();
            let mut sink = |_event: AgentEvent<'_>| {};
            let outcome = self
                .agent
                .run_turn(&mut state, &turn.message, &cancel, &mut sink)
                .await;
            match (&outcome.end, outcome.answer()) {
                (RunEnd::Answered(_), Some(answer)) => Ok(answer.to_string()),
                _ => Err(TurnError(outcome.end.error_message().unwrap_or_else(
                    || "the turn ended without an answer".to_string(),
                ))),
            }
        })
    }
}

/// Runs `engram gateway`.
pub fn run(ctx: &Context, args: GatewayArgs) -> Result<Status> {
    let (gateway, lock) = build(ctx, args)?;
    ctx.block_on(async {
        // Handlers go in before the gateway logs anything, so a SIGTERM sent as soon as it is
        // seen running is caught rather than killing it outright.
        let shutdown = shutdown_signal()?;
        gateway.run(shutdown).await.map_err(anyhow::Error::from)
    })??;
    drop(lock);
    Ok(Status::Success)
}

/// The gateway `args` describe, ready to run, and the lock that keeps it the only one in
/// this home (hold it while the gateway runs). `engram serve --gateway` runs it too.
pub fn build(ctx: &Context, args: GatewayArgs) -> Result<(Gateway, GatewayLock)> {
    let scheduler = open_scheduler(ctx)?;
    let config = scheduler_config(ctx)?;
    let runner = turn_runner(ctx, args.workspace.clone())?;
    let lock = GatewayLock::acquire(&ctx.home.dir().join(LOCK_FILE)).map_err(|e| Failure {
        status: Status::Conflict,
        message: e.to_string(),
    })?;
    let workspace = workspace_dir(ctx, args.workspace)?;
    let every = match &args.heartbeat {
        Some(text) => engram_core::time::parse_duration(text)
            .ok()
            .and_then(|d| Duration::try_from(d).ok())
            .ok_or_else(|| Failure {
                status: Status::Usage,
                message: format!(
                    "--heartbeat: cannot read '{text}' as a duration (try 30m, 1h or 0)"
                ),
            })?,
        None => Duration::from_secs(config.heartbeat_minutes.saturating_mul(60)),
    };
    let heartbeat = if every.is_zero() {
        None
    } else if workspace.is_dir() {
        // HEARTBEAT.md is read only while it leads inside the workspace.
        let confined = engram_agent::tools::Workspace::confined(&workspace)
            .with_context(|| format!("cannot use the workspace {}", workspace.display()))?;
        Some(HeartbeatOptions::in_workspace(every, confined))
    } else {
        // No workspace yet: no HEARTBEAT.md either, so every heartbeat is idle.
        Some(HeartbeatOptions::new(every, workspace.join(HEARTBEAT_FILE)))
    };
    let options = GatewayOptions {
        max_concurrent_runs: config.max_concurrent_runs.max(1),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        heartbeat,
        ..GatewayOptions::default()
    };
    let log: EventLog = if ctx.json {
        Arc::new(log_json)
    } else {
        Arc::new(log_text)
    };
    Ok((Gateway::new(scheduler, runner, options, log), lock))
}

/// Installs SIGTERM and SIGINT handlers now and returns a future that completes on either.
fn shutdown_signal() -> Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Now, in the system's zone, to the second.
fn now() -> String {
    Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::system())
        .strftime("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

fn log_text(event: &GatewayEvent) {
    let mut out = std::io::stdout().lock();
    let line = match event {
        GatewayEvent::Started { jobs, heartbeat } => format!(
            "gateway started: {jobs} enabled job(s), heartbeat {} (pid {})",
            if *heartbeat { "on" } else { "off" },
            std::process::id()
        ),
        GatewayEvent::Recovered(run) => format!(
            "job {} ({}): run #{} was cut off by a stopped process; marked interrupted",
            run.job_id, run.job_name, run.id
        ),
        GatewayEvent::Skipped { job_id, job_name } => {
            format!("job {job_id} ({job_name}): missed run skipped (policy: skip)")
        }
        GatewayEvent::RunStarted(run) => format!(
            "job {} ({}): run #{} started [{}]",
            run.job_id,
            run.job_name,
            run.id,
            run.trigger.as_str()
        ),
        GatewayEvent::RunFinished(finished) => {
            let run = &finished.run;
            let took = run
                .duration_ms()
                .map(|ms| format!(" in {:.1}s", ms as f64 / 1000.0))
                .unwrap_or_default();
            let mut line = format!(
                "job {} ({}): run #{} {}{took}",
                run.job_id,
                run.job_name,
                run.id,
                run.status.as_str()
            );
            if let Some(error) = &run.error {
                line.push_str(&format!(": {}", one_line(error)));
            }
            if let Some(output) = &finished.output {
                for text in output.lines() {
                    line.push_str("\n  | ");
                    line.push_str(text);
                }
            }
            line
        }
        GatewayEvent::HeartbeatIdle => "heartbeat: no tasks in HEARTBEAT.md; no turn".into(),
        GatewayEvent::HeartbeatFinished { result: Ok(answer) } => {
            let mut line = "heartbeat: turn finished".to_string();
            for text in answer.lines() {
                line.push_str("\n  | ");
                line.push_str(text);
            }
            line
        }
        GatewayEvent::HeartbeatFinished { result: Err(e) } => {
            format!("heartbeat: turn failed: {}", one_line(e))
        }
        GatewayEvent::Problem(problem) => format!("problem: {}", one_line(problem)),
        GatewayEvent::Stopping { running } => {
            format!("stopping: waiting for {running} running turn(s)")
        }
        GatewayEvent::Stopped => "gateway stopped".into(),
    };
    let _ = writeln!(out, "[{}] {line}", now());
    let _ = out.flush();
}

fn log_json(event: &GatewayEvent) {
    let at = Timestamp::now().to_string();
    let value = match event {
        GatewayEvent::Started { jobs, heartbeat } => {
            json!({"event": "started", "jobs": jobs, "heartbeat": heartbeat, "pid": std::process::id()})
        }
        GatewayEvent::Recovered(run) => {
            json!({"event": "recovered", "run": run_view(run, None)})
        }
        GatewayEvent::Skipped { job_id, job_name } => {
            json!({"event": "skipped", "job_id": job_id, "job_name": job_name})
        }
        GatewayEvent::RunStarted(run) => {
            json!({"event": "run_started", "run": run_view(run, None)})
        }
        GatewayEvent::RunFinished(finished) => json!({
            "event": "run_finished",
            "run": run_view(&finished.run, None),
            "output": finished.output,
        }),
        GatewayEvent::HeartbeatIdle => json!({"event": "heartbeat_idle"}),
        GatewayEvent::HeartbeatFinished { result } => match result {
            Ok(answer) => json!({"event": "heartbeat_finished", "status": "ok", "output": answer}),
            Err(e) => json!({"event": "heartbeat_finished", "status": "error", "error": e}),
        },
        GatewayEvent::Problem(problem) => json!({"event": "problem", "message": problem}),
        GatewayEvent::Stopping { running } => json!({"event": "stopping", "running": running}),
        GatewayEvent::Stopped => json!({"event": "stopped"}),
    };
    let mut value = value;
    value["at"] = json!(at);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}
