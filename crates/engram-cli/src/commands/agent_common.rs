//! What `engram chat` and `engram run` share: the flags, turning configuration into a ready
//! agent (model, workspace, tools with notes mirrored into the store, system prompt), Ctrl-C,
//! and how a turn is shown (answer on stdout, tool activity on stderr).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Args;
use engram_agent::scheduler::CronTool;
use engram_agent::skills::{LoadSkillTool, SkillSet};
use engram_agent::tools::{BuiltinOptions, NoteMemory, ToolRegistry, Workspace};
use engram_agent::{Agent, AgentConfig, CancelToken, DEFAULT_MAX_STEPS, ToolMode};
use engram_agent::{RunOutcome, RunState, StoredRunState, TurnHooks};
use engram_core::{ChatModel, Message, SystemClock};
use engram_core::{Scope, Usage};
use engram_llm::process_env;
use engram_memory::session::{Session, SessionKey, SessionRecord};
use engram_memory::working::{FitOutcome, ModelSummarizer, WorkingConfig};
use engram_memory::{ExtractionReport, MemoryManager};
use jiff::Timestamp;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::agent_prompt::{add_skills, build_prompt};
use crate::config::{Config, ToolModeSetting};
use crate::context::Context;
use crate::exit::{Failure, Status, usage};

/// The workspace directory inside ENGRAM_HOME, used when none is configured.
pub const DEFAULT_WORKSPACE_DIR: &str = "workspace";

/// Flags shared by `engram chat` and `engram run`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// The agent's workspace: file and shell tools stay inside it (default: [agent] workspace
    /// in config.toml, else ENGRAM_HOME/workspace, created if needed).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Model calls a run may make before it stops without an answer (default: [agent]
    /// max_steps, else 20).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,
    /// Whose memory the agent uses (default: ENGRAM_USER, else [agent] user, else your
    /// operating-system user name).
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
}

/// An agent ready to run, and what it was built from.
pub struct AgentSetup {
    /// The agent.
    pub agent: Agent,
    /// Its tools (give each conversation's run state this registry).
    pub tools: Arc<ToolRegistry>,
    /// The workspace (its root is canonical).
    pub workspace: Workspace,
    /// Whose memory.
    pub user: String,
    /// The configuration it came from.
    pub config: Config,
}

/// Builds the agent for `engram chat` / `engram run`: reads config.toml (printing its
/// warnings), connects the model (or says exactly what to set), prepares the workspace, opens
/// the store and registers the built-in tools.
pub fn prepare(ctx: &Context, args: &AgentArgs) -> Result<AgentSetup> {
    let config = Config::load(ctx.home.dir())?;
    for warning in &config.warnings {
        eprintln!("warning: {warning}");
    }
    let model = engram_llm::from_config(&config.llm, &process_env).map_err(|e| Failure {
        status: Status::Usage,
        message: e.in_file(&config.path).to_string(),
    })?;

    let max_steps = args
        .max_steps
        .or(config.agent.max_steps)
        .unwrap_or(DEFAULT_MAX_STEPS);
    if max_steps == 0 {
        return Err(usage(format!(
            "max_steps in [agent] of {} must be at least 1",
            config.path.display()
        )));
    }
    let tool_mode = match config.agent.tool_mode.unwrap_or_default() {
        ToolModeSetting::Auto => ToolMode::for_model(model.info()),
        ToolModeSetting::Native => ToolMode::Native,
        ToolModeSetting::Json => ToolMode::Json,
    };
    let user = default_user(&config, args.user.clone());

    let workspace = open_workspace(ctx, args, &config)?;
    let store = ctx.memories()?;
    let memory = NoteMemory {
        store,
        scope: Scope::user(user.clone()),
    };
    let mut options = BuiltinOptions::default();
    options.shell.pass_env = shell_env(&config);
    let mut registry = ToolRegistry::with_builtins(&workspace, &options, memory)
        .context("cannot set up the agent's tools")?;
    registry
        .register(CronTool::new(super::scheduler::open_scheduler(ctx)?))
        .context("cannot register the cron tool")?;
    let skills = Arc::new(SkillSet::load(&workspace));
    for error in skills.errors() {
        eprintln!("warning: {error}");
    }
    registry
        .register(LoadSkillTool::new(skills.clone()))
        .context("cannot register the load_skill tool")?;
    add_mcp_tools(&config, &mut registry)?;
    let tools = Arc::new(registry);
    let mut prompt = build_prompt(&workspace, &user);
    add_skills(&mut prompt, &skills);
    let agent = Agent::new(
        model,
        prompt,
        AgentConfig {
            max_steps,
            tool_mode,
            ..AgentConfig::default()
        },
    );
    Ok(AgentSetup {
        agent,
        tools,
        workspace: workspace.clone(),
        user,
        config,
    })
}

/// What memory adds to `engram chat` and `engram run`: the memory manager (context block
/// before each turn, extraction after), the session the conversation is kept in, and the
/// working memory's budget.
pub struct MemorySetup {
    /// The memory manager for this user.
    pub manager: Arc<MemoryManager>,
    /// The turn hooks the agent was given (context and extraction).
    pub hooks: Arc<MemoryHooks>,
    /// The session.
    pub session: Session,
    /// The working memory's budget.
    pub working: WorkingConfig,
    /// The model, for summarising old turns.
    pub model: Arc<dyn ChatModel>,
}

/// [`prepare`], plus memory: the manager for the user, the session `session_key` (resumed if
/// it exists), and the agent's turn hooks.
pub fn prepare_with_memory(
    ctx: &Context,
    args: &AgentArgs,
    session_key: SessionKey,
) -> Result<(AgentSetup, MemorySetup)> {
    // The BPE tokenizer takes ~0.2 s to build; build it while the rest is set up.
    std::thread::spawn(engram_memory::token_count::warm_up);
    let setup = prepare(ctx, args)?;
    // A second client on the same settings (prepare already checked them).
    let model = engram_llm::from_config(&setup.config.llm, &process_env).map_err(|e| Failure {
        status: Status::Usage,
        message: e.in_file(&setup.config.path).to_string(),
    })?;
    let backend = ctx.backend()?;
    let store = backend.memories.clone();
    let searcher = Arc::new(crate::retrieval::searcher(ctx, store.clone(), None, None)?);
    let manager = Arc::new(MemoryManager::new(
        store,
        backend.claims.clone(),
        searcher,
        Some(model.clone()),
        setup.workspace.clone(),
        setup.user.clone(),
        setup.config.memory.manager(),
    ));
    let mut metadata = serde_json::Map::new();
    metadata.insert("user".into(), setup.user.clone().into());
    let session = ctx.sessions()?.session(session_key, metadata);
    let hooks = Arc::new(MemoryHooks::new(manager.clone(), session.clone()));
    let working = setup.config.memory.working();
    let setup = AgentSetup {
        agent: setup.agent.with_hooks(hooks.clone()),
        ..setup
    };
    Ok((
        setup,
        MemorySetup {
            manager,
            hooks,
            session,
            working,
            model,
        },
    ))
}

impl MemorySetup {
    /// The conversation's run state: the session file, resumed, with working memory on the
    /// configured budget. Lines of the file skipped as damaged are reported on stderr.
    pub async fn open_state(&self, tools: Arc<ToolRegistry>) -> Result<StoredRunState> {
        let state = StoredRunState::open(self.session.clone(), tools, Arc::new(SystemClock))
            .await
            .with_context(|| format!("cannot open the session {}", self.session.key()))?
            .with_summarizer(
                Arc::new(ModelSummarizer::new(self.model.clone())),
                self.working,
            );
        for warning in state.warnings() {
            eprintln!("warning: {warning}");
        }
        Ok(state)
    }
}

/// Reports what the working memory did during a turn (on stderr).
pub fn report_fit_outcomes(state: &mut StoredRunState) {
    for outcome in state.take_fit_outcomes() {
        match outcome {
            FitOutcome::Fits => {}
            FitOutcome::Summarized {
                messages,
                tokens_before,
                tokens_after,
            } => eprintln!(
                "(summarised {messages} older messages: the conversation went from {tokens_before} to {tokens_after} tokens)"
            ),
            FitOutcome::Archived {
                messages,
                archive,
                error,
            } => eprintln!(
                "warning: {error}; {messages} older messages were archived in {archive} and left the context"
            ),
            FitOutcome::CannotFit { tokens, budget } => eprintln!(
                "warning: this turn alone needs {tokens} tokens of conversation, more than the {budget} the context window leaves; the model may refuse it"
            ),
        }
    }
}

/// The memory manager around each turn: the memory block before it (a system message after
/// the system prompt), extraction after every N turns in the background.
pub struct MemoryHooks {
    manager: Arc<MemoryManager>,
    session: Session,
    turns: AtomicU32,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// One extraction at a time, so two never take the same messages.
    extraction: Arc<tokio::sync::Mutex<()>>,
}

impl MemoryHooks {
    /// Hooks for `manager`, extracting from `session`.
    pub fn new(manager: Arc<MemoryManager>, session: Session) -> Self {
        Self {
            manager,
            session,
            turns: AtomicU32::new(0),
            tasks: std::sync::Mutex::new(Vec::new()),
            extraction: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Starts extraction of the messages not yet extracted, in the background.
    pub fn spawn_extraction(&self) {
        let manager = self.manager.clone();
        let session = self.session.clone();
        let lock = self.extraction.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = extract_pending(&manager, &session, &lock).await {
                eprintln!("warning: {e:#}");
            }
        });
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }

    /// Ends the session's memory work: waits for extractions under way, then extracts what is
    /// left (awaited). Returns that last extraction's report, if it ran.
    pub async fn finish(&self) -> Result<Option<ExtractionReport>> {
        let tasks: Vec<_> = match self.tasks.lock() {
            Ok(mut tasks) => tasks.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for task in tasks {
            let _ = task.await;
        }
        extract_pending(&self.manager, &self.session, &self.extraction).await
    }
}

#[async_trait::async_trait]
impl TurnHooks for MemoryHooks {
    async fn context(&self, input: &str, _state: &dyn RunState) -> Vec<Message> {
        memory_block(&self.manager, input).await
    }

    async fn after_turn(&self, _outcome: &RunOutcome, _state: &dyn RunState) {
        let turns = self.turns.fetch_add(1, Ordering::SeqCst) + 1;
        let every = self.manager.config().extract_every_turns;
        if every > 0 && turns.is_multiple_of(every) {
            self.spawn_extraction();
        }
    }
}

/// The memory block for a turn on `input`, as a system message; none when memory has nothing
/// to say, or (with a warning) when it could not be built: a turn never fails for it.
pub async fn memory_block(manager: &MemoryManager, input: &str) -> Vec<Message> {
    match manager.context_block(input, Timestamp::now()).await {
        Ok(Some(block)) => vec![Message::system(block.text)],
        Ok(None) => Vec::new(),
        Err(e) => {
            eprintln!("warning: the memory block was left out of this turn: {e}");
            Vec::new()
        }
    }
}

/// Extracts memories from the session's messages after the last extraction (claimed in the
/// store, so another process, here or on another machine sharing the store, never extracts the
/// same messages) and marks them done in the session log. `None` when there was nothing new.
async fn extract_pending(
    manager: &MemoryManager,
    session: &Session,
    lock: &tokio::sync::Mutex<()>,
) -> Result<Option<ExtractionReport>> {
    let _one_at_a_time = lock.lock().await;
    let log = session.load().await.with_context(|| {
        format!(
            "cannot read the session {} to extract from it",
            session.key()
        )
    })?;
    let messages = log.plain_messages();
    let from = log.extracted_through().min(messages.len());
    if !messages[from..]
        .iter()
        .any(|m| matches!(m, Message::User { .. }))
    {
        return Ok(None);
    }
    let now = Timestamp::now();
    let report = manager
        .extract_session(&messages, session.key().as_str(), from, now)
        .await
        .with_context(|| format!("memory extraction for the session {} failed", session.key()))?;
    if let Some([_, through]) = report.messages {
        session
            .append(
                &[SessionRecord::Extracted {
                    timestamp: now,
                    through,
                }],
                now,
            )
            .await
            .with_context(|| format!("cannot mark the session {} as extracted", session.key()))?;
    }
    Ok(Some(report))
}

/// `--workspace`, else `[agent] workspace` (relative to ENGRAM_HOME), else
/// ENGRAM_HOME/workspace, which is created. A directory named explicitly must exist.
fn open_workspace(ctx: &Context, args: &AgentArgs, config: &Config) -> Result<Workspace> {
    let explicit = match (&args.workspace, &config.agent.workspace) {
        (Some(dir), _) => Some(dir.clone()),
        (None, Some(dir)) => Some(ctx.home.dir().join(dir)),
        (None, None) => None,
    };
    let dir = match explicit {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "the workspace {} does not exist or is not a directory; create it or pass another --workspace",
                    dir.display()
                )));
            }
            dir
        }
        None => {
            let dir = ctx.home.dir().join(DEFAULT_WORKSPACE_DIR);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the workspace {}", dir.display()))?;
            dir
        }
    };
    Workspace::confined(&dir).with_context(|| format!("cannot use the workspace {}", dir.display()))
}

/// Connects the MCP servers listed under `[mcp.servers]` in config.toml and adds their tools to
/// the agent's registry as `mcp_<server>_<tool>`. A server that cannot be reached (or a tool
/// that cannot be registered) is reported on standard error and left out; the agent works on.
fn add_mcp_tools(config: &Config, registry: &mut ToolRegistry) -> Result<()> {
    let settings: engram_server::config::McpSettings = config.section("mcp")?;
    settings
        .validate()
        .map_err(|e| usage(format!("{}: {e}", config.path.display())))?;
    if settings.servers.is_empty() {
        return Ok(());
    }
    let clients = engram_server::mcp_client::McpClients::connect(&settings);
    for warning in &clients.warnings {
        eprintln!("warning: {warning}");
    }
    for tool in clients.tools {
        let name = tool.name().to_string();
        if let Err(e) = registry.register_arc(tool) {
            eprintln!("warning: the MCP tool {name} is left out: {e}");
        }
    }
    Ok(())
}

/// Whose memory a command uses: `explicit` (--user or ENGRAM_USER), else `[agent] user` in
/// config.toml, else the operating-system user name. `engram chat`, `engram run`, `engram
/// memory` and `engram mcp` all agree on it.
pub fn default_user(config: &Config, explicit: Option<String>) -> String {
    explicit
        .filter(|u| !u.trim().is_empty())
        .or_else(|| config.agent.user.clone().filter(|u| !u.trim().is_empty()))
        .unwrap_or_else(os_user)
}

/// `[agent] shell_env`, without the variables that hold model API keys (warned about: they
/// never reach a command).
fn shell_env(config: &Config) -> Vec<String> {
    let mut keys = vec![
        "OPENAI_API_KEY".to_string(),
        "ANTHROPIC_API_KEY".to_string(),
    ];
    keys.extend(config.llm.api_key_env.clone());
    config
        .agent
        .shell_env
        .iter()
        .filter(|name| {
            let secret = keys.contains(name);
            if secret {
                eprintln!(
                    "warning: [agent] shell_env names {name}, which holds the model's API key; \
                     it is not passed to commands"
                );
            }
            !secret
        })
        .cloned()
        .collect()
}

/// The operating-system user name, for whose memory the agent uses by default.
pub fn os_user() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "default".to_string())
}

/// Cancels `cancel` on Ctrl-C (SIGINT); a second Ctrl-C before the run has stopped exits at
/// once. Run it as a task and abort it when the turn is over.
pub async fn cancel_on_ctrl_c(cancel: CancelToken) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    cancel.cancel();
    eprintln!("\ncancelling (Ctrl-C again to quit at once)");
    if tokio::signal::ctrl_c().await.is_ok() {
        std::process::exit(Status::Interrupted as i32);
    }
}

/// Token counts for people: `1,234 in / 56 out`.
pub fn usage_text(usage: Usage) -> String {
    format!(
        "{} in / {} out",
        thousands(usage.input_tokens),
        thousands(usage.output_tokens)
    )
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_are_readable() {
        assert_eq!(
            usage_text(Usage {
                input_tokens: 1_234_567,
                output_tokens: 56
            }),
            "1,234,567 in / 56 out"
        );
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1000), "1,000");
    }
}
