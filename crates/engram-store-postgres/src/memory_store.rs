//! [`MemoryStore`] for [`PgStore`]: the contract, with the work in memories.rs (memories,
//! history, lexical search) and vectors.rs (dense search).

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use engram_core::store::{DenseSearchCounts, DenseTuning, ExportCursor, LexicalHit, MemoryPatch};
use engram_core::{
    AddOutcome, DayCount, Filter, HistoryEvent, Memory, MemoryId, MemoryStore, NewMemory,
    PendingText, SessionCount, StoreError, StoreStats, StoredVector, UserCount, VectorHit,
    VectorModelStats,
};

use crate::PgStore;

#[async_trait]
impl MemoryStore for PgStore {
    async fn add(&self, memory: NewMemory, actor: &str) -> Result<AddOutcome, StoreError> {
        PgStore::add(self, memory, actor).await
    }

    async fn add_many(
        &self,
        memories: Vec<NewMemory>,
        actor: &str,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, StoreError> {
        PgStore::add_many(self, memories, actor).await
    }

    async fn get(&self, id: MemoryId) -> Result<Memory, StoreError> {
        PgStore::get(self, id).await
    }

    async fn update(
        &self,
        id: MemoryId,
        patch: MemoryPatch,
        actor: &str,
    ) -> Result<Memory, StoreError> {
        PgStore::update(self, id, patch, actor).await
    }

    async fn invalidate(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        PgStore::invalidate(self, id, actor).await
    }

    async fn delete(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        PgStore::delete(self, id, actor).await
    }

    async fn history(&self, id: MemoryId) -> Result<Vec<HistoryEvent>, StoreError> {
        PgStore::history(self, id).await
    }

    async fn owner(&self, id: MemoryId) -> Result<Option<String>, StoreError> {
        PgStore::owner(self, id).await
    }

    async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        PgStore::list(self, filter, limit, offset).await
    }

    async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        PgStore::count(self, filter).await
    }

    async fn search_lexical(
        &self,
        filter: &Filter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError> {
        PgStore::search_lexical(self, filter, query, limit).await
    }

    async fn forget_user(&self, user_id: &str) -> Result<u64, StoreError> {
        PgStore::forget_user(self, user_id).await
    }

    async fn export_page(
        &self,
        user_id: &str,
        after: Option<ExportCursor>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        PgStore::export_page(self, user_id, after, limit).await
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        PgStore::stats(self).await
    }

    async fn users(&self) -> Result<Vec<UserCount>, StoreError> {
        PgStore::users(self).await
    }

    async fn session_counts(&self, user_id: &str) -> Result<Vec<SessionCount>, StoreError> {
        PgStore::session_counts(self, user_id).await
    }

    async fn count_by_day(
        &self,
        filter: &Filter,
        time_zone: &jiff::tz::TimeZone,
    ) -> Result<Vec<DayCount>, StoreError> {
        PgStore::count_by_day(self, filter, time_zone).await
    }

    async fn put_vectors(
        &self,
        model: &str,
        dimension: usize,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError> {
        PgStore::put_vectors(self, model, dimension, vectors).await
    }

    async fn texts_without_vectors(
        &self,
        model: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PendingText>, StoreError> {
        PgStore::texts_without_vectors(self, model, after, limit).await
    }

    async fn count_without_vectors(&self, model: &str) -> Result<u64, StoreError> {
        PgStore::count_without_vectors(self, model).await
    }

    async fn vector_search(
        &self,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<VectorHit>, StoreError> {
        PgStore::vector_search(self, model, filter, query, limit).await
    }

    async fn vector_models(&self) -> Result<Vec<VectorModelStats>, StoreError> {
        PgStore::vector_models(self).await
    }

    async fn has_vectors(&self, model: &str) -> Result<bool, StoreError> {
        PgStore::has_vectors(self, model).await
    }

    async fn previous_turns(
        &self,
        user_id: &str,
        ids: &[MemoryId],
    ) -> Result<Vec<Option<MemoryId>>, StoreError> {
        PgStore::previous_turns(self, user_id, ids).await
    }

    fn tune_dense_search(&self, tuning: DenseTuning) {
        let state = &self.dense_state;
        state
            .exact_max_scope
            .store(tuning.exact_max_scope as u64, Ordering::Relaxed);
        state
            .ef_search
            .store(tuning.ef_search as u64, Ordering::Relaxed);
    }

    fn dense_search_counts(&self) -> DenseSearchCounts {
        let state = &self.dense_state;
        DenseSearchCounts {
            exact_in_database: state.exact.load(Ordering::Relaxed),
            exact_in_memory: 0,
            approximate: state.approximate.load(Ordering::Relaxed),
        }
    }
}
