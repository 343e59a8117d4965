//! [`PgStore`]: opening a PostgreSQL database, migrating it, and the connection pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use engram_core::store::Backend;
use engram_core::{Clock, StoreError, SystemClock};
use jiff::Timestamp;
use tokio_postgres::NoTls;

use crate::error::{describe_config, from_pg, from_pool};
use crate::notify::Notices;
use crate::schema::{APPLICATION, MIGRATION_LOCK, MIGRATIONS, latest_version};
use crate::tls::Tls;

/// How a PostgreSQL store is opened.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections kept open at most (each process has its own pool).
    pub pool_size: usize,
    /// How long a caller waits for a free connection before giving up.
    pub acquire_timeout: Duration,
    /// How long making a new connection may take (when the URL sets no `connect_timeout`).
    pub connect_timeout: Duration,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// Up to how many of a user's memories dense search is exact (every vector in the scope
    /// scored); larger scopes use pgvector's HNSW index when there is one.
    pub exact_max_scope: u64,
    /// Shortest HNSW candidate list (`hnsw.ef_search`) for large scopes; a scope holding a
    /// small share of the index asks for more (see `vectors::index_candidates`).
    pub ef_search: usize,
    /// Extra trusted roots (a PEM file) for a database whose certificate a private CA signed;
    /// used with `sslmode=require` (see tls.rs).
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            acquire_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            clock: Arc::new(SystemClock),
            exact_max_scope: 20_000,
            ef_search: 256,
            ca_file: None,
        }
    }
}

/// How dense (vector) search is done in this database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenseSearch {
    /// Vectors in pgvector's type, searched through an HNSW index per model for large scopes.
    Pgvector {
        /// The installed version of the extension.
        version: String,
    },
    /// Vectors as bytes, every vector in the scope scored (no pgvector in this server, or not
    /// allowed to install it); the reason says which.
    Exact {
        /// Why pgvector is not used.
        reason: String,
    },
}

impl DenseSearch {
    /// How `engram stats` names it.
    pub fn describe(&self) -> String {
        match self {
            DenseSearch::Pgvector { version } => format!("pgvector {version} (hnsw)"),
            DenseSearch::Exact { reason } => format!("exact ({reason})"),
        }
    }

    pub(crate) fn is_pgvector(&self) -> bool {
        matches!(self, DenseSearch::Pgvector { .. })
    }
}

/// What dense search did since the store was opened, and how it is tuned now.
#[derive(Debug)]
pub(crate) struct DenseState {
    /// Searches that scored every vector in their scope.
    pub exact: AtomicU64,
    /// Searches that asked the HNSW index (some then also searched exactly).
    pub approximate: AtomicU64,
    /// See [`PgOptions::exact_max_scope`].
    pub exact_max_scope: AtomicU64,
    /// See [`PgOptions::ef_search`].
    pub ef_search: AtomicU64,
}

impl DenseState {
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Memories, their history and search indexes in a PostgreSQL database shared by any number of
/// engram processes.
pub struct PgStore {
    pub(crate) pool: Pool,
    pub(crate) options: PgOptions,
    /// Where the database is, for messages (no password).
    pub(crate) location: String,
    pub(crate) dense: DenseSearch,
    pub(crate) dense_state: DenseState,
    /// News from other processes, and this process's runner lock.
    pub(crate) notices: Notices,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.location)
            .field("dense", &self.dense)
            .finish_non_exhaustive()
    }
}

/// A pooled connection.
pub(crate) type Client = deadpool_postgres::Object;

/// A connection or a transaction, COPY included: what the write paths need, so that they serve
/// both ordinary transactions and a copy's long one (see transfer.rs).
pub(crate) trait Db: tokio_postgres::GenericClient + Sync {
    /// Starts `COPY ... FROM STDIN`.
    fn copy_rows<'a>(
        &'a self,
        sql: &'a str,
    ) -> impl std::future::Future<
        Output = Result<tokio_postgres::CopyInSink<bytes::Bytes>, tokio_postgres::Error>,
    > + Send
    + 'a;
}

impl Db for tokio_postgres::Client {
    fn copy_rows<'a>(
        &'a self,
        sql: &'a str,
    ) -> impl std::future::Future<
        Output = Result<tokio_postgres::CopyInSink<bytes::Bytes>, tokio_postgres::Error>,
    > + Send
    + 'a {
        self.copy_in(sql)
    }
}

impl Db for tokio_postgres::Transaction<'_> {
    fn copy_rows<'a>(
        &'a self,
        sql: &'a str,
    ) -> impl std::future::Future<
        Output = Result<tokio_postgres::CopyInSink<bytes::Bytes>, tokio_postgres::Error>,
    > + Send
    + 'a {
        self.copy_in(sql)
    }
}

impl PgStore {
    /// Opens the database at `url` (`postgres://user:password@host:port/database`), creating
    /// engram's tables or migrating them to this build's schema.
    pub async fn open(url: &str, options: PgOptions) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            StoreError::Backend(format!("the database URL is not a PostgreSQL URL: {e}"))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("engram");
        }
        let location = describe_config(&config);
        let tls = Tls::for_config(&config, options.ca_file.as_deref())?;
        let notices = Notices::new(config.clone(), tls.clone());
        let recycling = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match tls {
            Tls::Plain => Manager::from_config(config, NoTls, recycling),
            Tls::Verified(connect) => Manager::from_config(config, connect, recycling),
        };
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot set up the connection pool: {e}")))?;
        let dense_state = DenseState {
            exact: AtomicU64::new(0),
            approximate: AtomicU64::new(0),
            exact_max_scope: AtomicU64::new(options.exact_max_scope),
            ef_search: AtomicU64::new(options.ef_search as u64),
        };
        let mut store = Self {
            pool,
            options,
            location,
            dense: DenseSearch::Exact {
                reason: "not yet known".into(),
            },
            dense_state,
            notices,
        };
        let mut client = store.client().await?;
        store.dense = migrate(&mut client, &store.location).await?;
        Ok(store)
    }

    /// Every store of engram on this database, as one `Backend` (session logs included: on a
    /// shared database they are shared too).
    pub fn backend(self: Arc<Self>) -> Backend {
        let location = self.location.clone();
        Backend::from_engine(self.clone(), crate::ENGINE, location).with_sessions(self)
    }

    /// Where the database is, without the password.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// How dense search is done here.
    pub fn dense_search(&self) -> &DenseSearch {
        &self.dense
    }

    /// The clock this store stamps changes with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.options.clock
    }

    pub(crate) fn now(&self) -> Timestamp {
        engram_core::time::truncate_to_micros(self.options.clock.now())
    }

    pub(crate) fn err(&self, e: tokio_postgres::Error) -> StoreError {
        from_pg(&e, &self.location)
    }

    /// A connection from the pool.
    pub(crate) async fn client(&self) -> Result<Client, StoreError> {
        self.pool.get().await.map_err(|e| {
            from_pool(
                e,
                &self.location,
                self.options.pool_size,
                self.options.acquire_timeout,
            )
        })
    }
}

/// What the current schema holds.
struct Identity {
    /// `engram_schema`'s application and version, when the table exists.
    engram: Option<(String, u32)>,
    /// Tables, views and sequences in the schema.
    relations: i64,
    /// The schema's name.
    schema: String,
}

async fn identity(
    client: &impl tokio_postgres::GenericClient,
    location: &str,
) -> Result<Identity, StoreError> {
    let row = client
        .query_one(
            "SELECT current_schema(), \
             (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'p', 'f', 'S')), \
             to_regclass(format('%I.engram_schema', current_schema())) IS NOT NULL",
            &[],
        )
        .await
        .map_err(|e| from_pg(&e, location))?;
    let schema: Option<String> = row.get(0);
    let Some(schema) = schema else {
        return Err(StoreError::ReadOnly {
            location: location.to_string(),
            detail: "no schema to create engram's tables in (the search_path names none that \
                     exists)"
                .to_string(),
        });
    };
    let engram = if row.get::<_, bool>(2) {
        let found = client
            .query_opt(
                "SELECT application, version FROM engram_schema LIMIT 1",
                &[],
            )
            .await
            .map_err(|e| from_pg(&e, location))?;
        match found {
            Some(r) => Some((r.get(0), u32::try_from(r.get::<_, i32>(1)).unwrap_or(0))),
            None => Some((String::new(), 0)),
        }
    } else {
        None
    };
    Ok(Identity {
        engram,
        relations: row.get(1),
        schema,
    })
}

/// Refuses schemas that are not engram's, or are newer than this build.
fn check_identity(identity: &Identity, location: &str) -> Result<(), StoreError> {
    let not_engram = || StoreError::NotEngram {
        location: format!("{location} (schema {})", identity.schema),
    };
    match &identity.engram {
        None if identity.relations > 0 => Err(not_engram()),
        Some((application, _)) if application != APPLICATION => Err(not_engram()),
        Some((_, version)) if *version > latest_version() => Err(StoreError::TooNew {
            location: location.to_string(),
            found: *version,
            supported: latest_version(),
        }),
        _ => Ok(()),
    }
}

/// Brings the schema to the current version and settles how dense search is done, or explains
/// why it cannot. Nothing is written to a schema that turns out not to be engram's.
async fn migrate(client: &mut Client, location: &str) -> Result<DenseSearch, StoreError> {
    let map = |e: tokio_postgres::Error| from_pg(&e, location);
    let found = identity(&***client, location).await?;
    check_identity(&found, location)?;
    if found
        .engram
        .as_ref()
        .is_some_and(|(_, v)| *v == latest_version())
        && let Some(dense) = settled_dense_search(&***client, location).await?
    {
        // The common case: nothing to do, and no lock taken.
        return Ok(dense);
    }
    let tx = client.transaction().await.map_err(map)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map)?;
    // Read again under the lock: another process may have migrated while we waited.
    let found = identity(&*tx, location).await?;
    check_identity(&found, location)?;
    let from = match &found.engram {
        Some((_, version)) => *version,
        None => {
            tx.batch_execute(
                "CREATE TABLE engram_schema (\
                     application text    NOT NULL, \
                     version     integer NOT NULL\
                 )",
            )
            .await
            .map_err(map)?;
            tx.execute(
                "INSERT INTO engram_schema (application, version) VALUES ($1, 0)",
                &[&APPLICATION],
            )
            .await
            .map_err(map)?;
            0
        }
    };
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        tx.batch_execute(sql).await.map_err(map)?;
        let version = index as i32 + 1;
        tx.execute("UPDATE engram_schema SET version = $1", &[&version])
            .await
            .map_err(map)?;
    }
    crate::lexical::check_analyzer(&*tx, location).await?;
    let dense = crate::vectors::settle_dense_search(&tx, location).await?;
    tx.commit().await.map_err(map)?;
    Ok(dense)
}

/// How dense search is done, when that is settled and nothing would change it now: pgvector is
/// in use, or it is not and the server cannot offer it. `None` when the migration step must look
/// (under its lock).
async fn settled_dense_search(
    client: &impl tokio_postgres::GenericClient,
    location: &str,
) -> Result<Option<DenseSearch>, StoreError> {
    if !crate::lexical::analyzer_is_current(client, location).await? {
        return Ok(None);
    }
    crate::vectors::current_dense_search(client, location).await
}

/// Makes `schema` an empty schema of the database at `url` (dropping whatever it held) and
/// returns the URL of a store in it: for benchmarks and tests that want a fresh store each
/// time in a database they were given. The schema name is letters, digits and `_`.
pub async fn fresh_schema(url: &str, schema: &str) -> Result<String, StoreError> {
    if schema.is_empty()
        || !schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(StoreError::BadQuery(format!(
            "'{schema}' is not a plain schema name (letters, digits, _)"
        )));
    }
    let config: tokio_postgres::Config = url.parse().map_err(|e| {
        StoreError::Backend(format!("the database URL is not a PostgreSQL URL: {e}"))
    })?;
    let location = describe_config(&config);
    let tls = Tls::for_config(&config, None)?;
    let client = match tls {
        Tls::Plain => {
            let (client, connection) = config
                .connect(NoTls)
                .await
                .map_err(|e| from_pg(&e, &location))?;
            tokio::spawn(connection);
            client
        }
        Tls::Verified(connect) => {
            let (client, connection) = config
                .connect(connect)
                .await
                .map_err(|e| from_pg(&e, &location))?;
            tokio::spawn(connection);
            client
        }
    };
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        ))
        .await
        .map_err(|e| from_pg(&e, &location))?;
    // pgvector, once installed in the database, stays in `public`; the store's tables go in
    // the schema named first.
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!(
        "{url}{separator}options=-csearch_path%3D{schema}%2Cpublic"
    ))
}
