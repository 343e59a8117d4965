//! The knowledge graph behind the MCP graph tools: the graph of a [`GraphStore`], plus one
//! memory per entity and per observation so that `search_nodes` ranks with the same search as
//! every other memory (lexical today, hybrid once embeddings are on).
//!
//! Memories written here have the category `graph_entity` or `graph_observation`, kind `note`
//! or `fact`, source `graph`, and the entity's name in their metadata (`graph_entity`). Their
//! text carries the entity's name (`Alice: lives in Berlin`), so a query naming the entity finds
//! its observations. The graph tables stay the truth: a memory edited or deleted by hand only
//! changes what search finds.

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::store::graph::{
    Entity, GraphError, GraphLink, GraphStore, IndexTarget, KnowledgeGraph, ObservationDeletion,
    ObservationInput, ObservationsAdded, PendingIndex, Relation,
};
use engram_core::{AddOutcome, Filter, Kind, MemoryId, MemoryStore, NewMemory, Scope, StoreError};
use engram_memory::{SearchRequest, Searcher};
use jiff::Timestamp;

use crate::error::{ApiError, ErrorCode};

/// Category of the memory that makes an entity's name and type searchable.
pub const ENTITY_CATEGORY: &str = "graph_entity";
/// Category of the memory of one observation.
pub const OBSERVATION_CATEGORY: &str = "graph_observation";
/// Who graph changes are recorded as in memories' history.
const ACTOR: &str = "graph";
/// Rows indexed per transaction.
const INDEX_BATCH: usize = 500;
/// Memory hits looked at per entity asked for by `search_nodes`.
const HITS_PER_ENTITY: usize = 8;
/// The most entities `search_nodes` returns.
pub const MAX_SEARCH_ENTITIES: usize = 100;
/// Entities `search_nodes` returns when the caller does not say.
pub const DEFAULT_SEARCH_ENTITIES: usize = 10;

impl From<GraphError> for ApiError {
    fn from(err: GraphError) -> Self {
        match err {
            GraphError::EntityNotFound(_) => ApiError::new(ErrorCode::NotFound, err.to_string()),
            GraphError::Invalid(message) => ApiError::invalid(message),
            GraphError::Store(e) => ApiError::from(e),
        }
    }
}

/// Knowledge graphs with ranked search.
#[derive(Clone)]
pub struct KnowledgeBase {
    graph: Arc<dyn GraphStore>,
    store: Arc<dyn MemoryStore>,
    searcher: Searcher,
}

impl std::fmt::Debug for KnowledgeBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnowledgeBase").finish_non_exhaustive()
    }
}

/// The text of an entity's memory.
fn entity_text(name: &str, entity_type: &str) -> String {
    if entity_type.trim().is_empty() {
        name.to_string()
    } else {
        format!("{name} ({entity_type})")
    }
}

/// The text of an observation's memory.
fn observation_text(name: &str, content: &str) -> String {
    format!("{name}: {content}")
}

impl KnowledgeBase {
    /// A knowledge base over these stores; `searcher` must search `store`.
    pub fn new(
        graph: Arc<dyn GraphStore>,
        store: Arc<dyn MemoryStore>,
        searcher: Searcher,
    ) -> Self {
        Self {
            graph,
            store,
            searcher,
        }
    }

    /// Creates the entities whose names are new (with their observations); returns them.
    pub async fn create_entities(
        &self,
        user: &str,
        entities: &[Entity],
    ) -> Result<Vec<Entity>, ApiError> {
        check_user(user)?;
        let created = self
            .graph
            .create_entities(user, entities, Timestamp::now())
            .await?;
        self.index_pending(user).await?;
        Ok(created)
    }

    /// Creates the relations that are new; returns them.
    pub async fn create_relations(
        &self,
        user: &str,
        relations: &[Relation],
    ) -> Result<Vec<Relation>, ApiError> {
        check_user(user)?;
        Ok(self
            .graph
            .create_relations(user, relations, Timestamp::now())
            .await?)
    }

    /// Adds observations to existing entities; fails (adding nothing) if one is missing.
    pub async fn add_observations(
        &self,
        user: &str,
        inputs: &[ObservationInput],
    ) -> Result<Vec<ObservationsAdded>, ApiError> {
        check_user(user)?;
        let added = self
            .graph
            .add_observations(user, inputs, Timestamp::now())
            .await?;
        self.index_pending(user).await?;
        Ok(added)
    }

    /// Deletes entities with their observations and relations.
    pub async fn delete_entities(&self, user: &str, names: &[String]) -> Result<(), ApiError> {
        check_user(user)?;
        let orphaned = self.graph.delete_entities(user, names).await?;
        self.forget(&orphaned).await
    }

    /// Deletes observations from entities.
    pub async fn delete_observations(
        &self,
        user: &str,
        deletions: &[ObservationDeletion],
    ) -> Result<(), ApiError> {
        check_user(user)?;
        let orphaned = self.graph.delete_observations(user, deletions).await?;
        self.forget(&orphaned).await
    }

    /// Deletes relations.
    pub async fn delete_relations(
        &self,
        user: &str,
        relations: &[Relation],
    ) -> Result<(), ApiError> {
        check_user(user)?;
        Ok(self.graph.delete_relations(user, relations).await?)
    }

    /// The user's whole graph.
    pub async fn read_graph(&self, user: &str) -> Result<KnowledgeGraph, ApiError> {
        check_user(user)?;
        Ok(self.graph.read_graph(user).await?)
    }

    /// The named entities and the relations touching them.
    pub async fn open_nodes(
        &self,
        user: &str,
        names: &[String],
    ) -> Result<KnowledgeGraph, ApiError> {
        check_user(user)?;
        Ok(self.graph.open_nodes(user, names).await?)
    }

    /// The entities that best match `query`, best first, and the relations touching them.
    ///
    /// Entities, their types and their observations are ranked by the memory search. Each
    /// entity comes with the observations that matched, best first; an entity found only by its
    /// name or type comes with all of its observations (as `open_nodes` gives them).
    pub async fn search_nodes(
        &self,
        user: &str,
        query: &str,
        limit: usize,
    ) -> Result<KnowledgeGraph, ApiError> {
        check_user(user)?;
        let limit = limit.clamp(1, MAX_SEARCH_ENTITIES);
        // Rows another process left unindexed would otherwise be invisible to search.
        self.index_pending(user).await?;
        let request = SearchRequest {
            filter: Filter {
                categories: vec![
                    ENTITY_CATEGORY.to_string(),
                    OBSERVATION_CATEGORY.to_string(),
                ],
                ..Filter::user(user)
            },
            query: query.to_string(),
            limit: limit * HITS_PER_ENTITY,
        };
        let hits = match self.searcher.search(&request).await.map_err(ApiError::from) {
            Ok(results) => results.hits,
            // A query without searchable words matches nothing, as a search for "?" would.
            Err(e) if e.code == ErrorCode::InvalidRequest => Vec::new(),
            Err(e) => return Err(e),
        };
        let ids: Vec<MemoryId> = hits.iter().map(|h| h.memory.id).collect();
        let links = self.graph.links(user, &ids).await?;

        // Entities in order of their best hit, each with what matched.
        let mut order: Vec<String> = Vec::new();
        let mut matched: HashMap<String, (bool, Vec<String>)> = HashMap::new();
        for id in &ids {
            let Some(link) = links.get(id) else { continue };
            let (name, observation) = match link {
                GraphLink::Entity { name } => (name, None),
                GraphLink::Observation { name, content } => (name, Some(content)),
            };
            if !matched.contains_key(name) {
                if order.len() == limit {
                    continue;
                }
                order.push(name.clone());
            }
            let entry = matched.entry(name.clone()).or_default();
            match observation {
                None => entry.0 = true,
                Some(content) if !entry.1.contains(content) => entry.1.push(content.clone()),
                Some(_) => {}
            }
        }
        let full = self.graph.open_nodes(user, &order).await?;
        let mut entities = Vec::with_capacity(full.entities.len());
        for mut entity in full.entities {
            if let Some((_, observations)) = matched.remove(&entity.name)
                && !observations.is_empty()
            {
                entity.observations = observations;
            }
            entities.push(entity);
        }
        Ok(KnowledgeGraph {
            entities,
            relations: full.relations,
        })
    }

    /// Writes the search memories of rows that have none yet. Each round makes progress or
    /// stops, so a row that cannot be indexed never loops forever.
    pub async fn index_pending(&self, user: &str) -> Result<(), ApiError> {
        loop {
            let pending = self.graph.pending_index(user, INDEX_BATCH).await?;
            if pending.is_empty() {
                return Ok(());
            }
            let memories: Vec<NewMemory> = pending.iter().map(|p| memory_for(user, p)).collect();
            let outcomes = engram_memory::indexing::add_many_with_vectors(
                &self.store,
                self.searcher.embedder(),
                memories,
                ACTOR,
            )
            .await?;
            let mut links = Vec::with_capacity(pending.len());
            for (row, outcome) in pending.iter().zip(outcomes) {
                match outcome {
                    Ok(AddOutcome::Added(memory)) => links.push((row.target, memory.id)),
                    Ok(AddOutcome::Duplicate(id)) => links.push((row.target, id)),
                    Err(e) => {
                        tracing::warn!(user, entity = %row.entity_name, error = %e, "cannot index a graph row for search");
                    }
                }
            }
            if links.is_empty() {
                return Ok(());
            }
            let orphaned = self.graph.set_index(&links).await?;
            self.forget(&orphaned).await?;
            if pending.len() < INDEX_BATCH {
                return Ok(());
            }
        }
    }

    /// Deletes search memories whose graph rows are gone, leaving alone any memory that is not
    /// a graph memory (an observation may share its text with a memory added by other means).
    async fn forget(&self, ids: &[MemoryId]) -> Result<(), ApiError> {
        for id in ids {
            let memory = match self.store.get(*id).await {
                Ok(memory) => memory,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let is_graph = matches!(
                memory.category.as_deref(),
                Some(ENTITY_CATEGORY | OBSERVATION_CATEGORY)
            );
            if !is_graph {
                continue;
            }
            match self.store.delete(*id, ACTOR).await {
                Ok(_) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

fn check_user(user: &str) -> Result<(), ApiError> {
    Scope::user(user)
        .validate()
        .map_err(|e| ApiError::invalid(e.to_string()))
}

fn memory_for(user: &str, row: &PendingIndex) -> NewMemory {
    let (text, kind, category) = match (&row.target, &row.observation) {
        (IndexTarget::Observation(_), Some(content)) => (
            observation_text(&row.entity_name, content),
            Kind::Fact,
            OBSERVATION_CATEGORY,
        ),
        _ => (
            entity_text(&row.entity_name, &row.entity_type),
            Kind::Note,
            ENTITY_CATEGORY,
        ),
    };
    NewMemory::new(Scope::user(user), text)
        .with_kind(kind)
        .with_category(category)
        .with_source("graph")
        .with_meta(
            "graph_entity",
            serde_json::Value::String(row.entity_name.clone()),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_store_sqlite::SqliteStore;
    use tempfile::TempDir;

    fn base() -> (TempDir, KnowledgeBase, Arc<SqliteStore>) {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let base = KnowledgeBase::new(store.clone(), store.clone(), Searcher::new(store.clone()));
        (dir, base, store)
    }

    fn entity(name: &str, kind: &str, observations: &[&str]) -> Entity {
        Entity {
            name: name.into(),
            entity_type: kind.into(),
            observations: observations.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn search_ranks_entities_and_keeps_matching_observations() {
        let (_dir, kb, _store) = base();
        kb.create_entities(
            "u",
            &[
                entity(
                    "Alice",
                    "person",
                    &["lives in Berlin", "works on compilers", "likes tea"],
                ),
                entity("Bob", "person", &["lives in Paris", "likes coffee"]),
                entity("Berlin", "city", &[]),
            ],
        )
        .await
        .unwrap();
        kb.create_relations(
            "u",
            &[Relation {
                from: "Alice".into(),
                to: "Bob".into(),
                relation_type: "knows".into(),
            }],
        )
        .await
        .unwrap();

        let found = kb.search_nodes("u", "who drinks coffee", 10).await.unwrap();
        assert_eq!(found.entities[0].name, "Bob");
        assert_eq!(found.entities[0].observations, vec!["likes coffee"]);
        assert_eq!(found.relations.len(), 1);

        // Found by name only: every observation comes along.
        let found = kb.search_nodes("u", "Alice", 10).await.unwrap();
        assert_eq!(found.entities[0].name, "Alice");
        assert_eq!(found.entities[0].observations.len(), 3);

        // Found by type.
        let found = kb.search_nodes("u", "city", 10).await.unwrap();
        assert_eq!(found.entities[0].name, "Berlin");

        assert!(
            kb.search_nodes("u", "???", 10)
                .await
                .unwrap()
                .entities
                .is_empty()
        );
        assert!(
            kb.search_nodes("other", "coffee", 10)
                .await
                .unwrap()
                .entities
                .is_empty()
        );
    }

    #[tokio::test]
    async fn deleting_removes_the_search_memories_too() {
        let (_dir, kb, store) = base();
        kb.create_entities("u", &[entity("Alice", "person", &["likes tea"])])
            .await
            .unwrap();
        let all = Filter {
            include_closed: true,
            ..Filter::user("u")
        };
        assert_eq!(store.count(&all).await.unwrap(), 2);
        kb.delete_observations(
            "u",
            &[ObservationDeletion {
                entity_name: "Alice".into(),
                observations: vec!["likes tea".into()],
            }],
        )
        .await
        .unwrap();
        assert_eq!(store.count(&all).await.unwrap(), 1);
        kb.delete_entities("u", &["Alice".into()]).await.unwrap();
        assert_eq!(store.count(&all).await.unwrap(), 0);
        assert!(
            kb.search_nodes("u", "tea", 10)
                .await
                .unwrap()
                .entities
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_user_memory_with_the_same_text_survives_graph_deletes() {
        let (_dir, kb, store) = base();
        store
            .add(NewMemory::new(Scope::user("u"), "Alice: likes tea"), "cli")
            .await
            .unwrap();
        kb.create_entities("u", &[entity("Alice", "person", &["likes tea"])])
            .await
            .unwrap();
        kb.delete_entities("u", &["Alice".into()]).await.unwrap();
        assert_eq!(store.count(&Filter::user("u")).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn rows_left_unindexed_are_indexed_on_the_next_search() {
        let (dir, kb, _store) = base();
        // Another process wrote graph rows and died before writing their memories.
        let other = SqliteStore::open(dir.path().join("engram.db")).unwrap();
        other
            .create_entities(
                "u",
                &[entity("Carol", "person", &["plays the cello"])],
                Timestamp::now(),
            )
            .await
            .unwrap();
        let found = kb.search_nodes("u", "cello", 5).await.unwrap();
        assert_eq!(found.entities[0].name, "Carol");
    }

    #[tokio::test]
    async fn observations_for_missing_entities_are_not_found() {
        let (_dir, kb, _store) = base();
        let err = kb
            .add_observations(
                "u",
                &[ObservationInput {
                    entity_name: "Nobody".into(),
                    contents: vec!["x".into()],
                }],
            )
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert_eq!(err.message, "Entity with name Nobody not found");
    }
}
