//! The knowledge graph of the MCP graph tools, per user — entities, their observations and the
//! relations between them — as an engine stores it.
//!
//! The shapes follow the reference MCP memory server (`@modelcontextprotocol/server-memory`):
//! an entity has a unique name, a type and a list of observations; a relation joins two entity
//! names with a type in active voice. The serde names (`entityType`, `relationType`) are that
//! server's, so its JSONL file and its tool arguments read as they are.
//!
//! Every entity and observation is also meant to be findable by ranked search: the caller
//! writes a memory for each and records its id with [`GraphStore::set_index`]. Rows whose
//! memory is not written yet (a crash in between, another process mid-way) are listed by
//! [`GraphStore::pending_index`], so any process can finish the job; adding a memory twice is
//! harmless because the store keeps one copy of the same text.

use std::collections::HashMap;

use async_trait::async_trait;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::memory::MemoryId;

/// Longest entity name, entity type or relation type, in bytes.
pub const MAX_NAME_BYTES: usize = 1_024;
/// Longest observation, in bytes (its memory also carries the entity's name).
pub const MAX_OBSERVATION_BYTES: usize = 60 * 1024;

/// Why a graph operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// Observations were offered for an entity that does not exist.
    #[error("Entity with name {0} not found")]
    EntityNotFound(String),
    /// A name, type or observation is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A node of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entity {
    /// Unique (per user) name.
    pub name: String,
    /// What sort of thing it is (`person`, `project`, ...).
    pub entity_type: String,
    /// Facts about it, oldest first.
    #[serde(default)]
    pub observations: Vec<String>,
}

/// A directed, typed edge between two entity names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Relation {
    /// The entity the relation starts at.
    pub from: String,
    /// The entity it ends at.
    pub to: String,
    /// What the relation is, in active voice (`works_at`).
    pub relation_type: String,
}

/// Entities and the relations among them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnowledgeGraph {
    /// The entities.
    pub entities: Vec<Entity>,
    /// The relations.
    pub relations: Vec<Relation>,
}

/// Observations to add to one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservationInput {
    /// The entity.
    pub entity_name: String,
    /// The observations.
    pub contents: Vec<String>,
}

/// What [`GraphStore::add_observations`] added to one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservationsAdded {
    /// The entity.
    pub entity_name: String,
    /// The observations that were new.
    pub added_observations: Vec<String>,
}

/// Observations to remove from one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservationDeletion {
    /// The entity.
    pub entity_name: String,
    /// The observations to remove.
    pub observations: Vec<String>,
}

/// A graph row that still needs its search memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingIndex {
    /// Which row.
    pub target: IndexTarget,
    /// Its entity's name.
    pub entity_name: String,
    /// Its entity's type.
    pub entity_type: String,
    /// The observation, for an observation row.
    pub observation: Option<String>,
}

/// A row that can carry a search memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexTarget {
    /// An entity's name and type.
    Entity(i64),
    /// One observation.
    Observation(i64),
}

/// What a search memory stands for in the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphLink {
    /// An entity's name and type.
    Entity {
        /// The entity.
        name: String,
    },
    /// One observation of an entity.
    Observation {
        /// The entity.
        name: String,
        /// The observation.
        content: String,
    },
}

fn check_name(what: &str, value: &str, allow_empty: bool) -> Result<(), GraphError> {
    if !allow_empty && value.trim().is_empty() {
        return Err(GraphError::Invalid(format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(GraphError::Invalid(format!(
            "{what} is {} bytes, more than the limit of {MAX_NAME_BYTES}",
            value.len()
        )));
    }
    refuse_nul(what, value)
}

/// A NUL character cannot be kept by every engine (PostgreSQL text cannot hold one), and the
/// rows' search memories refuse it too, so no graph row takes one.
fn refuse_nul(what: &str, value: &str) -> Result<(), GraphError> {
    if value.contains('\0') {
        return Err(GraphError::Invalid(format!(
            "{what} contains a NUL character"
        )));
    }
    Ok(())
}

/// Checks one observation of `entity` can be stored: not empty, within its limit.
pub fn check_observation(entity: &str, content: &str) -> Result<(), GraphError> {
    if content.trim().is_empty() {
        return Err(GraphError::Invalid(format!(
            "an observation of entity {entity} is empty"
        )));
    }
    if content.len() > MAX_OBSERVATION_BYTES {
        return Err(GraphError::Invalid(format!(
            "an observation of entity {entity} is {} bytes, more than the limit of {MAX_OBSERVATION_BYTES}",
            content.len()
        )));
    }
    refuse_nul(&format!("an observation of entity {entity}"), content)
}

fn check_relation(relation: &Relation) -> Result<(), GraphError> {
    check_name("a relation's from", &relation.from, false)?;
    check_name("a relation's to", &relation.to, false)?;
    check_name("a relation's relationType", &relation.relation_type, false)
}

impl Entity {
    /// Checks the entity can be stored: a non-empty name, and names, type and observations
    /// within their limits.
    pub fn check(&self) -> Result<(), GraphError> {
        check_name("an entity's name", &self.name, false)?;
        check_name("an entity's entityType", &self.entity_type, true)?;
        for content in &self.observations {
            check_observation(&self.name, content)?;
        }
        Ok(())
    }
}

impl Relation {
    /// Checks the relation can be stored: non-empty names and type within their limits.
    pub fn check(&self) -> Result<(), GraphError> {
        check_relation(self)
    }
}

/// The knowledge graphs, one per user.
#[async_trait]
pub trait GraphStore: Send + Sync {
    /// Creates the entities whose names are new (each checked first, see [`Entity::check`]);
    /// entities that exist already are left as they are. Returns the ones created, with their
    /// observations (each once).
    async fn create_entities(
        &self,
        user_id: &str,
        entities: &[Entity],
        now: Timestamp,
    ) -> Result<Vec<Entity>, GraphError>;

    /// Creates the relations that do not exist yet; returns those.
    async fn create_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
        now: Timestamp,
    ) -> Result<Vec<Relation>, GraphError>;

    /// Adds observations to existing entities; each entity keeps one copy of each observation.
    /// If any entity is missing, nothing is added.
    async fn add_observations(
        &self,
        user_id: &str,
        inputs: &[ObservationInput],
        now: Timestamp,
    ) -> Result<Vec<ObservationsAdded>, GraphError>;

    /// Deletes entities, their observations and every relation that starts or ends at them.
    /// Names that do not exist are ignored. Returns the ids of the search memories that now
    /// stand for nothing, for the caller to delete.
    async fn delete_entities(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<Vec<MemoryId>, GraphError>;

    /// Removes observations from entities; missing entities and observations are ignored.
    /// Returns the ids of the search memories that now stand for nothing.
    async fn delete_observations(
        &self,
        user_id: &str,
        deletions: &[ObservationDeletion],
    ) -> Result<Vec<MemoryId>, GraphError>;

    /// Deletes these relations; ones that do not exist are ignored.
    async fn delete_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
    ) -> Result<(), GraphError>;

    /// The user's whole graph: entities and observations in the order they were added.
    async fn read_graph(&self, user_id: &str) -> Result<KnowledgeGraph, GraphError>;

    /// The named entities (in the order asked, each once; unknown names are skipped) and every
    /// relation that starts or ends at one of them, oldest first.
    async fn open_nodes(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<KnowledgeGraph, GraphError>;

    /// Up to `limit` entity rows and up to `limit` observation rows of the user's graph that
    /// have no search memory yet, oldest first.
    async fn pending_index(
        &self,
        user_id: &str,
        limit: usize,
    ) -> Result<Vec<PendingIndex>, GraphError>;

    /// Records the search memory written for each row. Rows deleted in the meantime are
    /// skipped; the returned ids are memories that stand for nothing because of that.
    async fn set_index(
        &self,
        links: &[(IndexTarget, MemoryId)],
    ) -> Result<Vec<MemoryId>, GraphError>;

    /// What each of these memories stands for in the user's graph; memories that stand for
    /// nothing there are left out.
    async fn links(
        &self,
        user_id: &str,
        memories: &[MemoryId],
    ) -> Result<HashMap<MemoryId, GraphLink>, GraphError>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_json_shapes_match_the_reference_server() {
        let entity = Entity {
            name: "A".into(),
            entity_type: "person".into(),
            observations: vec!["x".into()],
        };
        assert_eq!(
            serde_json::to_value(entity).unwrap(),
            serde_json::json!({"name": "A", "entityType": "person", "observations": ["x"]})
        );
        let relation = Relation {
            from: "A".into(),
            to: "B".into(),
            relation_type: "knows".into(),
        };
        assert_eq!(
            serde_json::to_value(relation).unwrap(),
            serde_json::json!({"from": "A", "to": "B", "relationType": "knows"})
        );
    }
}
