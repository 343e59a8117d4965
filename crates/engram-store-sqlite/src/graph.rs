//! The knowledge graphs of the MCP graph tools, in the same SQLite file as the memories, so
//! several processes share them safely (see [`engram_core::store::graph`] for the shapes and
//! the rules every engine keeps).

use std::collections::HashMap;

use engram_core::MemoryId;
use engram_core::store::graph::{
    Entity, GraphError, GraphLink, IndexTarget, KnowledgeGraph, ObservationDeletion,
    ObservationInput, ObservationsAdded, PendingIndex, Relation, check_observation,
};
use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::store::Database;

/// The knowledge graphs of one database.
#[derive(Debug, Clone, Copy)]
pub struct Graph<'a> {
    db: &'a Database,
}

impl Database {
    /// The knowledge graphs.
    pub fn graph(&self) -> Graph<'_> {
        Graph { db: self }
    }
}

impl Graph<'_> {
    fn err(&self, e: rusqlite::Error) -> GraphError {
        GraphError::Store(self.db.err(e))
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, GraphError>,
    ) -> Result<T, GraphError> {
        self.db.transaction(f)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, GraphError>,
    ) -> Result<T, GraphError> {
        self.db.reading(f)
    }

    /// Creates the entities whose names are new; entities that exist already are left as they
    /// are. Returns the ones created, with their observations (each once).
    pub fn create_entities(
        &self,
        user_id: &str,
        entities: &[Entity],
        now: Timestamp,
    ) -> Result<Vec<Entity>, GraphError> {
        for entity in entities {
            entity.check()?;
        }
        let now = now.as_microsecond();
        self.write(|tx| {
            let mut created = Vec::new();
            for entity in entities {
                let inserted = tx
                    .prepare_cached(
                        "INSERT OR IGNORE INTO graph_entities (user_id, name, entity_type, created_at) \
                         VALUES (?1, ?2, ?3, ?4)",
                    )
                    .and_then(|mut s| s.execute(params![user_id, entity.name, entity.entity_type, now]))
                    .map_err(|e| self.err(e))?;
                if inserted == 0 {
                    continue;
                }
                let entity_id = tx.last_insert_rowid();
                let mut kept = Vec::new();
                for content in &entity.observations {
                    if insert_observation(tx, entity_id, content, now).map_err(|e| self.err(e))? {
                        kept.push(content.clone());
                    }
                }
                created.push(Entity {
                    name: entity.name.clone(),
                    entity_type: entity.entity_type.clone(),
                    observations: kept,
                });
            }
            Ok(created)
        })
    }

    /// Creates the relations that do not exist yet; returns those.
    pub fn create_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
        now: Timestamp,
    ) -> Result<Vec<Relation>, GraphError> {
        for relation in relations {
            relation.check()?;
        }
        let now = now.as_microsecond();
        self.write(|tx| {
            let mut created = Vec::new();
            for relation in relations {
                let inserted = tx
                    .prepare_cached(
                        "INSERT OR IGNORE INTO graph_relations \
                         (user_id, from_name, to_name, relation_type, created_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            user_id,
                            relation.from,
                            relation.to,
                            relation.relation_type,
                            now
                        ])
                    })
                    .map_err(|e| self.err(e))?;
                if inserted == 1 {
                    created.push(relation.clone());
                }
            }
            Ok(created)
        })
    }

    /// Adds observations to existing entities; each entity keeps one copy of each observation.
    /// If any entity is missing, nothing is added.
    pub fn add_observations(
        &self,
        user_id: &str,
        inputs: &[ObservationInput],
        now: Timestamp,
    ) -> Result<Vec<ObservationsAdded>, GraphError> {
        for input in inputs {
            for content in &input.contents {
                check_observation(&input.entity_name, content)?;
            }
        }
        let now = now.as_microsecond();
        self.write(|tx| {
            let mut results = Vec::with_capacity(inputs.len());
            for input in inputs {
                let entity_id = entity_id(tx, user_id, &input.entity_name)
                    .map_err(|e| self.err(e))?
                    .ok_or_else(|| GraphError::EntityNotFound(input.entity_name.clone()))?;
                let mut added = Vec::new();
                for content in &input.contents {
                    if insert_observation(tx, entity_id, content, now).map_err(|e| self.err(e))? {
                        added.push(content.clone());
                    }
                }
                results.push(ObservationsAdded {
                    entity_name: input.entity_name.clone(),
                    added_observations: added,
                });
            }
            Ok(results)
        })
    }

    /// Deletes entities, their observations and every relation that starts or ends at them.
    /// Names that do not exist are ignored. Returns the ids of the search memories that now
    /// stand for nothing, for the caller to delete.
    pub fn delete_entities(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<Vec<MemoryId>, GraphError> {
        self.write(|tx| {
            let mut orphaned = Vec::new();
            for name in names {
                let Some(id) = entity_id(tx, user_id, name).map_err(|e| self.err(e))? else {
                    continue;
                };
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT memory_id FROM graph_observations \
                         WHERE entity_id = ?1 AND memory_id IS NOT NULL \
                         UNION ALL SELECT memory_id FROM graph_entities \
                         WHERE id = ?1 AND memory_id IS NOT NULL",
                    )
                    .map_err(|e| self.err(e))?;
                let ids = stmt
                    .query_map([id], |r| r.get::<_, String>(0))
                    .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| self.err(e))?;
                orphaned.extend(ids.iter().filter_map(|s| s.parse::<MemoryId>().ok()));
                // Observations go with their entity (ON DELETE CASCADE).
                tx.prepare_cached("DELETE FROM graph_entities WHERE id = ?1")
                    .and_then(|mut s| s.execute([id]))
                    .map_err(|e| self.err(e))?;
                tx.prepare_cached(
                    "DELETE FROM graph_relations WHERE user_id = ?1 AND (from_name = ?2 OR to_name = ?2)",
                )
                .and_then(|mut s| s.execute(params![user_id, name]))
                .map_err(|e| self.err(e))?;
            }
            Ok(orphaned)
        })
    }

    /// Removes observations from entities; missing entities and observations are ignored.
    /// Returns the ids of the search memories that now stand for nothing.
    pub fn delete_observations(
        &self,
        user_id: &str,
        deletions: &[ObservationDeletion],
    ) -> Result<Vec<MemoryId>, GraphError> {
        self.write(|tx| {
            let mut orphaned = Vec::new();
            for deletion in deletions {
                let Some(id) =
                    entity_id(tx, user_id, &deletion.entity_name).map_err(|e| self.err(e))?
                else {
                    continue;
                };
                for content in &deletion.observations {
                    let memory: Option<Option<String>> = tx
                        .prepare_cached(
                            "DELETE FROM graph_observations WHERE entity_id = ?1 AND content = ?2 \
                             RETURNING memory_id",
                        )
                        .and_then(|mut s| {
                            s.query_row(params![id, content], |r| r.get(0)).optional()
                        })
                        .map_err(|e| self.err(e))?;
                    if let Some(memory) = memory.flatten().and_then(|m| m.parse().ok()) {
                        orphaned.push(memory);
                    }
                }
            }
            Ok(orphaned)
        })
    }

    /// Deletes these relations; ones that do not exist are ignored.
    pub fn delete_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
    ) -> Result<(), GraphError> {
        self.write(|tx| {
            for relation in relations {
                tx.prepare_cached(
                    "DELETE FROM graph_relations WHERE user_id = ?1 AND from_name = ?2 \
                     AND to_name = ?3 AND relation_type = ?4",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        user_id,
                        relation.from,
                        relation.to,
                        relation.relation_type
                    ])
                })
                .map_err(|e| self.err(e))?;
            }
            Ok(())
        })
    }

    /// The user's whole graph: entities and observations in the order they were added.
    pub fn read_graph(&self, user_id: &str) -> Result<KnowledgeGraph, GraphError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT e.id, e.name, e.entity_type, o.content FROM graph_entities e \
                     LEFT JOIN graph_observations o ON o.entity_id = e.id \
                     WHERE e.user_id = ?1 ORDER BY e.id, o.id",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([user_id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            let mut entities: Vec<Entity> = Vec::new();
            let mut last_id = None;
            for (id, name, entity_type, content) in rows {
                if last_id != Some(id) {
                    last_id = Some(id);
                    entities.push(Entity {
                        name,
                        entity_type,
                        observations: Vec::new(),
                    });
                }
                if let (Some(content), Some(entity)) = (content, entities.last_mut()) {
                    entity.observations.push(content);
                }
            }
            let mut stmt = conn
                .prepare_cached(
                    "SELECT from_name, to_name, relation_type FROM graph_relations \
                     WHERE user_id = ?1 ORDER BY id",
                )
                .map_err(|e| self.err(e))?;
            let relations = stmt
                .query_map([user_id], relation_from_row)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            Ok(KnowledgeGraph {
                entities,
                relations,
            })
        })
    }

    /// The named entities (in the order asked, each once; unknown names are skipped) and every
    /// relation that starts or ends at one of them.
    pub fn open_nodes(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<KnowledgeGraph, GraphError> {
        self.read(|conn| {
            let mut entities = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for name in names {
                if !seen.insert(name.as_str()) {
                    continue;
                }
                if let Some(entity) = load_entity(conn, user_id, name).map_err(|e| self.err(e))? {
                    entities.push(entity);
                }
            }
            let relations =
                relations_touching(conn, user_id, &entities).map_err(|e| self.err(e))?;
            Ok(KnowledgeGraph {
                entities,
                relations,
            })
        })
    }

    /// Up to `limit` rows of the user's graph that have no search memory yet.
    pub fn pending_index(
        &self,
        user_id: &str,
        limit: usize,
    ) -> Result<Vec<PendingIndex>, GraphError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|conn| {
            let mut pending = Vec::new();
            let mut stmt = conn
                .prepare_cached(
                    "SELECT id, name, entity_type FROM graph_entities \
                     WHERE user_id = ?1 AND memory_id IS NULL ORDER BY id LIMIT ?2",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map(params![user_id, limit], |r| {
                    Ok(PendingIndex {
                        target: IndexTarget::Entity(r.get(0)?),
                        entity_name: r.get(1)?,
                        entity_type: r.get(2)?,
                        observation: None,
                    })
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            pending.extend(rows);
            let mut stmt = conn
                .prepare_cached(
                    "SELECT o.id, e.name, e.entity_type, o.content FROM graph_observations o \
                     JOIN graph_entities e ON e.id = o.entity_id \
                     WHERE e.user_id = ?1 AND o.memory_id IS NULL ORDER BY o.id LIMIT ?2",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map(params![user_id, limit], |r| {
                    Ok(PendingIndex {
                        target: IndexTarget::Observation(r.get(0)?),
                        entity_name: r.get(1)?,
                        entity_type: r.get(2)?,
                        observation: Some(r.get(3)?),
                    })
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            pending.extend(rows);
            Ok(pending)
        })
    }

    /// Records the search memory written for each row. Rows deleted in the meantime are
    /// skipped; the returned ids are memories that stand for nothing because of that.
    pub fn set_index(
        &self,
        links: &[(IndexTarget, MemoryId)],
    ) -> Result<Vec<MemoryId>, GraphError> {
        self.write(|tx| {
            let mut orphaned = Vec::new();
            for (target, memory) in links {
                let (sql, id) = match target {
                    IndexTarget::Entity(id) => {
                        ("UPDATE graph_entities SET memory_id = ?1 WHERE id = ?2", id)
                    }
                    IndexTarget::Observation(id) => (
                        "UPDATE graph_observations SET memory_id = ?1 WHERE id = ?2",
                        id,
                    ),
                };
                let changed = tx
                    .prepare_cached(sql)
                    .and_then(|mut s| s.execute(params![memory.to_string(), id]))
                    .map_err(|e| self.err(e))?;
                if changed == 0 {
                    orphaned.push(*memory);
                }
            }
            Ok(orphaned)
        })
    }

    /// What each of these memories stands for in the user's graph; memories that stand for
    /// nothing there are left out.
    pub fn links(
        &self,
        user_id: &str,
        memories: &[MemoryId],
    ) -> Result<HashMap<MemoryId, GraphLink>, GraphError> {
        self.read(|conn| {
            let mut links = HashMap::with_capacity(memories.len());
            let mut by_entity = conn
                .prepare_cached(
                    "SELECT name FROM graph_entities WHERE user_id = ?1 AND memory_id = ?2",
                )
                .map_err(|e| self.err(e))?;
            let mut by_observation = conn
                .prepare_cached(
                    "SELECT e.name, o.content FROM graph_observations o \
                     JOIN graph_entities e ON e.id = o.entity_id \
                     WHERE e.user_id = ?1 AND o.memory_id = ?2",
                )
                .map_err(|e| self.err(e))?;
            for memory in memories {
                let key = memory.to_string();
                let entity: Option<String> = by_entity
                    .query_row(params![user_id, key], |r| r.get(0))
                    .optional()
                    .map_err(|e| self.err(e))?;
                if let Some(name) = entity {
                    links.insert(*memory, GraphLink::Entity { name });
                    continue;
                }
                let observation: Option<(String, String)> = by_observation
                    .query_row(params![user_id, key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
                    .map_err(|e| self.err(e))?;
                if let Some((name, content)) = observation {
                    links.insert(*memory, GraphLink::Observation { name, content });
                }
            }
            Ok(links)
        })
    }
}

fn entity_id(conn: &Connection, user_id: &str, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT id FROM graph_entities WHERE user_id = ?1 AND name = ?2")?
        .query_row(params![user_id, name], |r| r.get(0))
        .optional()
}

/// Inserts one observation unless the entity has it already; true when inserted.
fn insert_observation(
    tx: &Transaction<'_>,
    entity_id: i64,
    content: &str,
    now: i64,
) -> rusqlite::Result<bool> {
    let inserted = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO graph_observations (entity_id, content, created_at) \
             VALUES (?1, ?2, ?3)",
        )?
        .execute(params![entity_id, content, now])?;
    Ok(inserted == 1)
}

fn load_entity(conn: &Connection, user_id: &str, name: &str) -> rusqlite::Result<Option<Entity>> {
    let found: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT id, entity_type FROM graph_entities WHERE user_id = ?1 AND name = ?2",
        )?
        .query_row(params![user_id, name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((id, entity_type)) = found else {
        return Ok(None);
    };
    let observations = conn
        .prepare_cached("SELECT content FROM graph_observations WHERE entity_id = ?1 ORDER BY id")?
        .query_map([id], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(Some(Entity {
        name: name.to_string(),
        entity_type,
        observations,
    }))
}

fn relation_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Relation> {
    Ok(Relation {
        from: row.get(0)?,
        to: row.get(1)?,
        relation_type: row.get(2)?,
    })
}

fn relations_touching(
    conn: &Connection,
    user_id: &str,
    entities: &[Entity],
) -> rusqlite::Result<Vec<Relation>> {
    let mut found: Vec<(i64, Relation)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stmt = conn.prepare_cached(
        "SELECT id, from_name, to_name, relation_type FROM graph_relations \
         WHERE user_id = ?1 AND (from_name = ?2 OR to_name = ?2)",
    )?;
    for entity in entities {
        let rows = stmt
            .query_map(params![user_id, entity.name], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    Relation {
                        from: r.get(1)?,
                        to: r.get(2)?,
                        relation_type: r.get(3)?,
                    },
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        for (id, relation) in rows {
            if seen.insert(id) {
                found.push((id, relation));
            }
        }
    }
    found.sort_by_key(|(id, _)| *id);
    Ok(found.into_iter().map(|(_, r)| r).collect())
}
