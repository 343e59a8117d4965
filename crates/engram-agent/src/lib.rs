//! engram's agent.
//!
//! - [`agent`]: the ReAct state machine (Reasoning -> Action -> ... -> Answer) and its
//!   controller, [`Agent`], which streams what happens as [`AgentEvent`]s.
//! - [`run_state`]: the run state the states read and write ([`RunState`], with the in-memory
//!   baseline [`InMemoryRunState`]), dumpable for replay.
//! - [`stored_run_state`]: the run state kept in a session file, with working memory on a
//!   token budget ([`StoredRunState`]).
//! - [`prompt`]: the system prompt, a versioned text file plus added sections.
//! - [`tools`]: the tool registry and the built-in file, shell and note tools, confined to a
//!   workspace.
//! - [`CancelToken`]: how a run is cancelled from outside (Ctrl-C).
//! - [`scheduler`]: scheduled jobs (`at`, `every`, `cron` with time zones), the heartbeat, the
//!   gateway daemon that runs them through a [`scheduler::TurnRunner`], and the `cron` tool.
//! - [`skills`]: SKILL.md skills (built-in and workspace), their prompt summary and the
//!   `load_skill` tool.
//! - [`workspace`]: the bootstrap files of the system prompt and `engram onboard`'s templates.

pub mod agent;
mod cancel;
pub mod prompt;
pub mod run_state;
pub mod scheduler;
pub mod skills;
pub mod stored_run_state;
pub mod tools;
pub mod workspace;

pub use agent::{
    Agent, AgentConfig, AgentEvent, AgentSink, DEFAULT_MAX_STEPS, RunEnd, RunError, RunOutcome,
    StepTiming, ToolMode, TurnHooks,
};
pub use cancel::CancelToken;
pub use prompt::{PromptSection, PromptVars, SystemPrompt};
pub use run_state::{
    InMemoryRunState, NextAction, RunProgress, RunRecord, RunState, RunStateError, RunStatus,
};
pub use stored_run_state::StoredRunState;
