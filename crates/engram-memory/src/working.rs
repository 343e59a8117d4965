//! Working memory: what of a conversation the model sees, in three layers, on a token budget.
//!
//! - **Immediate**: the current turn, from the user's last message on. Never folded.
//! - **Working window**: the recent messages in full detail (tool calls and results included).
//! - **Long-term summary**: everything older, condensed by the model into one running summary,
//!   shown to the model as a system message before the window.
//!
//! When the next request would pass the budget (context window minus the reply reserve, minus
//! what precedes the conversation: system prompt, memory block), [`WorkingMemory::fit`] folds the
//! oldest turns of the window into the summary. Cuts fall only where a user message starts, so a
//! tool call and its result are never separated. It folds enough to bring the conversation down
//! to [`WorkingConfig::target_percent`] of the room, so it does not run again on every turn.
//!
//! Nothing is lost: every message is already in the session file (see [`crate::session`]), and
//! the new summary is appended there as a `summary` record naming how many messages it covers,
//! so [`WorkingMemory::resume`] rebuilds the summary and the window after a restart. If the model
//! cannot summarise, the folded turns are copied to the session's archive file and the summary
//! gains a plain digest of them (the user's words, the assistant's answers, cut short) instead.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::llm::{ChatModel, ChatRequest, Message};
use jiff::Timestamp;

use crate::session::{Session, SessionError, SessionLog, SessionRecord, SummaryRecord};
use crate::token_count::{count_tokens, message_tokens, messages_tokens};

/// The summarisation prompt, a readable file with a version line that is not sent.
const SUMMARIZE_PROMPT: &str = include_str!("../prompts/summarize.md");

/// The heading of the system message that carries the summary.
pub const SUMMARY_HEADING: &str = "Summary of the earlier conversation";

/// Longest tool result (in characters) shown to the summariser; the rest is cut.
const TOOL_RESULT_CHARS: usize = 1500;

/// Longest piece of text (in characters) per message in the fallback digest.
const DIGEST_CHARS: usize = 300;

/// The working memory's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkingConfig {
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// Tokens kept free for the model's answer.
    pub reply_reserve: usize,
    /// The longest running summary, in tokens (asked of the model; a longer one is cut).
    pub summary_max_tokens: usize,
    /// After folding, the conversation (summary and window) takes at most this share of the
    /// room, in percent, so the next turns have space before folding again.
    pub target_percent: u8,
}

impl Default for WorkingConfig {
    fn default() -> Self {
        Self {
            context_window: 32_768,
            reply_reserve: 4_096,
            summary_max_tokens: 800,
            target_percent: 60,
        }
    }
}

impl WorkingConfig {
    /// The tokens a request may hold: the window minus the reply reserve.
    pub fn request_budget(&self) -> usize {
        self.context_window.saturating_sub(self.reply_reserve)
    }
}

/// Why summarising failed.
#[derive(Debug, thiserror::Error)]
pub enum SummarizeError {
    /// The model call failed.
    #[error("the model could not summarise the conversation: {0}")]
    Model(#[from] engram_core::LlmError),
    /// The model answered with nothing usable.
    #[error("the model's summary was empty")]
    Empty,
}

/// Why the working memory could not be brought within budget.
#[derive(Debug, thiserror::Error)]
pub enum WorkingError {
    /// The session file could not be written.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// Condenses conversation turns into a running summary.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// The new running summary: `previous` (if any) merged with `turns`, in at most about
    /// `max_tokens` tokens.
    async fn summarize(
        &self,
        previous: Option<&str>,
        turns: &[Message],
        max_tokens: usize,
    ) -> Result<String, SummarizeError>;
}

/// A summariser that asks a chat model with the prompt in `prompts/summarize.md`.
pub struct ModelSummarizer {
    model: Arc<dyn ChatModel>,
}

impl ModelSummarizer {
    /// Summarises with this model.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        Self { model }
    }
}

impl std::fmt::Debug for ModelSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSummarizer")
            .field("model", &self.model.info().model)
            .finish()
    }
}

#[async_trait]
impl Summarizer for ModelSummarizer {
    async fn summarize(
        &self,
        previous: Option<&str>,
        turns: &[Message],
        max_tokens: usize,
    ) -> Result<String, SummarizeError> {
        let prompt = summarize_prompt(previous, turns, max_tokens);
        let request = ChatRequest::new(vec![Message::user(prompt)])
            .with_max_tokens(u32::try_from(max_tokens.saturating_mul(2)).unwrap_or(u32::MAX));
        let response = self.model.chat(&request).await?;
        let text = response.message.content.trim();
        if text.is_empty() {
            return Err(SummarizeError::Empty);
        }
        Ok(cut_to_tokens(text, max_tokens.saturating_mul(3) / 2))
    }
}

/// The prompt sent to summarise `turns` into `previous`.
pub fn summarize_prompt(previous: Option<&str>, turns: &[Message], max_tokens: usize) -> String {
    let template = match SUMMARIZE_PROMPT.split_once('\n') {
        Some((first, rest)) if first.starts_with("<!--") => rest,
        _ => SUMMARIZE_PROMPT,
    };
    // About three words for every four tokens of English.
    let max_words = (max_tokens * 3 / 4).max(50).to_string();
    let previous = previous
        .filter(|p| !p.trim().is_empty())
        .unwrap_or("(none yet)");
    // The conversation goes in last, so text in it that looks like a placeholder stays as is.
    template
        .replace("{{max_words}}", &max_words)
        .replace("{{previous_summary}}", previous)
        .replace("{{conversation}}", &render_turns(turns))
}

/// The turns as plain text for the summariser: one block per message, tool calls with their
/// arguments, tool results cut to a readable length.
pub fn render_turns(turns: &[Message]) -> String {
    let mut out = String::new();
    let mut call_names: Vec<(String, String)> = Vec::new();
    for message in turns {
        match message {
            Message::System { content } => out.push_str(&format!("[system] {content}\n")),
            Message::User { content } => out.push_str(&format!("[user] {content}\n")),
            Message::Assistant(a) => {
                if !a.content.trim().is_empty() {
                    out.push_str(&format!("[assistant] {}\n", a.content.trim()));
                }
                for call in &a.tool_calls {
                    call_names.push((call.id.clone(), call.name.clone()));
                    out.push_str(&format!(
                        "[assistant calls {}] {}\n",
                        call.name,
                        cut_chars(&call.arguments, TOOL_RESULT_CHARS)
                    ));
                }
            }
            Message::Tool(t) => {
                let name = call_names
                    .iter()
                    .find(|(id, _)| *id == t.tool_call_id)
                    .map_or("tool", |(_, name)| name.as_str());
                let label = if t.is_error { "failed" } else { "result" };
                out.push_str(&format!(
                    "[{name} {label}] {}\n",
                    cut_chars(&t.content, TOOL_RESULT_CHARS)
                ));
            }
        }
    }
    out
}

/// What [`WorkingMemory::fit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FitOutcome {
    /// The conversation fits; nothing changed.
    Fits,
    /// `messages` of the oldest turns were folded into the summary by the model.
    Summarized {
        /// Messages folded.
        messages: usize,
        /// Tokens of the conversation before and after.
        tokens_before: usize,
        /// After.
        tokens_after: usize,
    },
    /// The model could not summarise; the turns were archived and digested instead.
    Archived {
        /// Messages folded.
        messages: usize,
        /// Where they were archived.
        archive: String,
        /// Why summarising failed.
        error: String,
    },
    /// Over budget, but only the current turn is left: nothing can be folded.
    CannotFit {
        /// Tokens the conversation needs.
        tokens: usize,
        /// Tokens it may have.
        budget: usize,
    },
}

/// The three layers of one conversation (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkingMemory {
    summary: Option<String>,
    window: Vec<Message>,
    /// The session's number of the window's first message.
    start: usize,
}

impl WorkingMemory {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// The working memory as a session file left it: the latest summary and the messages after
    /// it. A session ended (`ended` record) starts afresh after that point.
    pub fn resume(log: &SessionLog) -> Self {
        let mut count = 0usize;
        let mut summary: Option<(String, usize)> = None;
        let mut fresh_from = 0usize;
        for record in &log.records {
            match record {
                SessionRecord::Message(_) => count += 1,
                SessionRecord::Summary(s) => summary = Some((s.summary.clone(), s.through)),
                SessionRecord::Ended { .. } => {
                    fresh_from = count;
                    summary = None;
                }
                _ => {}
            }
        }
        let (summary, start) = match summary {
            Some((text, through)) if through >= fresh_from => (Some(text), through.min(count)),
            _ => (None, fresh_from),
        };
        let window = log
            .messages()
            .into_iter()
            .skip(start)
            .map(|m| m.message.clone())
            .collect();
        Self {
            summary,
            window,
            start,
        }
    }

    /// Adds a message to the window.
    pub fn push(&mut self, message: Message) {
        self.window.push(message);
    }

    /// Forgets the conversation; the next message is number `messages_seen` of the session.
    pub fn clear(&mut self) {
        self.start += self.window.len();
        self.window.clear();
        self.summary = None;
    }

    /// The running summary, if anything was folded.
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// The working window (and the immediate turn at its end), in full.
    pub fn window(&self) -> &[Message] {
        &self.window
    }

    /// How many of the session's messages come before the window.
    pub fn window_start(&self) -> usize {
        self.start
    }

    /// The session's messages so far, folded or not.
    pub fn messages_seen(&self) -> usize {
        self.start + self.window.len()
    }

    /// The summary as the system message the model sees.
    pub fn summary_message(&self) -> Option<Message> {
        self.summary
            .as_ref()
            .map(|s| Message::system(format!("{SUMMARY_HEADING}:\n{s}")))
    }

    /// What the model sees of the conversation: the summary message, then the window.
    pub fn context(&self) -> Vec<Message> {
        self.summary_message()
            .into_iter()
            .chain(self.window.iter().cloned())
            .collect()
    }

    /// The tokens of [`WorkingMemory::context`].
    pub fn context_tokens(&self) -> usize {
        self.summary_message().as_ref().map_or(0, message_tokens) + messages_tokens(&self.window)
    }

    /// How many of the window's oldest messages to fold so the conversation fits next to
    /// `fixed_tokens` (system prompt, memory block); `None` when it already fits or nothing
    /// can be folded. Only cuts where a user message starts, never inside the last turn.
    pub fn plan(&self, fixed_tokens: usize, config: &WorkingConfig) -> Option<usize> {
        let room = config.request_budget().saturating_sub(fixed_tokens);
        if self.context_tokens() <= room {
            return None;
        }
        let target = room * usize::from(config.target_percent.min(100)) / 100;
        // Room for the summary message itself.
        let keep_budget = target.saturating_sub(config.summary_max_tokens + 16);
        let cuts: Vec<usize> = self
            .window
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, m)| matches!(m, Message::User { .. }))
            .map(|(i, _)| i)
            .collect();
        let last = *cuts.last()?;
        // Tokens of window[i..] for each cut, from the end.
        let mut suffix = vec![0usize; self.window.len() + 1];
        for i in (0..self.window.len()).rev() {
            suffix[i] = suffix[i + 1] + message_tokens(&self.window[i]);
        }
        Some(
            cuts.iter()
                .copied()
                .find(|&i| suffix[i] <= keep_budget)
                .unwrap_or(last),
        )
    }

    /// Brings the conversation within budget next to `fixed_tokens`: folds the oldest turns
    /// into the summary with `summarizer`, and records the new summary in `session`. If the
    /// summariser fails, the turns are archived next to the session and digested into the
    /// summary instead. Only the session file's write can fail this.
    pub async fn fit(
        &mut self,
        fixed_tokens: usize,
        config: &WorkingConfig,
        summarizer: &dyn Summarizer,
        session: &Session,
        now: Timestamp,
    ) -> Result<FitOutcome, WorkingError> {
        let tokens_before = self.context_tokens();
        let Some(cut) = self.plan(fixed_tokens, config) else {
            let budget = config.request_budget().saturating_sub(fixed_tokens);
            return Ok(if tokens_before <= budget {
                FitOutcome::Fits
            } else {
                FitOutcome::CannotFit {
                    tokens: tokens_before,
                    budget,
                }
            });
        };
        let folded: Vec<Message> = self.window[..cut].to_vec();
        let through = self.start + cut;
        let result = summarizer
            .summarize(self.summary.as_deref(), &folded, config.summary_max_tokens)
            .await;
        let (summary, archived, outcome) = match result {
            Ok(summary) => (summary, None, None),
            Err(error) => {
                let archive = session.archive(&folded, now).await?;
                let summary = digest(
                    self.summary.as_deref(),
                    &folded,
                    &archive,
                    config.summary_max_tokens,
                );
                (
                    summary,
                    Some(archive.clone()),
                    Some(FitOutcome::Archived {
                        messages: cut,
                        archive,
                        error: error.to_string(),
                    }),
                )
            }
        };
        session
            .append(
                &[SessionRecord::Summary(SummaryRecord {
                    timestamp: now,
                    summary: summary.clone(),
                    through,
                    archived,
                })],
                now,
            )
            .await?;
        self.summary = Some(summary);
        self.window.drain(..cut);
        self.start = through;
        Ok(outcome.unwrap_or(FitOutcome::Summarized {
            messages: cut,
            tokens_before,
            tokens_after: self.context_tokens(),
        }))
    }
}

/// The summary kept when the model could not summarise: the previous summary, then the user's
/// words and the assistant's answers from the folded turns, cut short, newest kept when the
/// whole does not fit.
fn digest(previous: Option<&str>, turns: &[Message], archive: &str, max_tokens: usize) -> String {
    // (is the user's, line): the assistant's answers go first when the digest is too long.
    let mut lines: Vec<(bool, String)> = turns
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some((
                true,
                format!("- the user: {}", cut_chars(content, DIGEST_CHARS)),
            )),
            Message::Assistant(a) if !a.content.trim().is_empty() => Some((
                false,
                format!(
                    "- the assistant: {}",
                    cut_chars(a.content.trim(), DIGEST_CHARS)
                ),
            )),
            _ => None,
        })
        .collect();
    let heading = format!(
        "Earlier turns could not be summarised; their full text is archived in {archive}. What was said:"
    );
    let previous = previous.map(|p| format!("{p}\n\n")).unwrap_or_default();
    loop {
        let body: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        let text = format!("{previous}{heading}\n{}", body.join("\n"));
        if lines.is_empty() || count_tokens(&text) <= max_tokens * 2 {
            return text;
        }
        let drop = lines.iter().position(|(user, _)| !user).unwrap_or(0);
        lines.remove(drop);
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn cut_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `text` cut to about `max` tokens (at a character boundary), with an ellipsis when cut.
fn cut_to_tokens(text: &str, max: usize) -> String {
    let tokens = count_tokens(text);
    if tokens <= max {
        return text.to_string();
    }
    let chars = text.chars().count();
    let keep = chars.saturating_mul(max) / tokens.max(1);
    cut_chars(text, keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{SessionKey, SessionStore};
    use engram_core::llm::{AssistantMessage, ToolCall, check_tool_pairing};
    use std::sync::Mutex;

    /// Stands in for the model: records what it was asked, answers from a script.
    struct ScriptedSummarizer {
        answers: Mutex<Vec<Result<String, ()>>>,
        calls: Mutex<Vec<(Option<String>, Vec<Message>)>>,
    }

    impl ScriptedSummarizer {
        fn new(answers: Vec<Result<String, ()>>) -> Self {
            Self {
                answers: Mutex::new(answers),
                calls: Mutex::new(Vec::new()),
            }
        }
    }

    #[async_trait]
    impl Summarizer for ScriptedSummarizer {
        async fn summarize(
            &self,
            previous: Option<&str>,
            turns: &[Message],
            _max_tokens: usize,
        ) -> Result<String, SummarizeError> {
            self.calls
                .lock()
                .unwrap()
                .push((previous.map(str::to_string), turns.to_vec()));
            match self.answers.lock().unwrap().remove(0) {
                Ok(text) => Ok(text),
                Err(()) => Err(SummarizeError::Empty),
            }
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    /// A turn: the user asks, the assistant reads a file, then answers.
    fn turn(i: usize) -> Vec<Message> {
        let id = format!("call_{i}");
        vec![
            Message::user(format!("question {i}: what is in file {i}?")),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::new(
                    &id,
                    "read_file",
                    format!(r#"{{"path":"f{i}.txt"}}"#),
                )],
                ..AssistantMessage::default()
            }),
            Message::tool_result(&id, "lorem ipsum dolor sit amet ".repeat(40)),
            Message::assistant(format!("File {i} holds lorem ipsum.")),
        ]
    }

    fn small() -> WorkingConfig {
        WorkingConfig {
            context_window: 2_000,
            reply_reserve: 300,
            summary_max_tokens: 100,
            target_percent: 60,
        }
    }

    fn session() -> (tempfile::TempDir, Session) {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::files(dir.path());
        let session = store.session(SessionKey::default(), Default::default());
        (dir, session)
    }

    async fn fill(working: &mut WorkingMemory, session: &Session, turns: std::ops::Range<usize>) {
        for i in turns {
            for m in turn(i) {
                session.append_message(&m, at(i as i64)).await.unwrap();
                working.push(m);
            }
        }
    }

    #[tokio::test]
    async fn a_conversation_within_budget_is_left_alone() {
        let (_dir, session) = session();
        let mut working = WorkingMemory::new();
        fill(&mut working, &session, 0..2).await;
        let summarizer = ScriptedSummarizer::new(vec![]);
        let outcome = working
            .fit(100, &small(), &summarizer, &session, at(9))
            .await
            .unwrap();
        assert_eq!(outcome, FitOutcome::Fits);
        assert_eq!(working.window().len(), 8);
        assert!(summarizer.calls.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_oldest_turns_are_folded_at_user_boundaries_and_survive_a_restart() {
        let (_dir, session) = session();
        let mut working = WorkingMemory::new();
        fill(&mut working, &session, 0..12).await;
        let config = small();
        let before = working.context_tokens();
        assert!(before > config.request_budget());
        let summarizer =
            ScriptedSummarizer::new(vec![Ok("The user asked about files 0 to n.".into())]);
        let outcome = working
            .fit(200, &config, &summarizer, &session, at(20))
            .await
            .unwrap();
        let FitOutcome::Summarized {
            messages,
            tokens_after,
            ..
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        assert_eq!(messages % 4, 0, "cut inside a turn: {messages}");
        assert!(
            tokens_after + 200 <= config.request_budget() * 60 / 100 + 1,
            "{tokens_after}"
        );
        assert!(matches!(working.window()[0], Message::User { .. }));
        check_tool_pairing(&working.context(), true).unwrap();
        // What was folded went to the summariser whole, tool results with their calls.
        let calls = summarizer.calls.lock().unwrap().clone();
        assert_eq!(calls[0].1.len(), messages);
        check_tool_pairing(&calls[0].1, true).unwrap();
        let context = working.context();
        assert!(context[0].text().starts_with(SUMMARY_HEADING));
        assert!(context[0].text().contains("files 0 to n"));

        // A restart rebuilds the same working memory from the session file.
        let resumed = WorkingMemory::resume(&session.load().await.unwrap());
        assert_eq!(resumed, working);
        // Every message is still in the file.
        assert_eq!(session.load().await.unwrap().messages().len(), 48);
    }

    #[tokio::test]
    async fn a_failed_summary_archives_the_turns_and_keeps_the_users_words() {
        let (_dir, session) = session();
        let mut working = WorkingMemory::new();
        fill(&mut working, &session, 0..12).await;
        let summarizer = ScriptedSummarizer::new(vec![Err(())]);
        let outcome = working
            .fit(200, &small(), &summarizer, &session, at(20))
            .await
            .unwrap();
        let FitOutcome::Archived {
            messages,
            archive,
            error,
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        assert!(error.contains("empty"), "{error}");
        let archived = std::fs::read_to_string(&archive).unwrap();
        assert_eq!(archived.lines().count(), messages);
        assert!(archived.contains("question 0"));
        let summary = working.summary().unwrap();
        assert!(summary.contains("could not be summarised"), "{summary}");
        // The user's words are kept before the assistant's answers; the oldest go first.
        let last_folded = messages / 4 - 1;
        assert!(
            summary.contains(&format!(
                "question {last_folded}: what is in file {last_folded}?"
            )),
            "{summary}"
        );
        let log = session.load().await.unwrap();
        assert_eq!(
            log.last_summary().unwrap().archived.as_deref(),
            Some(archive.as_str())
        );
        assert_eq!(WorkingMemory::resume(&log), working);
    }

    #[tokio::test]
    async fn only_the_current_turn_left_cannot_be_folded() {
        let (_dir, session) = session();
        let mut working = WorkingMemory::new();
        working.push(Message::user("huge"));
        working.push(Message::tool_result("x", "word ".repeat(3000)));
        let summarizer = ScriptedSummarizer::new(vec![]);
        let outcome = working
            .fit(0, &small(), &summarizer, &session, at(1))
            .await
            .unwrap();
        assert!(
            matches!(outcome, FitOutcome::CannotFit { .. }),
            "{outcome:?}"
        );
        assert_eq!(working.window().len(), 2);
    }

    #[tokio::test]
    async fn summaries_roll_forward_and_an_ended_session_starts_afresh() {
        let (_dir, session) = session();
        let mut working = WorkingMemory::new();
        fill(&mut working, &session, 0..12).await;
        let summarizer = ScriptedSummarizer::new(vec![Ok("first".into()), Ok("second".into())]);
        working
            .fit(200, &small(), &summarizer, &session, at(20))
            .await
            .unwrap();
        fill(&mut working, &session, 12..24).await;
        working
            .fit(200, &small(), &summarizer, &session, at(40))
            .await
            .unwrap();
        assert_eq!(
            summarizer.calls.lock().unwrap()[1].0.as_deref(),
            Some("first"),
            "the previous summary is folded into the next"
        );
        assert_eq!(working.summary(), Some("second"));
        assert_eq!(
            WorkingMemory::resume(&session.load().await.unwrap()),
            working
        );

        session
            .append(&[SessionRecord::Ended { timestamp: at(50) }], at(50))
            .await
            .unwrap();
        let fresh = WorkingMemory::resume(&session.load().await.unwrap());
        assert_eq!(fresh.summary(), None);
        assert!(fresh.window().is_empty());
        assert_eq!(fresh.messages_seen(), 96);
    }

    #[test]
    fn the_summarize_prompt_is_stable() {
        let turns = vec![
            Message::user("Why does the build fail?"),
            Message::Assistant(AssistantMessage {
                content: "Let me run it.".into(),
                tool_calls: vec![ToolCall::new(
                    "c1",
                    "run_command",
                    r#"{"command":"cargo build"}"#,
                )],
                ..AssistantMessage::default()
            }),
            Message::Tool(engram_core::ToolResultMessage {
                tool_call_id: "c1".into(),
                content: "error[E0425]: cannot find value `x`".into(),
                is_error: true,
            }),
            Message::assistant("`x` is not defined in main.rs."),
        ];
        insta::assert_snapshot!(summarize_prompt(Some("The user is Ada."), &turns, 400));
    }
}
