//! `engram chat`: the interactive agent. Line editing and history (kept in ENGRAM_HOME),
//! multi-line input, answers rendered as Markdown while they stream, and a few slash commands.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow};
use clap::Args;
use engram_agent::{
    AgentEvent, CancelToken, RunEnd, RunOutcome, RunState, StoredRunState, ToolMode,
};
use engram_core::{Message, Usage};
use engram_memory::session::SessionKey;
use engram_memory::token_count::messages_tokens;
use rustyline::error::ReadlineError;
use rustyline::history::MemHistory;
use rustyline::{Config as EditorConfig, Editor};

use super::agent_common::{
    AgentArgs, AgentSetup, MemorySetup, cancel_on_ctrl_c, prepare_with_memory, report_fit_outcomes,
    usage_text,
};
use crate::context::Context;
use crate::exit::{Status, usage};
use crate::output::{one_line_cut, use_style};
use crate::turn_printer::TurnPrinter;

/// The file holding what was typed, one JSON string a line, newest last.
pub const HISTORY_FILE: &str = "chat_history.jsonl";
/// Inputs kept in the history file.
const MAX_HISTORY: usize = 1000;
/// The marker line that opens and closes a multi-line block.
const BLOCK_MARKER: &str = "\"\"\"";

const PROMPT: &str = "> ";
const CONTINUATION_PROMPT: &str = ". ";

/// Help shown by `/help` and after `engram chat --help`.
pub const CHAT_HELP: &str = "\
Commands:
  /help     this help
  /new      start a new conversation (what was learned is extracted into memory first)
  /history  show this conversation, tool calls included
  /memory   what engram remembers about you: profile, recent episodes, counts
  /forget   erase everything engram remembers about you (asks first)
  /sessions the conversations kept (engram sessions show KEY prints one)
  /stats    model, turns, steps and tokens so far
  /exit     leave (also /quit, or Ctrl-D); what was learned is extracted first

Multi-line input: end a line with \\ to continue on the next one, or put \"\"\" alone on a line,
then the text (paste freely), then \"\"\" alone on a line again. Pasted text keeps its newlines.

Ctrl-C while the agent works cancels that turn (the conversation stays consistent); Ctrl-C at
the prompt clears the line, and a second Ctrl-C in a row leaves. Input history is kept in
ENGRAM_HOME/chat_history.jsonl (up and down arrows, Ctrl-R to search).";

/// `engram chat`.
#[derive(Debug, Args)]
#[command(after_help = CHAT_HELP)]
pub struct ChatArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The session to continue or start (`channel:chat_id`; `KEY` alone means `cli:KEY`;
    /// default `cli:direct`).
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
}

/// What the conversation has cost so far.
#[derive(Debug, Clone, Copy, Default)]
struct ChatStats {
    turns: u32,
    steps: u32,
    usage: Usage,
    last_turn: Option<(u32, Usage, f64)>,
}

impl ChatStats {
    fn add(&mut self, outcome: &RunOutcome) {
        self.turns += 1;
        self.steps += outcome.progress.steps;
        self.usage += outcome.progress.usage;
        self.last_turn = Some((
            outcome.progress.steps,
            outcome.progress.usage,
            outcome.elapsed.as_secs_f64(),
        ));
    }
}

/// Runs `engram chat`.
pub fn chat(ctx: &Context, args: ChatArgs) -> Result<Status> {
    if ctx.json {
        return Err(usage(
            "engram chat is interactive and has no JSON output; use engram run --json for one task",
        ));
    }
    let key = match &args.session {
        Some(key) => super::sessions::parse_key(key)?,
        None => SessionKey::default_cli(),
    };
    let (setup, memory) = prepare_with_memory(ctx, &args.agent, key)?;
    let runtime = ctx.runtime()?;
    let editor_config = EditorConfig::builder()
        .auto_add_history(false)
        .max_history_size(MAX_HISTORY)
        .and_then(|b| b.history_ignore_dups(true))
        .map_err(|e| anyhow!("cannot set up line editing: {e}"))?
        .build();
    let mut editor: Editor<(), MemHistory> = Editor::with_history(editor_config, MemHistory::new())
        .map_err(|e| anyhow!("cannot set up line editing: {e}"))?;
    let history_path = ctx.home.dir().join(HISTORY_FILE);
    let mut inputs = load_history(&history_path);
    for input in &inputs {
        let _ = editor.add_history_entry(input.as_str());
    }

    let info = setup.agent.model_info();
    eprintln!(
        "engram chat · {} ({}) · user {} · workspace {}\n/help for commands · end a line with \\ to continue it · Ctrl-D to leave",
        info.model,
        info.provider,
        setup.user,
        setup.workspace.root().display()
    );

    let mut state = runtime.block_on(memory.open_state(setup.tools.clone()))?;
    match runtime.block_on(memory.manager.known_summary()) {
        Ok(line) => eprintln!("{line}"),
        Err(e) => eprintln!("warning: cannot read what is known about you: {e}"),
    }
    let resumed = state.working().window().len();
    if resumed > 0 || state.working().summary().is_some() {
        eprintln!(
            "(continuing session {}: {resumed} recent messages{})",
            memory.session.key(),
            if state.working().summary().is_some() {
                " and a summary of older ones"
            } else {
                ""
            }
        );
    }
    let mut stats = ChatStats::default();
    let mut interrupted = false;
    loop {
        let input = match read_input(&mut editor) {
            Ok(input) => input,
            Err(ReadlineError::Interrupted) => {
                if interrupted {
                    break;
                }
                interrupted = true;
                eprintln!("(Ctrl-C again, /exit or Ctrl-D to leave)");
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(anyhow!("cannot read input: {e}")),
        };
        interrupted = false;
        if input.trim().is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(input.as_str());
        inputs.push(input.clone());
        if let Err(e) = save_history(&history_path, &inputs) {
            eprintln!("warning: {e:#}");
        }

        match slash_command(&input) {
            Some("exit" | "quit") => break,
            Some("help") => println!("{CHAT_HELP}"),
            Some("new") => {
                // What this conversation taught is extracted before it is closed (awaited, so
                // the next conversation's first turn already sees it).
                eprintln!("(saving what I learned in this conversation…)");
                if let Err(e) = runtime.block_on(memory.hooks.finish()) {
                    eprintln!("warning: {e:#}");
                }
                runtime.block_on(state.clear())?;
                stats = ChatStats::default();
                eprintln!("(new conversation)");
            }
            Some("history") => print_history(&state.working().context()),
            Some("stats") => print_stats(&setup, &stats, &state),
            Some("memory") => match runtime.block_on(memory.manager.overview()) {
                Ok(overview) => println!("{overview}"),
                Err(e) => eprintln!("error: cannot read your memory: {e}"),
            },
            Some("forget") => {
                // A refusal (files linked out of the workspace) is said, and the chat goes on.
                if let Err(e) = forget(ctx, &mut editor, runtime, &setup, &memory, &mut state) {
                    eprintln!("error: {e:#}");
                }
            }
            Some("sessions") => print_sessions(ctx, &memory),
            Some(other) => eprintln!("unknown command /{other}; /help lists the commands"),
            None => {
                let outcome = runtime.block_on(turn(&setup, &mut state, &input));
                report_fit_outcomes(&mut state);
                stats.add(&outcome);
                report(&outcome);
            }
        }
    }
    eprintln!("(saving what I learned in this session…)");
    match runtime.block_on(memory.hooks.finish()) {
        Ok(Some(report)) if report.skipped.is_none() => eprintln!(
            "(remembered {} new episode{}, {} new fact{} or preference{})",
            report.episodes_added,
            if report.episodes_added == 1 { "" } else { "s" },
            report.facts_added,
            if report.facts_added == 1 { "" } else { "s" },
            if report.facts_added == 1 { "" } else { "s" },
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: {e:#}"),
    }
    Ok(Status::Success)
}

/// `/forget`: after a yes, ends the conversation and erases the user's memories, markdown
/// files and sessions.
fn forget(
    ctx: &Context,
    editor: &mut Editor<(), MemHistory>,
    runtime: &tokio::runtime::Runtime,
    setup: &AgentSetup,
    memory: &MemorySetup,
    state: &mut StoredRunState,
) -> Result<()> {
    let question = format!(
        "Erase everything engram remembers about {} (memories, MEMORY.md, daily notes, sessions)? [y/N] ",
        setup.user
    );
    let answer = match editor.readline(&question) {
        Ok(answer) => answer,
        Err(ReadlineError::Interrupted | ReadlineError::Eof) => String::new(),
        Err(e) => return Err(anyhow!("cannot read input: {e}")),
    };
    if !matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
        eprintln!("(nothing was erased)");
        return Ok(());
    }
    // Extraction still under way would write back what is being erased.
    if let Err(e) = runtime.block_on(memory.hooks.finish()) {
        eprintln!("warning: {e:#}");
    }
    runtime.block_on(state.clear())?;
    let erased = runtime
        .block_on(memory.manager.forget())
        .context("cannot erase your memories")?;
    let store = ctx.sessions()?;
    let mut sessions = 0;
    for info in runtime.block_on(store.list())? {
        if info.user.as_deref() == Some(setup.user.as_str())
            && runtime.block_on(store.delete(&info.key))?
        {
            sessions += 1;
        }
    }
    eprintln!(
        "(erased {erased} memor{} and {sessions} session{} of {})",
        if erased == 1 { "y" } else { "ies" },
        if sessions == 1 { "" } else { "s" },
        setup.user
    );
    Ok(())
}

fn print_sessions(ctx: &Context, memory: &MemorySetup) {
    let listed = ctx
        .sessions()
        .and_then(|store| ctx.block_on(store.list())?.map_err(anyhow::Error::from));
    match listed {
        Ok(list) if list.is_empty() => println!("(no sessions)"),
        Ok(list) => {
            for info in list {
                let current = if &info.key == memory.session.key() {
                    "*"
                } else {
                    " "
                };
                println!(
                    "{current} {:<28} {:>4} messages  {}",
                    info.key.as_str(),
                    info.messages,
                    info.updated_at
                        .map_or_else(|| "-".to_string(), crate::output::local_time)
                );
            }
        }
        Err(e) => eprintln!("error: {e}"),
    }
}

/// Reads one input: a line, lines joined by trailing backslashes, or a `"""` block.
fn read_input(editor: &mut Editor<(), MemHistory>) -> Result<String, ReadlineError> {
    let first = editor.readline(PROMPT)?;
    if first.trim() == BLOCK_MARKER {
        let mut lines = Vec::new();
        loop {
            match editor.readline(CONTINUATION_PROMPT) {
                Ok(line) if line.trim() == BLOCK_MARKER => break,
                Ok(line) => lines.push(line),
                // Input ended inside the block: send what came.
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(e),
            }
        }
        return Ok(lines.join("\n"));
    }
    let mut text = first;
    while text.ends_with('\\') {
        text.pop();
        text.push('\n');
        match editor.readline(CONTINUATION_PROMPT) {
            Ok(line) => text.push_str(&line),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(text)
}

/// The command named by `/word`, if the input is one (a path like `/etc/hosts` is not).
fn slash_command(input: &str) -> Option<&str> {
    let word = input.trim().strip_prefix('/')?;
    (!word.is_empty() && word.chars().all(|c| c.is_ascii_alphabetic())).then_some(word)
}

async fn turn(setup: &AgentSetup, state: &mut StoredRunState, input: &str) -> RunOutcome {
    let cancel = CancelToken::new();
    let watcher = tokio::spawn(cancel_on_ctrl_c(cancel.clone()));
    let mut printer = TurnPrinter::terminal(true);
    let mut sink = |event: AgentEvent<'_>| printer.on_event(event);
    let outcome = setup.agent.run_turn(state, input, &cancel, &mut sink).await;
    watcher.abort();
    outcome
}

/// After a turn: why it did not answer, and (on a terminal) what it cost.
fn report(outcome: &RunOutcome) {
    match &outcome.end {
        RunEnd::Answered(_) => {}
        RunEnd::Cancelled => eprintln!("(cancelled)"),
        end => eprintln!("error: {}", end.error_message().unwrap_or_default()),
    }
    if use_style(std::io::stderr().is_terminal()) {
        eprintln!(
            "\x1b[2m{} step{} · {} tokens · {:.1} s\x1b[0m",
            outcome.progress.steps,
            if outcome.progress.steps == 1 { "" } else { "s" },
            usage_text(outcome.progress.usage),
            outcome.elapsed.as_secs_f64()
        );
    }
}

fn print_history(messages: &[Message]) {
    let mut out = std::io::stdout().lock();
    if messages.is_empty() {
        let _ = writeln!(out, "(nothing said yet)");
    }
    for message in messages {
        let _ = match message {
            Message::System { content } => writeln!(out, "system: {}", one_line_cut(content, 200)),
            Message::User { content } => writeln!(out, "you: {content}"),
            Message::Assistant(a) => {
                if !a.content.is_empty() {
                    let _ = writeln!(out, "engram: {}", a.content);
                }
                for call in &a.tool_calls {
                    let _ = writeln!(
                        out,
                        "  → {} {}",
                        call.name,
                        one_line_cut(&call.arguments, 160)
                    );
                }
                Ok(())
            }
            Message::Tool(t) => writeln!(
                out,
                "  {} {}",
                if t.is_error { "✗" } else { "←" },
                one_line_cut(&t.content, 160)
            ),
        };
    }
}

fn print_stats(setup: &AgentSetup, stats: &ChatStats, state: &StoredRunState) {
    let info = setup.agent.model_info();
    let config = setup.agent.config();
    println!(
        "model      {} ({}, {})",
        info.model, info.provider, info.base_url
    );
    let tool_mode = match config.tool_mode {
        ToolMode::Native => "native tool calls",
        ToolMode::Json => "JSON protocol",
    };
    println!(
        "agent      {tool_mode}, up to {} steps a turn",
        config.max_steps
    );
    println!("config     {}", setup.config.path.display());
    println!("user       {}", setup.user);
    println!("workspace  {}", setup.workspace.root().display());
    println!(
        "this chat  {} turn{}, {} step{}, {} tokens",
        stats.turns,
        if stats.turns == 1 { "" } else { "s" },
        stats.steps,
        if stats.steps == 1 { "" } else { "s" },
        usage_text(stats.usage)
    );
    if let Some((steps, usage, seconds)) = stats.last_turn {
        println!(
            "last turn  {steps} step{}, {} tokens, {seconds:.1} s",
            if steps == 1 { "" } else { "s" },
            usage_text(usage)
        );
    }
    let working = state.working();
    println!("session    {}", state.session().key());
    println!(
        "context    {} messages{}, {} tokens (o200k)",
        working.window().len(),
        if working.summary().is_some() {
            " and a summary of older ones"
        } else {
            ""
        },
        messages_tokens(&working.context())
    );
}

/// Reads the input history; a damaged line is skipped, a missing file is empty.
fn load_history(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| serde_json::from_str::<String>(line).ok())
        .collect()
}

/// Writes the last [`MAX_HISTORY`] inputs through a temporary file and a rename.
fn save_history(path: &Path, inputs: &[String]) -> Result<()> {
    let start = inputs.len().saturating_sub(MAX_HISTORY);
    let mut text = String::new();
    for input in &inputs[start..] {
        text.push_str(&serde_json::to_string(input)?);
        text.push('\n');
    }
    let dir: PathBuf = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut temp = tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("cannot save the input history in {}", dir.display()))?;
    temp.write_all(text.as_bytes())
        .with_context(|| format!("cannot save the input history {}", path.display()))?;
    temp.persist(path)
        .with_context(|| format!("cannot save the input history {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_commands_are_single_words() {
        assert_eq!(slash_command("/help"), Some("help"));
        assert_eq!(slash_command("  /new "), Some("new"));
        assert_eq!(slash_command("/etc/hosts looks odd"), None);
        assert_eq!(slash_command("/"), None);
        assert_eq!(slash_command("hello /help"), None);
    }

    #[test]
    fn history_round_trips_multi_line_inputs_and_skips_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HISTORY_FILE);
        let inputs = vec!["one".to_string(), "two\nlines".to_string()];
        save_history(&path, &inputs).unwrap();
        assert_eq!(load_history(&path), inputs);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("not json\n");
        std::fs::write(&path, text).unwrap();
        assert_eq!(load_history(&path), inputs);
        let many: Vec<String> = (0..MAX_HISTORY + 5).map(|i| i.to_string()).collect();
        save_history(&path, &many).unwrap();
        let kept = load_history(&path);
        assert_eq!(kept.len(), MAX_HISTORY);
        assert_eq!(kept[0], "5");
    }
}
