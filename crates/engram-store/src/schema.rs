//! The database schema and its migrations.
//!
//! Each migration is applied once, in order, inside one write transaction; `PRAGMA user_version`
//! records how far a database has come. A database whose version is newer than the last migration
//! here was written by a newer engram and is refused rather than misread.

/// Marks a SQLite file as an engram database (`PRAGMA application_id`), ASCII "engr".
pub const APPLICATION_ID: i32 = 0x656E_6772;

/// The migrations, in order; migration `i` brings the schema to version `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: memories, their audit trail and the full-text index.
    r#"
    CREATE TABLE memories (
        rowid        INTEGER PRIMARY KEY,
        id           TEXT    NOT NULL UNIQUE,
        user_id      TEXT    NOT NULL,
        agent_id     TEXT,
        session_id   TEXT,
        kind         TEXT    NOT NULL
                     CHECK (kind IN ('episode', 'fact', 'preference', 'note', 'summary')),
        text         TEXT    NOT NULL,
        category     TEXT,
        importance   INTEGER NOT NULL CHECK (importance BETWEEN 1 AND 5),
        metadata     TEXT    NOT NULL DEFAULT '{}',
        created_at   INTEGER NOT NULL,  -- microseconds since the Unix epoch, as are all times
        updated_at   INTEGER NOT NULL,
        valid_from   INTEGER NOT NULL,
        valid_to     INTEGER,
        expires_at   INTEGER,
        source       TEXT    NOT NULL,
        content_hash TEXT    NOT NULL
    );
    -- The same text is stored once per scope among current memories; closed ones may repeat it.
    CREATE UNIQUE INDEX memories_current_hash ON memories (content_hash) WHERE valid_to IS NULL;
    CREATE INDEX memories_user_created ON memories (user_id, created_at);

    CREATE TABLE history (
        seq       INTEGER PRIMARY KEY,
        memory_id TEXT    NOT NULL,
        user_id   TEXT    NOT NULL,
        event     TEXT    NOT NULL CHECK (event IN ('add', 'update', 'invalidate', 'delete')),
        old_text  TEXT,
        new_text  TEXT,
        actor     TEXT    NOT NULL,
        at        INTEGER NOT NULL
    );
    CREATE INDEX history_memory ON history (memory_id, seq);
    CREATE INDEX history_user ON history (user_id);

    -- Contentless: the text lives in `memories`. Terms arrive already analysed and prefixed
    -- with their user (see fts.rs), so the tokenizer only splits on spaces.
    CREATE VIRTUAL TABLE memories_fts USING fts5 (
        body,
        content = '', contentless_delete = 1,
        tokenize = "ascii tokenchars '_'"
    );
    "#,
    // 2: scheduled jobs and their run history (see jobs.rs). Times in milliseconds, as named.
    r#"
    CREATE TABLE jobs (
        id               TEXT    PRIMARY KEY,
        name             TEXT    NOT NULL,
        enabled          INTEGER NOT NULL CHECK (enabled IN (0, 1)),
        schedule_kind    TEXT    NOT NULL CHECK (schedule_kind IN ('at', 'every', 'cron')),
        at_ms            INTEGER,
        every_ms         INTEGER CHECK (every_ms > 0),
        anchor_ms        INTEGER,
        cron_expr        TEXT,
        tz               TEXT    NOT NULL,
        message          TEXT    NOT NULL,
        deliver          INTEGER NOT NULL DEFAULT 0,
        channel          TEXT,
        recipient        TEXT,
        session_key      TEXT    NOT NULL,
        missed           TEXT    NOT NULL CHECK (missed IN ('run_once', 'skip')),
        delete_after_run INTEGER NOT NULL,
        next_run_at_ms   INTEGER,
        last_run_at_ms   INTEGER,
        last_status      TEXT,
        last_error       TEXT,
        running_run_id   INTEGER,
        created_at_ms    INTEGER NOT NULL,
        updated_at_ms    INTEGER NOT NULL
    );
    CREATE INDEX jobs_next_run ON jobs (next_run_at_ms) WHERE enabled = 1;

    CREATE TABLE job_runs (
        id              INTEGER PRIMARY KEY,
        job_id          TEXT    NOT NULL,
        job_name        TEXT    NOT NULL,
        trigger         TEXT    NOT NULL CHECK (trigger IN ('schedule', 'missed', 'manual')),
        scheduled_at_ms INTEGER,
        started_at_ms   INTEGER NOT NULL,
        finished_at_ms  INTEGER,
        status          TEXT    NOT NULL
                        CHECK (status IN ('running', 'ok', 'error', 'interrupted', 'skipped')),
        error           TEXT,
        output          TEXT,
        runner_pid      INTEGER
    );
    CREATE INDEX job_runs_job ON job_runs (job_id, id);
    CREATE INDEX job_runs_running ON job_runs (status) WHERE status = 'running';
    "#,
    // 3: dense vectors, one per model and content hash, so a text is embedded once per model
    // (an invalidated memory and a re-added one share it). `id` gives insertion order so an
    // in-memory index can catch up with rows added by other processes.
    r#"
    CREATE TABLE embedding_models (
        model      TEXT    PRIMARY KEY,
        dimension  INTEGER NOT NULL CHECK (dimension > 0),
        created_at INTEGER NOT NULL
    );
    CREATE TABLE embeddings (
        id           INTEGER PRIMARY KEY,
        model        TEXT    NOT NULL REFERENCES embedding_models (model),
        content_hash TEXT    NOT NULL,
        vector       BLOB    NOT NULL,  -- little-endian f32, `dimension` of them
        truncated    INTEGER NOT NULL DEFAULT 0,
        UNIQUE (model, content_hash)
    );
    CREATE INDEX memories_content_hash ON memories (content_hash);
    "#,
    // 4: API tokens for `engram serve` (stored as SHA-256 hashes; see tokens.rs) and the
    // knowledge graph of the MCP graph tools (see graph.rs). Each entity and observation points
    // at the memory that makes it findable by search; NULL until that memory is written.
    r#"
    CREATE TABLE api_tokens (
        id           TEXT    PRIMARY KEY,
        name         TEXT,
        users        TEXT    NOT NULL,  -- JSON list of the user ids the token may touch
        token_hash   TEXT    NOT NULL,  -- lowercase hex SHA-256 of the whole token text
        created_at   INTEGER NOT NULL,  -- microseconds since the Unix epoch
        last_used_at INTEGER,
        revoked_at   INTEGER
    );

    CREATE TABLE graph_entities (
        id          INTEGER PRIMARY KEY,
        user_id     TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        entity_type TEXT    NOT NULL,
        memory_id   TEXT,
        created_at  INTEGER NOT NULL,
        UNIQUE (user_id, name)
    );
    CREATE INDEX graph_entities_memory ON graph_entities (memory_id);
    CREATE INDEX graph_entities_unindexed ON graph_entities (user_id) WHERE memory_id IS NULL;

    CREATE TABLE graph_observations (
        id         INTEGER PRIMARY KEY,
        entity_id  INTEGER NOT NULL REFERENCES graph_entities (id) ON DELETE CASCADE,
        content    TEXT    NOT NULL,
        memory_id  TEXT,
        created_at INTEGER NOT NULL,
        UNIQUE (entity_id, content)
    );
    CREATE INDEX graph_observations_memory ON graph_observations (memory_id);
    CREATE INDEX graph_observations_unindexed ON graph_observations (entity_id)
        WHERE memory_id IS NULL;

    CREATE TABLE graph_relations (
        id            INTEGER PRIMARY KEY,
        user_id       TEXT    NOT NULL,
        from_name     TEXT    NOT NULL,
        to_name       TEXT    NOT NULL,
        relation_type TEXT    NOT NULL,
        created_at    INTEGER NOT NULL,
        UNIQUE (user_id, from_name, to_name, relation_type)
    );
    CREATE INDEX graph_relations_to ON graph_relations (user_id, to_name);
    "#,
    // 5: what an in-process vector index (ann/index.rs) must notice and the history table does
    // not say: memories removed (by row id, since the index keys on it; `forget` also erases
    // their history), vectors replaced in place, and erased history rows (after which history
    // sequence numbers may be reused, so the index re-reads every memory). Filled by triggers,
    // so every writer, of any version from this one on, keeps it.
    r#"
    CREATE TABLE vector_index_changes (
        seq   INTEGER PRIMARY KEY AUTOINCREMENT,
        event TEXT    NOT NULL CHECK (event IN ('memory_deleted', 'vector_replaced')),
        ref   INTEGER NOT NULL  -- memories.rowid or embeddings.id
    );
    CREATE TABLE vector_index_epoch (
        id               INTEGER PRIMARY KEY CHECK (id = 1),
        history_erasures INTEGER NOT NULL
    );
    INSERT INTO vector_index_epoch (id, history_erasures) VALUES (1, 0);
    CREATE TRIGGER vector_index_memory_deleted AFTER DELETE ON memories BEGIN
        INSERT INTO vector_index_changes (event, ref) VALUES ('memory_deleted', old.rowid);
    END;
    CREATE TRIGGER vector_index_vector_replaced AFTER UPDATE OF vector ON embeddings BEGIN
        INSERT INTO vector_index_changes (event, ref) VALUES ('vector_replaced', old.id);
    END;
    CREATE TRIGGER vector_index_history_erased AFTER DELETE ON history BEGIN
        UPDATE vector_index_epoch SET history_erasures = history_erasures + 1 WHERE id = 1;
    END;
    "#,
    // 6: the episodes of one conversation in order, for finding the turn before a new one
    // (its words are indexed with the new turn; see `conversation_context` in store.rs).
    r#"
    CREATE INDEX memories_session_order ON memories (user_id, session_id, created_at)
        WHERE session_id IS NOT NULL;
    "#,
    // 7: BM25 with each user's own statistics (see lexical.rs): every memory's indexed term
    // count, per-user totals, and term positions read through fts5vocab. `engram_meta` records
    // which text analyser built the index; another one means a re-index on open.
    r#"
    CREATE TABLE engram_meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    ALTER TABLE memories ADD COLUMN body_terms INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE fts_user_stats (
        user_id TEXT    PRIMARY KEY,
        docs    INTEGER NOT NULL,
        terms   INTEGER NOT NULL
    );
    CREATE VIRTUAL TABLE memories_fts_instance USING fts5vocab (memories_fts, instance);
    "#,
    // 8: one kind of one user's memories, newest first (the profile, the latest episodes, notes
    // from MEMORY.md) without walking all of that user's rows.
    r#"
    CREATE INDEX memories_user_kind_created ON memories (user_id, kind, created_at);
    "#,
];

/// The schema version this build writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.len() as u32
}
