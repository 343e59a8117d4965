//! [`GraphStore`] on PostgreSQL: each user's knowledge graph, with the SQLite engine's rules
//! (names unique per user, an observation once per entity, relations once).

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use engram_core::MemoryId;
use engram_core::store::graph::{
    Entity, GraphError, GraphLink, GraphStore, IndexTarget, KnowledgeGraph, ObservationDeletion,
    ObservationInput, ObservationsAdded, PendingIndex, Relation, check_observation,
};
use jiff::Timestamp;
use uuid::Uuid;

use crate::PgStore;
use crate::rows::{check_storable, clamp_i64};

type Tx<'a> = deadpool_postgres::Transaction<'a>;

impl PgStore {
    fn graph_err(&self, e: tokio_postgres::Error) -> GraphError {
        GraphError::Store(self.err(e))
    }

    async fn entity_id(
        &self,
        client: &impl tokio_postgres::GenericClient,
        user_id: &str,
        name: &str,
    ) -> Result<Option<i64>, GraphError> {
        Ok(client
            .query_opt(
                "SELECT id FROM graph_entities WHERE user_id = $1 AND name = $2",
                &[&user_id, &name],
            )
            .await
            .map_err(|e| self.graph_err(e))?
            .map(|r| r.get(0)))
    }

    /// Inserts one observation unless the entity has it already; true when inserted.
    async fn insert_observation(
        &self,
        tx: &Tx<'_>,
        entity_id: i64,
        content: &str,
        now: i64,
    ) -> Result<bool, GraphError> {
        let inserted = tx
            .execute(
                "INSERT INTO graph_observations (entity_id, content, created_at) \
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&entity_id, &content, &now],
            )
            .await
            .map_err(|e| self.graph_err(e))?;
        Ok(inserted == 1)
    }

    async fn load_entity(
        &self,
        client: &impl tokio_postgres::GenericClient,
        user_id: &str,
        name: &str,
    ) -> Result<Option<Entity>, GraphError> {
        let rows = client
            .query(
                "SELECT e.entity_type, o.content FROM graph_entities e \
                 LEFT JOIN graph_observations o ON o.entity_id = e.id \
                 WHERE e.user_id = $1 AND e.name = $2 ORDER BY o.id",
                &[&user_id, &name],
            )
            .await
            .map_err(|e| self.graph_err(e))?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(Entity {
            name: name.to_string(),
            entity_type: first.get(0),
            observations: rows
                .iter()
                .filter_map(|r| r.get::<_, Option<String>>(1))
                .collect(),
        }))
    }

    /// Every relation that starts or ends at one of these entities, oldest first.
    async fn relations_touching(
        &self,
        client: &impl tokio_postgres::GenericClient,
        user_id: &str,
        entities: &[Entity],
    ) -> Result<Vec<Relation>, GraphError> {
        let names: Vec<&str> = entities.iter().map(|e| e.name.as_str()).collect();
        Ok(client
            .query(
                "SELECT from_name, to_name, relation_type FROM graph_relations \
                 WHERE user_id = $1 AND (from_name = ANY($2) OR to_name = ANY($2)) ORDER BY id",
                &[&user_id, &names],
            )
            .await
            .map_err(|e| self.graph_err(e))?
            .iter()
            .map(|r| Relation {
                from: r.get(0),
                to: r.get(1),
                relation_type: r.get(2),
            })
            .collect())
    }
}

fn check_text(what: &str, value: &str) -> Result<(), GraphError> {
    check_storable(what, value).map_err(GraphError::Store)
}

#[async_trait]
impl GraphStore for PgStore {
    async fn create_entities(
        &self,
        user_id: &str,
        entities: &[Entity],
        now: Timestamp,
    ) -> Result<Vec<Entity>, GraphError> {
        for entity in entities {
            entity.check()?;
            check_text("an entity's name", &entity.name)?;
            check_text("an entity's entityType", &entity.entity_type)?;
            for content in &entity.observations {
                check_text("an observation", content)?;
            }
        }
        let now = now.as_microsecond();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        let mut created = Vec::new();
        for entity in entities {
            let inserted = tx
                .query_opt(
                    "INSERT INTO graph_entities (user_id, name, entity_type, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING id",
                    &[&user_id, &entity.name, &entity.entity_type, &now],
                )
                .await
                .map_err(|e| self.graph_err(e))?;
            let Some(row) = inserted else { continue };
            let entity_id: i64 = row.get(0);
            let mut kept = Vec::new();
            for content in &entity.observations {
                if self
                    .insert_observation(&tx, entity_id, content, now)
                    .await?
                {
                    kept.push(content.clone());
                }
            }
            created.push(Entity {
                name: entity.name.clone(),
                entity_type: entity.entity_type.clone(),
                observations: kept,
            });
        }
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(created)
    }

    async fn create_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
        now: Timestamp,
    ) -> Result<Vec<Relation>, GraphError> {
        for relation in relations {
            relation.check()?;
            for text in [&relation.from, &relation.to, &relation.relation_type] {
                check_text("a relation", text)?;
            }
        }
        let now = now.as_microsecond();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        let mut created = Vec::new();
        for relation in relations {
            let inserted = tx
                .execute(
                    "INSERT INTO graph_relations \
                     (user_id, from_name, to_name, relation_type, created_at) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    &[
                        &user_id,
                        &relation.from,
                        &relation.to,
                        &relation.relation_type,
                        &now,
                    ],
                )
                .await
                .map_err(|e| self.graph_err(e))?;
            if inserted == 1 {
                created.push(relation.clone());
            }
        }
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(created)
    }

    async fn add_observations(
        &self,
        user_id: &str,
        inputs: &[ObservationInput],
        now: Timestamp,
    ) -> Result<Vec<ObservationsAdded>, GraphError> {
        for input in inputs {
            for content in &input.contents {
                check_observation(&input.entity_name, content)?;
                check_text("an observation", content)?;
            }
        }
        let now = now.as_microsecond();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        let mut results = Vec::with_capacity(inputs.len());
        for input in inputs {
            let entity_id = self
                .entity_id(&*tx, user_id, &input.entity_name)
                .await?
                .ok_or_else(|| GraphError::EntityNotFound(input.entity_name.clone()))?;
            let mut added = Vec::new();
            for content in &input.contents {
                if self
                    .insert_observation(&tx, entity_id, content, now)
                    .await?
                {
                    added.push(content.clone());
                }
            }
            results.push(ObservationsAdded {
                entity_name: input.entity_name.clone(),
                added_observations: added,
            });
        }
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(results)
    }

    async fn delete_entities(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<Vec<MemoryId>, GraphError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        let mut orphaned = Vec::new();
        for name in names {
            let Some(id) = self.entity_id(&*tx, user_id, name).await? else {
                continue;
            };
            let rows = tx
                .query(
                    "SELECT memory_id FROM graph_observations \
                     WHERE entity_id = $1 AND memory_id IS NOT NULL \
                     UNION ALL SELECT memory_id FROM graph_entities \
                     WHERE id = $1 AND memory_id IS NOT NULL",
                    &[&id],
                )
                .await
                .map_err(|e| self.graph_err(e))?;
            orphaned.extend(rows.iter().map(|r| MemoryId::from(r.get::<_, Uuid>(0))));
            // Observations go with their entity (ON DELETE CASCADE).
            tx.execute("DELETE FROM graph_entities WHERE id = $1", &[&id])
                .await
                .map_err(|e| self.graph_err(e))?;
            tx.execute(
                "DELETE FROM graph_relations WHERE user_id = $1 \
                 AND (from_name = $2 OR to_name = $2)",
                &[&user_id, name],
            )
            .await
            .map_err(|e| self.graph_err(e))?;
        }
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(orphaned)
    }

    async fn delete_observations(
        &self,
        user_id: &str,
        deletions: &[ObservationDeletion],
    ) -> Result<Vec<MemoryId>, GraphError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        let mut orphaned = Vec::new();
        for deletion in deletions {
            let Some(id) = self.entity_id(&*tx, user_id, &deletion.entity_name).await? else {
                continue;
            };
            for content in &deletion.observations {
                let rows = tx
                    .query(
                        "DELETE FROM graph_observations WHERE entity_id = $1 \
                         AND md5(content) = md5($2) AND content = $2 RETURNING memory_id",
                        &[&id, content],
                    )
                    .await
                    .map_err(|e| self.graph_err(e))?;
                orphaned.extend(
                    rows.iter()
                        .filter_map(|r| r.get::<_, Option<Uuid>>(0))
                        .map(MemoryId::from),
                );
            }
        }
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(orphaned)
    }

    async fn delete_relations(
        &self,
        user_id: &str,
        relations: &[Relation],
    ) -> Result<(), GraphError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        for relation in relations {
            tx.execute(
                "DELETE FROM graph_relations WHERE user_id = $1 AND from_name = $2 \
                 AND to_name = $3 AND relation_type = $4",
                &[
                    &user_id,
                    &relation.from,
                    &relation.to,
                    &relation.relation_type,
                ],
            )
            .await
            .map_err(|e| self.graph_err(e))?;
        }
        tx.commit().await.map_err(|e| self.graph_err(e))
    }

    async fn read_graph(&self, user_id: &str) -> Result<KnowledgeGraph, GraphError> {
        let mut client = self.client().await?;
        // One snapshot for the entities and the relations.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| self.graph_err(e))?;
        let rows = tx
            .query(
                "SELECT e.id, e.name, e.entity_type, o.content FROM graph_entities e \
                 LEFT JOIN graph_observations o ON o.entity_id = e.id \
                 WHERE e.user_id = $1 ORDER BY e.id, o.id",
                &[&user_id],
            )
            .await
            .map_err(|e| self.graph_err(e))?;
        let mut entities: Vec<Entity> = Vec::new();
        let mut last_id = None;
        for row in &rows {
            let id: i64 = row.get(0);
            if last_id != Some(id) {
                last_id = Some(id);
                entities.push(Entity {
                    name: row.get(1),
                    entity_type: row.get(2),
                    observations: Vec::new(),
                });
            }
            if let (Some(content), Some(entity)) =
                (row.get::<_, Option<String>>(3), entities.last_mut())
            {
                entity.observations.push(content);
            }
        }
        let relations = tx
            .query(
                "SELECT from_name, to_name, relation_type FROM graph_relations \
                 WHERE user_id = $1 ORDER BY id",
                &[&user_id],
            )
            .await
            .map_err(|e| self.graph_err(e))?
            .iter()
            .map(|r| Relation {
                from: r.get(0),
                to: r.get(1),
                relation_type: r.get(2),
            })
            .collect();
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(KnowledgeGraph {
            entities,
            relations,
        })
    }

    async fn open_nodes(
        &self,
        user_id: &str,
        names: &[String],
    ) -> Result<KnowledgeGraph, GraphError> {
        let client = self.client().await?;
        let mut entities = Vec::new();
        let mut seen = HashSet::new();
        for name in names {
            if !seen.insert(name.as_str()) {
                continue;
            }
            if let Some(entity) = self.load_entity(&**client, user_id, name).await? {
                entities.push(entity);
            }
        }
        let relations = self
            .relations_touching(&**client, user_id, &entities)
            .await?;
        Ok(KnowledgeGraph {
            entities,
            relations,
        })
    }

    async fn pending_index(
        &self,
        user_id: &str,
        limit: usize,
    ) -> Result<Vec<PendingIndex>, GraphError> {
        let client = self.client().await?;
        let limit = clamp_i64(limit);
        let mut pending: Vec<PendingIndex> = client
            .query(
                "SELECT id, name, entity_type FROM graph_entities \
                 WHERE user_id = $1 AND memory_id IS NULL ORDER BY id LIMIT $2",
                &[&user_id, &limit],
            )
            .await
            .map_err(|e| self.graph_err(e))?
            .iter()
            .map(|r| PendingIndex {
                target: IndexTarget::Entity(r.get(0)),
                entity_name: r.get(1),
                entity_type: r.get(2),
                observation: None,
            })
            .collect();
        let observations = client
            .query(
                "SELECT o.id, e.name, e.entity_type, o.content FROM graph_observations o \
                 JOIN graph_entities e ON e.id = o.entity_id \
                 WHERE e.user_id = $1 AND o.memory_id IS NULL ORDER BY o.id LIMIT $2",
                &[&user_id, &limit],
            )
            .await
            .map_err(|e| self.graph_err(e))?;
        pending.extend(observations.iter().map(|r| PendingIndex {
            target: IndexTarget::Observation(r.get(0)),
            entity_name: r.get(1),
            entity_type: r.get(2),
            observation: Some(r.get(3)),
        }));
        Ok(pending)
    }

    async fn set_index(
        &self,
        links: &[(IndexTarget, MemoryId)],
    ) -> Result<Vec<MemoryId>, GraphError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.graph_err(e))?;
        let mut orphaned = Vec::new();
        for (target, memory) in links {
            let (sql, id) = match target {
                IndexTarget::Entity(id) => {
                    ("UPDATE graph_entities SET memory_id = $1 WHERE id = $2", id)
                }
                IndexTarget::Observation(id) => (
                    "UPDATE graph_observations SET memory_id = $1 WHERE id = $2",
                    id,
                ),
            };
            let changed = tx
                .execute(sql, &[memory.as_uuid(), id])
                .await
                .map_err(|e| self.graph_err(e))?;
            if changed == 0 {
                orphaned.push(*memory);
            }
        }
        tx.commit().await.map_err(|e| self.graph_err(e))?;
        Ok(orphaned)
    }

    async fn links(
        &self,
        user_id: &str,
        memories: &[MemoryId],
    ) -> Result<HashMap<MemoryId, GraphLink>, GraphError> {
        let client = self.client().await?;
        let ids: Vec<Uuid> = memories.iter().map(|m| *m.as_uuid()).collect();
        let mut links = HashMap::with_capacity(memories.len());
        for row in client
            .query(
                "SELECT o.memory_id, e.name, o.content FROM graph_observations o \
                 JOIN graph_entities e ON e.id = o.entity_id \
                 WHERE e.user_id = $1 AND o.memory_id = ANY($2)",
                &[&user_id, &ids],
            )
            .await
            .map_err(|e| self.graph_err(e))?
        {
            links.insert(
                MemoryId::from(row.get::<_, Uuid>(0)),
                GraphLink::Observation {
                    name: row.get(1),
                    content: row.get(2),
                },
            );
        }
        // An entity's own memory wins over an observation's, as in the SQLite engine.
        for row in client
            .query(
                "SELECT memory_id, name FROM graph_entities \
                 WHERE user_id = $1 AND memory_id = ANY($2)",
                &[&user_id, &ids],
            )
            .await
            .map_err(|e| self.graph_err(e))?
        {
            links.insert(
                MemoryId::from(row.get::<_, Uuid>(0)),
                GraphLink::Entity { name: row.get(1) },
            );
        }
        Ok(links)
    }
}
