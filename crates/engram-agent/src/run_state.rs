//! The run state ("agent memory" of reference design 2): everything one agent run reads and
//! writes — the goal, the instructions, the conversation, the tools, the next action, whether it
//! is done, the steps taken and the tokens spent.
//!
//! The agent's states are stateless functions over a [`RunState`]; a controller picks the next
//! state by reading it. The interface is async because later implementations keep the state in a
//! store. [`InMemoryRunState`] keeps a plain message list: the baseline the others are compared
//! with. [`RunState::dump`] gives a serialisable [`RunRecord`] for observation and replay, and
//! [`InMemoryRunState::from_record`] turns one back into a state.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::llm::{Message, ToolCall, Usage};
use engram_core::{Tool, ToolSpec};
use serde::{Deserialize, Serialize};

use crate::tools::ToolRegistry;

/// The `format` field of a [`RunRecord`], bumped when its shape changes.
pub const RUN_RECORD_FORMAT: &str = "engram-run/1";

/// Why a run state could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunStateError {
    /// The storage behind the state failed.
    #[error("the run state could not be {action}: {detail}")]
    Storage {
        /// What was being done ("saved", "read").
        action: String,
        /// The underlying error.
        detail: String,
    },
}

/// What the agent decided to do next, read from the model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NextAction {
    /// Run these tool calls (several run concurrently), then reason again.
    Tools {
        /// The calls, in the order the model made them.
        calls: Vec<ToolCall>,
    },
    /// Give the user this answer and stop.
    Answer {
        /// The answer text.
        text: String,
    },
}

/// Where a run stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunStatus {
    /// No run has started yet.
    #[default]
    Idle,
    /// A run is under way.
    Running,
    /// The run ended with an answer.
    Answered,
    /// The run used all its steps without an answer.
    MaxSteps {
        /// The step limit that was reached.
        steps: u32,
    },
    /// The user cancelled the run.
    Cancelled,
    /// The run failed (the model or the state storage).
    Failed {
        /// A short class name (`rate_limited`, `auth`, `state`, ...).
        kind: String,
        /// The error, as shown to the user.
        message: String,
    },
}

impl RunStatus {
    /// Whether the run has ended (the `done` flag of the reference design).
    pub fn is_done(&self) -> bool {
        !matches!(self, RunStatus::Idle | RunStatus::Running)
    }
}

/// Steps taken and tokens spent by the current run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunProgress {
    /// Model calls made (Reasoning steps).
    pub steps: u32,
    /// Tokens, summed over the steps.
    pub usage: Usage,
}

/// A serialisable record of a run state, for observation and replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Always [`RUN_RECORD_FORMAT`].
    pub format: String,
    /// The current run's goal (the user's request).
    pub goal: Vec<Message>,
    /// What precedes the conversation in every request: the system prompt and any context.
    pub instructions: Vec<Message>,
    /// The conversation, oldest first: user messages, answers, tool calls and their results.
    pub history: Vec<Message>,
    /// The names of the tools available.
    pub tools: Vec<String>,
    /// The action chosen but not yet taken, if any.
    pub next_action: Option<NextAction>,
    /// Where the run stands.
    pub status: RunStatus,
    /// Whether the run has ended.
    pub done: bool,
    /// Steps and tokens of the current run.
    pub progress: RunProgress,
}

impl RunRecord {
    /// The record as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data into a string cannot fail; fall back to compact just in case.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// The state of an agent run, read and written by the agent's states.
///
/// Object safe: the agent takes `&mut dyn RunState`. Every write is a single call, so an
/// implementation that persists can make each one atomic.
#[async_trait]
pub trait RunState: Send + Sync {
    /// Starts a new run towards `goal`: records it and clears the previous run's next action,
    /// status, steps and usage. The conversation is kept (the goal is not appended to it; the
    /// agent does that with [`RunState::update`]).
    async fn set_goal(&mut self, goal: Vec<Message>) -> Result<(), RunStateError>;

    /// The current run's goal, as messages.
    async fn goal(&self) -> Result<Vec<Message>, RunStateError>;

    /// Sets what precedes the conversation in each request (system prompt, memory context).
    async fn set_instructions(&mut self, instructions: Vec<Message>) -> Result<(), RunStateError>;

    /// What precedes the conversation in each request.
    async fn instructions(&self) -> Result<Vec<Message>, RunStateError>;

    /// Appends messages to the conversation, in order.
    async fn update(&mut self, messages: Vec<Message>) -> Result<(), RunStateError>;

    /// The conversation the model sees next, oldest first.
    async fn history(&self) -> Result<Vec<Message>, RunStateError>;

    /// Records the action chosen (or clears it).
    async fn set_next_action(&mut self, action: Option<NextAction>) -> Result<(), RunStateError>;

    /// The action chosen but not yet taken.
    async fn next_action(&self) -> Result<Option<NextAction>, RunStateError>;

    /// Counts one model call and adds the tokens it spent.
    async fn record_step(&mut self, usage: Usage) -> Result<(), RunStateError>;

    /// Steps taken and tokens spent by the current run.
    async fn progress(&self) -> Result<RunProgress, RunStateError>;

    /// Records where the run stands; any status but `Idle`/`Running` means done.
    async fn set_status(&mut self, status: RunStatus) -> Result<(), RunStateError>;

    /// Where the run stands.
    async fn status(&self) -> Result<RunStatus, RunStateError>;

    /// Whether the run has ended.
    async fn done(&self) -> Result<bool, RunStateError> {
        Ok(self.status().await?.is_done())
    }

    /// Forgets the conversation and the run (a new conversation); the tools stay.
    async fn clear(&mut self) -> Result<(), RunStateError>;

    /// A serialisable record of everything above.
    async fn dump(&self) -> Result<RunRecord, RunStateError>;

    /// The tools available, through which calls are made (it checks arguments).
    fn tools(&self) -> Arc<ToolRegistry>;

    /// The tools' descriptions, in the order the model sees them.
    fn list_tools(&self) -> Vec<ToolSpec> {
        self.tools().specs()
    }

    /// The tool with this name.
    fn get_tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools().get(name).cloned()
    }
}

/// A run state kept in memory: a plain message list (the baseline).
#[derive(Debug, Clone)]
pub struct InMemoryRunState {
    tools: Arc<ToolRegistry>,
    goal: Vec<Message>,
    instructions: Vec<Message>,
    history: Vec<Message>,
    next_action: Option<NextAction>,
    status: RunStatus,
    progress: RunProgress,
}

impl InMemoryRunState {
    /// An empty state with these tools.
    pub fn new(tools: Arc<ToolRegistry>) -> Self {
        Self {
            tools,
            goal: Vec::new(),
            instructions: Vec::new(),
            history: Vec::new(),
            next_action: None,
            status: RunStatus::Idle,
            progress: RunProgress::default(),
        }
    }

    /// A state restored from a dump (for replay or to continue a conversation), with these
    /// tools. Tool names in the record are not checked against them.
    pub fn from_record(record: RunRecord, tools: Arc<ToolRegistry>) -> Self {
        Self {
            tools,
            goal: record.goal,
            instructions: record.instructions,
            history: record.history,
            next_action: record.next_action,
            status: record.status,
            progress: record.progress,
        }
    }

    /// The conversation, without copying it.
    pub fn messages(&self) -> &[Message] {
        &self.history
    }
}

#[async_trait]
impl RunState for InMemoryRunState {
    async fn set_goal(&mut self, goal: Vec<Message>) -> Result<(), RunStateError> {
        self.goal = goal;
        self.next_action = None;
        self.status = RunStatus::Idle;
        self.progress = RunProgress::default();
        Ok(())
    }

    async fn goal(&self) -> Result<Vec<Message>, RunStateError> {
        Ok(self.goal.clone())
    }

    async fn set_instructions(&mut self, instructions: Vec<Message>) -> Result<(), RunStateError> {
        self.instructions = instructions;
        Ok(())
    }

    async fn instructions(&self) -> Result<Vec<Message>, RunStateError> {
        Ok(self.instructions.clone())
    }

    async fn update(&mut self, messages: Vec<Message>) -> Result<(), RunStateError> {
        self.history.extend(messages);
        Ok(())
    }

    async fn history(&self) -> Result<Vec<Message>, RunStateError> {
        Ok(self.history.clone())
    }

    async fn set_next_action(&mut self, action: Option<NextAction>) -> Result<(), RunStateError> {
        self.next_action = action;
        Ok(())
    }

    async fn next_action(&self) -> Result<Option<NextAction>, RunStateError> {
        Ok(self.next_action.clone())
    }

    async fn record_step(&mut self, usage: Usage) -> Result<(), RunStateError> {
        self.progress.steps = self.progress.steps.saturating_add(1);
        self.progress.usage += usage;
        Ok(())
    }

    async fn progress(&self) -> Result<RunProgress, RunStateError> {
        Ok(self.progress)
    }

    async fn set_status(&mut self, status: RunStatus) -> Result<(), RunStateError> {
        self.status = status;
        Ok(())
    }

    async fn status(&self) -> Result<RunStatus, RunStateError> {
        Ok(self.status.clone())
    }

    async fn clear(&mut self) -> Result<(), RunStateError> {
        let tools = Arc::clone(&self.tools);
        *self = Self::new(tools);
        Ok(())
    }

    async fn dump(&self) -> Result<RunRecord, RunStateError> {
        Ok(RunRecord {
            format: RUN_RECORD_FORMAT.to_string(),
            goal: self.goal.clone(),
            instructions: self.instructions.clone(),
            history: self.history.clone(),
            tools: self.tools.names().into_iter().map(str::to_string).collect(),
            next_action: self.next_action.clone(),
            status: self.status.clone(),
            done: self.status.is_done(),
            progress: self.progress,
        })
    }

    fn tools(&self) -> Arc<ToolRegistry> {
        Arc::clone(&self.tools)
    }
}

/// The tool results a conversation still owes: one "cancelled" error result for every tool call
/// of the last assistant message that has no result yet, in call order. Appending them makes the
/// history valid for both providers again (e.g. after a run was cancelled or its process died).
pub fn missing_tool_results(history: &[Message], reason: &str) -> Vec<Message> {
    let Some(last_call) = history
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(a) if !a.tool_calls.is_empty()))
    else {
        return Vec::new();
    };
    let Message::Assistant(assistant) = &history[last_call] else {
        return Vec::new();
    };
    let answered: Vec<&str> = history[last_call + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assistant
        .tool_calls
        .iter()
        .filter(|call| !answered.contains(&call.id.as_str()))
        .map(|call| cancelled_result(call, reason))
        .collect()
}

/// The tool result recorded for a call that never finished.
pub fn cancelled_result(call: &ToolCall, reason: &str) -> Message {
    Message::Tool(engram_core::ToolResultMessage {
        tool_call_id: call.id.clone(),
        content: format!("Error: tool '{}' did not finish: {reason}.", call.name),
        is_error: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::llm::{AssistantMessage, check_tool_pairing};

    fn state() -> InMemoryRunState {
        InMemoryRunState::new(Arc::new(ToolRegistry::new()))
    }

    #[tokio::test]
    async fn a_new_goal_resets_the_run_but_keeps_the_conversation() {
        let mut s = state();
        s.set_goal(vec![Message::user("one")]).await.unwrap();
        s.update(vec![Message::user("one"), Message::assistant("1")])
            .await
            .unwrap();
        s.record_step(Usage {
            input_tokens: 3,
            output_tokens: 2,
        })
        .await
        .unwrap();
        s.set_status(RunStatus::Answered).await.unwrap();
        assert!(s.done().await.unwrap());

        s.set_goal(vec![Message::user("two")]).await.unwrap();
        assert!(!s.done().await.unwrap());
        assert_eq!(s.progress().await.unwrap(), RunProgress::default());
        assert_eq!(s.goal().await.unwrap(), vec![Message::user("two")]);
        assert_eq!(s.history().await.unwrap().len(), 2);

        s.clear().await.unwrap();
        assert!(s.history().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_dump_round_trips_through_json() {
        let mut s = state();
        s.set_goal(vec![Message::user("go")]).await.unwrap();
        s.set_instructions(vec![Message::system("be good")])
            .await
            .unwrap();
        s.update(vec![Message::user("go")]).await.unwrap();
        s.set_next_action(Some(NextAction::Answer { text: "ok".into() }))
            .await
            .unwrap();
        s.set_status(RunStatus::MaxSteps { steps: 3 })
            .await
            .unwrap();
        let record = s.dump().await.unwrap();
        assert!(record.done);
        let text = record.to_json();
        assert!(text.contains("\"format\": \"engram-run/1\""), "{text}");
        assert!(text.contains("\"status\": \"max_steps\""), "{text}");
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
        let restored = InMemoryRunState::from_record(back, s.tools());
        assert_eq!(restored.dump().await.unwrap(), record);
    }

    #[test]
    fn missing_results_close_only_the_open_calls_in_order() {
        let call = |id: &str| ToolCall::new(id, "bash", "{}");
        let history = vec![
            Message::user("go"),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![call("a"), call("b"), call("c")],
                ..AssistantMessage::default()
            }),
            Message::tool_result("b", "done"),
        ];
        let missing = missing_tool_results(&history, "cancelled by the user");
        let ids: Vec<_> = missing
            .iter()
            .map(|m| match m {
                Message::Tool(t) => t.tool_call_id.clone(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(ids, ["a", "c"]);
        assert!(missing[0].text().contains("cancelled by the user"));
        let mut repaired = history.clone();
        repaired.extend(missing);
        check_tool_pairing(&repaired, true).unwrap();
        assert!(missing_tool_results(&repaired, "x").is_empty());
        assert!(missing_tool_results(&[Message::user("hi")], "x").is_empty());
    }
}
