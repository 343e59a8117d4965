//! Dense vectors: storage, and search through pgvector's HNSW index or exactly.
//!
//! Vectors are stored once per (model, content hash), as in the SQLite engine. Where the
//! `vector` extension (pgvector) is installed, or can be installed, the column has pgvector's
//! type and each model gets a partial HNSW index over its vectors (inner product; a model's
//! vectors share one dimension, which the index needs). Without pgvector the column holds the
//! SQLite engine's bytes (little-endian `f32`) and search is exact, scored in Rust. A database
//! created without pgvector is converted when pgvector becomes available (at the next open).
//!
//! A search is exact — every vector in the filtered scope scored — while the user has at most
//! [`PgOptions::exact_max_scope`] memories; beyond that (with pgvector) the model's HNSW index
//! proposes candidates which the filter then narrows, and when too few pass, the search falls
//! back to exact. The index holds every user's vectors, so it is asked for more candidates the
//! smaller the user's share of them (`index_candidates`); a share too small for pgvector's
//! longest candidate list goes straight to exact. Either way the filter decides before the top `k`.
//!
//! [`PgOptions::exact_max_scope`]: crate::PgOptions::exact_max_scope

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::Ordering::Relaxed;

use engram_core::{Filter, PendingText, StoreError, StoredVector, VectorHit, VectorModelStats};
use futures::TryStreamExt;
use pgvector::Vector;
use tokio_postgres::types::ToSql;

use crate::error::from_pg;
use crate::rows::{MEMORY_COLUMNS, Params, filter_sql, memory_from_row, micros};
use crate::store::{DenseSearch, DenseState, PgStore};

/// How dense search is done when nothing needs settling under the migration lock: `None` when
/// pgvector could be put to use now.
pub(crate) async fn current_dense_search(
    client: &impl tokio_postgres::GenericClient,
    location: &str,
) -> Result<Option<DenseSearch>, StoreError> {
    let facts = dense_facts(client, location).await?;
    Ok(match facts {
        DenseFacts {
            column_is_vector: true,
            installed: Some(version),
            ..
        } => Some(DenseSearch::Pgvector { version }),
        DenseFacts {
            installed: None,
            available: None,
            ..
        } => Some(no_pgvector()),
        DenseFacts {
            column_is_vector: false,
            hidden_in: Some(_),
            ..
        } => None,
        _ => None,
    })
}

fn no_pgvector() -> DenseSearch {
    DenseSearch::Exact {
        reason: "this PostgreSQL server has no pgvector extension".to_string(),
    }
}

struct DenseFacts {
    column_is_vector: bool,
    installed: Option<String>,
    available: Option<String>,
    /// The schema pgvector is installed in, when this connection's search_path cannot see it.
    hidden_in: Option<String>,
    /// Whether `public` is on the search_path (pgvector goes there, to be shared by stores in
    /// other schemas).
    public_on_path: bool,
}

async fn dense_facts(
    client: &impl tokio_postgres::GenericClient,
    location: &str,
) -> Result<DenseFacts, StoreError> {
    let row = client
        .query_one(
            "SELECT \
             (SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
              WHERE a.attrelid = to_regclass(format('%I.embeddings', current_schema())) \
              AND a.attname = 'vector'), \
             (SELECT extversion FROM pg_extension WHERE extname = 'vector'), \
             (SELECT default_version FROM pg_available_extensions WHERE name = 'vector'), \
             to_regtype('vector') IS NOT NULL, \
             (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n \
              ON n.oid = e.extnamespace WHERE e.extname = 'vector'), \
             'public' = ANY(current_schemas(false))",
            &[],
        )
        .await
        .map_err(|e| from_pg(&e, location))?;
    let visible: bool = row.get(3);
    let schema: Option<String> = row.get(4);
    Ok(DenseFacts {
        column_is_vector: row.get::<_, Option<String>>(0).as_deref() == Some("vector"),
        installed: row.get(1),
        available: row.get(2),
        hidden_in: schema.filter(|_| !visible),
        public_on_path: row.get(5),
    })
}

/// Puts pgvector to use if it can be (installing the extension, converting stored vectors and
/// indexing each model), inside the migration's transaction; says how dense search is done.
pub(crate) async fn settle_dense_search(
    tx: &tokio_postgres::Transaction<'_>,
    location: &str,
) -> Result<DenseSearch, StoreError> {
    let map = |e: tokio_postgres::Error| from_pg(&e, location);
    let facts = dense_facts(tx, location).await?;
    if let Some(schema) = &facts.hidden_in
        && !facts.column_is_vector
    {
        return Ok(DenseSearch::Exact {
            reason: format!(
                "pgvector is installed in schema {schema}, which is not on this connection's \
                 search_path"
            ),
        });
    }
    if facts.column_is_vector {
        return Ok(DenseSearch::Pgvector {
            version: facts.installed.unwrap_or_default(),
        });
    }
    if facts.installed.is_none() {
        if facts.available.is_none() {
            return Ok(no_pgvector());
        }
        // Installing an extension may need rights this login lacks; then search stays exact.
        tx.batch_execute("SAVEPOINT engram_pgvector")
            .await
            .map_err(map)?;
        // In `public` when it is on the path, so that stores in other schemas share it.
        let create = if facts.public_on_path {
            "CREATE EXTENSION IF NOT EXISTS vector SCHEMA public"
        } else {
            "CREATE EXTENSION IF NOT EXISTS vector"
        };
        if let Err(e) = tx.batch_execute(create).await {
            tx.batch_execute("ROLLBACK TO SAVEPOINT engram_pgvector")
                .await
                .map_err(map)?;
            let why = e
                .as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string());
            return Ok(DenseSearch::Exact {
                reason: format!("pgvector is available but could not be installed: {why}"),
            });
        }
        tx.batch_execute("RELEASE SAVEPOINT engram_pgvector")
            .await
            .map_err(map)?;
    }
    convert_to_pgvector(tx).await.map_err(map)?;
    let version: Option<String> = tx
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
            &[],
        )
        .await
        .map_err(map)?
        .get(0);
    Ok(DenseSearch::Pgvector {
        version: version.unwrap_or_default(),
    })
}

/// Rewrites stored vectors from bytes to pgvector's type and indexes every model.
async fn convert_to_pgvector(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute("ALTER TABLE embeddings ADD COLUMN vector_pg vector")
        .await?;
    let mut after = 0i64;
    loop {
        let rows = tx
            .query(
                "SELECT id, vector FROM embeddings WHERE id > $1 ORDER BY id LIMIT 5000",
                &[&after],
            )
            .await?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let vectors: Vec<Vector> = rows
            .iter()
            .map(|r| Vector::from(decode(r.get::<_, &[u8]>(1))))
            .collect();
        tx.execute(
            "UPDATE embeddings e SET vector_pg = v.vector \
             FROM unnest($1::bigint[], $2::vector[]) AS v(id, vector) WHERE e.id = v.id",
            &[&ids, &vectors],
        )
        .await?;
    }
    tx.batch_execute(
        "ALTER TABLE embeddings DROP COLUMN vector; \
         ALTER TABLE embeddings RENAME COLUMN vector_pg TO vector; \
         ALTER TABLE embeddings ALTER COLUMN vector SET NOT NULL;",
    )
    .await?;
    let models = tx
        .query("SELECT model, dimension FROM embedding_models", &[])
        .await?;
    for row in models {
        let dimension: i32 = row.get(1);
        tx.batch_execute(&hnsw_index_sql(row.get(0), dimension))
            .await?;
    }
    Ok(())
}

/// `text` as a SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// pgvector's largest `hnsw.ef_search`: an index scan returns at most this many rows.
const MAX_EF_SEARCH: usize = 1_000;

/// How many nearest vectors to ask the HNSW index for, so that `limit` of them are likely to
/// fall in the searched scope; `None` when even the most the index returns would not be enough.
///
/// The index holds every user's vectors and the scope is applied after it (pgvector 0.6 has no
/// filtered index scan), so a scope holding a share `scope / everyone` of the vectors keeps
/// about that share of the candidates. Twice `limit` over that share leaves room for the rest
/// of the filter (kinds, closed memories). When that is more than pgvector returns, an index
/// scan would come back short and the search would be done twice; exact search goes first.
pub(crate) fn index_candidates(
    limit: usize,
    scope: u64,
    everyone: u64,
    configured: usize,
) -> Option<usize> {
    if scope == 0 {
        return None;
    }
    let everyone = everyone.max(scope);
    let wanted = (limit as u128 * 2 * u128::from(everyone)).div_ceil(u128::from(scope));
    let wanted = usize::try_from(wanted).unwrap_or(usize::MAX);
    (wanted <= MAX_EF_SEARCH).then(|| wanted.max(configured).min(MAX_EF_SEARCH))
}

/// The name of a model's HNSW index.
pub(crate) fn hnsw_index_name(model: &str) -> String {
    let hash = blake3::hash(model.as_bytes());
    format!("embeddings_hnsw_{}", &hash.to_hex()[..16])
}

/// The statement that creates a model's HNSW index over its vectors (partial, so each index
/// holds one model's vectors, all of one dimension).
pub(crate) fn hnsw_index_sql(model: &str, dimension: i32) -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS {} ON embeddings USING hnsw \
         ((vector::vector({dimension})) vector_ip_ops) WHERE model = {}",
        hnsw_index_name(model),
        literal(model)
    )
}

/// Decodes stored bytes (little-endian `f32`); a trailing partial float is ignored.
pub(crate) fn decode(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Checks vectors before they are stored (the SQLite engine's rules and words).
fn validate(model: &str, dimension: usize, vectors: &[StoredVector]) -> Result<(), StoreError> {
    if model.trim().is_empty() {
        return Err(StoreError::BadQuery(
            "an embedding model id is empty".to_string(),
        ));
    }
    if dimension == 0 {
        return Err(StoreError::BadQuery(format!(
            "model {model} has dimension 0"
        )));
    }
    for v in vectors {
        if v.vector.len() != dimension {
            return Err(StoreError::BadQuery(format!(
                "a vector from {model} has {} dimensions, expected {dimension}",
                v.vector.len()
            )));
        }
        if v.vector.iter().any(|x| !x.is_finite()) {
            return Err(StoreError::BadQuery(format!(
                "a vector from {model} contains NaN or infinity"
            )));
        }
    }
    Ok(())
}

fn check_query(query: &[f32]) -> Result<(), StoreError> {
    if query.is_empty() || query.iter().any(|x| !x.is_finite()) {
        return Err(StoreError::BadQuery(
            "the query vector is empty or not finite".to_string(),
        ));
    }
    Ok(())
}

fn dimension_mismatch(model: &str, query: usize, stored: usize) -> StoreError {
    StoreError::BadQuery(format!(
        "the query vector has {query} dimensions but {model}'s vectors have {stored}"
    ))
}

/// A candidate in the top-k heap, ordered so that the heap's top is the weakest kept.
#[derive(Debug, Clone, Copy)]
struct Scored {
    similarity: f32,
    doc: i64,
    truncated: bool,
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        // A higher similarity is "less", so the max-heap's top is the weakest; among equals the
        // newer memory (higher doc) is stronger, as in the SQLite engine.
        other
            .similarity
            .total_cmp(&self.similarity)
            .then(other.doc.cmp(&self.doc))
    }
}

impl PgStore {
    /// See [`engram_core::MemoryStore::put_vectors`].
    pub(crate) async fn put_vectors(
        &self,
        model: &str,
        dimension: usize,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError> {
        validate(model, dimension, &vectors)?;
        crate::rows::check_storable("a model id", model)?;
        let map = |e: tokio_postgres::Error| self.err(e);
        let now = micros(self.now());
        let dimension_i32 = i32::try_from(dimension)
            .map_err(|_| StoreError::BadQuery(format!("model {model} has too many dimensions")))?;
        // One vector per content hash: the last one given wins, as when stored one by one.
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(vectors.len());
        for (i, v) in vectors.iter().enumerate() {
            last.insert(v.content_hash.as_str(), i);
        }
        let mut kept: Vec<usize> = last.into_values().collect();
        kept.sort_unstable();
        let hashes: Vec<&str> = kept
            .iter()
            .map(|&i| vectors[i].content_hash.as_str())
            .collect();
        let truncated: Vec<bool> = kept.iter().map(|&i| vectors[i].truncated).collect();

        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map)?;
        let inserted = tx
            .execute(
                "INSERT INTO embedding_models (model, dimension, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (model) DO NOTHING",
                &[&model, &dimension_i32, &now],
            )
            .await
            .map_err(map)?;
        let recorded: i32 = tx
            .query_one(
                "SELECT dimension FROM embedding_models WHERE model = $1",
                &[&model],
            )
            .await
            .map_err(map)?
            .get(0);
        if recorded != dimension_i32 {
            return Err(StoreError::BadQuery(format!(
                "model {model} was recorded with {recorded} dimensions, not {dimension}; \
                 its vectors cannot be mixed"
            )));
        }
        if inserted > 0 && self.dense.is_pgvector() {
            tx.batch_execute(&hnsw_index_sql(model, dimension_i32))
                .await
                .map_err(map)?;
        }
        if !hashes.is_empty() {
            let upsert = |kind: &str| {
                format!(
                    "INSERT INTO embeddings (model, content_hash, vector, truncated) \
                     SELECT $1, h, v, t FROM unnest($2::text[], $3::{kind}[], $4::boolean[]) \
                     AS x(h, v, t) \
                     ON CONFLICT (model, content_hash) DO UPDATE \
                     SET vector = excluded.vector, truncated = excluded.truncated"
                )
            };
            if self.dense.is_pgvector() {
                let values: Vec<Vector> = kept
                    .iter()
                    .map(|&i| Vector::from(vectors[i].vector.clone()))
                    .collect();
                tx.execute(&upsert("vector"), &[&model, &hashes, &values, &truncated])
                    .await
                    .map_err(map)?;
            } else {
                let values: Vec<Vec<u8>> =
                    kept.iter().map(|&i| encode(&vectors[i].vector)).collect();
                tx.execute(&upsert("bytea"), &[&model, &hashes, &values, &truncated])
                    .await
                    .map_err(map)?;
            }
        }
        tx.commit().await.map_err(map)
    }

    /// See [`engram_core::MemoryStore::texts_without_vectors`].
    pub(crate) async fn texts_without_vectors(
        &self,
        model: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PendingText>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT m.content_hash, min(m.text COLLATE \"C\") FROM memories m \
                 WHERE m.content_hash > $2 AND NOT EXISTS \
                 (SELECT 1 FROM embeddings e WHERE e.model = $1 \
                  AND e.content_hash = m.content_hash) \
                 GROUP BY m.content_hash ORDER BY m.content_hash LIMIT $3",
            )
            .await
            .map_err(|e| self.err(e))?;
        let rows = client
            .query(
                &statement,
                &[&model, &after.unwrap_or(""), &crate::rows::clamp_i64(limit)],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| PendingText {
                content_hash: r.get(0),
                text: r.get(1),
            })
            .collect())
    }

    /// See [`engram_core::MemoryStore::count_without_vectors`].
    pub(crate) async fn count_without_vectors(&self, model: &str) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(DISTINCT m.content_hash) FROM memories m WHERE NOT EXISTS \
                 (SELECT 1 FROM embeddings e WHERE e.model = $1 \
                  AND e.content_hash = m.content_hash)",
                &[&model],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// See [`engram_core::MemoryStore::has_vectors`].
    pub(crate) async fn has_vectors(&self, model: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let map = |e: tokio_postgres::Error| self.err(e);
        let statement = client
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM embeddings WHERE model = $1)")
            .await
            .map_err(map)?;
        let row = client.query_one(&statement, &[&model]).await.map_err(map)?;
        Ok(row.get(0))
    }

    /// See [`engram_core::MemoryStore::vector_models`].
    pub(crate) async fn vector_models(&self) -> Result<Vec<VectorModelStats>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT em.model, em.dimension, \
                 (SELECT count(*) FROM embeddings e WHERE e.model = em.model) \
                 FROM embedding_models em ORDER BY em.created_at, em.model",
                &[],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| VectorModelStats {
                model: r.get(0),
                dimension: r.get::<_, i32>(1).max(0) as usize,
                vectors: r.get::<_, i64>(2).max(0) as u64,
            })
            .collect())
    }

    /// See [`engram_core::MemoryStore::vector_search`].
    pub(crate) async fn vector_search(
        &self,
        model: &str,
        filter: &Filter,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<VectorHit>, StoreError> {
        check_query(query)?;
        let now = self.now();
        let mut params = Params::default();
        // Checks the filter first (the user is required).
        let conditions = filter_sql(filter, now, &mut params)?;
        let client = self.client().await?;
        let map = |e: tokio_postgres::Error| self.err(e);
        // Prepared once per connection: a statement given as text is parsed, run and closed,
        // three round trips where one will do.
        let statement = client
            .prepare_cached(
                "SELECT dimension, \
                 (SELECT docs FROM lexical_users WHERE user_id = $2), \
                 (SELECT sum(docs)::bigint FROM lexical_users) \
                 FROM embedding_models WHERE model = $1",
            )
            .await
            .map_err(map)?;
        let facts = client
            .query_opt(&statement, &[&model, &filter.user_id])
            .await
            .map_err(map)?;
        let Some(facts) = facts else {
            return Ok(Vec::new());
        };
        let dimension = facts.get::<_, i32>(0).max(0) as usize;
        if dimension != query.len() {
            return Err(dimension_mismatch(model, query.len(), dimension));
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let scope = facts.get::<_, Option<i64>>(1).unwrap_or(0).max(0) as u64;
        let state = &self.dense_state;
        if !self.dense.is_pgvector() {
            DenseState::count(&state.exact);
            return self
                .exact_in_rust(&client, model, query, limit, &conditions, params)
                .await;
        }
        let everyone = facts.get::<_, Option<i64>>(2).unwrap_or(0).max(0) as u64;
        let candidates = index_candidates(
            limit,
            scope,
            everyone,
            state.ef_search.load(Relaxed) as usize,
        );
        if scope > state.exact_max_scope.load(Relaxed)
            && let Some(candidates) = candidates
        {
            DenseState::count(&state.approximate);
            let hits = self
                .approximate(
                    &client,
                    model,
                    dimension,
                    query,
                    (limit, candidates),
                    &conditions,
                    &params,
                )
                .await?;
            if hits.len() >= limit {
                return Ok(hits);
            }
        }
        DenseState::count(&state.exact);
        self.exact_in_sql(&client, model, query, limit, &conditions, params)
            .await
    }

    /// Exact search with pgvector: every vector in the filtered scope is scored by the server.
    async fn exact_in_sql(
        &self,
        client: &crate::store::Client,
        model: &str,
        query: &[f32],
        limit: usize,
        conditions: &str,
        mut params: Params,
    ) -> Result<Vec<VectorHit>, StoreError> {
        let model_param = params.push(model.to_string());
        let query_param = params.push(Vector::from(query.to_vec()));
        let limit_param = params.push(crate::rows::clamp_i64(limit));
        let sql = format!(
            "SELECT {MEMORY_COLUMNS}, e.vector <#> {query_param}::vector, e.truncated \
             FROM memories m JOIN embeddings e \
             ON e.model = {model_param} AND e.content_hash = m.content_hash \
             WHERE {conditions} \
             ORDER BY e.vector <#> {query_param}::vector, m.doc DESC LIMIT {limit_param}"
        );
        self.hits(client, &sql, &params.as_refs()).await
    }

    /// Candidates from the model's HNSW index, narrowed by the filter.
    #[allow(clippy::too_many_arguments)]
    async fn approximate(
        &self,
        client: &crate::store::Client,
        model: &str,
        dimension: usize,
        query: &[f32],
        (limit, ef_search): (usize, usize),
        conditions: &str,
        params: &Params,
    ) -> Result<Vec<VectorHit>, StoreError> {
        let mut refs = params.as_refs();
        let query_vector = Vector::from(query.to_vec());
        let candidates = ef_search as i64;
        let limit_i64 = crate::rows::clamp_i64(limit);
        refs.push(&query_vector);
        let query_param = format!("${}", refs.len());
        refs.push(&candidates);
        let candidates_param = format!("${}", refs.len());
        refs.push(&limit_i64);
        let limit_param = format!("${}", refs.len());
        // The model and dimension are written into the statement, so that the planner can
        // match the model's partial index.
        let sql = format!(
            "WITH nearest AS (\
                 SELECT e.content_hash, e.truncated, \
                 e.vector::vector({dimension}) <#> {query_param}::vector({dimension}) AS distance \
                 FROM embeddings e WHERE e.model = {model} \
                 ORDER BY e.vector::vector({dimension}) <#> {query_param}::vector({dimension}) \
                 LIMIT {candidates_param}) \
             SELECT {MEMORY_COLUMNS}, n.distance, n.truncated FROM nearest n \
             JOIN memories m ON m.content_hash = n.content_hash \
             WHERE {conditions} ORDER BY n.distance, m.doc DESC LIMIT {limit_param}",
            model = literal(model),
        );
        let map = |e: tokio_postgres::Error| self.err(e);
        // The setting stays with the pooled connection, which only engram uses; sent in the same
        // round trip as the query (the driver pipelines them, in order).
        let set = format!("SET hnsw.ef_search = {ef_search}");
        let statement = client.prepare_cached(&sql).await.map_err(map)?;
        let (set, rows) =
            futures::join!(client.batch_execute(&set), client.query(&statement, &refs));
        set.map_err(map)?;
        rows.map_err(map)?.iter().map(hit_from_row).collect()
    }

    async fn hits(
        &self,
        client: &crate::store::Client,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<VectorHit>, StoreError> {
        let statement = client.prepare_cached(sql).await.map_err(|e| self.err(e))?;
        let rows = client
            .query(&statement, params)
            .await
            .map_err(|e| self.err(e))?;
        rows.iter().map(hit_from_row).collect()
    }

    /// Exact search without pgvector: the filtered scope's vectors are read and scored here.
    async fn exact_in_rust(
        &self,
        client: &crate::store::Client,
        model: &str,
        query: &[f32],
        limit: usize,
        conditions: &str,
        mut params: Params,
    ) -> Result<Vec<VectorHit>, StoreError> {
        let map = |e: tokio_postgres::Error| self.err(e);
        let model_param = params.push(model.to_string());
        let sql = format!(
            "SELECT m.doc, e.vector, e.truncated FROM memories m JOIN embeddings e \
             ON e.model = {model_param} AND e.content_hash = m.content_hash WHERE {conditions}"
        );
        let statement = client.prepare_cached(&sql).await.map_err(map)?;
        let refs = params.as_refs();
        let rows = client
            .query_raw(&statement, refs.iter().copied())
            .await
            .map_err(map)?;
        let mut rows = std::pin::pin!(rows);
        let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(limit + 1);
        let mut scratch: Vec<f32> = Vec::with_capacity(query.len());
        while let Some(row) = rows.try_next().await.map_err(map)? {
            let bytes: &[u8] = row.get(1);
            if bytes.len() != query.len() * 4 {
                return Err(dimension_mismatch(model, query.len(), bytes.len() / 4));
            }
            scratch.clear();
            scratch.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
            let candidate = Scored {
                similarity: engram_core::embed::dot(query, &scratch),
                doc: row.get(0),
                truncated: row.get(2),
            };
            if heap.len() < limit {
                heap.push(candidate);
            } else if let Some(worst) = heap.peek()
                && candidate < *worst
            {
                heap.pop();
                heap.push(candidate);
            }
        }
        let ranked = heap.into_sorted_vec();
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let docs: Vec<i64> = ranked.iter().map(|c| c.doc).collect();
        let statement = client
            .prepare_cached(&format!(
                "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.doc = ANY($1)"
            ))
            .await
            .map_err(map)?;
        let mut found: HashMap<i64, engram_core::Memory> = HashMap::new();
        for row in client.query(&statement, &[&docs]).await.map_err(map)? {
            let (doc, memory) = memory_from_row(&row)?;
            found.insert(doc, memory);
        }
        Ok(ranked
            .into_iter()
            .filter_map(|c| {
                found.remove(&c.doc).map(|memory| VectorHit {
                    memory,
                    similarity: c.similarity,
                    truncated: c.truncated,
                })
            })
            .collect())
    }
}

fn hit_from_row(row: &tokio_postgres::Row) -> Result<VectorHit, StoreError> {
    let (_, memory) = memory_from_row(row)?;
    let distance: f64 = row.get(17);
    Ok(VectorHit {
        memory,
        similarity: -(distance as f32),
        truncated: row.get(18),
    })
}

#[cfg(test)]
mod tests {
    use super::index_candidates;

    #[test]
    fn the_index_is_asked_for_enough_candidates_to_fill_the_scope_or_not_at_all() {
        // The whole index is the scope: the configured list is long enough.
        assert_eq!(index_candidates(100, 50_000, 50_000, 256), Some(256));
        // A quarter of the vectors: 2 x 100 x 4 = 800 candidates.
        assert_eq!(index_candidates(100, 25_000, 100_000, 256), Some(800));
        // A tenth: 2,000 would be needed, more than pgvector returns, so exact search.
        assert_eq!(index_candidates(100, 10_000, 100_000, 256), None);
        // A small limit fits: 2 x 10 x 10 = 200, raised to the configured 256.
        assert_eq!(index_candidates(10, 10_000, 100_000, 256), Some(256));
        // Never more than pgvector's cap, whatever is configured.
        assert_eq!(index_candidates(10, 100_000, 100_000, 5_000), Some(1_000));
        // Counts out of step (the total read before the scope grew) never divide by zero.
        assert_eq!(index_candidates(10, 0, 0, 256), None);
        assert_eq!(index_candidates(10, 500, 100, 256), Some(256));
    }
}
