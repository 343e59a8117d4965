//! `engram run -m TASK`: one task, start to answer. The answer streams to stdout; tool
//! activity goes to stderr; the exit status says how the run ended.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use engram_agent::{AgentEvent, CancelToken, RunEnd, RunOutcome, RunRecord, RunState};
use engram_memory::session::SessionKey;
use serde_json::json;

use super::agent_common::{
    AgentArgs, cancel_on_ctrl_c, prepare_with_memory, report_fit_outcomes, usage_text,
};
use crate::context::Context;
use crate::exit::{Failure, Status, usage};
use crate::turn_printer::TurnPrinter;

/// Help shown after `engram run --help`.
pub const RUN_AFTER_HELP: &str = "\
The answer is written to standard output as it arrives (Markdown is rendered on a terminal);
tool calls and warnings go to standard error. With --json, one JSON object is printed at the
end instead: {answer, status, steps, usage, elapsed_ms, error}.

Exit status: 0 answered; 1 the model or a tool setup failed (the error line says which: bad
key, rate limited, ...); 2 bad usage or no model configured (the message says what to set);
6 the step limit was reached without an answer; 130 cancelled with Ctrl-C (the history is left
consistent: every tool call has a result).

The run's conversation is kept in a session (ENGRAM_HOME/sessions; see engram sessions): its
own unless --session names one to continue. What the agent learns is extracted into memory
before the process exits; later runs and chats see it.

Examples:
  engram run --session work -m \"What did we decide about the database?\"
  engram run -m \"Summarise notes.md in three bullet points\"
  engram run --workspace ~/project --max-steps 40 -m \"Fix the failing test\" --dump run.json";

/// `engram run`.
#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// The task.
    #[arg(long, short = 'm', value_name = "TASK")]
    pub message: String,
    #[command(flatten)]
    pub agent: AgentArgs,
    /// When the run ends (however it ends), write its state as JSON to FILE: goal, system
    /// prompt, the whole conversation with tool calls and results, status, steps and tokens.
    #[arg(long, value_name = "FILE")]
    pub dump: Option<PathBuf>,
    /// Continue (or start) the session KEY (`channel:chat_id`; `KEY` alone means `cli:KEY`):
    /// the run sees its conversation and is appended to it. Without it, each run is a session
    /// of its own, `run:<time>-<pid>`.
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
}

/// Runs `engram run`.
pub fn run(ctx: &Context, args: RunArgs) -> Result<Status> {
    if args.message.trim().is_empty() {
        return Err(usage("the task is empty; pass it with -m \"TASK\""));
    }
    let key = match &args.session {
        Some(key) => super::sessions::parse_key(key)?,
        None => one_shot_key()?,
    };
    let (setup, memory) = prepare_with_memory(ctx, &args.agent, key)?;
    let runtime = ctx.runtime()?;
    let show_answer = !ctx.json;
    let mut state = runtime.block_on(memory.open_state(setup.tools.clone()))?;
    let (outcome, record, extraction) = runtime.block_on(async {
        let cancel = CancelToken::new();
        let watcher = tokio::spawn(cancel_on_ctrl_c(cancel.clone()));
        let mut printer = TurnPrinter::terminal(show_answer);
        let mut sink = |event: AgentEvent<'_>| printer.on_event(event);
        let outcome = setup
            .agent
            .run_turn(&mut state, &args.message, &cancel, &mut sink)
            .await;
        watcher.abort();
        report_fit_outcomes(&mut state);
        let record = state.dump().await;
        // The session ends with the run: its extraction finishes before the process exits.
        let extraction = memory.hooks.finish().await;
        (outcome, record, extraction)
    });
    if let Err(e) = extraction {
        eprintln!("warning: {e:#}");
    }

    if let Some(path) = &args.dump {
        let record = record.context("cannot read the run state to dump it")?;
        write_dump(path, &record)?;
    }
    if ctx.json {
        crate::output::json(&outcome_json(&outcome))?;
    } else {
        eprintln!(
            "{} step{} · {} tokens · {:.1} s",
            outcome.progress.steps,
            if outcome.progress.steps == 1 { "" } else { "s" },
            usage_text(outcome.progress.usage),
            outcome.elapsed.as_secs_f64()
        );
    }
    let status = match &outcome.end {
        RunEnd::Answered(_) => return Ok(Status::Success),
        RunEnd::MaxSteps(_) => Status::StepLimit,
        RunEnd::Cancelled => Status::Interrupted,
        RunEnd::Failed(_) => Status::Failure,
    };
    Err(Failure {
        status,
        message: outcome.end.error_message().unwrap_or_default(),
    }
    .into())
}

/// A session key of its own for a run without `--session`.
fn one_shot_key() -> Result<SessionKey> {
    let now = jiff::Zoned::now().strftime("%Y%m%d-%H%M%S%.3f").to_string();
    Ok(SessionKey::parse(&format!(
        "run:{}-{}",
        now.replace('.', ""),
        std::process::id()
    ))?)
}

fn outcome_json(outcome: &RunOutcome) -> serde_json::Value {
    let status = serde_json::to_value(outcome.end.status()).unwrap_or_default();
    json!({
        "answer": outcome.answer(),
        "status": status.get("status"),
        "error": outcome.end.error_message(),
        "steps": outcome.progress.steps,
        "usage": outcome.progress.usage,
        "elapsed_ms": outcome.elapsed.as_millis() as u64,
    })
}

/// Writes the dump through a temporary file in the same directory and a rename.
fn write_dump(path: &Path, record: &RunRecord) -> Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write the dump {}", path.display()))?;
    std::io::Write::write_all(&mut temp, record.to_json().as_bytes())
        .and_then(|()| std::io::Write::write_all(&mut temp, b"\n"))
        .with_context(|| format!("cannot write the dump {}", path.display()))?;
    temp.persist(path)
        .with_context(|| format!("cannot write the dump {}", path.display()))?;
    Ok(())
}
