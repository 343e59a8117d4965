//! The agent: a ReAct state machine, Reasoning -> Action -> Reasoning ... -> Answer.
//!
//! The states ([`states`]) are stateless functions over a [`RunState`]: Reasoning streams the
//! model and records what it decided as the state's next action, Action runs the tool calls
//! (concurrently) and appends their results, Answer hands over the answer and marks the run
//! done. The controller ([`Agent::run_turn`]) decides which state runs next by reading the
//! run state, enforces the step limit, handles cancellation, and streams what happens to the
//! caller as [`AgentEvent`]s.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use engram_agent::agent::{Agent, AgentConfig, AgentEvent};
//! # use engram_agent::{CancelToken, InMemoryRunState, SystemPrompt, tools::ToolRegistry};
//! # async fn demo(model: Arc<dyn engram_core::ChatModel>) {
//! let agent = Agent::new(model, SystemPrompt::plain("You are helpful."), AgentConfig::default());
//! let mut state = InMemoryRunState::new(Arc::new(ToolRegistry::new()));
//! let mut sink = |event: AgentEvent<'_>| {
//!     if let AgentEvent::Text(text) = event {
//!         print!("{text}");
//!     }
//! };
//! let outcome = agent.run_turn(&mut state, "Hello!", &CancelToken::new(), &mut sink).await;
//! println!("\n{:?} after {} steps", outcome.end, outcome.progress.steps);
//! # }
//! ```

mod reply_stream;
mod states;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use engram_core::llm::json_protocol;
use engram_core::{ChatModel, LlmError, Message, ModelInfo, ToolCall, ToolOutput};
use serde::{Deserialize, Serialize};

use crate::cancel::CancelToken;
use crate::prompt::SystemPrompt;
use crate::run_state::{
    NextAction, RunProgress, RunState, RunStateError, RunStatus, missing_tool_results,
};
use states::{StepError, TurnContext};

/// Steps (model calls) a run may take by default.
pub const DEFAULT_MAX_STEPS: u32 = 20;

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Native tool calls (function calling): tools go in the request, calls come back as such.
    #[default]
    Native,
    /// The JSON protocol for models without native tools: the system prompt lists the tools and
    /// the model answers `{"thought", "tool", "params"}` (see [`json_protocol`]).
    Json,
}

impl ToolMode {
    /// The mode a model supports, as its client reports it.
    pub fn for_model(info: &ModelInfo) -> Self {
        if info.native_tools {
            ToolMode::Native
        } else {
            ToolMode::Json
        }
    }
}

/// How the agent runs.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Model calls a run may make before it is stopped without an answer.
    pub max_steps: u32,
    /// Native tool calls or the JSON protocol.
    pub tool_mode: ToolMode,
    /// Longest answer per model call, in tokens (`None`: the client's default).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (`None`: the client's default).
    pub temperature: Option<f32>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_steps: DEFAULT_MAX_STEPS,
            tool_mode: ToolMode::Native,
            max_tokens: None,
            temperature: None,
        }
    }
}

/// Something that happened during a run, streamed to the caller as it happens.
#[derive(Debug)]
#[non_exhaustive]
pub enum AgentEvent<'a> {
    /// A Reasoning step (model call) starts; steps count from 1.
    StepStarted {
        /// The step's number.
        step: u32,
    },
    /// More answer text, as it arrives. (With the JSON protocol, the reply inside the protocol
    /// object, decoded, or text the model wrote outside any object.)
    Text(&'a str),
    /// More of the model's visible reasoning.
    Reasoning(&'a str),
    /// The model's stated reason for its next action (JSON protocol).
    Thought(&'a str),
    /// The model call failed before anything arrived and is being retried.
    Retrying {
        /// The attempt about to start (2 for the first retry).
        attempt: u32,
        /// How long the client waits first.
        delay: Duration,
        /// Why.
        reason: &'a str,
    },
    /// A warning worth showing (an answer cut off at the token limit, ...).
    Notice(&'a str),
    /// A tool call starts.
    ToolStarted {
        /// The call.
        call: &'a ToolCall,
    },
    /// A tool call finished.
    ToolFinished {
        /// The call.
        call: &'a ToolCall,
        /// What it returned.
        output: &'a ToolOutput,
        /// How long it took.
        elapsed: Duration,
    },
    /// The answer is complete (its text has already been streamed as [`AgentEvent::Text`]).
    Answer(&'a str),
}

/// Where agent events go: a callback run on each event. Keep it quick; the run waits for it.
pub type AgentSink<'a> = dyn FnMut(AgentEvent<'_>) + Send + 'a;

/// How long one step took, and how much of it was the model and the tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepTiming {
    /// The step's number, from 1.
    pub step: u32,
    /// The whole step: Reasoning plus the Action after it, if any.
    pub total: Duration,
    /// Waiting for the model (the request, the stream, retries).
    pub model: Duration,
    /// Running the tools (from the first call's start to the last one's end).
    pub tools: Duration,
}

impl StepTiming {
    /// The agent's own time: the step minus model and tool time.
    pub fn overhead(&self) -> Duration {
        self.total.saturating_sub(self.model + self.tools)
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The model call failed (already retried where that made sense).
    #[error("{0}")]
    Model(#[from] LlmError),
    /// The run state could not be read or written.
    #[error("{0}")]
    State(#[from] RunStateError),
}

impl RunError {
    /// A short class name for logs and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::Model(e) => e.kind(),
            RunError::State(_) => "state",
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// With this answer.
    Answered(String),
    /// Without an answer, after this many steps.
    MaxSteps(u32),
    /// Cancelled; the history was left consistent.
    Cancelled,
    /// With an error.
    Failed(RunError),
}

impl RunEnd {
    /// The status a run state records for this end.
    pub fn status(&self) -> RunStatus {
        match self {
            RunEnd::Answered(_) => RunStatus::Answered,
            RunEnd::MaxSteps(steps) => RunStatus::MaxSteps { steps: *steps },
            RunEnd::Cancelled => RunStatus::Cancelled,
            RunEnd::Failed(e) => RunStatus::Failed {
                kind: e.kind().to_string(),
                message: e.to_string(),
            },
        }
    }

    /// Why the run did not answer, as one sentence for the user; `None` for an answer.
    pub fn error_message(&self) -> Option<String> {
        match self {
            RunEnd::Answered(_) => None,
            RunEnd::MaxSteps(steps) => Some(format!(
                "the agent used all {steps} steps without giving an answer; raise the limit (--max-steps, or max_steps in [agent]) or split the task into smaller ones."
            )),
            RunEnd::Cancelled => Some("the run was cancelled.".to_string()),
            RunEnd::Failed(e) => Some(e.to_string()),
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// How it ended.
    pub end: RunEnd,
    /// Steps taken and tokens spent (summed over the steps).
    pub progress: RunProgress,
    /// Each step's timing.
    pub timings: Vec<StepTiming>,
    /// The whole run, wall time.
    pub elapsed: Duration,
}

impl RunOutcome {
    /// The answer, if the run gave one.
    pub fn answer(&self) -> Option<&str> {
        match &self.end {
            RunEnd::Answered(text) => Some(text),
            _ => None,
        }
    }
}

/// Hooks around each user turn, for the memory layer: context to put before the conversation,
/// and work to do once the turn is over (extraction). Both default to doing nothing.
#[async_trait]
pub trait TurnHooks: Send + Sync {
    /// Messages placed after the system prompt in every request of this turn (e.g. a system
    /// message with what memory knows that is relevant to `input`). Called once per turn,
    /// before the first model call; failures should be logged and yield no messages.
    async fn context(&self, input: &str, state: &dyn RunState) -> Vec<Message> {
        let _ = (input, state);
        Vec::new()
    }

    /// Called after every turn, whatever its end, with the state as the turn left it. Must not
    /// keep the user waiting: spawn long work (extraction, merging) and return.
    async fn after_turn(&self, outcome: &RunOutcome, state: &dyn RunState) {
        let _ = (outcome, state);
    }
}

/// The result text the model gets for a tool call that did not finish.
const CANCELLED_REASON: &str = "the run was cancelled before it finished";

/// The controller: runs turns of the state machine against a model.
pub struct Agent {
    model: Arc<dyn ChatModel>,
    prompt: SystemPrompt,
    config: AgentConfig,
    hooks: Option<Arc<dyn TurnHooks>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", self.model.info())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Which state runs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Reasoning,
    Action,
    Answer,
}

impl Agent {
    /// An agent for `model` with this system prompt and configuration.
    pub fn new(model: Arc<dyn ChatModel>, prompt: SystemPrompt, config: AgentConfig) -> Self {
        Self {
            model,
            prompt,
            config,
            hooks: None,
        }
    }

    /// Adds turn hooks (memory context, extraction).
    pub fn with_hooks(mut self, hooks: Arc<dyn TurnHooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// The model behind the agent.
    pub fn model_info(&self) -> &ModelInfo {
        self.model.info()
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The system prompt (before the JSON-protocol section, which is added per turn).
    pub fn prompt(&self) -> &SystemPrompt {
        &self.prompt
    }

    /// Runs one user turn to its end: an answer, the step limit, cancellation or an error.
    ///
    /// The user's `input` is appended to the state's conversation, then the state machine runs.
    /// Events stream to `sink` as they happen. Cancelling `cancel` stops the model call or the
    /// tools at once; every tool call in the history still gets a result (a "cancelled" error
    /// for those that did not finish), so the next turn's request is valid. The outcome is also
    /// recorded in the state ([`RunState::status`]).
    pub async fn run_turn(
        &self,
        state: &mut dyn RunState,
        input: &str,
        cancel: &CancelToken,
        sink: &mut AgentSink<'_>,
    ) -> RunOutcome {
        let started = Instant::now();
        let mut timings = Vec::new();
        let end = match self.drive(state, input, cancel, sink, &mut timings).await {
            Ok(end) => end,
            Err(StepError::Cancelled) => RunEnd::Cancelled,
            Err(StepError::Failed(e)) => RunEnd::Failed(e),
        };
        // Best effort: if the state cannot record the end, the outcome still says it.
        let _ = state.set_status(end.status()).await;
        let progress = state.progress().await.unwrap_or_default();
        let outcome = RunOutcome {
            end,
            progress,
            timings,
            elapsed: started.elapsed(),
        };
        if let Some(hooks) = &self.hooks {
            hooks.after_turn(&outcome, state).await;
        }
        outcome
    }

    async fn drive(
        &self,
        state: &mut dyn RunState,
        input: &str,
        cancel: &CancelToken,
        sink: &mut AgentSink<'_>,
        timings: &mut Vec<StepTiming>,
    ) -> Result<RunEnd, StepError> {
        self.start(state, input).await?;
        let context = TurnContext {
            model: self.model.as_ref(),
            config: &self.config,
            tools: match self.config.tool_mode {
                ToolMode::Native => state.list_tools(),
                ToolMode::Json => Vec::new(),
            },
        };
        let mut phase = Phase::Reasoning;
        loop {
            match phase {
                Phase::Reasoning => {
                    let steps = state.progress().await?.steps;
                    if steps >= self.config.max_steps {
                        return Ok(RunEnd::MaxSteps(self.config.max_steps));
                    }
                    let step = steps + 1;
                    sink(AgentEvent::StepStarted { step });
                    let step_started = Instant::now();
                    let model = states::reasoning(&context, state, cancel, sink).await?;
                    timings.push(StepTiming {
                        step,
                        total: step_started.elapsed(),
                        model,
                        tools: Duration::ZERO,
                    });
                    phase = match state.next_action().await? {
                        Some(NextAction::Tools { .. }) => Phase::Action,
                        Some(NextAction::Answer { .. }) | None => Phase::Answer,
                    };
                }
                Phase::Action => {
                    let action_started = Instant::now();
                    let tools = states::action(&context, state, cancel, sink).await?;
                    if let Some(timing) = timings.last_mut() {
                        timing.total += action_started.elapsed();
                        timing.tools = tools;
                    }
                    phase = Phase::Reasoning;
                }
                Phase::Answer => {
                    let text = states::answer(state, sink).await?;
                    return Ok(RunEnd::Answered(text));
                }
            }
        }
    }

    /// Begins a turn: closes tool calls an earlier run left open, sets the goal and the
    /// instructions, and appends the user's message.
    async fn start(&self, state: &mut dyn RunState, input: &str) -> Result<(), RunStateError> {
        let open = missing_tool_results(&state.history().await?, CANCELLED_REASON);
        if !open.is_empty() {
            state.update(open).await?;
        }
        let goal = vec![Message::user(input)];
        state.set_goal(goal.clone()).await?;
        state.set_status(RunStatus::Running).await?;

        let mut prompt = self.prompt.clone();
        if self.config.tool_mode == ToolMode::Json {
            prompt.push_section(
                "Tool protocol",
                json_protocol::instructions(&state.list_tools()),
            );
        }
        let mut instructions = vec![Message::system(prompt.render())];
        if let Some(hooks) = &self.hooks {
            instructions.extend(hooks.context(input, &*state).await);
        }
        state.set_instructions(instructions).await?;
        state.update(goal).await
    }
}
