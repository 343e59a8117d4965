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
    // 9: one index over the content hash instead of two. It finds every memory of a hash (for
    // the vectors) and keeps a text once per scope among current memories: the second key is
    // 0 for a current memory and NULL for a closed one, and NULLs never collide in a unique
    // index. Each stored memory adds one random key instead of two, which at a million
    // memories was most of an import's writing (see BENCHMARKS.md, "Store").
    r#"
    CREATE UNIQUE INDEX memories_hash ON memories
        (content_hash, (CASE WHEN valid_to IS NULL THEN 0 END));
    DROP INDEX memories_current_hash;
    DROP INDEX memories_content_hash;
    "#,
    // 10: a per-user count of updates and deletes of memories, kept by triggers so that it
    // counts every change from every process; an in-process copy of a user's ranking facts
    // (lexical_docs.rs) is used only while the count it was read at still stands. Inserts
    // need no count: a row added later is not in the copy and is read from the table.
    r#"
    CREATE TABLE memory_generations (
        user_id    TEXT    PRIMARY KEY,
        generation INTEGER NOT NULL
    );
    CREATE TRIGGER memories_count_updates AFTER UPDATE ON memories BEGIN
        INSERT INTO memory_generations (user_id, generation) VALUES (OLD.user_id, 1)
            ON CONFLICT (user_id) DO UPDATE SET generation = generation + 1;
    END;
    CREATE TRIGGER memories_count_moves AFTER UPDATE OF user_id ON memories
        WHEN NEW.user_id IS NOT OLD.user_id BEGIN
        INSERT INTO memory_generations (user_id, generation) VALUES (NEW.user_id, 1)
            ON CONFLICT (user_id) DO UPDATE SET generation = generation + 1;
    END;
    CREATE TRIGGER memories_count_deletes AFTER DELETE ON memories BEGIN
        INSERT INTO memory_generations (user_id, generation) VALUES (OLD.user_id, 1)
            ON CONFLICT (user_id) DO UPDATE SET generation = generation + 1;
    END;
    "#,
    // 11: a job's payload is the scheduler's JSON object, which the store keeps and does not
    // read (what a job does, and where its answer goes, is the scheduler's business), and the
    // missed-run policy is the scheduler's word. The table is rebuilt without the columns
    // message, deliver, channel and recipient; their values move into the payload under the
    // names the scheduler gives them (message, deliver, channel, to).
    r#"
    CREATE TABLE jobs_v11 (
        id               TEXT    PRIMARY KEY,
        name             TEXT    NOT NULL,
        enabled          INTEGER NOT NULL CHECK (enabled IN (0, 1)),
        schedule_kind    TEXT    NOT NULL CHECK (schedule_kind IN ('at', 'every', 'cron')),
        at_ms            INTEGER,
        every_ms         INTEGER CHECK (every_ms > 0),
        anchor_ms        INTEGER,
        cron_expr        TEXT,
        tz               TEXT    NOT NULL,
        payload          TEXT    NOT NULL,  -- JSON object, as the scheduler wrote it
        session_key      TEXT    NOT NULL,
        missed           TEXT    NOT NULL,
        delete_after_run INTEGER NOT NULL,
        next_run_at_ms   INTEGER,
        last_run_at_ms   INTEGER,
        last_status      TEXT,
        last_error       TEXT,
        running_run_id   INTEGER,
        created_at_ms    INTEGER NOT NULL,
        updated_at_ms    INTEGER NOT NULL
    );
    INSERT INTO jobs_v11 SELECT id, name, enabled, schedule_kind, at_ms, every_ms, anchor_ms,
        cron_expr, tz,
        json_object('message', message, 'deliver', json(CASE WHEN deliver THEN 'true' ELSE 'false' END),
                    'channel', channel, 'to', recipient),
        session_key, missed, delete_after_run, next_run_at_ms, last_run_at_ms, last_status,
        last_error, running_run_id, created_at_ms, updated_at_ms
        FROM jobs;
    DROP TABLE jobs;
    ALTER TABLE jobs_v11 RENAME TO jobs;
    CREATE INDEX jobs_next_run ON jobs (next_run_at_ms) WHERE enabled = 1;
    "#,
    // 12: claims on ranges of a stream (see claims.rs): which messages memory extraction has
    // done, or is doing now, seen by every process of the file. A claim being worked on has
    // the time its lease runs out; a finished one the time it was finished.
    r#"
    CREATE TABLE claims (
        id          TEXT    PRIMARY KEY,
        user_id     TEXT    NOT NULL,
        stream      TEXT    NOT NULL,
        range_start INTEGER NOT NULL CHECK (range_start >= 0),
        range_end   INTEGER NOT NULL CHECK (range_end > range_start),
        claimed_at  INTEGER NOT NULL,
        expires_at  INTEGER,
        finished_at INTEGER,
        CHECK ((expires_at IS NULL) <> (finished_at IS NULL))
    );
    CREATE INDEX claims_stream ON claims (user_id, stream, range_end);
    "#,
    // 13: the ranking facts of a user's memories (see lexical_docs.rs) read from an index that
    // holds them all, instead of a seek into the wide table row (text included) for each one:
    // the first search of a process over words in a quarter of a user's 100k memories loads
    // all their facts, and that took 54 -> 42 ms of a one-shot `engram search`. The index
    // starts with (user_id, created_at), so it serves what memories_user_created did, and
    // replaces it rather than adding a third index to every write.
    r#"
    CREATE INDEX memories_user_facts
        ON memories (user_id, created_at, valid_to, expires_at, body_terms, kind, importance);
    DROP INDEX memories_user_created;
    "#,
];

/// The schema version this build writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.len() as u32
}

#[cfg(test)]
mod tests {
    use engram_core::{AddOutcome, Filter, MemoryId, NewMemory, Scope, content_hash};
    use rusqlite::{Connection, params};

    use super::{APPLICATION_ID, MIGRATIONS};
    use crate::Database;

    /// Writes a database as engram left it at schema version 8: the same text in one scope
    /// twice (once closed, once current) and a vector for that text.
    fn version_8_database(path: &std::path::Path) -> (MemoryId, MemoryId) {
        let conn = Connection::open(path).unwrap();
        for sql in &MIGRATIONS[..8] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        let hash = content_hash(&Scope::user("alice"), "likes green tea");
        let (closed, current) = (MemoryId::new(), MemoryId::new());
        for (id, valid_to) in [(closed, Some(2_000_000i64)), (current, None)] {
            conn.execute(
                "INSERT INTO memories (id, user_id, kind, text, importance, created_at, \
                 updated_at, valid_from, valid_to, source, content_hash) \
                 VALUES (?1, 'alice', 'fact', 'likes green tea', 3, 1000000, 1000000, \
                 1000000, ?2, 'test', ?3)",
                params![id.to_string(), valid_to, hash],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO embedding_models (model, dimension, created_at) VALUES ('toy', 2, 0)",
            [],
        )
        .unwrap();
        let vector: Vec<u8> = [1.0f32, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        conn.execute(
            "INSERT INTO embeddings (model, content_hash, vector) VALUES ('toy', ?1, ?2)",
            params![hash, vector],
        )
        .unwrap();
        (closed, current)
    }

    /// A database this build made, in a folder of its own, and a plain connection to it.
    fn new_database() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engram.db");
        drop(Database::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        (dir, conn)
    }

    /// The steps SQLite's planner chooses for `sql`.
    fn query_plan(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(params, |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn index_names(path: &std::path::Path) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'memories' \
                 AND name NOT LIKE 'sqlite_%' ORDER BY name",
            )
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_version_8_database_keeps_its_memories_vectors_and_rules_under_one_hash_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engram.db");
        let (closed, current) = version_8_database(&path);
        assert!(index_names(&path).contains(&"memories_current_hash".to_string()));

        let store = Database::open(&path).unwrap();
        let names = index_names(&path);
        assert!(names.contains(&"memories_hash".to_string()), "{names:?}");
        assert!(!names.contains(&"memories_current_hash".to_string()));
        assert!(!names.contains(&"memories_content_hash".to_string()));
        assert_eq!(
            store.stats().unwrap().schema_version,
            super::latest_version()
        );
        assert!(store.get(closed).unwrap().valid_to.is_some());

        // Still once per scope among current memories...
        let again = NewMemory::new(Scope::user("alice"), "likes  green tea");
        assert_eq!(
            store.add(again.clone(), "test").unwrap(),
            AddOutcome::Duplicate(current)
        );
        // ...and the vector stored for the text serves every memory with it.
        assert_eq!(store.count_without_vectors("toy").unwrap(), 0);
        let hits = store
            .vector_search("toy", &Filter::user("alice"), &[1.0, 0.0], 10)
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].memory.id, current);

        // Once closed, the text may come back, and the closed ones may repeat it.
        store.invalidate(current, "test").unwrap();
        let back = match store.add(again, "test").unwrap() {
            AddOutcome::Added(memory) => memory.id,
            other => panic!("expected a new memory, got {other:?}"),
        };
        assert_eq!(store.count_without_vectors("toy").unwrap(), 0);

        // The vector goes with the last memory of its text, not before.
        store.delete(back, "test").unwrap();
        store.delete(closed, "test").unwrap();
        assert_eq!(store.vector_models().unwrap()[0].vectors, 1);
        store.delete(current, "test").unwrap();
        assert_eq!(store.vector_models().unwrap()[0].vectors, 0);

        // The lookups by hash use the new index.
        let conn = Connection::open(&path).unwrap();
        let plan = query_plan(
            &conn,
            "SELECT id FROM memories WHERE content_hash = ?1 AND valid_to IS NULL",
            ["x"],
        );
        assert!(
            plan.iter().any(|step| step.contains("memories_hash")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_version_10_job_keeps_its_message_and_delivery_in_its_payload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engram.db");
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..10] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 10).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.execute(
                "INSERT INTO jobs (id, name, enabled, schedule_kind, every_ms, anchor_ms, tz, \
                 message, deliver, channel, recipient, session_key, missed, delete_after_run, \
                 next_run_at_ms, created_at_ms, updated_at_ms) VALUES ('0badc0de', 'water', 1, \
                 'every', 60000, 0, 'UTC', 'water the plants', 1, 'telegram', '42', \
                 'cron:0badc0de', 'skip', 0, 60000, 5, 5)",
                [],
            )
            .unwrap();
        }
        let store = Database::open(&path).unwrap();
        let job = store.jobs().get("0badc0de").unwrap();
        assert_eq!(
            serde_json::Value::Object(job.payload),
            serde_json::json!({"message": "water the plants", "deliver": true,
                               "channel": "telegram", "to": "42"})
        );
        assert_eq!(job.missed, "skip");
        assert_eq!(job.state.next_run_at_ms, Some(60_000));
        assert_eq!(store.jobs().due(60_000).unwrap().len(), 1);
    }

    #[test]
    fn a_users_ranking_facts_are_read_from_one_index_without_the_table() {
        let (dir, conn) = new_database();
        let names = index_names(&dir.path().join("engram.db"));
        assert!(names.contains(&"memories_user_facts".to_string()));
        assert!(!names.contains(&"memories_user_created".to_string()));
        let plan = query_plan(&conn, crate::lexical_docs::FACTS_SQL, ["u"]);
        assert_eq!(
            plan,
            vec!["SEARCH memories USING COVERING INDEX memories_user_facts (user_id=?)"]
        );
    }

    #[test]
    fn candidates_the_facts_do_not_cover_are_read_by_row_not_by_walking_the_user() {
        let (_dir, conn) = new_database();
        let (conditions, values) =
            crate::rows::filter_sql(&Filter::user("u"), jiff::Timestamp::now()).unwrap();
        let mut params = vec![rusqlite::types::Value::Text("[1, 2, 3]".into())];
        params.extend(values);
        let plan = query_plan(
            &conn,
            &crate::store::facts_by_row_sql(&conditions),
            rusqlite::params_from_iter(params),
        );
        assert_eq!(
            plan[0], "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
            "{plan:?}"
        );
    }

    #[test]
    fn the_turn_before_is_found_by_seeking_in_its_session() {
        let (_dir, conn) = new_database();
        let plan = query_plan(&conn, crate::store::PREVIOUS_TURN_SQL, ["x", "u"]);
        assert!(
            plan.iter().any(|step| step
                .contains("memories_session_order (user_id=? AND session_id=? AND created_at<?)")),
            "{plan:?}"
        );
    }
}
