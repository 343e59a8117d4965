//! [`Transfer`] on SQLite: reading every table page by page, and writing a copy in one
//! transaction on a connection of its own.
//!
//! The copy's connection holds an immediate transaction from the first page to the last; if the
//! copy fails or is dropped half-way, the connection closes and SQLite rolls it back. Rows keep
//! their ids and times; memories get their row ids in the order they come (the order they were
//! stored in the source); the full-text index is rebuilt at the end, as after a change of
//! analyser.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use engram_core::store::claims::{DoneClaim, loaded_range, stored_range};
use engram_core::store::graph::Relation;
use engram_core::store::jobs::ScheduleRecord;
use engram_core::store::tokens::{ApiToken, TokenWithHash};
use engram_core::store::transfer::{
    EntityRecord, HistoryRecord, Loader, ModelRecord, ObservationRecord, Record, RelationRecord,
    Table, Transfer,
};
use engram_core::{HistoryEvent, MemoryId, StoreError, StoredVector};
use jiff::Timestamp;
use rusqlite::{Connection, Row, params};
use serde_json::Value;

use crate::engine::SqliteStore;
use crate::rows::{MEMORY_COLUMN_COUNT, MEMORY_COLUMNS, memory_from_row, micros};
use crate::store::Database;

fn time(micros: i64) -> rusqlite::Result<Timestamp> {
    Timestamp::from_microsecond(micros).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Integer,
            Box::new(StoreError::Backend(format!("bad time {micros}: {e}"))),
        )
    })
}

fn bad(what: &str, detail: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        Box::new(StoreError::Backend(format!(
            "a stored {what} cannot be read: {detail}"
        ))),
    )
}

fn memory_id(text: Option<String>) -> rusqlite::Result<Option<MemoryId>> {
    text.map(|t| t.parse::<MemoryId>().map_err(|e| bad("memory id", e)))
        .transpose()
}

/// One page of `table`, read on `conn`.
pub(crate) fn dump(
    conn: &Connection,
    table: Table,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, Record)>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let page = |sql: &str, read: &dyn Fn(&Row<'_>) -> rusqlite::Result<(i64, Record)>| {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map(params![after, limit], |row| read(row))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    };
    match table {
        Table::Memories => page(
            &format!(
                "SELECT {MEMORY_COLUMNS}, m.rowid FROM memories m WHERE m.rowid > ?1 \
                 ORDER BY m.rowid LIMIT ?2"
            ),
            &|row| {
                Ok((
                    row.get(MEMORY_COLUMN_COUNT)?,
                    Record::Memory(memory_from_row(row)?),
                ))
            },
        ),
        Table::History => page(
            "SELECT seq, memory_id, user_id, event, old_text, new_text, actor, at FROM history \
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            &|row| {
                let id: String = row.get(1)?;
                let event: String = row.get(3)?;
                Ok((
                    row.get(0)?,
                    Record::History(HistoryRecord {
                        user_id: row.get(2)?,
                        event: HistoryEvent {
                            memory_id: id.parse().map_err(|e| bad("history row", e))?,
                            event: event.parse().map_err(|e: String| bad("history row", e))?,
                            old_text: row.get(4)?,
                            new_text: row.get(5)?,
                            actor: row.get(6)?,
                            at: time(row.get(7)?)?,
                        },
                    }),
                ))
            },
        ),
        Table::VectorModels => page(
            "SELECT pos, model, dimension, created_at FROM (SELECT row_number() OVER \
             (ORDER BY created_at, model) AS pos, * FROM embedding_models) \
             WHERE pos > ?1 ORDER BY pos LIMIT ?2",
            &|row| {
                Ok((
                    row.get(0)?,
                    Record::VectorModel(ModelRecord {
                        model: row.get(1)?,
                        dimension: row.get::<_, i64>(2)?.max(0) as usize,
                        created_at: time(row.get(3)?)?,
                    }),
                ))
            },
        ),
        Table::Vectors => page(
            "SELECT id, model, content_hash, vector, truncated FROM embeddings WHERE id > ?1 \
             ORDER BY id LIMIT ?2",
            &|row| {
                let bytes: Vec<u8> = row.get(3)?;
                Ok((
                    row.get(0)?,
                    Record::Vector {
                        model: row.get(1)?,
                        vector: StoredVector {
                            content_hash: row.get(2)?,
                            vector: bytes
                                .chunks_exact(4)
                                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                                .collect(),
                            truncated: row.get(4)?,
                        },
                    },
                ))
            },
        ),
        Table::Tokens => page(
            "SELECT pos, id, name, users, created_at, last_used_at, revoked_at, token_hash \
             FROM (SELECT row_number() OVER (ORDER BY created_at, id) AS pos, * FROM api_tokens) \
             WHERE pos > ?1 ORDER BY pos LIMIT ?2",
            &|row| {
                let users: String = row.get(3)?;
                Ok((
                    row.get(0)?,
                    Record::Token(TokenWithHash {
                        token: ApiToken {
                            id: row.get(1)?,
                            name: row.get(2)?,
                            users: serde_json::from_str(&users).map_err(|e| bad("token", e))?,
                            created_at: time(row.get(4)?)?,
                            last_used_at: row.get::<_, Option<i64>>(5)?.map(time).transpose()?,
                            revoked_at: row.get::<_, Option<i64>>(6)?.map(time).transpose()?,
                        },
                        token_hash: row.get(7)?,
                    }),
                ))
            },
        ),
        Table::Jobs => page(
            &format!(
                "SELECT {}, pos FROM (SELECT row_number() OVER (ORDER BY created_at_ms, id) \
                 AS pos, * FROM jobs) WHERE pos > ?1 ORDER BY pos LIMIT ?2",
                crate::jobs::JOB_COLUMNS
            ),
            &|row| {
                let job = crate::jobs::job_for_copy(row)?;
                Ok((row.get(20)?, Record::Job(job)))
            },
        ),
        Table::JobRuns => page(
            &format!(
                "SELECT {} FROM job_runs WHERE id > ?1 ORDER BY id LIMIT ?2",
                crate::jobs::RUN_COLUMNS
            ),
            &|row| {
                let run = crate::jobs::run_for_copy(row)?;
                Ok((run.id, Record::JobRun(run)))
            },
        ),
        Table::Entities => page(
            "SELECT id, user_id, name, entity_type, memory_id, created_at FROM graph_entities \
             WHERE id > ?1 ORDER BY id LIMIT ?2",
            &|row| {
                Ok((
                    row.get(0)?,
                    Record::Entity(EntityRecord {
                        id: row.get(0)?,
                        user_id: row.get(1)?,
                        name: row.get(2)?,
                        entity_type: row.get(3)?,
                        memory_id: memory_id(row.get(4)?)?,
                        created_at: time(row.get(5)?)?,
                    }),
                ))
            },
        ),
        Table::Observations => page(
            "SELECT id, entity_id, content, memory_id, created_at FROM graph_observations \
             WHERE id > ?1 ORDER BY id LIMIT ?2",
            &|row| {
                Ok((
                    row.get(0)?,
                    Record::Observation(ObservationRecord {
                        id: row.get(0)?,
                        entity_id: row.get(1)?,
                        content: row.get(2)?,
                        memory_id: memory_id(row.get(3)?)?,
                        created_at: time(row.get(4)?)?,
                    }),
                ))
            },
        ),
        Table::Relations => page(
            "SELECT id, user_id, from_name, to_name, relation_type, created_at \
             FROM graph_relations WHERE id > ?1 ORDER BY id LIMIT ?2",
            &|row| {
                Ok((
                    row.get(0)?,
                    Record::Relation(RelationRecord {
                        id: row.get(0)?,
                        user_id: row.get(1)?,
                        relation: Relation {
                            from: row.get(2)?,
                            to: row.get(3)?,
                            relation_type: row.get(4)?,
                        },
                        created_at: time(row.get(5)?)?,
                    }),
                ))
            },
        ),
        Table::Claims => page(
            "SELECT pos, id, user_id, stream, range_start, range_end, claimed_at, finished_at \
             FROM (SELECT row_number() OVER (ORDER BY finished_at, id) AS pos, * FROM claims \
             WHERE finished_at IS NOT NULL) WHERE pos > ?1 ORDER BY pos LIMIT ?2",
            &|row| {
                Ok((
                    row.get(0)?,
                    Record::Claim(DoneClaim {
                        id: row.get(1)?,
                        user_id: row.get(2)?,
                        stream: row.get(3)?,
                        range: loaded_range(row.get(4)?, row.get(5)?),
                        claimed_at: time(row.get(6)?)?,
                        finished_at: time(row.get(7)?)?,
                    }),
                ))
            },
        ),
    }
}

/// True when the database holds nothing a copy could overwrite.
pub(crate) fn is_empty(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT NOT EXISTS (SELECT 1 FROM memories) AND NOT EXISTS (SELECT 1 FROM history) \
         AND NOT EXISTS (SELECT 1 FROM embedding_models) AND NOT EXISTS (SELECT 1 FROM api_tokens) \
         AND NOT EXISTS (SELECT 1 FROM jobs) AND NOT EXISTS (SELECT 1 FROM job_runs) \
         AND NOT EXISTS (SELECT 1 FROM graph_entities) \
         AND NOT EXISTS (SELECT 1 FROM graph_relations) AND NOT EXISTS (SELECT 1 FROM claims)",
        [],
        |r| r.get(0),
    )
}

/// Writes one record on `conn` (inside the copy's transaction).
fn load_one(conn: &Connection, record: &Record) -> rusqlite::Result<()> {
    match record {
        Record::Memory(m) => {
            let metadata = Value::Object(m.metadata.clone()).to_string();
            conn.prepare_cached(
                "INSERT INTO memories (id, user_id, agent_id, session_id, kind, text, category, \
                 importance, metadata, created_at, updated_at, valid_from, valid_to, expires_at, \
                 source, content_hash, body_terms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, 0)",
            )?
            .execute(params![
                m.id.to_string(),
                m.scope.user_id,
                m.scope.agent_id,
                m.scope.session_id,
                m.kind.as_str(),
                m.text,
                m.category,
                m.importance.get(),
                metadata,
                micros(m.created_at),
                micros(m.updated_at),
                micros(m.valid_from),
                m.valid_to.map(micros),
                m.expires_at.map(micros),
                m.source,
                m.content_hash,
            ])?;
        }
        Record::History(h) => {
            let e = &h.event;
            conn.prepare_cached(
                "INSERT INTO history (memory_id, user_id, event, old_text, new_text, actor, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                e.memory_id.to_string(),
                h.user_id,
                e.event.as_str(),
                e.old_text,
                e.new_text,
                e.actor,
                micros(e.at)
            ])?;
        }
        Record::VectorModel(m) => {
            conn.prepare_cached(
                "INSERT INTO embedding_models (model, dimension, created_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![m.model, m.dimension as i64, micros(m.created_at)])?;
        }
        Record::Vector { model, vector } => {
            let bytes: Vec<u8> = vector.vector.iter().flat_map(|x| x.to_le_bytes()).collect();
            conn.prepare_cached(
                "INSERT INTO embeddings (model, content_hash, vector, truncated) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![model, vector.content_hash, bytes, vector.truncated])?;
        }
        Record::Token(t) => {
            let users = serde_json::to_string(&t.token.users).map_err(|e| bad("token", e))?;
            conn.prepare_cached(
                "INSERT INTO api_tokens (id, name, users, token_hash, created_at, last_used_at, \
                 revoked_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                t.token.id,
                t.token.name,
                users,
                t.token_hash,
                micros(t.token.created_at),
                t.token.last_used_at.map(micros),
                t.token.revoked_at.map(micros)
            ])?;
        }
        Record::Job(job) => {
            let (at_ms, every_ms, anchor_ms, cron_expr) = match &job.schedule {
                ScheduleRecord::At { at_ms } => (Some(*at_ms), None, None, None),
                ScheduleRecord::Every {
                    every_ms,
                    anchor_ms,
                } => (None, Some(*every_ms), Some(*anchor_ms), None),
                ScheduleRecord::Cron { expr } => (None, None, None, Some(expr.clone())),
            };
            let s = &job.state;
            conn.prepare_cached(
                "INSERT INTO jobs (id, name, enabled, schedule_kind, at_ms, every_ms, anchor_ms, \
                 cron_expr, tz, payload, session_key, missed, delete_after_run, next_run_at_ms, \
                 last_run_at_ms, last_status, last_error, running_run_id, created_at_ms, \
                 updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, \
                 ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            )?
            .execute(params![
                job.id,
                job.name,
                job.enabled,
                job.schedule.kind(),
                at_ms,
                every_ms,
                anchor_ms,
                cron_expr,
                job.tz,
                Value::Object(job.payload.clone()).to_string(),
                job.session_key,
                job.missed,
                job.delete_after_run,
                s.next_run_at_ms,
                s.last_run_at_ms,
                s.last_status.map(|x| x.as_str()),
                s.last_error,
                s.running_run_id,
                job.created_at_ms,
                job.updated_at_ms
            ])?;
        }
        Record::JobRun(run) => {
            conn.prepare_cached(
                "INSERT INTO job_runs (id, job_id, job_name, trigger, scheduled_at_ms, \
                 started_at_ms, finished_at_ms, status, error, output, runner_pid) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                run.id,
                run.job_id,
                run.job_name,
                run.trigger.as_str(),
                run.scheduled_at_ms,
                run.started_at_ms,
                run.finished_at_ms,
                run.status.as_str(),
                run.error,
                run.output,
                run.runner_pid
            ])?;
        }
        Record::Entity(e) => {
            conn.prepare_cached(
                "INSERT INTO graph_entities (id, user_id, name, entity_type, memory_id, \
                 created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                e.id,
                e.user_id,
                e.name,
                e.entity_type,
                e.memory_id.map(|m| m.to_string()),
                micros(e.created_at)
            ])?;
        }
        Record::Observation(o) => {
            conn.prepare_cached(
                "INSERT INTO graph_observations (id, entity_id, content, memory_id, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                o.id,
                o.entity_id,
                o.content,
                o.memory_id.map(|m| m.to_string()),
                micros(o.created_at)
            ])?;
        }
        Record::Relation(r) => {
            conn.prepare_cached(
                "INSERT INTO graph_relations (id, user_id, from_name, to_name, relation_type, \
                 created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                r.id,
                r.user_id,
                r.relation.from,
                r.relation.to,
                r.relation.relation_type,
                micros(r.created_at)
            ])?;
        }
        Record::Claim(c) => {
            let range = stored_range(&c.range).map_err(|e| bad("claim", e))?;
            conn.prepare_cached(
                "INSERT INTO claims (id, user_id, stream, range_start, range_end, claimed_at, \
                 finished_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                c.id,
                c.user_id,
                c.stream,
                range.start,
                range.end,
                micros(c.claimed_at),
                micros(c.finished_at)
            ])?;
        }
    }
    Ok(())
}

/// A copy being written: a connection of its own in one immediate transaction.
struct SqliteLoader {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    db: Arc<Database>,
}

impl SqliteLoader {
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            work(&conn).map_err(|e| db.err(e))
        })
        .await
        .map_err(|e| StoreError::Backend(format!("the copy stopped: {e}")))?
    }
}

#[async_trait]
impl Loader for SqliteLoader {
    async fn load(&mut self, records: Vec<Record>) -> Result<(), StoreError> {
        self.blocking(move |conn| {
            for record in &records {
                load_one(conn, record)?;
            }
            Ok(())
        })
        .await
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        let _ = &self.path;
        self.blocking(|conn| {
            crate::store::rebuild_text_index(conn)?;
            conn.execute_batch("COMMIT")
        })
        .await
    }
}

#[async_trait]
impl Transfer for SqliteStore {
    async fn dump(
        &self,
        table: Table,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Record)>, StoreError> {
        self.run(move |db| {
            db.reading(|conn| dump(conn, table, after, limit).map_err(|e| db.err(e)))
        })
        .await
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        self.run(|db| db.reading(|conn| is_empty(conn).map_err(|e| db.err(e))))
            .await
    }

    async fn begin_load(&self) -> Result<Box<dyn Loader>, StoreError> {
        let db = self.database();
        let conn = self
            .run(|db| {
                let conn = db.new_connection()?;
                conn.execute_batch("BEGIN IMMEDIATE")
                    .map_err(|e| db.err(e))?;
                Ok::<_, StoreError>(conn)
            })
            .await?;
        Ok(Box::new(SqliteLoader {
            conn: Arc::new(Mutex::new(conn)),
            path: db.path().to_path_buf(),
            db,
        }))
    }
}
