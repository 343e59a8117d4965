//! The three states. Each reads and writes only the run state; the controller picks the next.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_core::llm::json_protocol::{self, ProtocolAction};
use engram_core::{
    AssistantMessage, ChatModel, ChatRequest, FinishReason, Message, StreamEvent, ToolCall,
    ToolOutput, ToolSpec,
};
use tokio::task::JoinSet;

use super::reply_stream::ReplyStream;
use super::{AgentConfig, AgentEvent, AgentSink, CANCELLED_REASON, RunError, ToolMode};
use crate::cancel::CancelToken;
use crate::run_state::{NextAction, RunState, RunStateError, RunStatus, cancelled_result};

/// What a turn's states share: the model, the settings, the tools offered.
pub(super) struct TurnContext<'a> {
    pub model: &'a dyn ChatModel,
    pub config: &'a AgentConfig,
    /// The tools sent with each request (none with the JSON protocol).
    pub tools: Vec<ToolSpec>,
}

impl TurnContext<'_> {
    fn json_protocol(&self) -> bool {
        self.config.tool_mode == ToolMode::Json
    }
}

/// Why a state stopped the run.
#[derive(Debug)]
pub(super) enum StepError {
    Cancelled,
    Failed(RunError),
}

impl From<RunStateError> for StepError {
    fn from(e: RunStateError) -> Self {
        StepError::Failed(RunError::State(e))
    }
}

/// Reasoning: sends the conversation to the model, streams its answer to the sink, appends it
/// to the history, and records the next action (tool calls, or the answer). Returns the time
/// spent waiting for the model.
pub(super) async fn reasoning(
    ctx: &TurnContext<'_>,
    state: &mut dyn RunState,
    cancel: &CancelToken,
    sink: &mut AgentSink<'_>,
) -> Result<Duration, StepError> {
    let mut messages = state.instructions().await?;
    messages.extend(state.history().await?);
    let call_id = format!("call_{}", messages.len());
    let request = ChatRequest {
        messages,
        tools: ctx.tools.clone(),
        max_tokens: ctx.config.max_tokens,
        temperature: ctx.config.temperature,
        ..ChatRequest::default()
    };

    let json = ctx.json_protocol();
    // The text shown so far, kept for the history if the user cancels mid-answer.
    let mut shown = String::new();
    // Under the JSON protocol, only the reply inside the object is shown.
    let mut protocol = ReplyStream::new();
    let started = Instant::now();
    let result = {
        let mut on_event = |event: &StreamEvent| match event {
            StreamEvent::TextDelta(text) if json => {
                let visible = protocol.push(text);
                if !visible.is_empty() {
                    shown.push_str(&visible);
                    sink(AgentEvent::Text(&visible));
                }
            }
            StreamEvent::TextDelta(text) => {
                shown.push_str(text);
                sink(AgentEvent::Text(text));
            }
            StreamEvent::ReasoningDelta(text) => sink(AgentEvent::Reasoning(text)),
            StreamEvent::Retrying {
                attempt,
                delay,
                reason,
            } => sink(AgentEvent::Retrying {
                attempt: *attempt,
                delay: *delay,
                reason,
            }),
            _ => {}
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            result = ctx.model.chat_stream(&request, &mut on_event) => Some(result),
        }
    };
    let model_time = started.elapsed();
    let response = match result {
        None => {
            if !shown.trim().is_empty() {
                // Keep what the user saw, marked, so the next turn knows where it stopped.
                state
                    .update(vec![Message::assistant(format!(
                        "{shown}\n\n[interrupted by the user]"
                    ))])
                    .await?;
            }
            return Err(StepError::Cancelled);
        }
        Some(Err(e)) => return Err(StepError::Failed(RunError::Model(e))),
        Some(Ok(response)) => response,
    };
    state.record_step(response.usage).await?;
    match response.finish_reason {
        FinishReason::Length => {
            sink(AgentEvent::Notice(
                "the model's answer was cut off at its token limit (max_tokens)",
            ));
        }
        FinishReason::ContentFilter => {
            sink(AgentEvent::Notice(
                "the provider's content filter stopped the answer, or the model refused",
            ));
        }
        _ => {}
    }

    let (message, next) = if json {
        read_protocol_answer(response.message, call_id, &protocol, sink)
    } else {
        let message = response.message;
        let next = if message.tool_calls.is_empty() {
            NextAction::Answer {
                text: message.content.clone(),
            }
        } else {
            NextAction::Tools {
                calls: message.tool_calls.clone(),
            }
        };
        (message, next)
    };
    state.update(vec![Message::Assistant(message)]).await?;
    state.set_next_action(Some(next)).await?;
    Ok(model_time)
}

/// Reads an answer under the JSON protocol: the history keeps it in canonical protocol form
/// (so the model sees well-formed examples of its own turns), and the action becomes either the
/// reply or one tool call.
fn read_protocol_answer(
    message: AssistantMessage,
    call_id: String,
    streamed: &ReplyStream,
    sink: &mut AgentSink<'_>,
) -> (AssistantMessage, NextAction) {
    let reply = json_protocol::parse_reply(&message.content);
    if let Some(thought) = &reply.thought {
        sink(AgentEvent::Thought(thought));
    }
    if let Some(rest) = streamed.remainder(&reply) {
        sink(AgentEvent::Text(&rest));
    }
    let next = match &reply.action {
        ProtocolAction::Reply(text) => NextAction::Answer { text: text.clone() },
        ProtocolAction::Tool { name, params } => NextAction::Tools {
            calls: vec![ToolCall::with_value(call_id, name.clone(), params)],
        },
    };
    let canonical = AssistantMessage {
        content: json_protocol::render_reply(&reply),
        tool_calls: Vec::new(),
        ..message
    };
    (canonical, next)
}

/// Action: runs the chosen tool calls concurrently through the registry (which checks the
/// arguments and turns every failure into text for the model), then appends one result per
/// call, in call order. On cancellation the calls still running are stopped and get a
/// "cancelled" result. Returns the time the tools took.
pub(super) async fn action(
    ctx: &TurnContext<'_>,
    state: &mut dyn RunState,
    cancel: &CancelToken,
    sink: &mut AgentSink<'_>,
) -> Result<Duration, StepError> {
    let calls = match state.next_action().await? {
        Some(NextAction::Tools { calls }) => calls,
        _ => return Ok(Duration::ZERO),
    };
    let registry = state.tools();
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    let mut index_of = HashMap::with_capacity(calls.len());
    for (index, call) in calls.iter().enumerate() {
        sink(AgentEvent::ToolStarted { call });
        let registry = Arc::clone(&registry);
        let call = call.clone();
        let handle = tasks.spawn(async move {
            let started = Instant::now();
            let output = registry.call_tool(&call).await;
            (output, started.elapsed())
        });
        index_of.insert(handle.id(), index);
    }

    let mut results: Vec<Option<ToolOutput>> = vec![None; calls.len()];
    let mut cancelled = false;
    while !tasks.is_empty() {
        let joined = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                cancelled = true;
                break;
            }
            joined = tasks.join_next_with_id() => joined,
        };
        let (id, output, elapsed) = match joined {
            None => break,
            Some(Ok((id, (output, elapsed)))) => (id, output, elapsed),
            // The registry catches tool panics; this is the task itself failing.
            Some(Err(e)) => (
                e.id(),
                ToolOutput::error(format!("the tool stopped unexpectedly: {e}")),
                started.elapsed(),
            ),
        };
        if let Some(&index) = index_of.get(&id) {
            sink(AgentEvent::ToolFinished {
                call: &calls[index],
                output: &output,
                elapsed,
            });
            results[index] = Some(output);
        }
    }
    // Dropping the set aborts the calls still running (the shell tools kill their processes).
    drop(tasks);
    let tool_time = started.elapsed();

    let json = ctx.json_protocol();
    let messages = calls
        .iter()
        .zip(results)
        .map(|(call, output)| match (output, json) {
            (Some(output), false) => Message::tool_output(call.id.clone(), &output),
            (None, false) => cancelled_result(call, CANCELLED_REASON),
            (Some(output), true) => Message::user(format!(
                "Result of tool `{}`:\n{}",
                call.name,
                output.to_model_text()
            )),
            (None, true) => Message::user(format!(
                "Result of tool `{}`: it did not finish: {CANCELLED_REASON}.",
                call.name
            )),
        })
        .collect();
    state.update(messages).await?;
    state.set_next_action(None).await?;
    if cancelled {
        Err(StepError::Cancelled)
    } else {
        Ok(tool_time)
    }
}

/// Answer: hands over the answer chosen by Reasoning (its text has been streamed already) and
/// marks the run done. Returns the text.
pub(super) async fn answer(
    state: &mut dyn RunState,
    sink: &mut AgentSink<'_>,
) -> Result<String, StepError> {
    let text = match state.next_action().await? {
        Some(NextAction::Answer { text }) => text,
        _ => String::new(),
    };
    sink(AgentEvent::Answer(&text));
    state.set_next_action(None).await?;
    state.set_status(RunStatus::Answered).await?;
    Ok(text)
}
