//! The database schema and its migrations.
//!
//! engram's tables live in the connection's current schema (`public` unless the URL's
//! `options=-csearch_path=...` names another, so one database can hold several stores). The
//! table `engram_schema` says that the schema is engram's and how far its migrations have come.
//! Migrations run at open, each once, in order, in one transaction under an advisory lock, so
//! two processes opening a new database at once do not both migrate it and a failure leaves
//! nothing half-done. A schema whose version is newer than this build knows, or that holds
//! tables but no `engram_schema`, is refused and left untouched.
//!
//! Times are microseconds since the Unix epoch in `bigint` columns, as in the SQLite engine, so
//! a store copied between the engines keeps every time exactly (jiff's range is wider than
//! `timestamptz`'s). Metadata is `json` (its text kept as given, keys in their order), not
//! `jsonb` (which reorders keys).

/// What `engram_schema.application` says in an engram schema.
pub const APPLICATION: &str = "engram";

/// Key of the advisory lock held while a schema is migrated (ASCII "engrmigr").
pub(crate) const MIGRATION_LOCK: i64 = 0x656e_6772_6d69_6772;

/// The migrations, in order; migration `i` brings the schema to version `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: everything engram keeps.
    r#"
    CREATE TABLE engram_meta (
        key   text PRIMARY KEY,
        value text NOT NULL
    );

    -- `doc` numbers memories in the order they were stored (the SQLite engine's rowid): the
    -- postings refer to it, and it breaks ties between equal times.
    CREATE SEQUENCE memories_doc_seq;
    CREATE TABLE memories (
        doc          bigint   PRIMARY KEY,
        id           uuid     NOT NULL UNIQUE,
        user_id      text     NOT NULL,
        agent_id     text,
        session_id   text,
        kind         text     NOT NULL
                     CHECK (kind IN ('episode', 'fact', 'preference', 'note', 'summary')),
        text         text     NOT NULL,
        category     text,
        importance   smallint NOT NULL CHECK (importance BETWEEN 1 AND 5),
        metadata     json     NOT NULL,
        created_at   bigint   NOT NULL,
        updated_at   bigint   NOT NULL,
        valid_from   bigint   NOT NULL,
        valid_to     bigint,
        expires_at   bigint,
        source       text     NOT NULL,
        content_hash text     COLLATE "C" NOT NULL,
        body_terms   integer  NOT NULL
    );
    ALTER SEQUENCE memories_doc_seq OWNED BY memories.doc;
    -- Finds every memory of a text (for its vectors) and keeps a text once per scope among
    -- current memories: the second key is 0 for a current memory and NULL for a closed one,
    -- and NULLs never collide in a unique index.
    CREATE UNIQUE INDEX memories_hash ON memories
        (content_hash, (CASE WHEN valid_to IS NULL THEN 0 END));
    CREATE INDEX memories_user_created ON memories (user_id, created_at);
    CREATE INDEX memories_user_kind_created ON memories (user_id, kind, created_at);
    CREATE INDEX memories_session_order ON memories (user_id, session_id, created_at)
        WHERE session_id IS NOT NULL;

    CREATE TABLE history (
        seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        memory_id uuid   NOT NULL,
        user_id   text   NOT NULL,
        event     text   NOT NULL CHECK (event IN ('add', 'update', 'invalidate', 'delete')),
        old_text  text,
        new_text  text,
        actor     text   NOT NULL,
        at        bigint NOT NULL
    );
    CREATE INDEX history_memory ON history (memory_id, seq);
    CREATE INDEX history_user ON history (user_id);

    -- Lexical search (see lexical.rs): each user's statistics and a short key for their
    -- postings; the row is also the lock that orders one user's writes.
    CREATE TABLE lexical_users (
        user_key integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        user_id  text    NOT NULL UNIQUE,
        docs     bigint  NOT NULL,
        terms    bigint  NOT NULL
    );
    -- One row per user, analysed term and memory: how often the term occurs in the memory's
    -- indexed body, and the body's length in terms. A search reads these from the index alone
    -- (an index-only scan: no table page per posting), so the index carries them; autovacuum
    -- visits the table often enough to keep its pages marked all-visible. A term longer than
    -- 200 bytes is kept as `~` and its BLAKE3 (lexical.rs): a B-tree entry holds at most about
    -- 2,700 bytes.
    CREATE TABLE postings (
        user_key integer NOT NULL,
        term     text    COLLATE "C" NOT NULL,
        doc      bigint  NOT NULL,
        tf       integer NOT NULL,
        len      integer NOT NULL,
        PRIMARY KEY (user_key, term, doc) INCLUDE (tf, len)
    ) WITH (autovacuum_vacuum_insert_scale_factor = 0.01,
            autovacuum_vacuum_insert_threshold = 10000);
    -- Each memory's indexed body (its analysed terms, space-separated), to take its postings
    -- out again exactly and to match phrases.
    CREATE TABLE lexical_bodies (
        doc   bigint PRIMARY KEY,
        terms text   NOT NULL
    );

    -- Dense vectors, one per model and content hash. `vector` is bytea (little-endian f32, as in
    -- the SQLite engine) until pgvector can be used, then pgvector's type (see store.rs).
    CREATE TABLE embedding_models (
        model      text    PRIMARY KEY,
        dimension  integer NOT NULL CHECK (dimension > 0),
        created_at bigint  NOT NULL
    );
    CREATE TABLE embeddings (
        id           bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        model        text    NOT NULL REFERENCES embedding_models (model),
        content_hash text    COLLATE "C" NOT NULL,
        vector       bytea   NOT NULL,
        truncated    boolean NOT NULL DEFAULT false,
        UNIQUE (model, content_hash)
    );

    -- Other processes hear of changes to jobs and tokens through NOTIFY (see notify.rs): a
    -- gateway picks up a job added anywhere, a server drops a revoked token at once. Row
    -- triggers, so a statement that changes nothing is no news (PostgreSQL sends one
    -- notification per transaction however many rows changed); token uses (last_used_at) are
    -- no news either.
    CREATE FUNCTION engram_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify(TG_ARGV[0], '');
        RETURN NULL;
    END
    $$;

    -- Scheduled jobs and their runs (see jobs.rs). Times in milliseconds, as named. Names and
    -- ids sort byte by byte ("C"), as in the SQLite engine, whatever the database's locale.
    CREATE TABLE jobs (
        id               text    COLLATE "C" PRIMARY KEY,
        name             text    COLLATE "C" NOT NULL,
        enabled          boolean NOT NULL,
        schedule_kind    text    NOT NULL CHECK (schedule_kind IN ('at', 'every', 'cron')),
        at_ms            bigint,
        every_ms         bigint  CHECK (every_ms > 0),
        anchor_ms        bigint,
        cron_expr        text,
        tz               text    NOT NULL,
        payload          json    NOT NULL,
        session_key      text    NOT NULL,
        missed           text    NOT NULL,
        delete_after_run boolean NOT NULL,
        next_run_at_ms   bigint,
        last_run_at_ms   bigint,
        last_status      text,
        last_error       text,
        running_run_id   bigint,
        created_at_ms    bigint  NOT NULL,
        updated_at_ms    bigint  NOT NULL
    );
    CREATE INDEX jobs_next_run ON jobs (next_run_at_ms) WHERE enabled;
    CREATE TRIGGER jobs_changed AFTER INSERT OR UPDATE OR DELETE ON jobs
        FOR EACH ROW EXECUTE FUNCTION engram_notify('engram_jobs');

    -- `runner_lock` is the advisory lock its process holds while it lives (on any host): a
    -- run whose lock nobody holds was left by a process that died.
    CREATE TABLE job_runs (
        id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        job_id          text    COLLATE "C" NOT NULL,
        job_name        text    NOT NULL,
        trigger         text    NOT NULL CHECK (trigger IN ('schedule', 'missed', 'manual')),
        scheduled_at_ms bigint,
        started_at_ms   bigint  NOT NULL,
        finished_at_ms  bigint,
        status          text    NOT NULL
                        CHECK (status IN ('running', 'ok', 'error', 'interrupted', 'skipped')),
        error           text,
        output          text,
        runner_pid      bigint,
        runner_lock     bigint
    );
    CREATE INDEX job_runs_job ON job_runs (job_id, id);
    CREATE INDEX job_runs_running ON job_runs (status) WHERE status = 'running';

    -- API tokens (hashes only; see tokens.rs).
    CREATE TABLE api_tokens (
        id           text   COLLATE "C" PRIMARY KEY,
        name         text,
        users        json   NOT NULL,
        token_hash   text   NOT NULL,
        created_at   bigint NOT NULL,
        last_used_at bigint,
        revoked_at   bigint
    );
    CREATE TRIGGER tokens_changed AFTER INSERT OR DELETE OR UPDATE OF revoked_at, users, token_hash
        ON api_tokens FOR EACH ROW EXECUTE FUNCTION engram_notify('engram_tokens');

    -- The knowledge graph of the MCP graph tools (see graph.rs). Long texts are kept unique
    -- through their md5, since a B-tree entry holds at most about 2,700 bytes.
    CREATE TABLE graph_entities (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        user_id     text   NOT NULL,
        name        text   NOT NULL,
        entity_type text   NOT NULL,
        memory_id   uuid,
        created_at  bigint NOT NULL,
        UNIQUE (user_id, name)
    );
    CREATE INDEX graph_entities_memory ON graph_entities (memory_id);
    CREATE INDEX graph_entities_unindexed ON graph_entities (user_id, id) WHERE memory_id IS NULL;
    CREATE TABLE graph_observations (
        id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        entity_id  bigint NOT NULL REFERENCES graph_entities (id) ON DELETE CASCADE,
        content    text   NOT NULL,
        memory_id  uuid,
        created_at bigint NOT NULL
    );
    CREATE UNIQUE INDEX graph_observations_unique ON graph_observations (entity_id, md5(content));
    CREATE INDEX graph_observations_memory ON graph_observations (memory_id);
    CREATE INDEX graph_observations_unindexed ON graph_observations (entity_id, id)
        WHERE memory_id IS NULL;
    CREATE TABLE graph_relations (
        id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        user_id       text   NOT NULL,
        from_name     text   NOT NULL,
        to_name       text   NOT NULL,
        relation_type text   NOT NULL,
        created_at    bigint NOT NULL
    );
    CREATE UNIQUE INDEX graph_relations_unique ON graph_relations
        (user_id, md5(from_name), md5(to_name), md5(relation_type));
    CREATE INDEX graph_relations_from ON graph_relations (user_id, from_name);
    CREATE INDEX graph_relations_to ON graph_relations (user_id, to_name);

    -- The agent's session logs (see sessions.rs): one row per line, in order.
    CREATE TABLE session_lines (
        key  text     COLLATE "C" NOT NULL,
        log  smallint NOT NULL,  -- 0: the session, 1: its archive
        seq  integer  NOT NULL,
        line text     NOT NULL,
        PRIMARY KEY (key, log, seq)
    );
    "#,
    // 2: claims on ranges of a stream (see claims.rs): which messages memory extraction has
    // done, or is doing now, on any host. A claim being worked on has the time its lease runs
    // out; a finished one the time it was finished.
    r#"
    CREATE TABLE claims (
        id          text   COLLATE "C" PRIMARY KEY,
        user_id     text   NOT NULL,
        stream      text   NOT NULL,
        range_start bigint NOT NULL CHECK (range_start >= 0),
        range_end   bigint NOT NULL CHECK (range_end > range_start),
        claimed_at  bigint NOT NULL,
        expires_at  bigint,
        finished_at bigint,
        CHECK ((expires_at IS NULL) <> (finished_at IS NULL))
    );
    CREATE INDEX claims_stream ON claims (user_id, stream, range_end);
    "#,
];

/// The schema version this build writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.len() as u32
}
