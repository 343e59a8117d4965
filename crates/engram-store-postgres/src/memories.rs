//! Memories and their history: the same semantics as the SQLite engine, written for many
//! processes on one database.
//!
//! Every write that changes a user's memories first locks that user's row in `lexical_users`
//! (see `lexical::lock_users`), so one user's writes happen one after another, as they do in
//! SQLite where the whole file has one writer, while different users' writes run in parallel.
//! Under that lock a batch knows exactly which of its memories are already stored, so it can be
//! written with binary COPY in one round trip per table.

use std::collections::HashMap;

use engram_core::store::{ExportCursor, LexicalHit, MemoryPatch};
use engram_core::{
    AddOutcome, DayCount, DayCounter, Filter, HistoryEvent, HistoryKind, InvalidMemory, Kind,
    Memory, MemoryId, NewMemory, SessionCount, StoreError, StoreStats, UserCount, content_hash,
};
use jiff::Timestamp;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use crate::lexical::{self, Indexed, Turn};
use crate::rows::{
    MEMORY_COLUMNS, Params, RawJson, check_storable, clamp_i64, filter_sql, memory_from_row, micros,
};
use crate::store::{Db, PgStore};

/// A memory accepted for storing, with the doc it gets.
struct Accepted {
    index: usize,
    memory: Memory,
    metadata: String,
    doc: i64,
}

/// Builds the stored form of a new memory (defaults filled in, times to the microsecond), as
/// the SQLite engine does.
fn prepare(new: NewMemory, now: Timestamp) -> Result<Memory, StoreError> {
    new.validate()?;
    let truncate = engram_core::time::truncate_to_micros;
    let created_at = truncate(new.created_at.unwrap_or(now));
    let memory = Memory {
        id: new.id.unwrap_or_default(),
        content_hash: new.content_hash(),
        kind: new.kind,
        text: new.text,
        category: new.category,
        importance: new.importance,
        created_at,
        updated_at: truncate(new.updated_at.unwrap_or(now)),
        valid_from: truncate(new.valid_from.unwrap_or(created_at)),
        valid_to: new.valid_to.map(truncate),
        expires_at: new.expires_at.map(truncate),
        source: new.source,
        scope: new.scope,
        metadata: new.metadata,
    };
    Ok(memory)
}

impl PgStore {
    /// See [`engram_core::MemoryStore::add`].
    pub(crate) async fn add(
        &self,
        memory: NewMemory,
        actor: &str,
    ) -> Result<AddOutcome, StoreError> {
        let mut outcomes = self.add_many(vec![memory], actor).await?;
        outcomes
            .pop()
            .unwrap_or_else(|| Err(StoreError::Backend("no outcome for the memory".into())))
    }

    /// See [`engram_core::MemoryStore::add_many`].
    pub(crate) async fn add_many(
        &self,
        memories: Vec<NewMemory>,
        actor: &str,
    ) -> Result<Vec<Result<AddOutcome, StoreError>>, StoreError> {
        check_storable("the actor", actor)?;
        let now = self.now();
        let mut outcomes: Vec<Option<Result<AddOutcome, StoreError>>> =
            Vec::with_capacity(memories.len());
        let mut valid: Vec<(usize, Memory)> = Vec::with_capacity(memories.len());
        for (index, new) in memories.into_iter().enumerate() {
            match prepare(new, now) {
                Ok(memory) => {
                    outcomes.push(None);
                    valid.push((index, memory));
                }
                Err(e) => outcomes.push(Some(Err(e))),
            }
        }
        if !valid.is_empty() {
            let map = |e: tokio_postgres::Error| self.err(e);
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(map)?;
            let users: Vec<&str> = valid
                .iter()
                .map(|(_, m)| m.scope.user_id.as_str())
                .collect();
            let keys = lexical::lock_users(&*tx, &users).await.map_err(map)?;

            // Which ids and current texts are taken, then each memory in turn as if inserted
            // one by one: a later copy of an earlier one in the batch is a duplicate too.
            let ids: Vec<Uuid> = valid.iter().map(|(_, m)| *m.id.as_uuid()).collect();
            let hashes: Vec<&str> = valid
                .iter()
                .filter(|(_, m)| m.valid_to.is_none())
                .map(|(_, m)| m.content_hash.as_str())
                .collect();
            // Two index lookups (a plain `id = ANY(..) OR hash = ANY(..)` makes the planner
            // scan the table, comparing every row with every element).
            let (id_params, hash_params): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) =
                ([&ids], [&hashes]);
            let by_id = tx.query(
                "SELECT m.id, m.content_hash, m.valid_to IS NULL, m.user_id \
                 FROM unnest($1::uuid[]) AS q(id) JOIN memories m ON m.id = q.id",
                &id_params,
            );
            let by_hash = tx.query(
                "SELECT m.id, m.content_hash, true, m.user_id FROM unnest($1::text[]) AS q(hash) \
                 JOIN memories m ON m.content_hash = q.hash AND m.valid_to IS NULL",
                &hash_params,
            );
            let (by_id, by_hash) = futures::join!(by_id, by_hash);
            // Each taken id with the user whose memory holds it.
            let mut taken_ids: HashMap<Uuid, String> = HashMap::new();
            let mut current: HashMap<String, MemoryId> = HashMap::new();
            for row in by_id.map_err(map)?.iter().chain(&by_hash.map_err(map)?) {
                let id: Uuid = row.get(0);
                taken_ids.insert(id, row.get(3));
                if row.get::<_, bool>(2) {
                    current.insert(row.get(1), MemoryId::from(id));
                }
            }
            let mut accepted: Vec<Accepted> = Vec::with_capacity(valid.len());
            for (index, memory) in valid {
                if let Some(owner) = taken_ids.get(memory.id.as_uuid()) {
                    // A memory that names its id never takes or touches another user's memory.
                    outcomes[index] = Some(if *owner == memory.scope.user_id {
                        Ok(AddOutcome::Duplicate(memory.id))
                    } else {
                        Err(StoreError::Invalid(InvalidMemory::IdOfAnotherUser(
                            memory.id,
                        )))
                    });
                    continue;
                }
                if memory.valid_to.is_none()
                    && let Some(existing) = current.get(&memory.content_hash)
                {
                    outcomes[index] = Some(Ok(AddOutcome::Duplicate(*existing)));
                    continue;
                }
                taken_ids.insert(*memory.id.as_uuid(), memory.scope.user_id.clone());
                if memory.valid_to.is_none() {
                    current.insert(memory.content_hash.clone(), memory.id);
                }
                let metadata = serde_json::Value::Object(memory.metadata.clone()).to_string();
                accepted.push(Accepted {
                    index,
                    memory,
                    metadata,
                    doc: 0,
                });
            }
            if !accepted.is_empty() {
                let docs: Vec<i64> = tx
                    .query(
                        "SELECT nextval('memories_doc_seq') FROM generate_series(1, $1::integer)",
                        &[&(accepted.len() as i32)],
                    )
                    .await
                    .map_err(map)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                let mut docs = docs;
                docs.sort_unstable();
                for (a, doc) in accepted.iter_mut().zip(docs) {
                    a.doc = doc;
                }
                self.write_new(&*tx, &accepted, &keys, actor, now)
                    .await
                    .map_err(map)?;
            }
            tx.commit().await.map_err(map)?;
            for a in accepted {
                outcomes[a.index] = Some(Ok(AddOutcome::Added(a.memory)));
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(StoreError::Backend("a memory had no outcome".into())))
            })
            .collect())
    }

    /// Writes accepted memories with their index entries, history rows and statistics.
    async fn write_new(
        &self,
        tx: &impl Db,
        accepted: &[Accepted],
        keys: &HashMap<String, i32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), tokio_postgres::Error> {
        let turns: Vec<Turn<'_>> = accepted
            .iter()
            .map(|a| Turn {
                user_id: &a.memory.scope.user_id,
                session_id: a.memory.scope.session_id.as_deref(),
                is_episode: a.memory.kind == Kind::Episode,
                created_at: micros(a.memory.created_at),
                doc: a.doc,
                text: &a.memory.text,
            })
            .collect();
        let contexts = lexical::contexts_for_new(tx, &turns).await?;
        let bodies: Vec<Vec<String>> = accepted
            .iter()
            .zip(&contexts)
            .map(|(a, context)| lexical::body(&a.memory.text, context.as_deref()))
            .collect();

        let rows: Vec<StoredRow<'_>> = accepted
            .iter()
            .zip(&bodies)
            .map(|(a, body)| StoredRow {
                doc: a.doc,
                memory: &a.memory,
                metadata: &a.metadata,
                body_terms: body.len() as i32,
            })
            .collect();
        copy_memories(tx, &rows).await?;

        let mut indexed = Vec::with_capacity(accepted.len());
        let mut deltas: HashMap<i32, (i64, i64)> = HashMap::new();
        for (a, body) in accepted.iter().zip(&bodies) {
            let Some(&user_key) = keys.get(&a.memory.scope.user_id) else {
                continue;
            };
            let delta = deltas.entry(user_key).or_default();
            delta.0 += 1;
            delta.1 += body.len() as i64;
            indexed.push(Indexed {
                doc: a.doc,
                user_key,
                body,
            });
        }
        lexical::write_index(tx, &indexed).await?;
        lexical::add_to_stats(tx, &deltas).await?;

        let sink = tx
            .copy_rows(
                "COPY history (memory_id, user_id, event, old_text, new_text, actor, at) \
                 FROM STDIN BINARY",
            )
            .await?;
        let types = [
            Type::UUID,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::INT8,
        ];
        let writer = BinaryCopyInWriter::new(sink, &types);
        let mut writer = std::pin::pin!(writer);
        let at = micros(now);
        let none: Option<&str> = None;
        for a in accepted {
            writer
                .as_mut()
                .write(&[
                    a.memory.id.as_uuid(),
                    &a.memory.scope.user_id,
                    &HistoryKind::Add.as_str(),
                    &none,
                    &a.memory.text,
                    &actor,
                    &at,
                ])
                .await?;
        }
        writer.finish().await?;
        Ok(())
    }

    /// See [`engram_core::MemoryStore::get`].
    pub(crate) async fn get(&self, id: MemoryId) -> Result<Memory, StoreError> {
        let client = self.client().await?;
        self.get_in(&client, id, false).await.map(|(_, m)| m)
    }

    /// The memory with this id and its doc; `for_update` locks its row.
    async fn get_in(
        &self,
        client: &impl deadpool_postgres::GenericClient,
        id: MemoryId,
        for_update: bool,
    ) -> Result<(i64, Memory), StoreError> {
        let lock = if for_update { " FOR UPDATE" } else { "" };
        let sql = format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id = $1{lock}");
        let statement = client.prepare_cached(&sql).await.map_err(|e| self.err(e))?;
        let row = client
            .query_opt(&statement, &[id.as_uuid()])
            .await
            .map_err(|e| self.err(e))?
            .ok_or(StoreError::NotFound(id))?;
        memory_from_row(&row)
    }

    /// Starts a write on one memory: locks its user's statistics row (the order every writer
    /// follows) and then the memory's row. Returns the user's key, the doc and the memory.
    async fn lock_memory(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: MemoryId,
    ) -> Result<(i32, i64, Memory), StoreError> {
        let map = |e: tokio_postgres::Error| self.err(e);
        let user: String = tx
            .query_opt(
                "SELECT user_id FROM memories WHERE id = $1",
                &[id.as_uuid()],
            )
            .await
            .map_err(map)?
            .ok_or(StoreError::NotFound(id))?
            .get(0);
        let keys = lexical::lock_users(&**tx, &[user.as_str()])
            .await
            .map_err(map)?;
        let (doc, memory) = self.get_in(tx, id, true).await?;
        let key = keys
            .get(&memory.scope.user_id)
            .copied()
            .ok_or_else(|| StoreError::Backend("the memory's user changed under a lock".into()))?;
        Ok((key, doc, memory))
    }

    /// See [`engram_core::MemoryStore::update`].
    pub(crate) async fn update(
        &self,
        id: MemoryId,
        patch: MemoryPatch,
        actor: &str,
    ) -> Result<Memory, StoreError> {
        patch.validate()?;
        let now = self.now();
        let map = |e: tokio_postgres::Error| self.err(e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        let (user_key, doc, mut memory) = self.lock_memory(&tx, id).await?;
        let old_text = memory.text.clone();
        let old_hash = memory.content_hash.clone();
        if let Some(text) = patch.text {
            let hash = content_hash(&memory.scope, &text);
            if hash != memory.content_hash && memory.valid_to.is_none() {
                let clash = tx
                    .query_opt(
                        "SELECT id FROM memories WHERE content_hash = $1 \
                         AND valid_to IS NULL AND id <> $2",
                        &[&hash, id.as_uuid()],
                    )
                    .await
                    .map_err(map)?;
                if let Some(other) = clash {
                    return Err(StoreError::Duplicate(MemoryId::from(
                        other.get::<_, Uuid>(0),
                    )));
                }
            }
            memory.text = text;
            memory.content_hash = hash;
        }
        if let Some(category) = patch.category {
            memory.category = category;
        }
        if let Some(importance) = patch.importance {
            memory.importance = importance;
        }
        if let Some(metadata) = patch.metadata {
            memory.metadata = metadata;
        }
        if let Some(expires_at) = patch.expires_at {
            memory.expires_at = expires_at.map(engram_core::time::truncate_to_micros);
        }
        memory.updated_at = now;
        let metadata = serde_json::Value::Object(memory.metadata.clone()).to_string();
        let importance = i16::from(memory.importance.get());
        tx.execute(
            "UPDATE memories SET text = $1, content_hash = $2, category = $3, importance = $4, \
             metadata = $5, expires_at = $6, updated_at = $7 WHERE doc = $8",
            &[
                &memory.text,
                &memory.content_hash,
                &memory.category,
                &importance,
                &RawJson(&metadata),
                &memory.expires_at.map(micros),
                &micros(now),
                &doc,
            ],
        )
        .await
        .map_err(map)?;
        if memory.text != old_text {
            self.reindex(&tx, user_key, doc, &memory)
                .await
                .map_err(map)?;
            drop_orphan_vectors(&tx, &old_hash).await.map_err(map)?;
        }
        record(
            &tx,
            &memory,
            HistoryKind::Update,
            Some(&old_text),
            Some(&memory.text),
            actor,
            now,
        )
        .await
        .map_err(map)?;
        tx.commit().await.map_err(map)?;
        Ok(memory)
    }

    /// Indexes a stored memory again after its text changed.
    async fn reindex(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        user_key: i32,
        doc: i64,
        memory: &Memory,
    ) -> Result<(), tokio_postgres::Error> {
        let old_terms = lexical::unindex(&**tx, user_key, doc).await?;
        let turn = Turn {
            user_id: &memory.scope.user_id,
            session_id: memory.scope.session_id.as_deref(),
            is_episode: memory.kind == Kind::Episode,
            created_at: micros(memory.created_at),
            doc,
            text: &memory.text,
        };
        let context = lexical::context_of_stored(&**tx, &turn).await?;
        let body = lexical::body(&memory.text, context.as_deref());
        lexical::write_index(
            &**tx,
            &[Indexed {
                doc,
                user_key,
                body: &body,
            }],
        )
        .await?;
        let terms = body.len() as i32;
        tx.execute(
            "UPDATE memories SET body_terms = $1 WHERE doc = $2",
            &[&terms, &doc],
        )
        .await?;
        let delta = HashMap::from([(user_key, (0, i64::from(terms) - old_terms))]);
        lexical::add_to_stats(&**tx, &delta).await
    }

    /// See [`engram_core::MemoryStore::invalidate`].
    pub(crate) async fn invalidate(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        let now = self.now();
        let map = |e: tokio_postgres::Error| self.err(e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        let (_, doc, mut memory) = self.lock_memory(&tx, id).await?;
        if memory.valid_to.is_some() {
            return Err(StoreError::AlreadyClosed(id));
        }
        memory.valid_to = Some(now);
        memory.updated_at = now;
        tx.execute(
            "UPDATE memories SET valid_to = $1, updated_at = $1 WHERE doc = $2",
            &[&micros(now), &doc],
        )
        .await
        .map_err(map)?;
        record(
            &tx,
            &memory,
            HistoryKind::Invalidate,
            Some(&memory.text),
            None,
            actor,
            now,
        )
        .await
        .map_err(map)?;
        tx.commit().await.map_err(map)?;
        Ok(memory)
    }

    /// See [`engram_core::MemoryStore::delete`].
    pub(crate) async fn delete(&self, id: MemoryId, actor: &str) -> Result<Memory, StoreError> {
        let now = self.now();
        let map = |e: tokio_postgres::Error| self.err(e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        let (user_key, doc, memory) = self.lock_memory(&tx, id).await?;
        let terms = lexical::unindex(&*tx, user_key, doc).await.map_err(map)?;
        tx.execute("DELETE FROM memories WHERE doc = $1", &[&doc])
            .await
            .map_err(map)?;
        drop_orphan_vectors(&tx, &memory.content_hash)
            .await
            .map_err(map)?;
        lexical::add_to_stats(&*tx, &HashMap::from([(user_key, (-1, -terms))]))
            .await
            .map_err(map)?;
        record(
            &tx,
            &memory,
            HistoryKind::Delete,
            Some(&memory.text),
            None,
            actor,
            now,
        )
        .await
        .map_err(map)?;
        tx.commit().await.map_err(map)?;
        Ok(memory)
    }

    /// See [`engram_core::MemoryStore::history`].
    pub(crate) async fn history(&self, id: MemoryId) -> Result<Vec<HistoryEvent>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT event, old_text, new_text, actor, at FROM history \
                 WHERE memory_id = $1 ORDER BY seq",
            )
            .await
            .map_err(|e| self.err(e))?;
        let rows = client
            .query(&statement, &[id.as_uuid()])
            .await
            .map_err(|e| self.err(e))?;
        if rows.is_empty() {
            return Err(StoreError::NotFound(id));
        }
        rows.iter()
            .map(|row| {
                let event: &str = row.get(0);
                let at: i64 = row.get(4);
                Ok(HistoryEvent {
                    memory_id: id,
                    event: event.parse().map_err(StoreError::Backend)?,
                    old_text: row.get(1),
                    new_text: row.get(2),
                    actor: row.get(3),
                    at: Timestamp::from_microsecond(at)
                        .map_err(|e| StoreError::Backend(e.to_string()))?,
                })
            })
            .collect()
    }

    /// See [`engram_core::MemoryStore::list`].
    pub(crate) async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let mut params = Params::default();
        let conditions = filter_sql(filter, self.now(), &mut params)?;
        let limit = params.push(clamp_i64(limit));
        let offset = params.push(clamp_i64(offset));
        let sql = format!(
            "SELECT {MEMORY_COLUMNS} FROM memories m WHERE {conditions} \
             ORDER BY m.created_at DESC, m.doc DESC LIMIT {limit} OFFSET {offset}"
        );
        let client = self.client().await?;
        let statement = client.prepare_cached(&sql).await.map_err(|e| self.err(e))?;
        client
            .query(&statement, &params.as_refs())
            .await
            .map_err(|e| self.err(e))?
            .iter()
            .map(|row| memory_from_row(row).map(|(_, m)| m))
            .collect()
    }

    /// See [`engram_core::MemoryStore::count`].
    pub(crate) async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        let mut params = Params::default();
        let conditions = filter_sql(filter, self.now(), &mut params)?;
        let sql = format!("SELECT count(*) FROM memories m WHERE {conditions}");
        let client = self.client().await?;
        let statement = client.prepare_cached(&sql).await.map_err(|e| self.err(e))?;
        let row = client
            .query_one(&statement, &params.as_refs())
            .await
            .map_err(|e| self.err(e))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// See [`engram_core::MemoryStore::users`].
    pub(crate) async fn users(&self) -> Result<Vec<UserCount>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT user_id, count(*) FROM memories GROUP BY user_id ORDER BY user_id COLLATE \"C\"",
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(client
            .query(&statement, &[])
            .await
            .map_err(|e| self.err(e))?
            .iter()
            .map(|row| UserCount {
                user_id: row.get(0),
                memories: row.get::<_, i64>(1).max(0) as u64,
            })
            .collect())
    }

    /// See [`engram_core::MemoryStore::session_counts`].
    pub(crate) async fn session_counts(
        &self,
        user_id: &str,
    ) -> Result<Vec<SessionCount>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT session_id, count(*), min(created_at), max(created_at) FROM memories \
                 WHERE user_id = $1 AND session_id IS NOT NULL \
                 GROUP BY session_id ORDER BY session_id COLLATE \"C\"",
            )
            .await
            .map_err(|e| self.err(e))?;
        let time = |t: i64| {
            Timestamp::from_microsecond(t)
                .map_err(|e| StoreError::Backend(format!("bad time {t}: {e}")))
        };
        client
            .query(&statement, &[&user_id])
            .await
            .map_err(|e| self.err(e))?
            .iter()
            .map(|row| {
                Ok(SessionCount {
                    session_id: row.get(0),
                    memories: row.get::<_, i64>(1).max(0) as u64,
                    first_at: time(row.get(2))?,
                    last_at: time(row.get(3))?,
                })
            })
            .collect()
    }

    /// See [`engram_core::MemoryStore::count_by_day`].
    pub(crate) async fn count_by_day(
        &self,
        filter: &Filter,
        time_zone: &jiff::tz::TimeZone,
    ) -> Result<Vec<DayCount>, StoreError> {
        let mut params = Params::default();
        let conditions = filter_sql(filter, self.now(), &mut params)?;
        // Two small columns per memory; days are cut in Rust (see DayCounter), as on SQLite.
        let sql = format!("SELECT m.created_at, m.kind FROM memories m WHERE {conditions}");
        let client = self.client().await?;
        let statement = client.prepare_cached(&sql).await.map_err(|e| self.err(e))?;
        let mut counter = DayCounter::new(time_zone.clone());
        for row in client
            .query(&statement, &params.as_refs())
            .await
            .map_err(|e| self.err(e))?
        {
            let created: i64 = row.get(0);
            let kind: String = row.get(1);
            let created = Timestamp::from_microsecond(created)
                .map_err(|e| StoreError::Backend(format!("bad time {created}: {e}")))?;
            let kind = kind
                .parse::<Kind>()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            counter.add(created, kind);
        }
        Ok(counter.finish())
    }

    /// See [`engram_core::MemoryStore::search_lexical`].
    pub(crate) async fn search_lexical(
        &self,
        filter: &Filter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError> {
        let client = self.client().await?;
        lexical::search(&client, &self.location, filter, query, limit, self.now()).await
    }

    /// See [`engram_core::MemoryStore::forget_user`].
    pub(crate) async fn forget_user(&self, user_id: &str) -> Result<u64, StoreError> {
        let map = |e: tokio_postgres::Error| self.err(e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        let keys = lexical::lock_users(&*tx, &[user_id]).await.map_err(map)?;
        if let Some(key) = keys.get(user_id) {
            tx.execute("DELETE FROM postings WHERE user_key = $1", &[key])
                .await
                .map_err(map)?;
        }
        tx.execute(
            "DELETE FROM lexical_bodies WHERE doc IN \
             (SELECT doc FROM memories WHERE user_id = $1)",
            &[&user_id],
        )
        .await
        .map_err(map)?;
        // Content hashes include the user, so these vectors are this user's alone.
        tx.execute(
            "DELETE FROM embeddings WHERE content_hash IN \
             (SELECT content_hash FROM memories WHERE user_id = $1)",
            &[&user_id],
        )
        .await
        .map_err(map)?;
        let removed = tx
            .execute("DELETE FROM memories WHERE user_id = $1", &[&user_id])
            .await
            .map_err(map)?;
        tx.execute("DELETE FROM history WHERE user_id = $1", &[&user_id])
            .await
            .map_err(map)?;
        tx.execute("DELETE FROM lexical_users WHERE user_id = $1", &[&user_id])
            .await
            .map_err(map)?;
        tx.commit().await.map_err(map)?;
        Ok(removed)
    }

    /// See [`engram_core::MemoryStore::export_page`].
    pub(crate) async fn export_page(
        &self,
        user_id: &str,
        after: Option<ExportCursor>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let client = self.client().await?;
        let (since, after_id) = match after {
            Some(cursor) => (micros(cursor.created_at), *cursor.id.as_uuid()),
            None => (i64::MIN, Uuid::nil()),
        };
        let sql = format!(
            "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.user_id = $1 \
             AND (m.created_at, m.id) > ($2, $3) ORDER BY m.created_at, m.id LIMIT $4"
        );
        let statement = client.prepare_cached(&sql).await.map_err(|e| self.err(e))?;
        client
            .query(
                &statement,
                &[&user_id, &since, &after_id, &clamp_i64(limit)],
            )
            .await
            .map_err(|e| self.err(e))?
            .iter()
            .map(|row| memory_from_row(row).map(|(_, m)| m))
            .collect()
    }

    /// See [`engram_core::MemoryStore::owner`].
    pub(crate) async fn owner(&self, id: MemoryId) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT user_id FROM history WHERE memory_id = $1 LIMIT 1")
            .await
            .map_err(|e| self.err(e))?;
        Ok(client
            .query_opt(&statement, &[id.as_uuid()])
            .await
            .map_err(|e| self.err(e))?
            .map(|r| r.get(0)))
    }

    /// See [`engram_core::MemoryStore::previous_turns`]: the rule of `contexts_for_new` and
    /// `context_of_stored` in lexical.rs (and of the SQLite engine), one query for all.
    pub(crate) async fn previous_turns(
        &self,
        user_id: &str,
        ids: &[MemoryId],
    ) -> Result<Vec<Option<MemoryId>>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let uuids: Vec<uuid::Uuid> = ids.iter().map(|id| *id.as_uuid()).collect();
        let client = self.client().await?;
        // Prepared once per connection: every hybrid search asks this.
        let statement = client
            .prepare_cached(
                "SELECT q.i, p.id FROM unnest($1::uuid[]) WITH ORDINALITY AS q(id, i) \
                 JOIN memories m ON m.id = q.id AND m.user_id = $2 \
                     AND m.kind = 'episode' AND m.session_id IS NOT NULL \
                 CROSS JOIN LATERAL (SELECT p.id FROM memories p \
                     WHERE p.user_id = m.user_id AND p.session_id = m.session_id \
                     AND p.created_at <= m.created_at \
                     AND p.kind = 'episode' AND p.doc <> m.doc \
                     AND (p.created_at < m.created_at OR p.doc < m.doc) \
                     ORDER BY p.created_at DESC, p.doc DESC LIMIT 1) p",
            )
            .await
            .map_err(|e| self.err(e))?;
        let rows = client
            .query(&statement, &[&uuids, &user_id])
            .await
            .map_err(|e| self.err(e))?;
        let mut out = vec![None; ids.len()];
        for row in rows {
            let ordinal: i64 = row.get(0);
            let previous: uuid::Uuid = row.get(1);
            if let Some(slot) = usize::try_from(ordinal - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
            {
                *slot = Some(MemoryId::from(previous));
            }
        }
        Ok(out)
    }

    /// See [`engram_core::MemoryStore::stats`].
    pub(crate) async fn stats(&self) -> Result<StoreStats, StoreError> {
        let now = micros(self.now());
        let client = self.client().await?;
        let map = |e: tokio_postgres::Error| self.err(e);
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM memories), \
                 (SELECT count(*) FROM memories WHERE valid_to <= $1 OR expires_at <= $1), \
                 (SELECT count(DISTINCT user_id) FROM memories), \
                 (SELECT count(*) FROM history), \
                 (SELECT version FROM engram_schema LIMIT 1), \
                 (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                  WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')), \
                 current_setting('server_version'), \
                 coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[&now],
            )
            .await
            .map_err(map)?;
        let count = |i: usize| row.get::<_, i64>(i).max(0) as u64;
        let mut stats = StoreStats {
            engine: crate::ENGINE.to_string(),
            location: self.location.clone(),
            schema_version: u32::try_from(row.get::<_, i32>(4)).unwrap_or(0),
            dense_search: self.dense.describe(),
            size_bytes: Some(count(5)),
            memories: count(0),
            closed: count(1),
            users: count(2),
            history_rows: count(3),
            ..StoreStats::default()
        };
        stats.details.insert(
            "server".into(),
            format!("PostgreSQL {}", row.get::<_, String>(6)),
        );
        let tls = if row.get::<_, bool>(7) { "yes" } else { "no" };
        stats.details.insert("tls".into(), tls.to_string());
        stats.details.insert(
            "pool".into(),
            format!("{} connections per process", self.options.pool_size),
        );
        for row in client
            .query("SELECT kind, count(*) FROM memories GROUP BY kind", &[])
            .await
            .map_err(map)?
        {
            let kind: &str = row.get(0);
            if let Ok(kind) = kind.parse::<Kind>() {
                stats
                    .by_kind
                    .insert(kind, row.get::<_, i64>(1).max(0) as u64);
            }
        }
        Ok(stats)
    }
}

/// A memory as written to its table.
pub(crate) struct StoredRow<'a> {
    pub doc: i64,
    pub memory: &'a Memory,
    /// Its metadata, serialised.
    pub metadata: &'a str,
    pub body_terms: i32,
}

/// Writes memory rows (binary COPY: one round trip however many).
pub(crate) async fn copy_memories(
    tx: &impl Db,
    rows: &[StoredRow<'_>],
) -> Result<(), tokio_postgres::Error> {
    let sink = tx
        .copy_rows(
            "COPY memories (doc, id, user_id, agent_id, session_id, kind, text, category, \
             importance, metadata, created_at, updated_at, valid_from, valid_to, expires_at, \
             source, content_hash, body_terms) FROM STDIN BINARY",
        )
        .await?;
    let types = [
        Type::INT8,
        Type::UUID,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT2,
        Type::JSON,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::INT4,
    ];
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    for row in rows {
        let m = row.memory;
        let importance = i16::from(m.importance.get());
        writer
            .as_mut()
            .write(&[
                &row.doc,
                m.id.as_uuid(),
                &m.scope.user_id,
                &m.scope.agent_id,
                &m.scope.session_id,
                &m.kind.as_str(),
                &m.text,
                &m.category,
                &importance,
                &RawJson(row.metadata),
                &micros(m.created_at),
                &micros(m.updated_at),
                &micros(m.valid_from),
                &m.valid_to.map(micros),
                &m.expires_at.map(micros),
                &m.source,
                &m.content_hash,
                &row.body_terms,
            ])
            .await?;
    }
    writer.finish().await?;
    Ok(())
}

/// Drops the vectors of a content hash no memory uses any more.
async fn drop_orphan_vectors(
    tx: &deadpool_postgres::Transaction<'_>,
    content_hash: &str,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "DELETE FROM embeddings WHERE content_hash = $1 \
         AND NOT EXISTS (SELECT 1 FROM memories WHERE content_hash = $1)",
        &[&content_hash],
    )
    .await?;
    Ok(())
}

async fn record(
    tx: &deadpool_postgres::Transaction<'_>,
    memory: &Memory,
    event: HistoryKind,
    old_text: Option<&str>,
    new_text: Option<&str>,
    actor: &str,
    at: Timestamp,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO history (memory_id, user_id, event, old_text, new_text, actor, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            memory.id.as_uuid(),
            &memory.scope.user_id,
            &event.as_str(),
            &old_text,
            &new_text,
            &actor,
            &micros(at),
        ],
    )
    .await?;
    Ok(())
}
