//! `engram bench agent`: the agent loop's own cost, against the scripted model server on
//! 127.0.0.1 (so the model costs almost nothing and the rest shows).
//!
//! - Loop overhead per step: a step's wall time minus the time inside the model call and the
//!   time the tools ran (the agent measures all three per step). What is left is the state
//!   machine: reading the run state, building the request, recording the answer and results,
//!   dispatching the tool calls, and the events to the output writer.
//! - Token to writer: from the server handing a streamed delta to the connection to the same
//!   text having been rendered (Markdown, styled) and written and flushed to a real file
//!   descriptor (/dev/null), through the same printer `engram run` and `engram chat` use. The
//!   deltas come 1 ms apart (faster than any real model) for the latency figure; sent back to
//!   back they queue behind each other, and that run measures throughput instead.
//! - Start to first request: from spawning `engram run` to the server receiving its request
//!   (configuration, store, tools, HTTP client, runtime).
//!
//! Each figure is the median over many samples, with the 95th percentile beside it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use clap::Args;
use engram_agent::tools::{BuiltinOptions, NoteMemory, ToolRegistry, Workspace};
use engram_agent::{Agent, AgentConfig, AgentEvent, CancelToken, InMemoryRunState};
use engram_backend::StoreConfig;
use engram_core::{MemoryStore, Scope};
use engram_llm::Provider;
use engram_llm::scripted::{
    LatencySummary, SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn, delta_latencies,
};
use serde::Serialize;
use serde_json::json;

use crate::agent_prompt::build_prompt;
use crate::context::Context;
use crate::exit::Status;
use crate::output;
use crate::turn_printer::TurnPrinter;

/// `engram bench agent`.
#[derive(Debug, Args)]
pub struct BenchAgentArgs {
    /// Runs of each measurement.
    #[arg(long, default_value = "20", value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: u64,
    /// Tool-calling steps per run in the loop-overhead measurement.
    #[arg(long, default_value = "10", value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Streamed deltas per answer in the token-latency measurement.
    #[arg(long, default_value = "1000", value_parser = clap::value_parser!(u64).range(1..))]
    pub deltas: u64,
    /// The wire format: openai or anthropic.
    #[arg(long, default_value = "openai")]
    pub provider: Provider,
}

/// One figure: median and 95th percentile, in milliseconds, against a target if it has one.
#[derive(Debug, Serialize)]
pub(crate) struct Figure {
    pub(crate) name: &'static str,
    pub(crate) samples: usize,
    pub(crate) median_ms: f64,
    pub(crate) p95_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) target_ms: Option<f64>,
    pub(crate) met: Option<bool>,
}

impl Figure {
    /// The figure of `samples`, met when the median is within `target_ms`.
    pub(crate) fn of(
        name: &'static str,
        samples: &[Duration],
        target_ms: Option<f64>,
    ) -> Result<Figure> {
        let summary =
            LatencySummary::of(samples).ok_or_else(|| anyhow!("no samples for {name}"))?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Ok(Figure {
            name,
            samples: summary.count,
            median_ms: ms(summary.median),
            p95_ms: ms(summary.p95),
            max_ms: ms(summary.max),
            target_ms,
            met: target_ms.map(|target| ms(summary.median) <= target),
        })
    }
}

/// Runs `engram bench agent`.
pub fn run(ctx: &Context, args: BenchAgentArgs) -> Result<Status> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let runtime = ctx.runtime()?;
    let runs = usize::try_from(args.runs).unwrap_or(usize::MAX);
    let steps = usize::try_from(args.steps).unwrap_or(usize::MAX);
    let deltas = usize::try_from(args.deltas).unwrap_or(usize::MAX);

    let (overhead, model, tools) =
        runtime.block_on(loop_overhead(dir.path(), args.provider, runs, steps))?;
    let pace = Some(Duration::from_millis(1));
    let (paced, _) = runtime.block_on(token_to_writer(
        dir.path(),
        args.provider,
        runs,
        deltas,
        pace,
    ))?;
    let (unpaced, throughput) = runtime.block_on(token_to_writer(
        dir.path(),
        args.provider,
        runs,
        deltas,
        None,
    ))?;
    let start = start_to_first_request(dir.path(), args.provider, runs)?;

    let figures = [
        Figure::of("loop overhead per step", &overhead, Some(1.0))?,
        Figure::of("streamed token to writer, 1 ms apart", &paced, Some(5.0))?,
        Figure::of("streamed token to writer, back to back", &unpaced, None)?,
        Figure::of("engram run start to first request", &start, Some(50.0))?,
    ];
    let mean_ms = |samples: &[Duration]| {
        samples.iter().sum::<Duration>().as_secs_f64() * 1e3 / samples.len().max(1) as f64
    };
    if ctx.json {
        output::json(&json!({
            "provider": args.provider.as_str(),
            "runs": runs,
            "steps_per_run": steps,
            "deltas_per_answer": deltas,
            "figures": figures,
            "back_to_back_deltas_per_second": throughput,
            "mean_model_ms_per_step": mean_ms(&model),
            "mean_tool_ms_per_step": mean_ms(&tools),
        }))?;
    } else {
        println!(
            "agent loop against the scripted {} server: {runs} runs, {steps} tool steps a run, {deltas} deltas an answer",
            args.provider
        );
        println!(
            "{:<40} {:>9} {:>10} {:>10} {:>10}  target",
            "", "samples", "median ms", "p95 ms", "max ms"
        );
        for f in &figures {
            let target = match (f.target_ms, f.met) {
                (Some(t), Some(true)) => format!("<= {t} ms, met"),
                (Some(t), _) => format!("<= {t} ms, MISSED"),
                _ => "-".to_string(),
            };
            println!(
                "{:<40} {:>9} {:>10.3} {:>10.3} {:>10.3}  {target}",
                f.name, f.samples, f.median_ms, f.p95_ms, f.max_ms
            );
        }
        println!(
            "(back to back, the whole path from server to writer carried {throughput:.0} deltas/s; there the figure is queueing, not latency)"
        );
        println!(
            "(for scale: the model call took {:.3} ms and the tools {:.3} ms per step on average)",
            mean_ms(&model),
            mean_ms(&tools)
        );
    }
    Ok(Status::Success)
}

/// A workspace and a store in `dir`, the built-in tools over them.
fn tools_in(dir: &Path, name: &str) -> Result<(Arc<ToolRegistry>, Workspace)> {
    let ws = dir.join(name);
    std::fs::create_dir_all(&ws)?;
    let workspace = Workspace::confined(&ws)?;
    let store: Arc<dyn MemoryStore> =
        engram_backend::open_blocking(&StoreConfig::sqlite(dir.join(format!("{name}.db"))))?
            .memories;
    let memory = NoteMemory {
        store,
        scope: Scope::user("bench"),
    };
    let registry = ToolRegistry::with_builtins(&workspace, &BuiltinOptions::default(), memory)?;
    Ok((Arc::new(registry), workspace))
}

fn agent_for(
    server: &ScriptedServer,
    provider: Provider,
    ws: &Workspace,
    max_steps: usize,
) -> Result<Agent> {
    let model = engram_llm::build(server.client_config(provider))?;
    Ok(Agent::new(
        model,
        build_prompt(ws, "bench"),
        AgentConfig {
            max_steps: u32::try_from(max_steps).unwrap_or(u32::MAX),
            ..AgentConfig::default()
        },
    ))
}

fn dev_null() -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")
}

/// Per-step overhead, model time and tool time over `runs` runs of `steps` tool calls each.
async fn loop_overhead(
    dir: &Path,
    provider: Provider,
    runs: usize,
    steps: usize,
) -> Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
    let (tools, ws) = tools_in(dir, "loop")?;
    let server = ScriptedServer::spawn(Vec::new())?;
    let agent = agent_for(&server, provider, &ws, steps + 1)?;
    let (mut overhead, mut model, mut tool) = (Vec::new(), Vec::new(), Vec::new());
    // One run first to warm the connection pool and caches; not counted.
    for run in 0..=runs {
        for _ in 0..steps {
            server.push(Turn::tool_call("recall_notes", json!({})));
        }
        server.push(Turn::text("Done."));
        let mut state = InMemoryRunState::new(tools.clone());
        let mut printer = TurnPrinter::new(dev_null()?, dev_null()?, true, false, true);
        let mut sink = |event: AgentEvent<'_>| printer.on_event(event);
        let outcome = agent
            .run_turn(
                &mut state,
                "Recall your notes, repeatedly.",
                &CancelToken::new(),
                &mut sink,
            )
            .await;
        if outcome.answer().is_none() {
            return Err(anyhow!(
                "a benchmark run failed: {}",
                outcome.end.error_message().unwrap_or_default()
            ));
        }
        if run > 0 {
            for timing in &outcome.timings {
                overhead.push(timing.overhead());
                model.push(timing.model);
                tool.push(timing.tools);
            }
        }
    }
    Ok((overhead, model, tool))
}

/// From the server sending each delta (`pace` apart, or back to back) to the printer having
/// written it; and the deltas per second carried from the first send to the last write.
async fn token_to_writer(
    dir: &Path,
    provider: Provider,
    runs: usize,
    deltas: usize,
    pace: Option<Duration>,
) -> Result<(Vec<Duration>, f64)> {
    let name = if pace.is_some() { "paced" } else { "unpaced" };
    let (tools, ws) = tools_in(dir, name)?;
    let server = ScriptedServer::spawn(Vec::new())?;
    let agent = agent_for(&server, provider, &ws, 1)?;
    let mut latencies = Vec::new();
    let (mut carried, mut spent) = (0usize, Duration::ZERO);
    for run in 0..=runs {
        let mut turn = Turn::stream_deltas(deltas);
        if let Some(pace) = pace {
            turn = turn.chunk_delay(pace);
        }
        server.push(turn);
        let mut state = InMemoryRunState::new(tools.clone());
        let mut printer = TurnPrinter::new(dev_null()?, dev_null()?, true, false, true);
        printer.text_written = Some(Vec::with_capacity(deltas));
        let outcome = {
            let mut sink = |event: AgentEvent<'_>| printer.on_event(event);
            agent
                .run_turn(&mut state, "Stream.", &CancelToken::new(), &mut sink)
                .await
        };
        if outcome.answer().is_none() {
            return Err(anyhow!(
                "a benchmark run failed: {}",
                outcome.end.error_message().unwrap_or_default()
            ));
        }
        let record = server
            .request(run + 1)
            .ok_or_else(|| anyhow!("the scripted server recorded no request"))?;
        let written = printer.text_written.take().unwrap_or_default();
        if written.len() != record.content_sent_at.len() {
            return Err(anyhow!(
                "{} deltas were sent but {} written; the pairing would be wrong",
                record.content_sent_at.len(),
                written.len()
            ));
        }
        if run > 0 {
            latencies.extend(delta_latencies(&record, &written));
            if let (Some(first), Some(last)) = (record.content_sent_at.first(), written.last()) {
                carried += written.len();
                spent += last.saturating_duration_since(*first);
            }
        }
    }
    Ok((latencies, carried as f64 / spent.as_secs_f64().max(1e-9)))
}

/// From spawning `engram run` to the server receiving its first request.
fn start_to_first_request(dir: &Path, provider: Provider, runs: usize) -> Result<Vec<Duration>> {
    let exe = std::env::current_exe().context("cannot find the engram executable")?;
    let home = dir.join("home");
    let ws = dir.join("home-ws");
    std::fs::create_dir_all(&ws)?;
    let server = ScriptedServer::spawn(Vec::new())?;
    let mut samples = Vec::new();
    for run in 0..=runs {
        server.push(Turn::text("ok"));
        let started = Instant::now();
        let status = Command::new(&exe)
            .arg("--home")
            .arg(&home)
            .args(["run", "-m", "hi", "--workspace"])
            .arg(&ws)
            .env("ENGRAM_PROVIDER", provider.as_str())
            .env("ENGRAM_MODEL", SCRIPTED_MODEL)
            .env(provider.default_key_env(), SCRIPTED_KEY)
            .env(provider.base_url_env(), server.base_url(provider))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("cannot run engram")?;
        if !status.success() {
            return Err(anyhow!("engram run failed ({status}) during the benchmark"));
        }
        let received = server
            .request(run + 1)
            .and_then(|r| r.received_at)
            .ok_or_else(|| anyhow!("the scripted server recorded no request"))?;
        // The first run creates the store: a one-time cost, not counted.
        if run > 0 {
            samples.push(received.saturating_duration_since(started));
        }
    }
    Ok(samples)
}
