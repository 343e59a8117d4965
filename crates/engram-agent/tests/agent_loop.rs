#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent's state machine against the scripted model server (real HTTP on 127.0.0.1, both
//! wire formats), with the real built-in tools in a temporary workspace and a real SQLite store.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use engram_agent::tools::{BuiltinOptions, NoteMemory, ToolRegistry, Workspace};
use engram_agent::{
    Agent, AgentConfig, AgentEvent, CancelToken, InMemoryRunState, NextAction, RunEnd, RunError,
    RunOutcome, RunState, RunStatus, SystemPrompt, ToolMode, TurnHooks,
};
use engram_core::llm::check_tool_pairing;
use engram_core::{LlmError, MemoryStore, Message, Scope, Usage};
use engram_llm::Provider;
use engram_llm::scripted::{ScriptedCall, ScriptedServer, Turn};
use engram_store_sqlite::SqliteStore;
use serde_json::{Value, json};

const PROVIDERS: [Provider; 2] = [Provider::OpenAi, Provider::Anthropic];

struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    server: ScriptedServer,
    agent: Agent,
    state: InMemoryRunState,
}

impl Fixture {
    async fn new(provider: Provider, turns: Vec<Turn>, config: AgentConfig) -> Self {
        Self::with_hooks(provider, turns, config, None).await
    }

    async fn with_hooks(
        provider: Provider,
        turns: Vec<Turn>,
        config: AgentConfig,
        hooks: Option<Arc<dyn TurnHooks>>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("ws");
        std::fs::create_dir(&ws).unwrap();
        let store: Arc<dyn MemoryStore> =
            Arc::new(SqliteStore::open(base.join("engram.db")).unwrap());
        let workspace = Workspace::confined(&ws).unwrap();
        let memory = NoteMemory {
            store,
            scope: Scope::user("alice"),
        };
        let registry =
            ToolRegistry::with_builtins(&workspace, &BuiltinOptions::default(), memory).unwrap();
        let server = ScriptedServer::start(turns).await.unwrap();
        let model = engram_llm::build(server.client_config(provider)).unwrap();
        let mut agent = Agent::new(model, SystemPrompt::plain("You are a test agent."), config);
        if let Some(hooks) = hooks {
            agent = agent.with_hooks(hooks);
        }
        Self {
            _dir: dir,
            ws,
            server,
            agent,
            state: InMemoryRunState::new(Arc::new(registry)),
        }
    }

    /// Runs a turn, collecting the events as short strings.
    async fn turn(&mut self, input: &str) -> (RunOutcome, Vec<String>) {
        self.turn_with(input, &CancelToken::new(), |_, _| {}).await
    }

    /// Runs a turn; `on_event` also sees each event (and may cancel).
    async fn turn_with(
        &mut self,
        input: &str,
        cancel: &CancelToken,
        mut on_event: impl FnMut(&AgentEvent<'_>, &CancelToken) + Send,
    ) -> (RunOutcome, Vec<String>) {
        let mut events = Vec::new();
        let token = cancel.clone();
        let mut sink = |event: AgentEvent<'_>| {
            on_event(&event, &token);
            events.push(describe(&event));
        };
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            self.agent
                .run_turn(&mut self.state, input, cancel, &mut sink),
        )
        .await
        .expect("the turn finished");
        (outcome, events)
    }

    fn history(&self) -> Vec<Message> {
        self.state.messages().to_vec()
    }

    /// Every recorded request was accepted and pairs tool calls and results.
    fn assert_consistent(&self) {
        self.server.check_tool_pairing().unwrap();
        check_tool_pairing(&self.history(), true).unwrap();
    }
}

fn describe(event: &AgentEvent<'_>) -> String {
    match event {
        AgentEvent::StepStarted { step } => format!("step {step}"),
        AgentEvent::Text(t) => format!("text {t}"),
        AgentEvent::Reasoning(t) => format!("reasoning {t}"),
        AgentEvent::Thought(t) => format!("thought {t}"),
        AgentEvent::Retrying { attempt, .. } => format!("retrying {attempt}"),
        AgentEvent::Notice(t) => format!("notice {t}"),
        AgentEvent::ToolStarted { call } => format!("start {} {}", call.name, call.id),
        AgentEvent::ToolFinished { call, output, .. } => format!(
            "done {} {} {}",
            call.name,
            call.id,
            if output.success { "ok" } else { "error" }
        ),
        AgentEvent::Answer(t) => format!("answer {t}"),
        other => format!("{other:?}"),
    }
}

fn tool_results(history: &[Message]) -> Vec<(String, String, bool)> {
    history
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_call_id.clone(), t.content.clone(), t.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn multi_step_tool_use_through_both_wire_formats() {
    for provider in PROVIDERS {
        let mut f = Fixture::new(
            provider,
            vec![
                Turn::tool_call(
                    "write_file",
                    json!({"path": "notes/a.txt", "content": "hello from the agent"}),
                )
                .usage(100, 20),
                Turn::tool_call("read_file", json!({"path": "notes/a.txt"})).usage(200, 30),
                Turn::text("The file says hello from the agent.")
                    .chunk_chars(5)
                    .usage(300, 40),
            ],
            AgentConfig::default(),
        )
        .await;
        let (outcome, events) = f.turn("Write a note file, then read it back.").await;
        assert_eq!(
            outcome.answer(),
            Some("The file says hello from the agent."),
            "{provider}: {events:?}"
        );
        assert_eq!(
            std::fs::read_to_string(f.ws.join("notes/a.txt")).unwrap(),
            "hello from the agent"
        );
        assert_eq!(outcome.progress.steps, 3);
        assert_eq!(
            outcome.progress.usage,
            Usage {
                input_tokens: 600,
                output_tokens: 90
            },
            "usage is summed over the steps"
        );
        assert_eq!(outcome.timings.len(), 3);
        assert!(outcome.timings.iter().all(|t| t.total >= t.model + t.tools));

        // The answer streamed in pieces before the final event.
        let texts: Vec<_> = events.iter().filter(|e| e.starts_with("text ")).collect();
        assert!(texts.len() > 3, "{events:?}");
        assert_eq!(
            events.last().unwrap(),
            "answer The file says hello from the agent."
        );
        assert_eq!(events.iter().filter(|e| e.starts_with("step ")).count(), 3);

        let requests = f.server.requests();
        assert_eq!(requests.len(), 3);
        assert!(
            requests[0]
                .tool_names()
                .contains(&"record_note".to_string())
        );
        assert_eq!(requests[0].provider(), Some(provider));
        assert!(
            requests[2]
                .body
                .to_string()
                .contains("hello from the agent")
        );
        f.assert_consistent();
        assert_eq!(f.state.status().await.unwrap(), RunStatus::Answered);
        assert!(f.state.done().await.unwrap());
    }
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently_and_results_keep_the_call_order() {
    for provider in PROVIDERS {
        let mut f = Fixture::new(
            provider,
            vec![
                Turn::tool_calls([
                    ScriptedCall::new("bash", json!({"command": "sleep 0.5; echo slow"}))
                        .with_id("c_slow"),
                    ScriptedCall::new("bash", json!({"command": "echo fast"})).with_id("c_fast"),
                ]),
                Turn::text("Both ran."),
            ],
            AgentConfig::default(),
        )
        .await;
        let (outcome, events) = f.turn("Run two commands.").await;
        assert_eq!(outcome.answer(), Some("Both ran."));
        let finished: Vec<_> = events.iter().filter(|e| e.starts_with("done ")).collect();
        assert_eq!(
            finished,
            ["done bash c_fast ok", "done bash c_slow ok"],
            "the fast call finished while the slow one ran: {events:?}"
        );
        let results = tool_results(&f.history());
        assert_eq!(results[0].0, "c_slow");
        assert!(results[0].1.contains("slow"));
        assert_eq!(results[1].0, "c_fast");
        assert!(results[1].1.contains("fast"));
        f.assert_consistent();
    }
}

#[tokio::test]
async fn malformed_arguments_go_back_to_the_model_and_the_loop_continues() {
    let mut f = Fixture::new(
        Provider::OpenAi,
        vec![
            Turn::tool_calls([
                ScriptedCall::raw("write_file", "[\"a.txt\", \"text\"]").with_id("c_array"),
                ScriptedCall::new("write_file", json!({"path": 5})).with_id("c_schema"),
            ]),
            Turn::tool_call("write_file", json!({"path": "a.txt", "content": "fixed"})),
            Turn::text("Written after fixing the arguments."),
        ],
        AgentConfig::default(),
    )
    .await;
    let (outcome, _) = f.turn("Write a.txt").await;
    assert_eq!(
        outcome.answer(),
        Some("Written after fixing the arguments.")
    );
    let results = tool_results(&f.history());
    assert!(
        results[0].2 && results[0].1.starts_with("Error: "),
        "{results:?}"
    );
    assert!(results[0].1.contains("not a JSON object"), "{results:?}");
    assert!(results[1].2, "{results:?}");
    assert!(
        results[1]
            .1
            .contains("invalid arguments for tool 'write_file'")
    );
    assert!(!results[2].2, "{results:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("a.txt")).unwrap(),
        "fixed"
    );
    // The model saw the errors.
    let second = f.server.request(2).unwrap().body.to_string();
    assert!(second.contains("not a JSON object"), "{second}");
    f.assert_consistent();
}

#[tokio::test]
async fn an_unknown_tool_is_an_error_the_model_can_read() {
    let mut f = Fixture::new(
        Provider::Anthropic,
        vec![
            Turn::tool_call("fly_to_the_moon", json!({"speed": "fast"})),
            Turn::text("I cannot fly."),
        ],
        AgentConfig::default(),
    )
    .await;
    let (outcome, events) = f.turn("Fly!").await;
    assert_eq!(outcome.answer(), Some("I cannot fly."));
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("done fly_to_the_moon") && e.ends_with("error"))
    );
    let results = tool_results(&f.history());
    assert!(
        results[0].1.contains("unknown tool 'fly_to_the_moon'"),
        "{results:?}"
    );
    assert!(
        results[0].1.contains("read_file"),
        "lists the tools: {results:?}"
    );
    f.assert_consistent();
}

#[tokio::test]
async fn max_steps_ends_the_run_with_a_clear_message_and_a_consistent_history() {
    let mut f = Fixture::new(
        Provider::OpenAi,
        vec![
            Turn::tool_call("list_dir", json!({"path": "."})),
            Turn::tool_call("list_dir", json!({"path": "."})),
            Turn::text("never requested"),
        ],
        AgentConfig {
            max_steps: 2,
            ..AgentConfig::default()
        },
    )
    .await;
    let (outcome, _) = f.turn("Look around forever.").await;
    assert_eq!(outcome.end, RunEnd::MaxSteps(2));
    assert_eq!(outcome.progress.steps, 2);
    let message = outcome.end.error_message().unwrap();
    assert!(message.contains("all 2 steps"), "{message}");
    assert!(message.contains("--max-steps"), "{message}");
    assert_eq!(f.server.requests().len(), 2);
    assert_eq!(f.server.remaining_turns(), 1);
    assert_eq!(
        f.state.status().await.unwrap(),
        RunStatus::MaxSteps { steps: 2 }
    );
    f.assert_consistent();
}

#[tokio::test]
async fn cancelling_during_tools_keeps_finished_results_and_closes_the_rest() {
    for provider in PROVIDERS {
        let mut f = Fixture::new(
            provider,
            vec![
                Turn::tool_calls([
                    ScriptedCall::new("bash", json!({"command": "sleep 300"})).with_id("c_sleep"),
                    ScriptedCall::new("bash", json!({"command": "echo quick"})).with_id("c_quick"),
                ]),
                Turn::text("Starting over."),
            ],
            AgentConfig::default(),
        )
        .await;
        let cancel = CancelToken::new();
        let (outcome, events) = f
            .turn_with("Sleep a long time.", &cancel, |event, token| {
                if let AgentEvent::ToolFinished { call, .. } = event
                    && call.id == "c_quick"
                {
                    token.cancel();
                }
            })
            .await;
        assert_eq!(outcome.end, RunEnd::Cancelled, "{events:?}");
        assert_eq!(f.state.status().await.unwrap(), RunStatus::Cancelled);
        let results = tool_results(&f.history());
        assert_eq!(results.len(), 2, "{results:?}");
        assert_eq!(results[0].0, "c_sleep");
        assert!(
            results[0].2 && results[0].1.contains("cancelled"),
            "{results:?}"
        );
        assert_eq!(results[1].0, "c_quick");
        assert!(results[1].1.contains("quick") && !results[1].2);
        check_tool_pairing(&f.history(), true).unwrap();

        // The next turn's request is valid: the server (which refuses broken pairs) accepts it.
        let (outcome, _) = f.turn("Never mind.").await;
        assert_eq!(outcome.answer(), Some("Starting over."));
        f.assert_consistent();
        assert!(f.server.requests().iter().all(|r| r.refused.is_none()));
    }
}

#[tokio::test]
async fn cancelling_mid_answer_keeps_the_shown_text_marked_as_interrupted() {
    let mut f = Fixture::new(
        Provider::OpenAi,
        vec![
            Turn::text("one two three four five six seven eight nine ten")
                .chunk_delay(Duration::from_millis(50)),
            Turn::text("Fine."),
        ],
        AgentConfig::default(),
    )
    .await;
    let cancel = CancelToken::new();
    let (outcome, events) = f
        .turn_with("Count slowly.", &cancel, |event, token| {
            if matches!(event, AgentEvent::Text(_)) {
                token.cancel();
            }
        })
        .await;
    assert_eq!(outcome.end, RunEnd::Cancelled, "{events:?}");
    let history = f.history();
    let last = history.last().unwrap();
    assert!(last.text().starts_with("one"), "{history:?}");
    assert!(last.text().ends_with("[interrupted by the user]"));
    let (outcome, _) = f.turn("Stop counting.").await;
    assert_eq!(outcome.answer(), Some("Fine."));
    f.assert_consistent();
}

#[tokio::test]
async fn a_cancel_before_the_model_answers_sends_nothing_more() {
    let mut f = Fixture::new(
        Provider::Anthropic,
        vec![Turn::text("late").delay(Duration::from_secs(30))],
        AgentConfig::default(),
    )
    .await;
    let cancel = CancelToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        })
    };
    let (outcome, _) = f.turn_with("Hello?", &cancel, |_, _| {}).await;
    canceller.await.unwrap();
    assert_eq!(outcome.end, RunEnd::Cancelled);
    assert_eq!(f.history(), vec![Message::user("Hello?")]);
}

#[tokio::test]
async fn the_json_protocol_drives_models_without_native_tools() {
    let mut f = Fixture::new(
        Provider::OpenAi,
        vec![
            Turn::text(
                r#"{"thought": "I should write the file", "tool": "write_file", "params": {"path": "j.txt", "content": "from json"}}"#,
            ),
            Turn::text(
                "```json\n{\"thought\": \"done\", \"tool\": \"chat\", \"params\": {\"response\": \"Wrote j.txt.\"}}\n```",
            ),
        ],
        AgentConfig {
            tool_mode: ToolMode::Json,
            ..AgentConfig::default()
        },
    )
    .await;
    let (outcome, events) = f.turn("Write j.txt").await;
    assert_eq!(outcome.answer(), Some("Wrote j.txt."));
    assert_eq!(
        std::fs::read_to_string(f.ws.join("j.txt")).unwrap(),
        "from json"
    );
    // The reply streamed as it arrived (the scripted server sends one word a delta), and no
    // JSON was shown.
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| e.strip_prefix("text "))
        .collect();
    assert_eq!(texts.concat(), "Wrote j.txt.", "{events:?}");
    assert!(texts.len() > 1, "streamed in pieces: {events:?}");
    assert!(events.contains(&"thought I should write the file".to_string()));

    let first = f.server.request(1).unwrap();
    assert!(first.tool_names().is_empty(), "no native tools are sent");
    let system = first.messages()[0]["content"].as_str().unwrap();
    assert!(system.contains("exactly one JSON object"), "{system}");
    assert!(system.contains("- write_file:"), "{system}");
    let second = f.server.request(2).unwrap().body.to_string();
    assert!(second.contains("Result of tool `write_file`"), "{second}");

    // The history holds the model's turns in canonical protocol form, and no native calls.
    let history = f.history();
    assert!(history.iter().all(|m| !matches!(m, Message::Tool(_))));
    assert!(
        history[1]
            .text()
            .starts_with("{\"thought\":\"I should write the file\"")
    );
    f.assert_consistent();
}

#[tokio::test]
async fn model_errors_are_classified_and_transient_ones_retried() {
    let mut f = Fixture::new(
        Provider::OpenAi,
        vec![Turn::rate_limited(), Turn::text("Hi after a retry.")],
        AgentConfig::default(),
    )
    .await;
    let (outcome, events) = f.turn("Hi").await;
    assert_eq!(outcome.answer(), Some("Hi after a retry."));
    assert!(events.contains(&"retrying 2".to_string()), "{events:?}");

    f.server.push(Turn::unauthorized());
    let (outcome, _) = f.turn("Hi again").await;
    let RunEnd::Failed(RunError::Model(error)) = &outcome.end else {
        panic!("{:?}", outcome.end);
    };
    assert!(matches!(error, LlmError::Auth { .. }), "{error}");
    let message = outcome.end.error_message().unwrap();
    assert!(message.contains("rejected the API key"), "{message}");
    match f.state.status().await.unwrap() {
        RunStatus::Failed { kind, .. } => assert_eq!(kind, "auth"),
        other => panic!("{other:?}"),
    }
    f.assert_consistent();
}

#[tokio::test]
async fn open_tool_calls_from_an_interrupted_run_are_closed_before_the_next_turn() {
    let mut f = Fixture::new(
        Provider::Anthropic,
        vec![Turn::text("Recovered.")],
        AgentConfig::default(),
    )
    .await;
    // As if a process died between a tool call and its result.
    f.state
        .update(vec![
            Message::user("do it"),
            Message::Assistant(engram_core::AssistantMessage {
                tool_calls: vec![engram_core::ToolCall::new("c_lost", "list_dir", "{}")],
                ..Default::default()
            }),
        ])
        .await
        .unwrap();
    let (outcome, _) = f.turn("Are you there?").await;
    assert_eq!(outcome.answer(), Some("Recovered."));
    f.assert_consistent();
}

#[derive(Default)]
struct RecordingHooks {
    seen: Mutex<Vec<String>>,
}

#[async_trait]
impl TurnHooks for RecordingHooks {
    async fn context(&self, input: &str, state: &dyn RunState) -> Vec<Message> {
        let earlier = state.history().await.unwrap().len();
        vec![Message::system(format!(
            "Memory: the user likes tea. ({input}; {earlier} earlier messages)"
        ))]
    }

    async fn after_turn(&self, outcome: &RunOutcome, state: &dyn RunState) {
        let last = state
            .history()
            .await
            .unwrap()
            .last()
            .unwrap()
            .text()
            .to_string();
        self.seen
            .lock()
            .unwrap()
            .push(format!("{:?} {last}", outcome.answer()));
    }
}

#[tokio::test]
async fn turn_hooks_add_context_after_the_system_prompt_and_see_the_outcome() {
    let hooks = Arc::new(RecordingHooks::default());
    let mut f = Fixture::with_hooks(
        Provider::OpenAi,
        vec![Turn::text("Tea it is."), Turn::text("Still tea.")],
        AgentConfig::default(),
        Some(hooks.clone()),
    )
    .await;
    f.turn("What do I like?").await;
    f.turn("And now?").await;
    let second = f.server.request(2).unwrap();
    let messages: Vec<(&str, &str)> = second
        .messages()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(messages[0], ("system", "You are a test agent."));
    assert_eq!(
        messages[1],
        (
            "system",
            "Memory: the user likes tea. (And now?; 2 earlier messages)"
        )
    );
    assert_eq!(messages[2], ("user", "What do I like?"));
    assert_eq!(messages.last().unwrap(), &("user", "And now?"));
    assert_eq!(
        *hooks.seen.lock().unwrap(),
        [
            "Some(\"Tea it is.\") Tea it is.",
            "Some(\"Still tea.\") Still tea."
        ]
    );
    // The dump shows exactly what preceded the conversation.
    let record = f.state.dump().await.unwrap();
    assert_eq!(record.instructions.len(), 2);
    assert_eq!(record.next_action, None::<NextAction>);
    assert_eq!(
        serde_json::to_value(&record.status).unwrap(),
        json!({"status": "answered"})
    );
    let _: Value = serde_json::from_str(&record.to_json()).unwrap();
}
