//! The memory manager: the one object the agent talks to about long-term memory.
//!
//! Before each user turn, [`MemoryManager::context_block`] builds the memory block (profile,
//! relevant and recent episodes, today's notes, MEMORY.md). After replies, off the critical path,
//! [`MemoryManager::extract_and_merge`] turns conversation into episodes and profile updates.
//! MEMORY.md, which a person may edit, is read on every turn and indexed into the store as `note`
//! memories (`metadata.source_file = "MEMORY.md"`), re-synced whenever the file changes.

use std::collections::HashSet;
use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use engram_core::store::claims::{ClaimOutcome, ClaimStore};
use engram_core::{
    AddOutcome, ChatModel, Filter, Importance, Kind, LlmError, Memory, MemoryStore, Message,
    MetaCondition, NewMemory, Scope, StoreError,
};
use engram_workspace::Workspace;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Serialize;
use serde_json::{Value, json};

use crate::context::{ContextItem, ContextTimings, Section, assemble};
use crate::extract::{
    self, ExtractedEpisode, ProfileUpdate, UnusableOutput, resolve_relative_dates,
};
use crate::grounding::{Grounding, Rejection};
use crate::indexing::add_with_vector;
use crate::maintenance::{self, CleanupReport, CleanupRule, CompactReport};
use crate::merge::{self, GroundedEntry, MergeOrigin};
use crate::mirror::{LONG_TERM_FILE, MarkdownMirror, MirrorError};
use crate::search::{SearchError, SearchRequest, Searcher};

pub use crate::context::ContextBlock;

/// The history actor for changes the manager makes.
pub const ACTOR: &str = "memory-manager";
/// The log of model answers extraction could not use, in the workspace.
const REJECTED_LOG: &str = "logs/memory-rejected.jsonl";

/// `metadata.source_file` of notes indexed from MEMORY.md.
pub const SOURCE_FILE_KEY: &str = "source_file";
/// Most profile entries considered for one block.
const PROFILE_LIMIT: usize = 200;
/// Most known profile entries shown to the extractor.
const KNOWN_SHOWN: usize = 40;
/// Share of an episode's content words that must occur in the conversation.
const EPISODE_MIN_SHARE: f64 = 0.6;
/// How long a claim on messages holds without being finished before another process may
/// extract them (its process is taken for dead): far longer than an extraction takes.
pub const EXTRACTION_LEASE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Settings, from `[memory]` in config.toml. Every field has a default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ManagerConfig {
    /// The memory block is cut to this many tokens (default 1500).
    pub context_budget_tokens: usize,
    /// Episodes below this importance are not brought back (default 2).
    pub min_importance: u8,
    /// Relevant episodes per turn (default 5).
    pub relevant_episodes: usize,
    /// Recent episodes per turn, besides the relevant ones (default 3).
    pub recent_episodes: usize,
    /// Extract every this many turns (default 10; 0: only at session end and on /new).
    pub extract_every_turns: u32,
    /// Let the model decide ADD / UPDATE / DELETE / NONE against known entries (default true);
    /// false: the same key always replaces.
    pub model_merge: bool,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            context_budget_tokens: 1500,
            min_importance: 2,
            relevant_episodes: 5,
            recent_episodes: 3,
            extract_every_turns: 10,
            model_merge: true,
        }
    }
}

/// Why the memory manager could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Retrieval failed.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// A markdown file could not be read or written.
    #[error(transparent)]
    Mirror(#[from] MirrorError),
    /// The model call failed.
    #[error("the memory model call failed: {0}")]
    Model(#[from] LlmError),
    /// The operation needs a model and none is configured.
    #[error(
        "{0} needs a language model, and none is configured; set one in [llm] of config.toml or with ENGRAM_PROVIDER / OPENAI_API_KEY"
    )]
    NoModel(&'static str),
}

/// What one extraction did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExtractionReport {
    /// Why nothing was extracted (too short, no model), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Episodes stored.
    pub episodes_added: usize,
    /// Facts and preferences stored.
    pub facts_added: usize,
    /// Known facts and preferences closed because new ones replaced them.
    pub facts_superseded: usize,
    /// Known facts and preferences closed by the model's DELETE.
    pub facts_deleted: usize,
    /// New values kept as candidates (not in the profile): they contradict a known value
    /// without the support to replace it.
    pub candidates: usize,
    /// Entries that were already known.
    pub unchanged: usize,
    /// Profile entries the model merge decided (the rest by the key rule).
    pub decided_by_model: usize,
    /// Model answers that could not be used (their raw text is in `rejected_log`).
    pub unusable: Vec<String>,
    /// Extracted entries the conversation does not support, with the reason (also in
    /// `rejected_log`).
    pub rejected: Vec<RejectedEntry>,
    /// Where the raw text of unusable answers was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected_log: Option<PathBuf>,
    /// Which messages were extracted (`[from, to)`), when a claim decided it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<[usize; 2]>,
}

/// An extracted entry that was not stored, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RejectedEntry {
    /// `fact`, `preference`, `episode` or `ended`.
    pub what: String,
    /// The entry as the model wrote it.
    pub text: String,
    /// A stable code: `assistant_only`, `prompt_example`, `not_stated`, `denied`, `not_said`,
    /// `about_someone_else`, `empty`.
    pub code: String,
    /// One line saying why.
    pub reason: String,
}

/// What is known about the user, for `/memory`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryOverview {
    /// Whose memory.
    pub user: String,
    /// Current facts.
    pub facts: Vec<Memory>,
    /// Current preferences.
    pub preferences: Vec<Memory>,
    /// The last 10 episodes.
    pub recent_episodes: Vec<Memory>,
    /// Current episodes in all.
    pub episode_count: u64,
    /// Current notes in all.
    pub note_count: u64,
    /// Closed memories kept in history (invalidated or expired).
    pub closed_count: u64,
}

impl fmt::Display for MemoryOverview {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |count: usize, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        writeln!(
            f,
            "Memory of {}: {}, {}, {}, {} ({} older entries in history)",
            self.user,
            n(self.facts.len(), "fact", "facts"),
            n(self.preferences.len(), "preference", "preferences"),
            n(
                usize::try_from(self.episode_count).unwrap_or(usize::MAX),
                "episode",
                "episodes"
            ),
            n(
                usize::try_from(self.note_count).unwrap_or(usize::MAX),
                "note",
                "notes"
            ),
            self.closed_count
        )?;
        for (title, list) in [("Facts", &self.facts), ("Preferences", &self.preferences)] {
            if !list.is_empty() {
                writeln!(f, "\n{title}:")?;
                for m in list.iter() {
                    writeln!(f, "  - {}", m.text)?;
                }
            }
        }
        if !self.recent_episodes.is_empty() {
            writeln!(f, "\nLast episodes:")?;
            for m in &self.recent_episodes {
                let category = m.category.as_deref().unwrap_or("episode");
                writeln!(
                    f,
                    "  - {} [{category}, importance {}] {}",
                    m.created_at.strftime("%Y-%m-%d"),
                    m.importance,
                    m.text
                )?;
            }
        }
        Ok(())
    }
}

/// Long-term memory for one user: store, retrieval, model and markdown files together.
pub struct MemoryManager {
    store: Arc<dyn MemoryStore>,
    claims: Arc<dyn ClaimStore>,
    searcher: Arc<Searcher>,
    model: Option<Arc<dyn ChatModel>>,
    mirror: MarkdownMirror,
    workspace: Workspace,
    user: String,
    config: ManagerConfig,
    time_zone: TimeZone,
    /// Hash of the MEMORY.md text last indexed by this process.
    long_term_synced: Mutex<Option<String>>,
}

impl fmt::Debug for MemoryManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryManager")
            .field("user", &self.user)
            .field("workspace", &self.workspace)
            .field(
                "model",
                &self.model.as_ref().map(|m| m.info().model.clone()),
            )
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MemoryManager {
    /// A manager for `user`, with MEMORY.md and daily notes under `workspace/memory`, and
    /// claims on the messages it extracts in `claims` (the same engine as `store`, so that
    /// every process sharing the memories shares the claims). Without a model there is no
    /// extraction, merging or compaction; the context still works.
    pub fn new(
        store: Arc<dyn MemoryStore>,
        claims: Arc<dyn ClaimStore>,
        searcher: Arc<Searcher>,
        model: Option<Arc<dyn ChatModel>>,
        workspace: Workspace,
        user: String,
        config: ManagerConfig,
    ) -> Self {
        Self {
            store,
            claims,
            searcher,
            model,
            mirror: MarkdownMirror::new(&workspace),
            workspace,
            user,
            config,
            time_zone: TimeZone::system(),
            long_term_synced: Mutex::new(None),
        }
    }

    /// Reads dates (daily notes, "yesterday") in this zone instead of the system's.
    pub fn with_time_zone(mut self, time_zone: TimeZone) -> Self {
        self.time_zone = time_zone;
        self
    }

    /// Whose memory this is.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The settings.
    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    /// The markdown files.
    pub fn mirror(&self) -> &MarkdownMirror {
        &self.mirror
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// Where the raw text of model answers that could not be used is kept (JSON lines), as
    /// named in the workspace.
    pub fn rejected_log_path(&self) -> PathBuf {
        self.workspace.root().join(REJECTED_LOG)
    }

    /// [`MemoryManager::rejected_log_path`], refused when it leads outside the workspace.
    fn rejected_log(&self, action: &'static str) -> Result<PathBuf, MirrorError> {
        self.workspace
            .resolve(REJECTED_LOG)
            .map_err(|e| MirrorError {
                action,
                path: self.rejected_log_path(),
                source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()),
            })
    }

    fn filter(&self) -> Filter {
        Filter::user(self.user.clone())
    }

    /// The memory block for this user message: profile (current facts, preferences), relevant
    /// episodes, recent episodes not already shown, today's notes, MEMORY.md; deduplicated,
    /// ranked, cut to the budget; `None` when there is nothing to say. The text starts with the
    /// guidance (use memory naturally, don't recite it, the user's current words win).
    pub async fn context_block(
        &self,
        user_message: &str,
        now: Timestamp,
    ) -> Result<Option<ContextBlock>, MemoryError> {
        let mut items = Vec::new();
        let mut timings = ContextTimings::default();

        let started = Instant::now();
        let long_term = self.mirror.read_long_term()?;
        self.sync_long_term(long_term.as_deref(), now).await?;
        for (index, chunk) in long_term_chunks(long_term.as_deref().unwrap_or(""))
            .iter()
            .enumerate()
        {
            // File order: earlier lines rank higher.
            items.push(ContextItem::new(
                Section::LongTerm,
                chunk.as_str(),
                chunk,
                -(index as f64),
            ));
        }

        timings.long_term_us = ContextTimings::since(started);

        let started = Instant::now();
        for memory in merge::current_profile(self.store.as_ref(), &self.user, PROFILE_LIMIT).await?
        {
            let rank =
                f64::from(memory.importance.get()) * 1e10 + memory.updated_at.as_second() as f64;
            items.push(
                ContextItem::new(Section::Profile, memory.text.as_str(), &memory.text, rank)
                    .with_memory(memory.id),
            );
        }

        timings.profile_us = ContextTimings::since(started);

        let started = Instant::now();
        let min_importance = Importance::new(i64::from(self.config.min_importance)).ok();
        let mut shown = HashSet::new();
        if self.config.relevant_episodes > 0 && !user_message.trim().is_empty() {
            let request = SearchRequest {
                filter: Filter {
                    kinds: vec![Kind::Episode, Kind::Summary, Kind::Note],
                    min_importance,
                    ..self.filter()
                },
                // An embedder reads the whole message best; BM25 is faster and no worse on the
                // message's distinctive words.
                query: if self.searcher.embedder().is_some() {
                    user_message.to_string()
                } else {
                    relevance_query(user_message, now, &self.time_zone)
                },
                limit: self.config.relevant_episodes,
            };
            match self.searcher.search(&request).await {
                Ok(results) => {
                    for hit in results.hits {
                        shown.insert(hit.memory.id);
                        items.push(
                            ContextItem::new(
                                Section::Relevant,
                                self.dated(&hit.memory),
                                &hit.memory.text,
                                hit.score,
                            )
                            .with_memory(hit.memory.id),
                        );
                    }
                }
                // A message with no searchable words (only punctuation, say) finds nothing.
                Err(SearchError::Store(StoreError::BadQuery(_))) => {}
                // Without the embedder the turn still gets its profile and recent episodes.
                Err(SearchError::Embed(e)) => {
                    tracing::warn!(error = %e, "relevant memories skipped: the query could not be embedded");
                }
                Err(e) => return Err(e.into()),
            }
        }

        timings.relevant_us = ContextTimings::since(started);

        let started = Instant::now();
        if self.config.recent_episodes > 0 {
            let filter = Filter {
                kinds: vec![Kind::Episode],
                min_importance,
                ..self.filter()
            };
            let recent = self
                .store
                .list(&filter, self.config.recent_episodes + shown.len(), 0)
                .await?;
            for memory in recent
                .into_iter()
                .filter(|m| !shown.contains(&m.id))
                .take(self.config.recent_episodes)
            {
                let rank = memory.created_at.as_second() as f64;
                items.push(
                    ContextItem::new(Section::Recent, self.dated(&memory), &memory.text, rank)
                        .with_memory(memory.id),
                );
            }
        }

        timings.recent_us = ContextTimings::since(started);

        let started = Instant::now();
        let today = now.to_zoned(self.time_zone.clone()).date();
        if let Some(note) = self.mirror.read_daily(today)? {
            for (index, line) in daily_lines(&note).into_iter().enumerate() {
                // The latest notes first when the budget is short.
                items.push(ContextItem::new(
                    Section::Today,
                    line.as_str(),
                    daily_body(&line),
                    index as f64,
                ));
            }
        }

        timings.today_us = ContextTimings::since(started);

        let started = Instant::now();
        let mut block = assemble(items, self.config.context_budget_tokens);
        timings.assemble_us = ContextTimings::since(started);
        if let Some(block) = &mut block {
            block.timings = timings;
        }
        Ok(block)
    }

    /// `YYYY-MM-DD: text`, in the manager's zone.
    fn dated(&self, memory: &Memory) -> String {
        let date = memory.created_at.to_zoned(self.time_zone.clone()).date();
        format!("{date}: {}", memory.text)
    }

    /// Indexes MEMORY.md into the store when its text differs from what this process last
    /// indexed: one `note` per line, lines no longer in the file invalidated.
    async fn sync_long_term(&self, text: Option<&str>, now: Timestamp) -> Result<(), MemoryError> {
        let text = text.unwrap_or("");
        let hash = blake3::hash(text.as_bytes()).to_hex()[..32].to_string();
        if self
            .long_term_synced
            .lock()
            .map(|h| h.as_deref() == Some(hash.as_str()))
            .unwrap_or(false)
        {
            return Ok(());
        }
        let chunks = long_term_chunks(text);
        let wanted: HashSet<String> = chunks
            .iter()
            .map(|c| engram_core::normalize_text(c))
            .collect();
        let filter = Filter {
            kinds: vec![Kind::Note],
            metadata: vec![MetaCondition {
                key: SOURCE_FILE_KEY.into(),
                value: LONG_TERM_FILE.into(),
            }],
            ..self.filter()
        };
        let indexed = self.store.list(&filter, 100_000, 0).await?;
        let mut present = HashSet::new();
        for memory in indexed {
            let normal = engram_core::normalize_text(&memory.text);
            if wanted.contains(&normal) && present.insert(normal) {
                continue;
            }
            match self.store.invalidate(memory.id, ACTOR).await {
                Ok(_) | Err(StoreError::AlreadyClosed(_) | StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for chunk in chunks {
            if present.contains(&engram_core::normalize_text(&chunk)) {
                continue;
            }
            let note = NewMemory::new(Scope::user(self.user.clone()), chunk)
                .with_kind(Kind::Note)
                .with_category("long_term")
                .with_importance(Importance::new(4).unwrap_or_default())
                .with_meta(SOURCE_FILE_KEY, Value::String(LONG_TERM_FILE.into()))
                .with_meta("file_hash", Value::String(hash.clone()))
                .with_source("markdown")
                .at(now);
            self.add_indexed(note).await?;
        }
        if let Ok(mut synced) = self.long_term_synced.lock() {
            *synced = Some(hash);
        }
        Ok(())
    }

    /// Adds a memory with its vector when an embedder is configured; when embedding fails the
    /// memory is stored anyway (it gets its vector on `engram reindex`).
    async fn add_indexed(&self, memory: NewMemory) -> Result<AddOutcome, MemoryError> {
        let embedder = self.searcher.embedder();
        match add_with_vector(&self.store, embedder, memory.clone(), ACTOR).await {
            Ok(outcome) => Ok(outcome),
            Err(SearchError::Embed(e)) => {
                tracing::warn!(error = %e, "memory stored without a vector: embedding failed");
                Ok(self.store.add(memory, ACTOR).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Extracts the messages of a session log that no process has extracted yet: claims them in
    /// the store ([`ClaimStore`]; the stream is the session key, positions are messages) from
    /// `already` (what the log records as extracted) to the end, extracts what the claim
    /// grants, and marks it done (or gives it back when extraction fails). Another process
    /// extracting the same messages at the same time, on this machine or another sharing the
    /// store, gets `skipped`, and so does a re-run over messages already extracted.
    pub async fn extract_session(
        &self,
        messages: &[Message],
        session_key: &str,
        already: usize,
        now: Timestamp,
    ) -> Result<ExtractionReport, MemoryError> {
        self.extract_claimed(messages, session_key, session_key, already, now)
            .await
    }

    /// Extracts one batch of messages (what `POST /v1/memories` with `infer: true` receives),
    /// once: the claim is on the session and a digest of the messages (one stream of its own,
    /// claimed whole), so the same messages sent again, or by two clients at once, are
    /// extracted by one of them only.
    pub async fn extract_batch(
        &self,
        messages: &[Message],
        session_key: &str,
        now: Timestamp,
    ) -> Result<ExtractionReport, MemoryError> {
        let mut hasher = blake3::Hasher::new();
        for (is_user, text) in crate::grounding::spoken(messages) {
            hasher.update(if is_user { b"u" } else { b"a" });
            hasher.update(&(text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        }
        let stream = format!("{session_key}#{}", &hasher.finalize().to_hex()[..32]);
        self.extract_claimed(messages, &stream, session_key, 0, now)
            .await
    }

    async fn extract_claimed(
        &self,
        messages: &[Message],
        stream: &str,
        session_key: &str,
        already: usize,
        now: Timestamp,
    ) -> Result<ExtractionReport, MemoryError> {
        if self.model.is_none() {
            return self.extract_and_merge(messages, session_key, now).await;
        }
        let position = |i: usize| u64::try_from(i).unwrap_or(u64::MAX);
        let wanted = position(already)..position(messages.len());
        let ticket = match self
            .claims
            .claim(&self.user, stream, wanted, EXTRACTION_LEASE)
            .await?
        {
            ClaimOutcome::Granted(ticket) => ticket,
            ClaimOutcome::AlreadyDone => {
                return Ok(ExtractionReport {
                    skipped: Some("these messages were already extracted".into()),
                    ..ExtractionReport::default()
                });
            }
            ClaimOutcome::InProgress => {
                return Ok(ExtractionReport {
                    skipped: Some("another process is extracting these messages right now".into()),
                    ..ExtractionReport::default()
                });
            }
        };
        let index = |p: u64| usize::try_from(p).unwrap_or(usize::MAX).min(messages.len());
        let range = index(ticket.range.start)..index(ticket.range.end);
        match self
            .extract_and_merge(&messages[range.clone()], session_key, now)
            .await
        {
            Ok(mut report) => {
                if !self.claims.finish(&ticket).await? {
                    tracing::warn!(
                        stream,
                        "the claim on these messages lapsed before their extraction ended; another process may have extracted them too"
                    );
                }
                report.messages = Some([range.start, range.end]);
                Ok(report)
            }
            Err(e) => {
                if let Err(release) = self.claims.release(&ticket).await {
                    tracing::warn!(error = %release, "an extraction claim could not be given back; it lapses after its lease");
                }
                Err(e)
            }
        }
    }

    /// Extraction + merge for a stretch of conversation (user and assistant messages; tool
    /// messages are ignored). One user message is enough; skipped only when no user message has
    /// text, or without a model. Every fact and preference must be grounded in the user's own
    /// words and every episode in the conversation ([`crate::grounding`]); what is not is
    /// rejected, and model answers that cannot be used add nothing: both are logged (a `tracing`
    /// warning, and a line in [`MemoryManager::rejected_log_path`] with the reason). Relative
    /// dates are resolved against `now`. New episodes are also appended to today's daily note.
    pub async fn extract_and_merge(
        &self,
        conversation: &[Message],
        session_key: &str,
        now: Timestamp,
    ) -> Result<ExtractionReport, MemoryError> {
        let mut report = ExtractionReport::default();
        let Some(model) = &self.model else {
            report.skipped = Some("no language model is configured".into());
            return Ok(report);
        };
        let Some(transcript) = extract::transcript(conversation) else {
            report.skipped = Some("no user message to learn from".into());
            return Ok(report);
        };
        let grounding = Grounding::new(
            conversation,
            &format!(
                "{}\n{}",
                crate::prompts::EXTRACT_EPISODES.text(),
                crate::prompts::EXTRACT_PROFILE.text()
            ),
        );

        let answer = model
            .chat(&extract::episodes_request(
                &transcript,
                now,
                &self.time_zone,
            ))
            .await?;
        let episodes = match extract::parse_episodes(&answer.message.content) {
            Ok(episodes) => episodes,
            Err(unusable) => {
                self.reject(&unusable, session_key, now, &mut report);
                Vec::new()
            }
        };
        let known = merge::current_profile(self.store.as_ref(), &self.user, KNOWN_SHOWN).await?;
        let known_texts: Vec<String> = known.iter().map(|m| m.text.clone()).collect();
        let answer = model
            .chat(&extract::profile_request(
                &transcript,
                &known_texts,
                now,
                &self.time_zone,
            ))
            .await?;
        let profile = match extract::parse_profile(&answer.message.content) {
            Ok(profile) => profile,
            Err(unusable) => {
                self.reject(&unusable, session_key, now, &mut report);
                ProfileUpdate::default()
            }
        };

        for episode in episodes {
            match grounding.episode(&episode.summary, EPISODE_MIN_SHARE) {
                Ok(()) => {
                    self.store_episode(episode, session_key, now, &mut report)
                        .await?
                }
                Err(rejection) => self.refuse(
                    "episode",
                    &episode.summary,
                    &rejection,
                    session_key,
                    now,
                    &mut report,
                ),
            }
        }

        let mut grounded = Vec::new();
        let entries = profile.facts.into_iter().map(|e| (Kind::Fact, e)).chain(
            profile
                .preferences
                .into_iter()
                .map(|e| (Kind::Preference, e)),
        );
        for (kind, entry) in entries {
            // What the user said of someone else is kept as theirs, when the model left them
            // out of the key ("daughter_allergy", not the user's "allergy").
            let entry = grounding.filed_under_person(&entry).unwrap_or(entry);
            match grounding.profile_entry(&entry) {
                Ok(support) => grounded.push(GroundedEntry {
                    kind,
                    entry: extract::ProfileEntry {
                        value: resolve_relative_dates(&entry.value, now, &self.time_zone),
                        key: entry.key,
                    },
                    support,
                }),
                // A known entry the model repeated without the user saying it again.
                Err(_) if known.iter().any(|m| same_entry(&m.text, &entry.text())) => {
                    report.unchanged += 1
                }
                Err(rejection) => self.refuse(
                    kind.as_str(),
                    &entry.text(),
                    &rejection,
                    session_key,
                    now,
                    &mut report,
                ),
            }
        }

        let origin = MergeOrigin {
            user: &self.user,
            session_key,
            at: now,
            actor: ACTOR,
        };
        let merger = if self.config.model_merge {
            Some(model.as_ref())
        } else {
            None
        };
        let merged =
            merge::merge_profile(self.store.as_ref(), merger, &grounding, &grounded, &origin)
                .await?;
        if let Some(unusable) = &merged.unusable {
            self.reject(unusable, session_key, now, &mut report);
        }
        // What the model listed as ended, and what the user's words end that it left out.
        let mut ending = profile.ended.clone();
        for entry in merge::ended_in_words(self.store.as_ref(), &grounding, &self.user).await? {
            if !ending
                .iter()
                .any(|e| e.key == entry.key && e.value == entry.value)
            {
                ending.push(entry);
            }
        }
        let (ended, refused) =
            merge::close_ended(self.store.as_ref(), &grounding, &ending, &grounded, &origin)
                .await?;
        for (entry, reason) in refused {
            let text = if entry.value.is_empty() {
                entry.key.clone()
            } else {
                entry.text()
            };
            self.refuse_with(
                "ended",
                &text,
                "not_said",
                &reason,
                session_key,
                now,
                &mut report,
            );
        }
        report.facts_added = merged.added;
        report.facts_superseded = merged.superseded;
        report.facts_deleted = merged.deleted + ended;
        report.candidates = merged.candidates;
        report.unchanged += merged.unchanged;
        report.decided_by_model = merged.by_model;
        if report.facts_added + report.facts_superseded + report.facts_deleted > 0 {
            self.mirror_profile().await?;
        }
        Ok(report)
    }

    /// Writes the current profile into MEMORY.md's managed section (facts, then preferences),
    /// so the file a person opens shows what the agent believes. The rest of the file is theirs.
    pub async fn mirror_profile(&self) -> Result<bool, MemoryError> {
        let mut profile =
            merge::current_profile(self.store.as_ref(), &self.user, PROFILE_LIMIT).await?;
        profile.sort_by(|a, b| {
            (a.kind != Kind::Fact)
                .cmp(&(b.kind != Kind::Fact))
                .then_with(|| a.text.cmp(&b.text))
        });
        let lines: Vec<String> = profile.into_iter().map(|m| m.text).collect();
        Ok(self.mirror.write_managed(&lines)?)
    }

    async fn store_episode(
        &self,
        episode: ExtractedEpisode,
        session_key: &str,
        now: Timestamp,
        report: &mut ExtractionReport,
    ) -> Result<(), MemoryError> {
        let summary = resolve_relative_dates(&episode.summary, now, &self.time_zone);
        let memory = NewMemory::new(
            Scope::user(self.user.clone()).with_session(session_key),
            summary.clone(),
        )
        .with_kind(Kind::Episode)
        .with_category(episode.category.as_str())
        .with_importance(episode.importance)
        .with_meta("session", Value::String(session_key.to_string()))
        .with_source("extraction")
        .at(now);
        match self.add_indexed(memory).await? {
            AddOutcome::Added(_) => {
                report.episodes_added += 1;
                self.append_daily_note(&format!("[{}] {summary}", episode.category), now)?;
            }
            AddOutcome::Duplicate(_) => report.unchanged += 1,
        }
        Ok(())
    }

    /// Logs an unusable answer and keeps its raw text.
    fn reject(
        &self,
        unusable: &UnusableOutput,
        session_key: &str,
        now: Timestamp,
        report: &mut ExtractionReport,
    ) {
        let line = json!({
            "at": now.to_string(),
            "user": self.user,
            "session": session_key,
            "call": unusable.what,
            "reason": unusable.reason,
            "raw": unusable.raw,
        });
        if self.append_rejected(&line) {
            tracing::warn!(call = unusable.what, reason = %unusable.reason, kept = %self.rejected_log_path().display(), "model answer for memory extraction not usable; nothing stored from it");
            report.rejected_log = Some(self.rejected_log_path());
        }
        report.unusable.push(unusable.to_string());
    }

    /// Logs an extracted entry that the conversation does not support, with the reason.
    fn refuse(
        &self,
        what: &str,
        text: &str,
        rejection: &Rejection,
        session_key: &str,
        now: Timestamp,
        report: &mut ExtractionReport,
    ) {
        self.refuse_with(
            what,
            text,
            rejection.code(),
            &rejection.reason(),
            session_key,
            now,
            report,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn refuse_with(
        &self,
        what: &str,
        text: &str,
        code: &str,
        reason: &str,
        session_key: &str,
        now: Timestamp,
        report: &mut ExtractionReport,
    ) {
        let line = json!({
            "at": now.to_string(),
            "user": self.user,
            "session": session_key,
            "call": what,
            "rejected": text,
            "code": code,
            "reason": reason,
        });
        if self.append_rejected(&line) {
            report.rejected_log = Some(self.rejected_log_path());
        }
        tracing::info!(entry = %text, reason = %reason, "extracted {what} not grounded in the conversation; not stored");
        report.rejected.push(RejectedEntry {
            what: what.to_string(),
            text: text.to_string(),
            code: code.to_string(),
            reason: reason.to_string(),
        });
    }

    /// Appends one line to the log of rejected output; false (with a warning) when it cannot.
    fn append_rejected(&self, line: &Value) -> bool {
        let path = match self.rejected_log("write") {
            Ok(path) => path,
            Err(e) => {
                tracing::warn!(error = %e, line = %line, "the log of rejected memory extraction output is refused");
                return false;
            }
        };
        let kept = path
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| OpenOptions::new().create(true).append(true).open(&path))
            .and_then(|mut file| writeln!(file, "{line}"));
        match kept {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, line = %line, "the log of rejected memory extraction output could not be written");
                false
            }
        }
    }

    async fn count(&self, kinds: &[Kind]) -> Result<u64, StoreError> {
        self.store
            .count(&Filter {
                kinds: kinds.to_vec(),
                ..self.filter()
            })
            .await
    }

    /// One line on what is known, for the start of a REPL.
    pub async fn known_summary(&self) -> Result<String, MemoryError> {
        let facts = self.count(&[Kind::Fact]).await?;
        let preferences = self.count(&[Kind::Preference]).await?;
        let episodes = self.count(&[Kind::Episode]).await?;
        if facts + preferences + episodes == 0 {
            return Ok("I don't remember anything about you yet.".to_string());
        }
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        Ok(format!(
            "I remember {}, {} and {} about you.",
            plural(facts, "fact", "facts"),
            plural(preferences, "preference", "preferences"),
            plural(episodes, "episode", "episodes")
        ))
    }

    /// The profile, the last 10 episodes and counts, for `/memory`.
    pub async fn overview(&self) -> Result<MemoryOverview, MemoryError> {
        let profile =
            merge::current_profile(self.store.as_ref(), &self.user, PROFILE_LIMIT).await?;
        let (facts, preferences) = profile.into_iter().partition(|m| m.kind == Kind::Fact);
        let recent_episodes = self
            .store
            .list(
                &Filter {
                    kinds: vec![Kind::Episode],
                    ..self.filter()
                },
                10,
                0,
            )
            .await?;
        let all = self
            .store
            .count(&Filter {
                include_closed: true,
                ..self.filter()
            })
            .await?;
        let current = self.store.count(&self.filter()).await?;
        Ok(MemoryOverview {
            user: self.user.clone(),
            facts,
            preferences,
            recent_episodes,
            episode_count: self.count(&[Kind::Episode]).await?,
            note_count: self.count(&[Kind::Note]).await?,
            closed_count: all.saturating_sub(current),
        })
    }

    /// Erases this user's memories (and their history) and the markdown files (MEMORY.md, daily
    /// notes, the log of unusable answers). Returns how many memories went.
    ///
    /// Files that lead outside the workspace (a `memory` folder linked elsewhere) are refused
    /// before anything is erased, so the answer is all or nothing as far as it can be.
    pub async fn forget(&self) -> Result<u64, MemoryError> {
        self.mirror.check("remove")?;
        let log = self.rejected_log("remove")?;
        let removed = self.store.forget_user(&self.user).await?;
        self.mirror.remove_all()?;
        match std::fs::remove_file(&log) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(MirrorError {
                    action: "remove",
                    path: log,
                    source,
                }
                .into());
            }
        }
        if let Ok(mut synced) = self.long_term_synced.lock() {
            *synced = None;
        }
        Ok(removed)
    }

    /// Appends a line (`HH:MM text`) to today's daily note (memory/YYYY-MM-DD.md); atomic write.
    pub fn append_daily_note(&self, text: &str, now: Timestamp) -> Result<(), MemoryError> {
        let local = now.to_zoned(self.time_zone.clone());
        let line = format!("{} {}", local.strftime("%H:%M"), text.trim());
        Ok(self.mirror.append_daily(local.date(), &line)?)
    }

    /// Invalidates (keeping history) old unimportant episodes and expired memories, or only
    /// lists them when `dry_run`.
    pub async fn cleanup(
        &self,
        rule: &CleanupRule,
        now: Timestamp,
        dry_run: bool,
    ) -> Result<CleanupReport, MemoryError> {
        Ok(
            maintenance::cleanup(self.store.as_ref(), &self.user, rule, now, dry_run, ACTOR)
                .await?,
        )
    }

    /// Has the model condense the profile into fewer entries; the old ones are invalidated.
    pub async fn compact(&self, now: Timestamp) -> Result<CompactReport, MemoryError> {
        let Some(model) = &self.model else {
            return Err(MemoryError::NoModel("compacting the profile"));
        };
        let report = maintenance::compact_profile(
            self.store.as_ref(),
            model.as_ref(),
            &self.user,
            now,
            ACTOR,
        )
        .await?;
        self.mirror_profile().await?;
        Ok(report)
    }

    /// The workspace the markdown files live under.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }
}

/// True when two profile texts say the same (case and spacing aside).
fn same_entry(a: &str, b: &str) -> bool {
    engram_core::normalize_text(a).to_lowercase() == engram_core::normalize_text(b).to_lowercase()
}

/// Most words of a user message searched for relevant memories.
pub const MAX_QUERY_TERMS: usize = 8;

/// The words of a user message searched for relevant memories by a lexical-only searcher (with
/// an embedder the whole message is searched): its [`MAX_QUERY_TERMS`] longest
/// distinct words (longer words are rarer and say more; every extra common word makes the search
/// slower and rarely better), in the message's order, plus any time phrase ("last week") so
/// ranking can still favour that time. A short message is searched as it is.
pub fn relevance_query(message: &str, now: Timestamp, time_zone: &TimeZone) -> String {
    let words: Vec<&str> = message
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() <= MAX_QUERY_TERMS {
        return message.to_string();
    }
    let mut seen = HashSet::new();
    let mut distinct: Vec<(usize, &str)> = words
        .iter()
        .enumerate()
        .filter(|(_, w)| seen.insert(w.to_lowercase()))
        .map(|(i, w)| (i, *w))
        .collect();
    // Longest first; among equals, earlier first.
    distinct.sort_by(|a, b| {
        b.1.chars()
            .count()
            .cmp(&a.1.chars().count())
            .then(a.0.cmp(&b.0))
    });
    distinct.truncate(MAX_QUERY_TERMS);
    distinct.sort_by_key(|(i, _)| *i);
    let mut query: Vec<String> = distinct.into_iter().map(|(_, w)| w.to_string()).collect();
    if let Some(window) = crate::when::time_window(message, now, time_zone) {
        query.push(window.phrase);
    }
    query.join(" ")
}

/// The lines of MEMORY.md that carry content: not headings, not blank, not HTML comments, not
/// the managed section (the profile's mirror), list markers removed, each once.
pub fn long_term_chunks(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    // The managed section mirrors the profile, which the block carries already.
    crate::mirror::without_managed(text)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("<!--") && *l != "---")
        .map(|l| {
            l.trim_start_matches(['-', '*', '+'])
                .trim_start()
                .to_string()
        })
        .filter(|l| !l.is_empty() && seen.insert(engram_core::normalize_text(l)))
        .collect()
}

/// A daily note line without its `HH:MM` time and `[category]` tag: the text the same episode
/// has in the store, so the two are recognised as one.
fn daily_body(line: &str) -> &str {
    let mut rest = line.trim();
    if let Some((time, after)) = rest.split_once(' ')
        && time.len() == 5
        && time.as_bytes()[2] == b':'
    {
        rest = after.trim_start();
    }
    if rest.starts_with('[')
        && let Some(end) = rest.find("] ")
    {
        rest = &rest[end + 2..];
    }
    rest
}

/// The notes of a daily file: its list items (continuation lines joined), without the heading.
fn daily_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for raw in text.lines() {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match trimmed.strip_prefix("- ") {
            Some(item) => lines.push(item.to_string()),
            None => match lines.last_mut() {
                Some(last) if raw.starts_with(' ') => {
                    last.push(' ');
                    last.push_str(trimmed);
                }
                _ => lines.push(trimmed.to_string()),
            },
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_term_chunks_are_content_lines_once() {
        let text = "# Long-term memory\n\n- Works at Acme\n* likes tea\n<!-- note -->\n\nWorks  at Acme\n---\nplain line\n";
        assert_eq!(
            long_term_chunks(text),
            vec!["Works at Acme", "likes tea", "plain line"]
        );
    }

    #[test]
    fn long_messages_are_searched_by_their_longest_words_and_time_phrase() {
        let now: Timestamp = "2024-05-16T15:00:00Z".parse().unwrap();
        let tz = TimeZone::UTC;
        assert_eq!(
            relevance_query("python version?", now, &tz),
            "python version?"
        );
        let query = relevance_query(
            "so what was it that we decided about the deployment pipeline for the billing service last week, do you remember it",
            now,
            &tz,
        );
        assert_eq!(
            query,
            "what decided about deployment pipeline billing service remember last week"
        );
    }

    proptest::proptest! {
        #[test]
        fn relevance_queries_are_short_and_made_of_the_messages_words(message in "[a-zA-Z ,.?]{0,200}") {
            let now: Timestamp = "2024-05-16T15:00:00Z".parse().unwrap();
            let query = relevance_query(&message, now, &TimeZone::UTC);
            let words: Vec<String> = message
                .split(|c: char| !c.is_alphanumeric())
                .map(str::to_lowercase)
                .collect();
            let terms: Vec<&str> = query
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            // The longest words, plus at most a three-word time phrase.
            proptest::prop_assert!(terms.len() <= MAX_QUERY_TERMS.max(words.len().min(MAX_QUERY_TERMS)) + 3);
            for term in terms {
                proptest::prop_assert!(words.contains(&term.to_lowercase()), "{term}");
            }
        }
    }

    #[test]
    fn daily_bodies_drop_time_and_tag() {
        assert_eq!(daily_body("09:00 [task_result] Deployed"), "Deployed");
        assert_eq!(daily_body("09:00 called mum"), "called mum");
        assert_eq!(daily_body("[x] y"), "y");
        assert_eq!(daily_body("plain"), "plain");
    }

    #[test]
    fn daily_lines_join_continuations() {
        let text = "# 2024-05-16\n\n- 09:00 a\n- 10:00 b\n  more\n";
        assert_eq!(daily_lines(text), vec!["09:00 a", "10:00 b more"]);
    }

    #[test]
    fn config_defaults_match_the_design() {
        let c = ManagerConfig::default();
        assert_eq!(
            (
                c.context_budget_tokens,
                c.min_importance,
                c.relevant_episodes,
                c.recent_episodes,
                c.extract_every_turns,
                c.model_merge
            ),
            (1500, 2, 5, 3, 10, true)
        );
        let parsed: ManagerConfig = serde_json::from_str(r#"{"recent_episodes": 1}"#).unwrap();
        assert_eq!(parsed.recent_episodes, 1);
        assert_eq!(parsed.context_budget_tokens, 1500);
    }
}
