//! [`Transfer`] on PostgreSQL: reading every table page by page, and writing a copy in one
//! transaction on a connection of its own.
//!
//! The copy's connection is taken out of the pool: if the copy fails or is dropped half-way,
//! the connection closes and the server rolls everything back. Rows keep their ids (runs and
//! graph rows with `OVERRIDING SYSTEM VALUE`, and the counters are moved past them at the
//! end); memories get their docs in the order they come, which is the order they were stored
//! in the source. The lexical index is rebuilt at the end, as after a change of analyser.

use async_trait::async_trait;
use engram_core::store::claims::{DoneClaim, loaded_range, stored_range};
use engram_core::store::graph::Relation;
use engram_core::store::jobs::ScheduleRecord;
use engram_core::store::tokens::TokenWithHash;
use engram_core::store::transfer::{
    EntityRecord, HistoryRecord, Loader, ModelRecord, ObservationRecord, Record, RelationRecord,
    Table, Transfer,
};
use engram_core::{HistoryEvent, MemoryId, StoreError, StoredVector};
use jiff::Timestamp;
use pgvector::Vector;
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::PgStore;
use crate::error::from_pg;
use crate::memories::{StoredRow, copy_memories};
use crate::rows::{MEMORY_COLUMNS, RawJson, check_storable, clamp_i64, memory_from_row, micros};

fn time(micros: i64) -> Result<Timestamp, StoreError> {
    Timestamp::from_microsecond(micros)
        .map_err(|e| StoreError::Backend(format!("a stored time {micros} is out of range: {e}")))
}

fn optional_id(uuid: Option<Uuid>) -> Option<MemoryId> {
    uuid.map(MemoryId::from)
}

impl PgStore {
    async fn dump_rows(&self, sql: &str, after: i64, limit: usize) -> Result<Vec<Row>, StoreError> {
        let client = self.client().await?;
        client
            .query(sql, &[&after, &clamp_i64(limit)])
            .await
            .map_err(|e| self.err(e))
    }
}

#[async_trait]
impl Transfer for PgStore {
    async fn dump(
        &self,
        table: Table,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Record)>, StoreError> {
        let read = |what: &str, e: &dyn std::fmt::Display| {
            StoreError::Backend(format!("a stored {what} cannot be read: {e}"))
        };
        match table {
            Table::Memories => {
                let sql = format!(
                    "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.doc > $1 \
                     ORDER BY m.doc LIMIT $2"
                );
                self.dump_rows(&sql, after, limit)
                    .await?
                    .iter()
                    .map(|row| memory_from_row(row).map(|(doc, m)| (doc, Record::Memory(m))))
                    .collect()
            }
            Table::History => self
                .dump_rows(
                    "SELECT seq, memory_id, user_id, event, old_text, new_text, actor, at \
                     FROM history WHERE seq > $1 ORDER BY seq LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    let event: &str = row.get(3);
                    Ok((
                        row.get(0),
                        Record::History(HistoryRecord {
                            user_id: row.get(2),
                            event: HistoryEvent {
                                memory_id: MemoryId::from(row.get::<_, Uuid>(1)),
                                event: event
                                    .parse()
                                    .map_err(|e: String| read("history row", &e))?,
                                old_text: row.get(4),
                                new_text: row.get(5),
                                actor: row.get(6),
                                at: time(row.get(7))?,
                            },
                        }),
                    ))
                })
                .collect(),
            Table::VectorModels => self
                .dump_rows(
                    "SELECT pos, model, dimension, created_at FROM (SELECT row_number() OVER \
                     (ORDER BY created_at, model) AS pos, * FROM embedding_models) t \
                     WHERE pos > $1 ORDER BY pos LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.get(0),
                        Record::VectorModel(ModelRecord {
                            model: row.get(1),
                            dimension: row.get::<_, i32>(2).max(0) as usize,
                            created_at: time(row.get(3))?,
                        }),
                    ))
                })
                .collect(),
            Table::Vectors => {
                let rows = self
                    .dump_rows(
                        "SELECT id, model, content_hash, vector, truncated FROM embeddings \
                         WHERE id > $1 ORDER BY id LIMIT $2",
                        after,
                        limit,
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|row| {
                        let vector = if self.dense.is_pgvector() {
                            row.get::<_, Vector>(3).to_vec()
                        } else {
                            crate::vectors::decode(row.get::<_, &[u8]>(3))
                        };
                        (
                            row.get(0),
                            Record::Vector {
                                model: row.get(1),
                                vector: StoredVector {
                                    content_hash: row.get(2),
                                    vector,
                                    truncated: row.get(4),
                                },
                            },
                        )
                    })
                    .collect())
            }
            Table::Tokens => self
                .dump_rows(
                    "SELECT pos, id, name, users::text, created_at, last_used_at, revoked_at, \
                     token_hash FROM (SELECT row_number() OVER (ORDER BY created_at, id) AS pos, \
                     * FROM api_tokens) t WHERE pos > $1 ORDER BY pos LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    let users: &str = row.get(3);
                    let users: Vec<String> =
                        serde_json::from_str(users).map_err(|e| read("token", &e))?;
                    Ok((
                        row.get(0),
                        Record::Token(TokenWithHash {
                            token: engram_core::store::tokens::ApiToken {
                                id: row.get(1),
                                name: row.get(2),
                                users,
                                created_at: time(row.get(4))?,
                                last_used_at: row.get::<_, Option<i64>>(5).map(time).transpose()?,
                                revoked_at: row.get::<_, Option<i64>>(6).map(time).transpose()?,
                            },
                            token_hash: row.get(7),
                        }),
                    ))
                })
                .collect(),
            Table::Jobs => {
                let sql = format!(
                    "SELECT {}, pos FROM (SELECT row_number() OVER (ORDER BY created_at_ms, id) \
                     AS pos, * FROM jobs) t WHERE pos > $1 ORDER BY pos LIMIT $2",
                    crate::jobs::JOB_COLUMNS
                );
                self.dump_rows(&sql, after, limit)
                    .await?
                    .iter()
                    .map(|row| {
                        let job = crate::jobs::job_from_row(row).map_err(|e| read("job", &e))?;
                        Ok((row.get(20), Record::Job(job)))
                    })
                    .collect()
            }
            Table::JobRuns => {
                let sql = format!(
                    "SELECT {} FROM job_runs WHERE id > $1 ORDER BY id LIMIT $2",
                    crate::jobs::RUN_COLUMNS
                );
                self.dump_rows(&sql, after, limit)
                    .await?
                    .iter()
                    .map(|row| {
                        let run = crate::jobs::run_from_row(row).map_err(|e| read("run", &e))?;
                        Ok((run.id, Record::JobRun(run)))
                    })
                    .collect()
            }
            Table::Entities => self
                .dump_rows(
                    "SELECT id, user_id, name, entity_type, memory_id, created_at \
                     FROM graph_entities WHERE id > $1 ORDER BY id LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.get(0),
                        Record::Entity(EntityRecord {
                            id: row.get(0),
                            user_id: row.get(1),
                            name: row.get(2),
                            entity_type: row.get(3),
                            memory_id: optional_id(row.get(4)),
                            created_at: time(row.get(5))?,
                        }),
                    ))
                })
                .collect(),
            Table::Observations => self
                .dump_rows(
                    "SELECT id, entity_id, content, memory_id, created_at \
                     FROM graph_observations WHERE id > $1 ORDER BY id LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.get(0),
                        Record::Observation(ObservationRecord {
                            id: row.get(0),
                            entity_id: row.get(1),
                            content: row.get(2),
                            memory_id: optional_id(row.get(3)),
                            created_at: time(row.get(4))?,
                        }),
                    ))
                })
                .collect(),
            Table::Relations => self
                .dump_rows(
                    "SELECT id, user_id, from_name, to_name, relation_type, created_at \
                     FROM graph_relations WHERE id > $1 ORDER BY id LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.get(0),
                        Record::Relation(RelationRecord {
                            id: row.get(0),
                            user_id: row.get(1),
                            relation: Relation {
                                from: row.get(2),
                                to: row.get(3),
                                relation_type: row.get(4),
                            },
                            created_at: time(row.get(5))?,
                        }),
                    ))
                })
                .collect(),
            Table::Claims => self
                .dump_rows(
                    "SELECT pos, id, user_id, stream, range_start, range_end, claimed_at, \
                     finished_at FROM (SELECT row_number() OVER (ORDER BY finished_at, id) \
                     AS pos, * FROM claims WHERE finished_at IS NOT NULL) c \
                     WHERE pos > $1 ORDER BY pos LIMIT $2",
                    after,
                    limit,
                )
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.get(0),
                        Record::Claim(DoneClaim {
                            id: row.get(1),
                            user_id: row.get(2),
                            stream: row.get(3),
                            range: loaded_range(row.get(4), row.get(5)),
                            claimed_at: time(row.get(6))?,
                            finished_at: time(row.get(7))?,
                        }),
                    ))
                })
                .collect(),
        }
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT NOT EXISTS (SELECT 1 FROM memories) AND NOT EXISTS (SELECT 1 FROM history) \
                 AND NOT EXISTS (SELECT 1 FROM embedding_models) \
                 AND NOT EXISTS (SELECT 1 FROM api_tokens) AND NOT EXISTS (SELECT 1 FROM jobs) \
                 AND NOT EXISTS (SELECT 1 FROM job_runs) \
                 AND NOT EXISTS (SELECT 1 FROM graph_entities) \
                 AND NOT EXISTS (SELECT 1 FROM graph_relations) \
                 AND NOT EXISTS (SELECT 1 FROM claims)",
                &[],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(row.get(0))
    }

    async fn begin_load(&self) -> Result<Box<dyn Loader>, StoreError> {
        // Out of the pool: closing it (on failure) rolls the copy back.
        let client = deadpool_postgres::Object::take(self.client().await?);
        client
            .batch_execute("BEGIN")
            .await
            .map_err(|e| self.err(e))?;
        Ok(Box::new(PgLoader {
            client,
            location: self.location.clone(),
            pgvector: self.dense.is_pgvector(),
            indexes_due: Vec::new(),
        }))
    }
}

/// A copy being written, in one open transaction.
struct PgLoader {
    client: deadpool_postgres::ClientWrapper,
    location: String,
    pgvector: bool,
    /// The HNSW index of each model copied, built at commit: building it once over every
    /// vector is far faster than growing it with each insert (a copy of 100k memories with
    /// MiniLM vectors took 668 s with the index first, 180 s with it last).
    indexes_due: Vec<(String, i32)>,
}

impl PgLoader {
    fn err(&self, e: tokio_postgres::Error) -> StoreError {
        from_pg(&e, &self.location)
    }

    async fn memories(&self, memories: &[engram_core::Memory]) -> Result<(), StoreError> {
        let client: &tokio_postgres::Client = &self.client;
        let docs: Vec<i64> = client
            .query(
                "SELECT nextval('memories_doc_seq') FROM generate_series(1, $1::integer)",
                &[&(memories.len() as i32)],
            )
            .await
            .map_err(|e| self.err(e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut docs = docs;
        docs.sort_unstable();
        let metadata: Vec<String> = memories
            .iter()
            .map(|m| Value::Object(m.metadata.clone()).to_string())
            .collect();
        let rows: Vec<StoredRow<'_>> = memories
            .iter()
            .zip(&metadata)
            .zip(docs)
            .map(|((memory, metadata), doc)| StoredRow {
                doc,
                memory,
                metadata,
                // Counted when the index is rebuilt, at the end.
                body_terms: 0,
            })
            .collect();
        copy_memories(client, &rows).await.map_err(|e| self.err(e))
    }

    async fn history(&self, rows: &[HistoryRecord]) -> Result<(), StoreError> {
        let ids: Vec<Uuid> = rows.iter().map(|h| *h.event.memory_id.as_uuid()).collect();
        let users: Vec<&str> = rows.iter().map(|h| h.user_id.as_str()).collect();
        let events: Vec<&str> = rows.iter().map(|h| h.event.event.as_str()).collect();
        let old: Vec<Option<&str>> = rows.iter().map(|h| h.event.old_text.as_deref()).collect();
        let new: Vec<Option<&str>> = rows.iter().map(|h| h.event.new_text.as_deref()).collect();
        let actors: Vec<&str> = rows.iter().map(|h| h.event.actor.as_str()).collect();
        let at: Vec<i64> = rows.iter().map(|h| micros(h.event.at)).collect();
        self.client
            .execute(
                "INSERT INTO history (memory_id, user_id, event, old_text, new_text, actor, at) \
                 SELECT m, u, e, o, n, a, t FROM unnest($1::uuid[], $2::text[], $3::text[], \
                 $4::text[], $5::text[], $6::text[], $7::bigint[]) WITH ORDINALITY \
                 AS h(m, u, e, o, n, a, t, i) ORDER BY i",
                &[&ids, &users, &events, &old, &new, &actors, &at],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    async fn vectors(&self, rows: &[(String, StoredVector)]) -> Result<(), StoreError> {
        let models: Vec<&str> = rows.iter().map(|(m, _)| m.as_str()).collect();
        let hashes: Vec<&str> = rows.iter().map(|(_, v)| v.content_hash.as_str()).collect();
        let truncated: Vec<bool> = rows.iter().map(|(_, v)| v.truncated).collect();
        let insert = |kind: &str| {
            format!(
                "INSERT INTO embeddings (model, content_hash, vector, truncated) \
                 SELECT m, h, v, t FROM unnest($1::text[], $2::text[], $3::{kind}[], \
                 $4::boolean[]) WITH ORDINALITY AS x(m, h, v, t, i) ORDER BY i"
            )
        };
        let result = if self.pgvector {
            let vectors: Vec<Vector> = rows
                .iter()
                .map(|(_, v)| Vector::from(v.vector.clone()))
                .collect();
            self.client
                .execute(&insert("vector"), &[&models, &hashes, &vectors, &truncated])
                .await
        } else {
            let vectors: Vec<Vec<u8>> = rows
                .iter()
                .map(|(_, v)| crate::vectors::encode(&v.vector))
                .collect();
            self.client
                .execute(&insert("bytea"), &[&models, &hashes, &vectors, &truncated])
                .await
        };
        result.map(|_| ()).map_err(|e| self.err(e))
    }

    async fn one(&self, record: &Record) -> Result<(), StoreError> {
        let client: &tokio_postgres::Client = &self.client;
        let result = match record {
            // Written in runs by `load`.
            Record::Memory(_) | Record::History(_) | Record::Vector { .. } => Ok(0),
            Record::VectorModel(m) => {
                let dimension = i32::try_from(m.dimension).unwrap_or(i32::MAX);
                client
                    .execute(
                        "INSERT INTO embedding_models (model, dimension, created_at) \
                         VALUES ($1, $2, $3)",
                        &[&m.model, &dimension, &micros(m.created_at)],
                    )
                    .await
            }
            Record::Token(t) => {
                let users = serde_json::to_string(&t.token.users).unwrap_or_else(|_| "[]".into());
                client
                    .execute(
                        "INSERT INTO api_tokens (id, name, users, token_hash, created_at, \
                         last_used_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        &[
                            &t.token.id,
                            &t.token.name,
                            &RawJson(&users),
                            &t.token_hash,
                            &micros(t.token.created_at),
                            &t.token.last_used_at.map(micros),
                            &t.token.revoked_at.map(micros),
                        ],
                    )
                    .await
            }
            Record::Job(job) => {
                let (at_ms, every_ms, anchor_ms, cron_expr) = match &job.schedule {
                    ScheduleRecord::At { at_ms } => (Some(*at_ms), None, None, None),
                    ScheduleRecord::Every {
                        every_ms,
                        anchor_ms,
                    } => (None, Some(*every_ms), Some(*anchor_ms), None),
                    ScheduleRecord::Cron { expr } => (None, None, None, Some(expr.as_str())),
                };
                let payload = Value::Object(job.payload.clone()).to_string();
                let state = &job.state;
                client
                    .execute(
                        "INSERT INTO jobs (id, name, enabled, schedule_kind, at_ms, every_ms, \
                         anchor_ms, cron_expr, tz, payload, session_key, missed, \
                         delete_after_run, next_run_at_ms, last_run_at_ms, last_status, \
                         last_error, running_run_id, created_at_ms, updated_at_ms) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
                         $15, $16, $17, $18, $19, $20)",
                        &[
                            &job.id,
                            &job.name,
                            &job.enabled,
                            &job.schedule.kind(),
                            &at_ms,
                            &every_ms,
                            &anchor_ms,
                            &cron_expr,
                            &job.tz,
                            &RawJson(&payload),
                            &job.session_key,
                            &job.missed,
                            &job.delete_after_run,
                            &state.next_run_at_ms,
                            &state.last_run_at_ms,
                            &state.last_status.map(|s| s.as_str()),
                            &state.last_error,
                            &state.running_run_id,
                            &job.created_at_ms,
                            &job.updated_at_ms,
                        ],
                    )
                    .await
            }
            Record::JobRun(run) => {
                client
                    .execute(
                        "INSERT INTO job_runs (id, job_id, job_name, trigger, scheduled_at_ms, \
                         started_at_ms, finished_at_ms, status, error, output, runner_pid) \
                         OVERRIDING SYSTEM VALUE \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                        &[
                            &run.id,
                            &run.job_id,
                            &run.job_name,
                            &run.trigger.as_str(),
                            &run.scheduled_at_ms,
                            &run.started_at_ms,
                            &run.finished_at_ms,
                            &run.status.as_str(),
                            &run.error,
                            &run.output,
                            &run.runner_pid,
                        ],
                    )
                    .await
            }
            Record::Entity(e) => {
                client
                    .execute(
                        "INSERT INTO graph_entities (id, user_id, name, entity_type, memory_id, \
                         created_at) OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6)",
                        &[
                            &e.id,
                            &e.user_id,
                            &e.name,
                            &e.entity_type,
                            &e.memory_id.map(|m| *m.as_uuid()),
                            &micros(e.created_at),
                        ],
                    )
                    .await
            }
            Record::Observation(o) => {
                client
                    .execute(
                        "INSERT INTO graph_observations (id, entity_id, content, memory_id, \
                         created_at) OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5)",
                        &[
                            &o.id,
                            &o.entity_id,
                            &o.content,
                            &o.memory_id.map(|m| *m.as_uuid()),
                            &micros(o.created_at),
                        ],
                    )
                    .await
            }
            Record::Relation(r) => {
                client
                    .execute(
                        "INSERT INTO graph_relations (id, user_id, from_name, to_name, \
                         relation_type, created_at) OVERRIDING SYSTEM VALUE \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                        &[
                            &r.id,
                            &r.user_id,
                            &r.relation.from,
                            &r.relation.to,
                            &r.relation.relation_type,
                            &micros(r.created_at),
                        ],
                    )
                    .await
            }
            Record::Claim(c) => {
                check_storable("a claim's user", &c.user_id)?;
                check_storable("a claim's stream", &c.stream)?;
                let range = stored_range(&c.range)?;
                client
                    .execute(
                        "INSERT INTO claims (id, user_id, stream, range_start, range_end, \
                         claimed_at, finished_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        &[
                            &c.id,
                            &c.user_id,
                            &c.stream,
                            &range.start,
                            &range.end,
                            &micros(c.claimed_at),
                            &micros(c.finished_at),
                        ],
                    )
                    .await
            }
        };
        result.map(|_| ()).map_err(|e| self.err(e))
    }
}

#[async_trait]
impl Loader for PgLoader {
    async fn load(&mut self, records: Vec<Record>) -> Result<(), StoreError> {
        // Runs of one kind: memories by COPY, history and vectors by arrays (in order), the
        // rest row by row, pipelined (they carry their own ids).
        let mut rest: Vec<Record> = Vec::new();
        let mut iter = records.into_iter().peekable();
        while let Some(record) = iter.next() {
            match record {
                Record::Memory(first) => {
                    let mut run = vec![first];
                    while let Some(Record::Memory(_)) = iter.peek() {
                        if let Some(Record::Memory(m)) = iter.next() {
                            run.push(m);
                        }
                    }
                    self.memories(&run).await?;
                }
                Record::History(first) => {
                    let mut run = vec![first];
                    while let Some(Record::History(_)) = iter.peek() {
                        if let Some(Record::History(h)) = iter.next() {
                            run.push(h);
                        }
                    }
                    self.history(&run).await?;
                }
                Record::Vector { model, vector } => {
                    let mut run = vec![(model, vector)];
                    while let Some(Record::Vector { .. }) = iter.peek() {
                        if let Some(Record::Vector { model, vector }) = iter.next() {
                            run.push((model, vector));
                        }
                    }
                    self.vectors(&run).await?;
                }
                other => rest.push(other),
            }
        }
        futures::future::try_join_all(rest.iter().map(|r| self.one(r))).await?;
        if self.pgvector {
            for record in &rest {
                if let Record::VectorModel(m) = record {
                    let dimension = i32::try_from(m.dimension).unwrap_or(i32::MAX);
                    self.indexes_due.push((m.model.clone(), dimension));
                }
            }
        }
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        let client: &tokio_postgres::Client = &self.client;
        crate::lexical::rebuild(client)
            .await
            .map_err(|e| self.err(e))?;
        for (model, dimension) in &self.indexes_due {
            client
                .batch_execute(&crate::vectors::hnsw_index_sql(model, *dimension))
                .await
                .map_err(|e| self.err(e))?;
        }
        // Ids given by the copy: the next ones come after them.
        for table in [
            "job_runs",
            "graph_entities",
            "graph_observations",
            "graph_relations",
        ] {
            client
                .batch_execute(&format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                     (SELECT coalesce(max(id), 0) + 1 FROM {table}), false)"
                ))
                .await
                .map_err(|e| self.err(e))?;
        }
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| self.err(e))?;
        // Tables filled at once have no statistics and no visibility map until autovacuum
        // comes by: the planner guesses (500 rows for 100,000 vectors) and every index-only
        // scan visits the heap (counting 100k vectors took 50 ms, not 7). Both are made now,
        // once, rather than found by the first searches. VACUUM runs outside a transaction.
        client
            .batch_execute(&format!("VACUUM (ANALYZE) {}", COPIED_TABLES.join(", ")))
            .await
            .map_err(|e| self.err(e))
    }
}

/// The tables a copy fills, vacuumed and analysed after it.
const COPIED_TABLES: &[&str] = &[
    "memories",
    "history",
    "lexical_users",
    "postings",
    "lexical_bodies",
    "embedding_models",
    "embeddings",
    "jobs",
    "job_runs",
    "api_tokens",
    "graph_entities",
    "graph_observations",
    "graph_relations",
    "claims",
];
