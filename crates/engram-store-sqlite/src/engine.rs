//! [`SqliteStore`]: the storage traits of engram-core on one SQLite file.
//!
//! SQLite blocks: a call waits on the disk, and on another process's write for up to the busy
//! timeout. So every trait method runs its work where blocking is allowed, here at the engine's
//! edge, once per call (see [`SqliteStore::run`]); callers simply await.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use engram_core::store::claims::{ClaimOutcome, ClaimStore, ClaimTicket};
use engram_core::store::graph::{
    Entity, GraphError, GraphLink, GraphStore, IndexTarget, KnowledgeGraph, ObservationDeletion,
    ObservationInput, ObservationsAdded, PendingIndex, Relation,
};
use engram_core::store::jobs::{
    AfterRun, IsAlive, Job, JobError, JobRun, JobStore, NewJob, NextRun, RunEnd, RunTrigger,
};
use engram_core::store::tokens::{ApiToken, NewToken, TokenError, TokenStore, TokenWithHash};
use engram_core::{
    AddOutcome, Backend, DayCount, DenseIndexStats, DenseSearchCounts, DenseTuning, ExportCursor,
    Filter, HistoryEvent, LexicalHit, Memory, MemoryId, MemoryPatch, MemoryStore, NewMemory,
    PendingText, SessionCount, StoreError, StoreStats, StoredVector, UserCount, VectorHit,
    VectorModelStats,
};
use jiff::Timestamp;
use tokio::runtime::RuntimeFlavor;

use crate::store::{Database, ENGINE, StoreOptions};

/// Every store of one SQLite database file, async. Cheap to clone (the database is shared).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    db: Arc<Database>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens (creating if needed) the database at `path`, migrating it to the current schema.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, StoreError> {
        Ok(Self {
            db: Arc::new(Database::open_with(path, options)?),
        })
    }

    /// The same database, synchronously: for this crate's tests, and for work that is already
    /// on a blocking thread.
    pub fn blocking(&self) -> &Database {
        &self.db
    }

    /// The shared database.
    pub(crate) fn database(&self) -> Arc<Database> {
        Arc::clone(&self.db)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// Every store of this database as one [`Backend`] (session logs stay in files).
    pub fn into_backend(self) -> Backend {
        let location = crate::error::location(self.db.path());
        Backend::from_engine(Arc::new(self), ENGINE, location)
    }

    /// Runs `work` where blocking is allowed: in place on a multi-threaded runtime (which then
    /// hands this worker's other tasks to another thread, see `block_in_place`), on the blocking
    /// pool on a current-thread runtime, and in place outside a runtime. A panic in it is
    /// resumed here, as it would have been had the work run in place.
    ///
    /// In place, because handing every call to a pool thread and waiting for it to wake cost a
    /// search more than the search itself: 0.07 ms became 0.15-0.19 ms at 100k memories, and a
    /// one-shot `engram search` took 5 ms longer (a command's future runs in `block_on`, where
    /// `block_in_place` costs nothing).
    pub(crate) async fn run<T, E>(
        &self,
        work: impl FnOnce(&Database) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| work(&db))
            }
            Ok(runtime) => match runtime.spawn_blocking(move || work(&db)).await {
                Ok(result) => result,
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    Err(e) => {
                        Err(StoreError::Backend(format!("a storage task was stopped: {e}")).into())
                    }
                },
            },
            Err(_) => work(&db),
        }
    }
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn add(&self, memory: NewMemory, actor: &str) -> Result<AddOutcome, StoreError> {
        let actor = actor.to_string();
        self.run(move |db| db.add(memory, &actor)).await
    }

    async fn add_many(
        &self,
        memories: Vec<NewMemory>,
        actor: &str,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, StoreError> {
        let actor = actor.to_string();
        self.run(move |db| db.add_many(memories, &actor)).await
    }

    async fn get(&self, id: MemoryId) -> Result<Memory, StoreError> {
        self.run(move |db| db.get(id)).await
    }

    async fn update(
        &self,
        id: MemoryId,
        patch: MemoryPatch,
        actor: &str,
    ) -> Result<Memory, StoreError> {
        let actor = actor.to_string();
        self.run(move |db| db.update(id, patch, &actor)).await
    }

    async fn invalidate(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        let actor = actor.to_string();
        self.run(move |db| db.invalidate(id, &actor)).await
    }

    async fn delete(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        let actor = actor.to_string();
        self.run(move |db| db.delete(id, &actor)).await
    }

    async fn history(&self, id: MemoryId) -> Result<Vec<HistoryEvent>, StoreError> {
        self.run(move |db| db.history(id)).await
    }

    async fn owner(&self, id: MemoryId) -> Result<Option<String>, StoreError> {
        self.run(move |db| db.owner(id)).await
    }

    async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let filter = filter.clone();
        self.run(move |db| db.list(&filter, limit, offset)).await
    }

    async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        let filter = filter.clone();
        self.run(move |db| db.count(&filter)).await
    }

    async fn search_lexical(
        &self,
        filter: &Filter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError> {
        let (filter, query) = (filter.clone(), query.to_string());
        self.run(move |db| db.search_lexical(&filter, &query, limit))
            .await
    }

    async fn forget_user(&self, user_id: &str) -> Result<u64, StoreError> {
        let user_id = user_id.to_string();
        self.run(move |db| db.forget_user(&user_id)).await
    }

    async fn export_page(
        &self,
        user_id: &str,
        after: Option<ExportCursor>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let user_id = user_id.to_string();
        self.run(move |db| db.export_page(&user_id, after, limit))
            .await
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.run(|db| db.stats()).await
    }

    async fn users(&self) -> Result<Vec<UserCount>, StoreError> {
        self.run(|db| db.users()).await
    }

    async fn session_counts(&self, user_id: &str) -> Result<Vec<SessionCount>, StoreError> {
        let user_id = user_id.to_string();
        self.run(move |db| db.session_counts(&user_id)).await
    }

    async fn count_by_day(
        &self,
        filter: &Filter,
        time_zone: &jiff::tz::TimeZone,
    ) -> Result<Vec<DayCount>, StoreError> {
        let (filter, time_zone) = (filter.clone(), time_zone.clone());
        self.run(move |db| db.count_by_day(&filter, &time_zone))
            .await
    }

    async fn put_vectors(
        &self,
        model: &str,
        dimension: usize,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError> {
        let model = model.to_string();
        self.run(move |db| db.put_vectors(&model, dimension, vectors))
            .await
    }

    async fn texts_without_vectors(
        &self,
        model: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PendingText>, StoreError> {
        let (model, after) = (model.to_string(), after.map(str::to_string));
        self.run(move |db| db.texts_without_vectors(&model, after.as_deref(), limit))
            .await
    }

    async fn count_without_vectors(&self, model: &str) -> Result<u64, StoreError> {
        let model = model.to_string();
        self.run(move |db| db.count_without_vectors(&model)).await
    }

    async fn vector_search(
        &self,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<VectorHit>, StoreError> {
        let (model, filter, query) = (model.to_string(), filter.clone(), query.to_vec());
        self.run(move |db| db.vector_search(&model, &filter, &query, limit))
            .await
    }

    async fn vector_models(&self) -> Result<Vec<VectorModelStats>, StoreError> {
        self.run(|db| db.vector_models()).await
    }

    async fn has_vectors(&self, model: &str) -> Result<bool, StoreError> {
        let model = model.to_string();
        self.run(move |db| db.has_vectors(&model)).await
    }

    async fn previous_turns(
        &self,
        user_id: &str,
        ids: &[MemoryId],
    ) -> Result<Vec<Option<MemoryId>>, StoreError> {
        let (user_id, ids) = (user_id.to_string(), ids.to_vec());
        self.run(move |db| db.previous_turns(&user_id, &ids)).await
    }

    async fn warm_dense_index(&self, model: &str) -> Result<Option<DenseIndexStats>, StoreError> {
        let model = model.to_string();
        let stats = self.run(move |db| db.warm_vector_index(&model)).await?;
        Ok(Some(DenseIndexStats {
            vectors: stats.vectors,
            memories: stats.memories,
            dimension: stats.dimension,
            heap_bytes: stats.heap_bytes,
            load_time: stats.load_time,
            link_time: stats.link_time,
        }))
    }

    fn tune_dense_search(&self, tuning: DenseTuning) {
        self.db
            .tune_vector_search(tuning.exact_max_scope, tuning.ef_search);
    }

    fn dense_search_counts(&self) -> DenseSearchCounts {
        let counts = self.db.vector_search_counts();
        DenseSearchCounts {
            exact_in_database: counts.sql_exact,
            exact_in_memory: counts.memory_exact,
            approximate: counts.approximate,
        }
    }
}

#[async_trait]
impl JobStore for SqliteStore {
    async fn add(&self, new: NewJob, now_ms: i64) -> Result<Job, JobError> {
        self.run(move |db| db.jobs().add(new, now_ms)).await
    }

    async fn get(&self, id: &str) -> Result<Job, JobError> {
        let id = id.to_string();
        self.run(move |db| db.jobs().get(&id)).await
    }

    async fn list(&self, include_disabled: bool) -> Result<Vec<Job>, JobError> {
        self.run(move |db| db.jobs().list(include_disabled)).await
    }

    async fn due(&self, now_ms: i64) -> Result<Vec<Job>, JobError> {
        self.run(move |db| db.jobs().due(now_ms)).await
    }

    async fn next_wake(&self) -> Result<Option<i64>, JobError> {
        self.run(|db| db.jobs().next_wake()).await
    }

    async fn remove(&self, id: &str) -> Result<Job, JobError> {
        let id = id.to_string();
        self.run(move |db| db.jobs().remove(&id)).await
    }

    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        now_ms: i64,
        next_run: NextRun,
    ) -> Result<Job, JobError> {
        let id = id.to_string();
        self.run(move |db| db.jobs().set_enabled(&id, enabled, now_ms, next_run))
            .await
    }

    async fn start_run(
        &self,
        job_id: &str,
        trigger: RunTrigger,
        expected_next_run_ms: Option<i64>,
        started_at_ms: i64,
        runner_pid: u32,
    ) -> Result<Option<JobRun>, JobError> {
        let job_id = job_id.to_string();
        self.run(move |db| {
            db.jobs().start_run(
                &job_id,
                trigger,
                expected_next_run_ms,
                started_at_ms,
                runner_pid,
            )
        })
        .await
    }

    async fn finish_run(
        &self,
        run: &JobRun,
        end: &RunEnd,
        after: AfterRun,
    ) -> Result<(), JobError> {
        let (run, end) = (run.clone(), end.clone());
        self.run(move |db| db.jobs().finish_run(&run, &end, after))
            .await
    }

    async fn skip_missed(
        &self,
        job_id: &str,
        scheduled_at_ms: i64,
        now_ms: i64,
        after: AfterRun,
    ) -> Result<bool, JobError> {
        let job_id = job_id.to_string();
        self.run(move |db| {
            db.jobs()
                .skip_missed(&job_id, scheduled_at_ms, now_ms, after)
        })
        .await
    }

    async fn recover_interrupted(
        &self,
        now_ms: i64,
        is_alive: IsAlive,
    ) -> Result<Vec<JobRun>, JobError> {
        self.run(move |db| db.jobs().recover_interrupted(now_ms, is_alive))
            .await
    }

    async fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, JobError> {
        let job_id = job_id.to_string();
        self.run(move |db| db.jobs().runs(&job_id, limit)).await
    }

    async fn run(&self, run_id: i64) -> Result<JobRun, JobError> {
        SqliteStore::run(self, move |db| db.jobs().run(run_id)).await
    }

    async fn change_version(&self) -> Result<i64, JobError> {
        self.run(|db| Ok(db.data_version()?)).await
    }
}

#[async_trait]
impl TokenStore for SqliteStore {
    async fn insert(&self, token: NewToken) -> Result<bool, TokenError> {
        self.run(move |db| db.tokens().insert(&token)).await
    }

    async fn list(&self) -> Result<Vec<ApiToken>, TokenError> {
        self.run(|db| db.tokens().list()).await
    }

    async fn active_count(&self) -> Result<u64, TokenError> {
        self.run(|db| db.tokens().active_count()).await
    }

    async fn revoke(&self, id: &str, now: Timestamp) -> Result<ApiToken, TokenError> {
        let id = id.to_string();
        self.run(move |db| db.tokens().revoke(&id, now)).await
    }

    async fn find(&self, id: &str) -> Result<Option<TokenWithHash>, TokenError> {
        let id = id.to_string();
        self.run(move |db| db.tokens().find(&id)).await
    }

    async fn touch(&self, id: &str, now: Timestamp) -> Result<(), TokenError> {
        let id = id.to_string();
        self.run(move |db| db.tokens().touch(&id, now)).await
    }

    async fn change_version(&self) -> Result<i64, TokenError> {
        self.run(|db| Ok(db.data_version()?)).await
    }

    fn try_change_version(&self) -> Option<i64> {
        self.db.try_data_version()
    }
}

#[async_trait]
impl ClaimStore for SqliteStore {
    async fn claim(
        &self,
        user_id: &str,
        stream: &str,
        wanted: Range<u64>,
        lease: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        let (user_id, stream) = (user_id.to_string(), stream.to_string());
        self.run(move |db| db.claims().claim(&user_id, &stream, wanted, lease))
            .await
    }

    async fn finish(&self, ticket: &ClaimTicket) -> Result<bool, StoreError> {
        let ticket = ticket.clone();
        self.run(move |db| db.claims().finish(&ticket)).await
    }

    async fn release(&self, ticket: &ClaimTicket) -> Result<(), StoreError> {
        let ticket = ticket.clone();
        self.run(move |db| db.claims().release(&ticket)).await
    }
}

#[async_trait]
impl GraphStore for SqliteStore {
    async fn create_entities(
        &self,
        user_id: &str,
        entities: &[Entity],
        now: Timestamp,
    ) -> Result<Vec<Entity>, GraphError> {
        let (user_id, entities) = (user_id.to_string(), entities.to_vec());
        self.run(move |db| db.graph().create_entities(&user_id, &entities, now))
            .await
    }

    async fn create_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
        now: Timestamp,
    ) -> Result<Vec<Relation>, GraphError> {
        let (user_id, relations) = (user_id.to_string(), relations.to_vec());
        self.run(move |db| db.graph().create_relations(&user_id, &relations, now))
            .await
    }

    async fn add_observations(
        &self,
        user_id: &str,
        inputs: &[ObservationInput],
        now: Timestamp,
    ) -> Result<Vec<ObservationsAdded>, GraphError> {
        let (user_id, inputs) = (user_id.to_string(), inputs.to_vec());
        self.run(move |db| db.graph().add_observations(&user_id, &inputs, now))
            .await
    }

    async fn delete_entities(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<Vec<MemoryId>, GraphError> {
        let (user_id, names) = (user_id.to_string(), names.to_vec());
        self.run(move |db| db.graph().delete_entities(&user_id, &names))
            .await
    }

    async fn delete_observations(
        &self,
        user_id: &str,
        deletions: &[ObservationDeletion],
    ) -> Result<Vec<MemoryId>, GraphError> {
        let (user_id, deletions) = (user_id.to_string(), deletions.to_vec());
        self.run(move |db| db.graph().delete_observations(&user_id, &deletions))
            .await
    }

    async fn delete_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
    ) -> Result<(), GraphError> {
        let (user_id, relations) = (user_id.to_string(), relations.to_vec());
        self.run(move |db| db.graph().delete_relations(&user_id, &relations))
            .await
    }

    async fn read_graph(&self, user_id: &str) -> Result<KnowledgeGraph, GraphError> {
        let user_id = user_id.to_string();
        self.run(move |db| db.graph().read_graph(&user_id)).await
    }

    async fn open_nodes(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<KnowledgeGraph, GraphError> {
        let (user_id, names) = (user_id.to_string(), names.to_vec());
        self.run(move |db| db.graph().open_nodes(&user_id, &names))
            .await
    }

    async fn pending_index(
        &self,
        user_id: &str,
        limit: usize,
    ) -> Result<Vec<PendingIndex>, GraphError> {
        let user_id = user_id.to_string();
        self.run(move |db| db.graph().pending_index(&user_id, limit))
            .await
    }

    async fn set_index(
        &self,
        links: &[(IndexTarget, MemoryId)],
    ) -> Result<Vec<MemoryId>, GraphError> {
        let links = links.to_vec();
        self.run(move |db| db.graph().set_index(&links)).await
    }

    async fn links(
        &self,
        user_id: &str,
        memories: &[MemoryId],
    ) -> Result<HashMap<MemoryId, GraphLink>, GraphError> {
        let (user_id, memories) = (user_id.to_string(), memories.to_vec());
        self.run(move |db| db.graph().links(&user_id, &memories))
            .await
    }
}
