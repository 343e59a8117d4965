//! What the REST API and the MCP tools both do: memory operations with access checks, a
//! bounded number at a time.
//!
//! A memory another user owns is reported exactly as a memory that does not exist; only
//! operations that name a user outright (add, search, list, export) answer 403 for users the
//! caller may not touch.

use std::collections::BTreeMap;
use std::sync::Arc;

use engram_core::store::MemoryPatch;
use engram_core::store::claims::ClaimStore;
use engram_core::store::tokens::TokenStore;
use engram_core::{
    AddOutcome, ChatModel, DayCount, Filter, HistoryEvent, Memory, MemoryId, MemoryStore, Message,
    NewMemory, Scope, StoreError, UserCount,
};
use engram_memory::manager::{ExtractionReport, ManagerConfig, MemoryError, MemoryManager};
use engram_memory::session::{SessionInfo, SessionKey, SessionLog, SessionStore};
use engram_memory::{SearchRequest, SearchResults, Searcher};
use engram_workspace::Workspace;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::auth::Access;
use crate::error::{ApiError, ErrorCode};
use crate::knowledge::KnowledgeBase;

/// Lines of an export buffered between the database and the network.
const EXPORT_BUFFER_LINES: usize = 256;

/// The memory operations, shared by the REST API and the MCP server. Cheap to clone.
#[derive(Clone)]
pub struct MemoryService {
    store: Arc<dyn MemoryStore>,
    claims: Arc<dyn ClaimStore>,
    searcher: Searcher,
    tokens: Arc<dyn TokenStore>,
    knowledge: KnowledgeBase,
    gate: Arc<Semaphore>,
    extraction: Option<Arc<Extraction>>,
    transcripts: Option<SessionStore>,
}

/// What extraction from messages (`infer: true`) needs: the model, the workspace whose
/// `logs/` keep unusable model answers, and the memory manager's settings.
#[derive(Clone)]
pub struct Extraction {
    /// The language model that extracts and merges.
    pub model: Arc<dyn ChatModel>,
    /// The agent's workspace (the memory manager's home for its files).
    pub workspace: Workspace,
    /// `[memory]` from config.toml.
    pub config: ManagerConfig,
}

impl std::fmt::Debug for Extraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extraction")
            .field("model", &self.model.info().model)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for MemoryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryService").finish_non_exhaustive()
    }
}

/// One session of a user: the agent's conversation (its transcript), the memories that carry
/// its `session_id`, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// The session's id (the agent's session key, `channel:chat_id`).
    pub session_id: String,
    /// The user it belongs to.
    pub user_id: String,
    /// How many memories carry its id (current and closed).
    pub memories: u64,
    /// How many messages its transcript holds (0 without one).
    pub messages: u64,
    /// Whether the agent kept its transcript (see `/v1/sessions/{id}/messages`).
    pub transcript: bool,
    /// The oldest memory's or message's time.
    pub first_at: Timestamp,
    /// The newest.
    pub last_at: Timestamp,
}

/// How many store operations may run at once: enough to keep every core busy, few enough that
/// each has a pooled connection.
pub fn default_concurrency() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores * 2).clamp(2, 8)
}

impl MemoryService {
    /// A service over these parts; `searcher` must search `store`, and `claims`, `tokens` and
    /// `knowledge` must use the same database.
    pub fn new(
        store: Arc<dyn MemoryStore>,
        claims: Arc<dyn ClaimStore>,
        searcher: Searcher,
        tokens: Arc<dyn TokenStore>,
        knowledge: KnowledgeBase,
        concurrency: usize,
    ) -> Self {
        Self {
            store,
            claims,
            searcher,
            tokens,
            knowledge,
            gate: Arc::new(Semaphore::new(concurrency.max(1))),
            extraction: None,
            transcripts: None,
        }
    }

    /// The service with the agent's conversations (their transcripts) read from `sessions`;
    /// without, sessions are known only through the memories that name them.
    pub fn with_transcripts(mut self, sessions: Option<SessionStore>) -> Self {
        self.transcripts = sessions;
        self
    }

    /// The service with extraction from messages (`infer: true`) through `extraction`.
    pub fn with_extraction(mut self, extraction: Option<Extraction>) -> Self {
        self.extraction = extraction.map(Arc::new);
        self
    }

    /// Extracts episodes, facts and preferences from a conversation into `scope`'s user's
    /// memory and merges them with what is known, as the agent does at a session's end. What
    /// it stores is stamped `now` (so callers can find it again).
    pub async fn extract(
        &self,
        access: &Access,
        scope: &Scope,
        conversation: Vec<Message>,
        now: Timestamp,
    ) -> Result<ExtractionReport, ApiError> {
        access.require(&scope.user_id)?;
        let Some(extraction) = &self.extraction else {
            return Err(ApiError::new(
                ErrorCode::NotImplemented,
                "extracting memories from messages (infer: true, the default) needs a language \
                 model, and this server has none configured ([llm] in config.toml or \
                 ENGRAM_PROVIDER / OPENAI_API_KEY); send \"infer\": false to store each message \
                 verbatim as an episode",
            ));
        };
        let manager = MemoryManager::new(
            self.store.clone(),
            self.claims.clone(),
            Arc::new(self.searcher.clone()),
            Some(extraction.model.clone()),
            extraction.workspace.clone(),
            scope.user_id.clone(),
            extraction.config.clone(),
        );
        let session = scope
            .session_id
            .clone()
            .unwrap_or_else(|| "api".to_string());
        manager
            .extract_batch(&conversation, &session, now)
            .await
            .map_err(|e| match e {
                MemoryError::Model(e) => ApiError::new(ErrorCode::ModelFailed, e.to_string()),
                MemoryError::Store(e) => ApiError::from(e),
                other => ApiError::internal(other.to_string()),
            })
    }

    /// The token store (for authentication).
    pub fn tokens(&self) -> &Arc<dyn TokenStore> {
        &self.tokens
    }

    /// Waits for a turn: at most `concurrency` store operations run at once; the permit is
    /// held until dropped.
    pub async fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.gate
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the server is shutting down"))
    }

    /// Stores one memory for a user the caller may touch.
    pub async fn add(&self, access: &Access, memory: NewMemory) -> Result<AddOutcome, ApiError> {
        access.require(&memory.scope.user_id)?;
        let _permit = self.permit().await?;
        Ok(engram_memory::indexing::add_with_vector(
            &self.store,
            self.searcher.embedder(),
            memory,
            &access.actor(),
        )
        .await?)
    }

    /// Stores many memories in one transaction; each gets its own outcome.
    pub async fn add_many(
        &self,
        access: &Access,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, ApiError> {
        for memory in &memories {
            access.require(&memory.scope.user_id)?;
        }
        let _permit = self.permit().await?;
        Ok(engram_memory::indexing::add_many_with_vectors(
            &self.store,
            self.searcher.embedder(),
            memories,
            &access.actor(),
        )
        .await?)
    }

    /// Ranked search in one user's memories.
    pub async fn search(
        &self,
        access: &Access,
        request: SearchRequest,
    ) -> Result<SearchResults, ApiError> {
        access.require(&request.filter.user_id)?;
        let _permit = self.permit().await?;
        Ok(self.searcher.search(&request).await?)
    }

    /// One user's memories, newest first.
    pub async fn list(
        &self,
        access: &Access,
        filter: Filter,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Memory>, ApiError> {
        access.require(&filter.user_id)?;
        let _permit = self.permit().await?;
        Ok(self.store.list(&filter, limit, offset).await?)
    }

    /// How many of one user's memories match the filter.
    pub async fn count(&self, access: &Access, filter: Filter) -> Result<u64, ApiError> {
        access.require(&filter.user_id)?;
        let _permit = self.permit().await?;
        Ok(self.store.count(&filter).await?)
    }

    /// Erases every memory of a user and their history, for good; gives how many memories.
    pub async fn forget(&self, access: &Access, user_id: String) -> Result<u64, ApiError> {
        access.require(&user_id)?;
        let _permit = self.permit().await?;
        Ok(self.store.forget_user(&user_id).await?)
    }

    /// A memory the caller may see.
    pub async fn get(&self, access: &Access, id: MemoryId) -> Result<Memory, ApiError> {
        let _permit = self.permit().await?;
        self.visible(access, id).await
    }

    /// Changes a memory the caller may see.
    pub async fn update(
        &self,
        access: &Access,
        id: MemoryId,
        patch: MemoryPatch,
    ) -> Result<Memory, ApiError> {
        let _permit = self.permit().await?;
        self.visible(access, id).await?;
        Ok(self.store.update(id, patch, &access.actor()).await?)
    }

    /// Closes a memory the caller may see.
    pub async fn invalidate(&self, access: &Access, id: MemoryId) -> Result<Memory, ApiError> {
        let _permit = self.permit().await?;
        self.visible(access, id).await?;
        Ok(self.store.invalidate(id, &access.actor()).await?)
    }

    /// Deletes a memory the caller may see.
    pub async fn delete(&self, access: &Access, id: MemoryId) -> Result<Memory, ApiError> {
        let _permit = self.permit().await?;
        self.visible(access, id).await?;
        Ok(self.store.delete(id, &access.actor()).await?)
    }

    /// The audit trail of a memory the caller may see (deleted ones included).
    pub async fn history(
        &self,
        access: &Access,
        id: MemoryId,
    ) -> Result<Vec<HistoryEvent>, ApiError> {
        let _permit = self.permit().await?;
        match self.store.owner(id).await? {
            Some(owner) if access.allows(&owner) => Ok(self.store.history(id).await?),
            _ => Err(ApiError::memory_not_found(id)),
        }
    }

    /// Streams a user's memories as JSONL lines (the format of `engram export`), oldest first.
    /// The receiver gets one `Ok(line)` per memory, or an `Err` if the export failed midway.
    pub async fn export(
        &self,
        access: &Access,
        user_id: String,
    ) -> Result<mpsc::Receiver<Result<Vec<u8>, ApiError>>, ApiError> {
        access.require(&user_id)?;
        let (sender, receiver) = mpsc::channel(EXPORT_BUFFER_LINES);
        let service = self.clone();
        tokio::spawn(async move {
            if let Err(e) = service.export_to(&user_id, &sender).await {
                tracing::warn!(error = %e, "export stopped");
                let _ = sender.send(Err(e)).await;
            }
        });
        Ok(receiver)
    }

    /// Sends a user's memories to `sender`, a page at a time; stops when the receiver goes.
    async fn export_to(
        &self,
        user_id: &str,
        sender: &mpsc::Sender<Result<Vec<u8>, ApiError>>,
    ) -> Result<(), ApiError> {
        let mut after = None;
        loop {
            let page = {
                let _permit = self.permit().await?;
                self.store
                    .export_page(user_id, after, engram_core::store::EXPORT_PAGE)
                    .await?
            };
            let full = page.len() == engram_core::store::EXPORT_PAGE;
            for memory in page {
                after = Some(engram_core::ExportCursor::after(&memory));
                let mut line = serde_json::to_vec(&memory)
                    .map_err(|e| ApiError::internal(format!("cannot write a memory: {e}")))?;
                line.push(b'\n');
                if sender.send(Ok(line)).await.is_err() {
                    return Ok(()); // the client went away
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// The sessions a user's memories belong to, most recent first.
    pub async fn sessions(
        &self,
        access: &Access,
        user_id: String,
    ) -> Result<Vec<SessionSummary>, ApiError> {
        access.require(&user_id)?;
        let _permit = self.permit().await?;
        let mut sessions: BTreeMap<String, SessionSummary> = self
            .store
            .session_counts(&user_id)
            .await?
            .into_iter()
            .map(|c| {
                let summary = SessionSummary {
                    session_id: c.session_id.clone(),
                    user_id: user_id.clone(),
                    memories: c.memories,
                    messages: 0,
                    transcript: false,
                    first_at: c.first_at,
                    last_at: c.last_at,
                };
                (c.session_id, summary)
            })
            .collect();
        for info in self.user_transcripts(&user_id).await? {
            let (Some(first), Some(last)) = (info.created_at, info.updated_at) else {
                continue;
            };
            let entry = sessions
                .entry(info.key.as_str().to_string())
                .or_insert_with(|| SessionSummary {
                    session_id: info.key.as_str().to_string(),
                    user_id: user_id.clone(),
                    memories: 0,
                    messages: 0,
                    transcript: true,
                    first_at: first,
                    last_at: last,
                });
            entry.transcript = true;
            entry.messages = info.messages as u64;
            entry.first_at = entry.first_at.min(first);
            entry.last_at = entry.last_at.max(last);
        }
        let mut list: Vec<SessionSummary> = sessions.into_values().collect();
        list.sort_by(|a, b| {
            b.last_at
                .cmp(&a.last_at)
                .then(a.session_id.cmp(&b.session_id))
        });
        Ok(list)
    }

    /// The transcript of one of a user's conversations; `None` when the agent kept none for
    /// that user under this key.
    pub async fn transcript(
        &self,
        access: &Access,
        user_id: String,
        key: String,
    ) -> Result<Option<SessionLog>, ApiError> {
        access.require(&user_id)?;
        let Some(store) = self.transcripts.clone() else {
            return Ok(None);
        };
        let Ok(key) = SessionKey::parse(&key) else {
            return Ok(None);
        };
        let log = store
            .load(&key)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(log.filter(|log| log.user() == Some(user_id.as_str())))
    }

    /// The user's conversations the agent kept.
    async fn user_transcripts(&self, user_id: &str) -> Result<Vec<SessionInfo>, ApiError> {
        let Some(store) = self.transcripts.clone() else {
            return Ok(Vec::new());
        };
        Ok(store
            .list()
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .into_iter()
            .filter(|info| info.user.as_deref() == Some(user_id))
            .collect())
    }

    /// The users the caller may see, with how many memories each has: every user with
    /// memories for a local caller, the token's own users (with none or some) otherwise.
    pub async fn users(&self, access: &Access) -> Result<Vec<UserCount>, ApiError> {
        let _permit = self.permit().await?;
        match access {
            Access::Local => Ok(self.store.users().await?),
            Access::Token { users, .. } => {
                let mut counts = Vec::with_capacity(users.len());
                for user in users {
                    let all = Filter {
                        include_closed: true,
                        ..Filter::user(user.clone())
                    };
                    counts.push(UserCount {
                        user_id: user.clone(),
                        memories: self.store.count(&all).await?,
                    });
                }
                Ok(counts)
            }
        }
    }

    /// How many memories match the filter, per day (in `time_zone`) and kind.
    pub async fn count_by_day(
        &self,
        access: &Access,
        filter: Filter,
        time_zone: TimeZone,
    ) -> Result<Vec<DayCount>, ApiError> {
        access.require(&filter.user_id)?;
        let _permit = self.permit().await?;
        Ok(self.store.count_by_day(&filter, &time_zone).await?)
    }

    /// The knowledge graphs, for a user the caller may touch.
    pub fn graph(&self, access: &Access, user_id: &str) -> Result<&KnowledgeBase, ApiError> {
        access.require(user_id)?;
        Ok(&self.knowledge)
    }

    /// The memory, if it exists and the caller may see it; otherwise the same not-found error.
    async fn visible(&self, access: &Access, id: MemoryId) -> Result<Memory, ApiError> {
        match self.store.get(id).await {
            Ok(memory) if access.allows(&memory.scope.user_id) => Ok(memory),
            Ok(_) | Err(StoreError::NotFound(_)) => Err(ApiError::memory_not_found(id)),
            Err(e) => Err(e.into()),
        }
    }
}
