//! A run state kept in a session file: the conversation survives the process.
//!
//! [`StoredRunState`] implements [`RunState`] over an `engram-memory` [`Session`]: every message
//! the agent appends (the user's, the model's with its tool calls, each tool result) is written
//! to the session's JSONL file as it happens, and the conversation the model sees is the
//! session's working memory ([`WorkingMemory`]): a running summary of older turns plus the recent
//! ones in full. When a summariser is attached, each new user message checks the budget and folds
//! the oldest turns into the summary if the next request would not fit (see
//! [`engram_memory::working`]).
//!
//! Opening a state resumes the session: the summary and window come back from the file (a torn
//! last line is skipped and reported by [`StoredRunState::warnings`]). What belongs to one run
//! only — goal, instructions, next action, status, steps — lives in memory, as in the baseline
//! [`crate::InMemoryRunState`]: a run does not outlive its process, its conversation does.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::Clock;
use engram_core::llm::{Message, Usage};
use engram_memory::session::{Session, SessionRecord, SessionWarning};
use engram_memory::token_count::messages_tokens;
use engram_memory::working::{FitOutcome, Summarizer, WorkingConfig, WorkingMemory};

use crate::run_state::{
    NextAction, RUN_RECORD_FORMAT, RunProgress, RunRecord, RunState, RunStateError, RunStatus,
};
use crate::tools::ToolRegistry;

/// A run state whose conversation lives in a session file (see the module docs).
pub struct StoredRunState {
    tools: Arc<ToolRegistry>,
    session: Session,
    working: WorkingMemory,
    summarizer: Option<(Arc<dyn Summarizer>, WorkingConfig)>,
    clock: Arc<dyn Clock>,
    warnings: Vec<SessionWarning>,
    fit_outcomes: Vec<FitOutcome>,
    goal: Vec<Message>,
    instructions: Vec<Message>,
    next_action: Option<NextAction>,
    status: RunStatus,
    progress: RunProgress,
}

impl std::fmt::Debug for StoredRunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredRunState")
            .field("session", &self.session.key())
            .field("window", &self.working.window().len())
            .field("summarized", &self.working.summary().is_some())
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

fn storage(action: &str, error: impl std::fmt::Display) -> RunStateError {
    RunStateError::Storage {
        action: action.to_string(),
        detail: error.to_string(),
    }
}

impl StoredRunState {
    /// Opens (resumes or starts) the conversation of `session`. The file is created, with its
    /// metadata line, at once, so a session that was started is listed even before anything
    /// is said.
    pub async fn open(
        session: Session,
        tools: Arc<ToolRegistry>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, RunStateError> {
        session
            .create(clock.now())
            .await
            .map_err(|e| storage("created", e))?;
        let log = session.load().await.map_err(|e| storage("read", e))?;
        Ok(Self {
            tools,
            working: WorkingMemory::resume(&log),
            warnings: log.warnings,
            session,
            summarizer: None,
            clock,
            fit_outcomes: Vec::new(),
            goal: Vec::new(),
            instructions: Vec::new(),
            next_action: None,
            status: RunStatus::Idle,
            progress: RunProgress::default(),
        })
    }

    /// Keeps the conversation within `config`'s budget by folding old turns with `summarizer`.
    /// Without one, the whole conversation since the last summary is sent.
    pub fn with_summarizer(
        mut self,
        summarizer: Arc<dyn Summarizer>,
        config: WorkingConfig,
    ) -> Self {
        self.summarizer = Some((summarizer, config));
        self
    }

    /// Lines of the session file skipped when it was opened (torn by a crash, damaged).
    pub fn warnings(&self) -> &[SessionWarning] {
        &self.warnings
    }

    /// The session behind the state.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The working memory: summary and window.
    pub fn working(&self) -> &WorkingMemory {
        &self.working
    }

    /// What the budget checks did since the last call (folds, archives, turns too big to fit),
    /// for the caller to report.
    pub fn take_fit_outcomes(&mut self) -> Vec<FitOutcome> {
        std::mem::take(&mut self.fit_outcomes)
    }

    async fn fit(&mut self) -> Result<(), RunStateError> {
        let Some((summarizer, config)) = &self.summarizer else {
            return Ok(());
        };
        let fixed = messages_tokens(&self.instructions);
        let outcome = self
            .working
            .fit(
                fixed,
                config,
                summarizer.as_ref(),
                &self.session,
                self.clock.now(),
            )
            .await
            .map_err(|e| storage("saved", e))?;
        if outcome != FitOutcome::Fits {
            self.fit_outcomes.push(outcome);
        }
        Ok(())
    }
}

#[async_trait]
impl RunState for StoredRunState {
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

    /// Appends the messages to the session file in one write, then to the working window; a
    /// new user message then checks the budget (and may fold old turns into the summary).
    async fn update(&mut self, messages: Vec<Message>) -> Result<(), RunStateError> {
        if messages.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let records: Vec<SessionRecord> = messages
            .iter()
            .map(|m| SessionRecord::message(m.clone(), now))
            .collect();
        self.session
            .append(&records, now)
            .await
            .map_err(|e| storage("saved", e))?;
        let user_turn = messages.iter().any(|m| matches!(m, Message::User { .. }));
        for message in messages {
            self.working.push(message);
        }
        if user_turn {
            self.fit().await?;
        }
        Ok(())
    }

    async fn history(&self) -> Result<Vec<Message>, RunStateError> {
        Ok(self.working.context())
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

    /// Ends the conversation in the session file (an `ended` record: a later resume starts
    /// afresh after it; the messages stay in the file) and forgets the run.
    async fn clear(&mut self) -> Result<(), RunStateError> {
        let now = self.clock.now();
        self.session
            .append(&[SessionRecord::Ended { timestamp: now }], now)
            .await
            .map_err(|e| storage("saved", e))?;
        self.working.clear();
        self.goal.clear();
        self.instructions.clear();
        self.next_action = None;
        self.status = RunStatus::Idle;
        self.progress = RunProgress::default();
        Ok(())
    }

    async fn dump(&self) -> Result<RunRecord, RunStateError> {
        Ok(RunRecord {
            format: RUN_RECORD_FORMAT.to_string(),
            goal: self.goal.clone(),
            instructions: self.instructions.clone(),
            history: self.working.context(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InMemoryRunState;
    use engram_core::FixedClock;
    use engram_core::llm::{AssistantMessage, ToolCall, check_tool_pairing};
    use engram_llm::scripted::{ScriptedServer, Turn};
    use engram_memory::session::{SessionKey, SessionStore};
    use engram_memory::working::{ModelSummarizer, SUMMARY_HEADING};
    use jiff::Timestamp;

    fn clock() -> Arc<dyn Clock> {
        Arc::new(FixedClock::new(
            Timestamp::from_second(1_700_000_000).unwrap(),
        ))
    }

    fn tools() -> Arc<ToolRegistry> {
        Arc::new(ToolRegistry::new())
    }

    async fn stored(dir: &std::path::Path) -> StoredRunState {
        let store = SessionStore::files(dir);
        StoredRunState::open(
            store.session(SessionKey::default(), Default::default()),
            tools(),
            clock(),
        )
        .await
        .unwrap()
    }

    /// The behaviour every run state shares, run against each implementation.
    async fn contract(s: &mut dyn RunState) {
        assert_eq!(s.status().await.unwrap(), RunStatus::Idle);
        assert!(!s.done().await.unwrap());
        s.set_goal(vec![Message::user("one")]).await.unwrap();
        s.set_instructions(vec![Message::system("be good")])
            .await
            .unwrap();
        assert_eq!(
            s.instructions().await.unwrap(),
            vec![Message::system("be good")]
        );
        let call = ToolCall::new("c1", "read_file", "{}");
        let conversation = vec![
            Message::user("one"),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![call.clone()],
                ..AssistantMessage::default()
            }),
            Message::tool_result("c1", "text"),
            Message::assistant("1"),
        ];
        s.update(conversation[..1].to_vec()).await.unwrap();
        s.update(conversation[1..].to_vec()).await.unwrap();
        assert_eq!(s.history().await.unwrap(), conversation);
        s.set_next_action(Some(NextAction::Tools {
            calls: vec![call.clone()],
        }))
        .await
        .unwrap();
        assert_eq!(
            s.next_action().await.unwrap(),
            Some(NextAction::Tools { calls: vec![call] })
        );
        s.record_step(Usage {
            input_tokens: 3,
            output_tokens: 2,
        })
        .await
        .unwrap();
        s.record_step(Usage::default()).await.unwrap();
        assert_eq!(s.progress().await.unwrap().steps, 2);
        assert_eq!(s.progress().await.unwrap().usage.total(), 5);
        s.set_status(RunStatus::Answered).await.unwrap();
        assert!(s.done().await.unwrap());

        let record = s.dump().await.unwrap();
        assert!(record.done);
        assert_eq!(record.history, conversation);
        assert_eq!(record.goal, vec![Message::user("one")]);
        let back: RunRecord = serde_json::from_str(&record.to_json()).unwrap();
        assert_eq!(back, record);

        // A new goal resets the run but keeps the conversation.
        s.set_goal(vec![Message::user("two")]).await.unwrap();
        assert!(!s.done().await.unwrap());
        assert_eq!(s.progress().await.unwrap(), RunProgress::default());
        assert_eq!(s.next_action().await.unwrap(), None);
        assert_eq!(s.history().await.unwrap().len(), 4);

        s.clear().await.unwrap();
        assert!(s.history().await.unwrap().is_empty());
        assert_eq!(s.status().await.unwrap(), RunStatus::Idle);
        assert!(s.list_tools().is_empty());
        assert!(s.get_tool("read_file").is_none());
    }

    #[tokio::test]
    async fn the_in_memory_baseline_keeps_the_contract() {
        let mut s = InMemoryRunState::new(tools());
        contract(&mut s).await;
    }

    #[tokio::test]
    async fn the_stored_state_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = stored(dir.path()).await;
        contract(&mut s).await;
    }

    #[tokio::test]
    async fn the_conversation_survives_a_restart_and_clear_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let conversation = vec![
            Message::user("I use Python 3.12"),
            Message::assistant("Noted."),
        ];
        {
            let mut s = stored(dir.path()).await;
            s.update(conversation.clone()).await.unwrap();
        }
        let mut s = stored(dir.path()).await;
        assert!(s.warnings().is_empty());
        assert_eq!(s.history().await.unwrap(), conversation);
        s.clear().await.unwrap();
        let s = stored(dir.path()).await;
        assert!(s.history().await.unwrap().is_empty());
        // Nothing was removed from the file.
        assert_eq!(
            s.session().load().await.unwrap().plain_messages(),
            conversation
        );
    }

    #[tokio::test]
    async fn a_torn_line_is_reported_on_open_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = {
            let mut s = stored(dir.path()).await;
            s.update(vec![Message::user("kept")]).await.unwrap();
            std::path::PathBuf::from(s.session().location())
        };
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"_type":"message","timest"#);
        std::fs::write(&path, text).unwrap();
        let mut s = stored(dir.path()).await;
        assert_eq!(s.warnings().len(), 1);
        assert_eq!(s.warnings()[0].line, 3);
        s.update(vec![Message::user("after")]).await.unwrap();
        let s = stored(dir.path()).await;
        assert_eq!(
            s.history().await.unwrap(),
            vec![Message::user("kept"), Message::user("after")]
        );
    }

    #[tokio::test]
    async fn old_turns_are_summarised_by_the_model_before_the_request_outgrows_the_window() {
        let server = ScriptedServer::start(vec![Turn::text(
            "The user asked about files 0 to 9; each held lorem ipsum.",
        )])
        .await
        .unwrap();
        let model = engram_llm::build(server.client_config(engram_llm::Provider::OpenAi)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = WorkingConfig {
            context_window: 3_000,
            reply_reserve: 500,
            summary_max_tokens: 200,
            target_percent: 60,
        };
        let mut s = stored(dir.path())
            .await
            .with_summarizer(Arc::new(ModelSummarizer::new(model)), config);
        s.set_instructions(vec![Message::system("You are engram.")])
            .await
            .unwrap();
        for i in 0..16 {
            let id = format!("call_{i}");
            s.update(vec![Message::user(format!("what is in file {i}?"))])
                .await
                .unwrap();
            s.update(vec![
                Message::Assistant(AssistantMessage {
                    tool_calls: vec![ToolCall::new(&id, "read_file", "{}")],
                    ..AssistantMessage::default()
                }),
                Message::tool_result(&id, "lorem ipsum dolor sit amet ".repeat(30)),
                Message::assistant(format!("File {i} holds lorem ipsum.")),
            ])
            .await
            .unwrap();
        }
        let outcomes = s.take_fit_outcomes();
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
        assert!(matches!(outcomes[0], FitOutcome::Summarized { .. }));
        let history = s.history().await.unwrap();
        assert!(history[0].text().starts_with(SUMMARY_HEADING));
        check_tool_pairing(&history, true).unwrap();
        let mut request = s.instructions().await.unwrap();
        request.extend(history);
        assert!(messages_tokens(&request) <= config.request_budget());
        // The model was asked once, with whole turns.
        let asked = server.requests();
        assert_eq!(asked.len(), 1);
        let prompt = asked[0].messages()[0]["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(prompt.contains("[user] what is in file 0?"), "{prompt}");
        assert!(
            prompt.contains("[read_file result] lorem ipsum"),
            "{prompt}"
        );
        // The file keeps every message; a restart sees the same summary and window.
        assert_eq!(s.session().load().await.unwrap().messages().len(), 64);
        let resumed = stored(dir.path()).await;
        assert_eq!(resumed.working(), s.working());
    }
}
