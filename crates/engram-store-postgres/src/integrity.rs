//! [`PgStore::check_integrity`]: the PostgreSQL engine's counterpart of the SQLite engine's
//! integrity check, run by the crash tests after every kill.
//!
//! PostgreSQL's own crash safety (its write-ahead log) is not engram's to prove; what can go
//! wrong is engram's: a write cut short between two statements that should have been one
//! transaction, or derived data (the lexical index, each user's BM25 statistics, vectors)
//! left out of step with the memories. So the check recomputes what engram derives and compares
//! it with what is stored. It also asks `amcheck` to verify every B-tree index of engram's
//! schema against its table, when the server has that extension.

use engram_core::StoreError;

use crate::lexical::MAX_POSTING_TERM_BYTES;
use crate::store::PgStore;
use crate::vectors::hnsw_index_name;

/// What [`PgStore::check_integrity`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Integrity {
    /// What is damaged or out of step, one line each; none means sound.
    pub problems: Vec<String>,
    /// Checks that could not run here, and why (amcheck missing on the server, or not
    /// allowed to be installed). Not problems: the store may well be sound.
    pub skipped: Vec<String>,
}

impl Integrity {
    /// True when no problem was found.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks that count what is out of step: (what, query returning one bigint).
const CHECKS: &[(&str, &str)] = &[
    (
        "memories without an indexed body",
        "SELECT count(*) FROM memories m \
         WHERE NOT EXISTS (SELECT 1 FROM lexical_bodies b WHERE b.doc = m.doc)",
    ),
    (
        "indexed bodies without a memory",
        "SELECT count(*) FROM lexical_bodies b \
         WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.doc = b.doc)",
    ),
    (
        "memories whose indexed body holds another number of words",
        "SELECT count(*) FROM memories m JOIN lexical_bodies b ON b.doc = m.doc \
         WHERE cardinality(string_to_array(b.terms, ' ')) <> m.body_terms",
    ),
    (
        "users whose word statistics disagree with their memories",
        "SELECT count(*) FROM \
         (SELECT user_id, count(*) AS docs, sum(body_terms) AS terms \
          FROM memories GROUP BY user_id) m \
         FULL JOIN lexical_users s ON s.user_id = m.user_id \
         WHERE coalesce(m.docs, 0) <> coalesce(s.docs, 0) \
            OR coalesce(m.terms, 0) <> coalesce(s.terms, 0)",
    ),
    (
        "vectors of a text no memory has",
        "SELECT count(*) FROM embeddings e \
         WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.content_hash = e.content_hash)",
    ),
    (
        "memories without history",
        "SELECT count(*) FROM memories m \
         WHERE NOT EXISTS (SELECT 1 FROM history h WHERE h.memory_id = m.id)",
    ),
    (
        "memories gone without a delete in their history",
        "SELECT count(DISTINCT h.memory_id) FROM history h \
         WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = h.memory_id) \
           AND NOT EXISTS (SELECT 1 FROM history d \
                           WHERE d.memory_id = h.memory_id AND d.event = 'delete')",
    ),
    (
        "history rows naming another user than their memory's",
        "SELECT count(*) FROM history h JOIN memories m ON m.id = h.memory_id \
         WHERE h.user_id <> m.user_id",
    ),
];

/// Memories whose postings are not exactly those of their indexed body: one row per distinct
/// term with its frequency, the body's length, under the key of the memory's user. A term
/// longer than [`MAX_POSTING_TERM_BYTES`] is posted as `~` and a hash (lexical.rs), which SQL
/// cannot recompute: those are compared by number and frequency, not by value. `$1` is that
/// length.
const POSTINGS_CHECK: &str = "\
    WITH expected AS ( \
        SELECT m.doc, u.user_key, m.body_terms AS len, \
               (CASE WHEN octet_length(t) <= $1 THEN t ELSE '~' END) COLLATE \"C\" AS term, \
               count(*) AS tf, count(DISTINCT t) AS distinct_terms \
        FROM memories m \
        JOIN lexical_users u ON u.user_id = m.user_id \
        JOIN lexical_bodies b ON b.doc = m.doc \
        CROSS JOIN LATERAL unnest(string_to_array(b.terms, ' ')) AS t \
        GROUP BY 1, 2, 3, 4), \
    stored AS ( \
        SELECT doc, user_key, \
               (CASE WHEN term LIKE '~%' THEN '~' ELSE term END) COLLATE \"C\" AS term, \
               sum(tf) AS tf, count(*) AS terms, min(len) AS min_len, max(len) AS max_len \
        FROM postings GROUP BY 1, 2, 3) \
    SELECT count(DISTINCT coalesce(e.doc, s.doc)) \
    FROM expected e FULL JOIN stored s \
      ON s.doc = e.doc AND s.user_key = e.user_key AND s.term = e.term \
    WHERE e.doc IS NULL OR s.doc IS NULL OR s.tf <> e.tf OR s.terms <> e.distinct_terms \
       OR s.min_len <> e.len OR s.max_len <> e.len";

impl PgStore {
    /// Checks the store for damage and for derived data out of step with the memories, as
    /// `SqliteStore::check_integrity` does for SQLite:
    ///
    /// - every B-tree index of engram's schema against its table (`amcheck`'s `bt_index_check`
    ///   with `heapallindexed`), when the server has amcheck and this role may install it;
    ///   otherwise that check is listed in [`Integrity::skipped`] with the reason, never
    ///   silently left out;
    /// - the lexical index: every memory has its indexed body with as many words as it was
    ///   counted with, its postings are exactly its body's terms and frequencies under its
    ///   user's key, and each user's document and word counts (BM25's statistics) equal what
    ///   their memories hold;
    /// - vectors: each has its model's dimension, belongs to a text some memory has, and (with
    ///   pgvector) each model has its HNSW index;
    /// - history: every memory has some, history names the memory's user, and a memory that
    ///   is gone has a delete in its history.
    ///
    /// Reads the whole schema (postings included): seconds to minutes per million memories.
    pub async fn check_integrity(&self) -> Result<Integrity, StoreError> {
        let map = |e: tokio_postgres::Error| self.err(e);
        let client = self.client().await?;
        let mut found = Integrity::default();
        self.check_btrees(&client, &mut found).await?;
        for (what, sql) in CHECKS {
            let count: i64 = client.query_one(*sql, &[]).await.map_err(map)?.get(0);
            if count > 0 {
                found.problems.push(format!("{count} {what}"));
            }
        }
        let longest = MAX_POSTING_TERM_BYTES as i32;
        let count: i64 = client
            .query_one(POSTINGS_CHECK, &[&longest])
            .await
            .map_err(map)?
            .get(0);
        if count > 0 {
            found.problems.push(format!(
                "{count} memories whose postings are not their indexed body's terms"
            ));
        }
        let lengths = if self.dense.is_pgvector() {
            "vector_dims(e.vector)"
        } else {
            "length(e.vector) / 4.0"
        };
        let count: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM embeddings e JOIN embedding_models m \
                     ON m.model = e.model WHERE {lengths} <> m.dimension"
                ),
                &[],
            )
            .await
            .map_err(map)?
            .get(0);
        if count > 0 {
            found
                .problems
                .push(format!("{count} vectors whose length is not their model's"));
        }
        if self.dense.is_pgvector() {
            let models = client
                .query("SELECT model FROM embedding_models ORDER BY model", &[])
                .await
                .map_err(map)?;
            for row in models {
                let model: String = row.get(0);
                let index = client
                    .query_one(
                        "SELECT to_regclass(format('%I.%I', current_schema(), $1::text)) \
                         IS NOT NULL",
                        &[&hnsw_index_name(&model)],
                    )
                    .await
                    .map_err(map)?;
                if !index.get::<_, bool>(0) {
                    found
                        .problems
                        .push(format!("model {model} has no HNSW index over its vectors"));
                }
            }
        }
        Ok(found)
    }

    /// amcheck's `bt_index_check` on every valid B-tree index of the current schema.
    async fn check_btrees(
        &self,
        client: &crate::store::Client,
        found: &mut Integrity,
    ) -> Result<(), StoreError> {
        let map = |e: tokio_postgres::Error| self.err(e);
        let available = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck')",
                &[],
            )
            .await
            .map_err(map)?
            .get::<_, bool>(0);
        if !available {
            found.skipped.push(
                "B-tree indexes not verified: this server has no amcheck extension".to_string(),
            );
            return Ok(());
        }
        if let Err(e) = client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            .await
        {
            found.skipped.push(format!(
                "B-tree indexes not verified: amcheck could not be installed: {}",
                self.err(e)
            ));
            return Ok(());
        }
        let schema: String = client
            .query_one(
                "SELECT n.nspname::text FROM pg_extension x \
                 JOIN pg_namespace n ON n.oid = x.extnamespace WHERE x.extname = 'amcheck'",
                &[],
            )
            .await
            .map_err(map)?
            .get(0);
        let indexes = client
            .query(
                "SELECT c.oid::regclass::text FROM pg_index i \
                 JOIN pg_class c ON c.oid = i.indexrelid \
                 JOIN pg_am a ON a.oid = c.relam \
                 WHERE a.amname = 'btree' AND i.indisvalid AND i.indisready \
                   AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
                 ORDER BY 1",
                &[],
            )
            .await
            .map_err(map)?;
        let check = format!(
            "SELECT {}.bt_index_check(index => $1::text::regclass, heapallindexed => true)",
            quote_ident(&schema)
        );
        for row in indexes {
            let index: String = row.get(0);
            if let Err(e) = client.execute(&check, &[&index]).await {
                let detail = e
                    .as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_string());
                found.problems.push(format!("index {index}: {detail}"));
            }
        }
        Ok(())
    }
}

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
