#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Crash safety: `engram import`, `engram serve` in the middle of batches, `engram reindex`,
//! extraction and summarisation are killed with SIGKILL at random points, again and again.
//! After each kill the store passes its integrity checks (SQLite's, the full-text index's, and
//! the index agreeing with the memories), every write that was acknowledged is there, nothing
//! is there by halves (a batch, a vector, a memory), and session files still read (a torn last
//! line is skipped).
//!
//! The kill points come from a seeded generator: set ENGRAM_CRASH_SEED to replay a run (the
//! seed is printed). The tests run once per storage engine in [`Engine::all`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::{Value, json};
use tempfile::TempDir;

mod common;
use common::Database;

/// SplitMix64: repeatable kill points.
struct Rng(u64);

impl Rng {
    fn seeded(test: &str) -> Self {
        let seed = std::env::var("ENGRAM_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5EED_u64);
        eprintln!("{test}: ENGRAM_CRASH_SEED={seed}");
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration between `low` and `high` milliseconds.
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }
}

/// The storage engines the crash tests run on: every test runs once on each.
#[derive(Debug, Clone, Copy)]
enum Engine {
    /// The home's own database file.
    Sqlite,
    /// A database of the test's own on the test script's PostgreSQL 16 with pgvector
    /// (ENGRAM_TEST_PG_URL; the tests fail without it, naming the fix), named in the home's
    /// config.toml as `[store] url`.
    Postgres,
}

impl Engine {
    fn all() -> [Engine; 2] {
        [Engine::Sqlite, Engine::Postgres]
    }

    /// Sets up `home` to use this engine; `test` names the test's database.
    fn prepare(self, home: &Path, test: &str) -> Store {
        let database = match self {
            Engine::Sqlite => None,
            Engine::Postgres => {
                let database = Database::new(&format!("crash_{test}"));
                let mut config = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(home.join("config.toml"))
                    .unwrap();
                writeln!(config, "\n[store]\nurl = {:?}", database.url).unwrap();
                Some(database)
            }
        };
        Store {
            engine: self,
            database,
        }
    }
}

/// Where one test keeps its memories (a PostgreSQL database is dropped with it).
struct Store {
    engine: Engine,
    database: Option<Database>,
}

impl Store {
    /// What the engine's integrity check finds wrong (nothing, after any crash).
    fn problems(&self, home: &Path) -> Vec<String> {
        match (&self.engine, &self.database) {
            (Engine::Sqlite, _) => {
                let store = engram_store_sqlite::SqliteStore::open(home.join("engram.db"))
                    .unwrap_or_else(|e| panic!("the store does not open after the crash: {e}"));
                store.blocking().check_integrity().unwrap()
            }
            (Engine::Postgres, Some(database)) => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let found = runtime.block_on(async {
                    let store = engram_store_postgres::PgStore::open(
                        &database.url,
                        engram_store_postgres::PgOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("the store does not open after the crash: {e}"));
                    store.check_integrity().await.unwrap()
                });
                // What could not be checked here (amcheck, when the server lacks it) is said.
                for skipped in &found.skipped {
                    eprintln!("integrity check: {skipped}");
                }
                found.problems
            }
            (Engine::Postgres, None) => unreachable!("a PostgreSQL store has its database"),
        }
    }
}

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_engram"));
    cmd.arg("--home").arg(home);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_DATABASE_URL",
        "ENGRAM_USER",
        "ENGRAM_PROVIDER",
        "ENGRAM_MODEL",
        "ENGRAM_EMBED_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("USER", "tester").env("NO_COLOR", "1");
    cmd
}

/// Kills `child` outright (SIGKILL) after `after`, unless it ended first. True when it was
/// killed.
fn kill_after(child: &mut Child, after: Duration) -> bool {
    let deadline = Instant::now() + after;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if child.try_wait().unwrap().is_some() {
        return false;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    true
}

/// Every memory of `user`, by its `metadata.n` (the line or item that made it), as exported.
fn exported(home: &Path, user: &str) -> BTreeMap<u64, Value> {
    let out = engram(home)
        .args(["export", "--user", user])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut memories = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let memory: Value = serde_json::from_str(line).unwrap();
        let n = memory["metadata"]["n"].as_u64().unwrap();
        assert!(
            memories.insert(n, memory).is_none(),
            "memory {n} is stored twice"
        );
    }
    memories
}

fn assert_sound(store: &Store, home: &Path, when: &str) {
    let problems = store.problems(home);
    assert!(
        problems.is_empty(),
        "{:?} {when}: {problems:?}",
        store.engine
    );
}

#[test]
fn import_killed_at_random_points_keeps_every_committed_batch_whole() {
    const LINES: u64 = 20_000;
    const BATCH: u64 = 2_000;
    let mut rng = Rng::seeded("import");
    for engine in Engine::all() {
        let home = TempDir::new().unwrap();
        let store = engine.prepare(home.path(), "import");
        let file = home.path().join("in.jsonl");
        let text = |n: u64| format!("memory {n}: the {} garden path", n * 7919 % 10_007);
        let lines: String = (0..LINES)
            .map(|n| {
                format!(
                    "{}\n",
                    json!({"user_id": "u", "text": text(n), "kind": "note", "metadata": {"n": n}})
                )
            })
            .collect();
        std::fs::write(&file, lines).unwrap();

        let mut stored = 0;
        let mut kills = 0;
        for round in 0..6 {
            let mut child = engram(home.path())
                .arg("import")
                .arg(&file)
                .args(["--batch-size", &BATCH.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            kills += usize::from(kill_after(&mut child, rng.millis(50, 1500)));
            assert_sound(&store, home.path(), &format!("after import round {round}"));
            let memories = exported(home.path(), "u");
            let count = memories.len() as u64;
            // Whole batches, in file order, and nothing committed is lost.
            assert!(
                count.is_multiple_of(BATCH) || count == LINES,
                "round {round}: {count} memories is not a whole number of batches"
            );
            assert!(count >= stored, "round {round}: {count} < {stored}");
            assert_eq!(
                memories.keys().copied().collect::<Vec<_>>(),
                (0..count).collect::<Vec<_>>(),
                "round {round}"
            );
            for (n, memory) in &memories {
                assert_eq!(
                    memory["text"],
                    text(*n),
                    "memory {n} is not what was imported"
                );
                assert_eq!(memory["kind"], "note");
            }
            stored = count;
        }
        assert!(kills > 0, "no import was killed in the middle");

        let out = engram(home.path())
            .arg("import")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(exported(home.path(), "u").len() as u64, LINES);
        assert_sound(&store, home.path(), "after the last import");
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One HTTP/1.1 request on a new connection: the status (None when the connection failed).
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

fn start_server(home: &Path, addr: SocketAddr) -> Child {
    let mut child = engram(home)
        .args(["serve", "--listen", &addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while http(addr, "GET", "/health", "") != Some(200) {
        assert!(Instant::now() < deadline, "the server did not start");
        assert!(child.try_wait().unwrap().is_none(), "the server exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn serve_killed_mid_batch_keeps_every_acknowledged_write() {
    const ITEMS: u64 = 400;
    let mut rng = Rng::seeded("serve");
    for engine in Engine::all() {
        let home = TempDir::new().unwrap();
        let store = engine.prepare(home.path(), "serve");
        let addr = free_port();
        let mut acknowledged: BTreeSet<u64> = BTreeSet::new();
        let mut sent: BTreeSet<u64> = BTreeSet::new();
        let mut next_batch = 0u64;
        for round in 0..4 {
            let mut server = start_server(home.path(), addr);
            let stop_at = Instant::now() + rng.millis(150, 1200);
            // Batches go out back to back from another thread; the server is killed under them.
            let first = next_batch;
            let writer = std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut batch = first;
                loop {
                    let memories: Vec<Value> = (0..ITEMS)
                        .map(|i| {
                            let n = batch * ITEMS + i;
                            json!({"user_id": "u", "text": format!("batch {batch} item {i}"), "metadata": {"n": n}})
                        })
                        .collect();
                    let body = json!({ "memories": memories }).to_string();
                    let status = http(addr, "POST", "/v1/memories/batch", &body);
                    batch += 1;
                    match status {
                        Some(200) => acked.push(batch - 1),
                        _ => return (acked, batch),
                    }
                }
            });
            while Instant::now() < stop_at {
                std::thread::sleep(Duration::from_millis(5));
            }
            server.kill().unwrap();
            server.wait().unwrap();
            let (acked, sent_up_to) = writer.join().unwrap();
            acknowledged.extend(acked);
            sent.extend(first..sent_up_to);
            next_batch = sent_up_to;
            assert_sound(&store, home.path(), &format!("after serve round {round}"));

            let memories = exported(home.path(), "u");
            let mut present: BTreeMap<u64, u64> = BTreeMap::new();
            for n in memories.keys() {
                *present.entry(n / ITEMS).or_default() += 1;
            }
            for batch in &acknowledged {
                assert_eq!(
                    present.get(batch),
                    Some(&ITEMS),
                    "round {round}: acknowledged batch {batch} is not all there"
                );
            }
            for (batch, count) in &present {
                assert!(sent.contains(batch));
                assert_eq!(
                    *count, ITEMS,
                    "round {round}: batch {batch} is there by halves"
                );
            }
        }
        assert!(!acknowledged.is_empty(), "no batch was ever acknowledged");
    }
}

fn model_dir() -> PathBuf {
    match std::env::var_os("ENGRAM_TEST_MODEL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "ENGRAM_TEST_MODEL_DIR is not set: run the tests with scripts/test.sh, or \
             export ENGRAM_TEST_MODEL_DIR=\"$(scripts/fetch-test-model.sh)\""
        ),
    }
}

#[test]
fn reindex_killed_at_random_points_leaves_whole_vectors_and_finishes_later() {
    const MEMORIES: u64 = 1_500;
    let mut rng = Rng::seeded("reindex");
    for engine in Engine::all() {
        let home = TempDir::new().unwrap();
        let store = engine.prepare(home.path(), "reindex");
        let file = home.path().join("in.jsonl");
        let lines: String = (0..MEMORIES)
            .map(|n| {
                format!(
                    "{}\n",
                    json!({"user_id": "u", "text": format!("note {n} about the {} river trip", n % 97), "metadata": {"n": n}})
                )
            })
            .collect();
        std::fs::write(&file, lines).unwrap();
        assert!(
            engram(home.path())
                .arg("import")
                .arg(&file)
                .output()
                .unwrap()
                .status
                .success()
        );
        let mut kills = 0;
        for round in 0..4 {
            let mut child = engram(home.path())
                .arg("reindex")
                .env("ENGRAM_EMBED_MODEL", model_dir())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            kills += usize::from(kill_after(&mut child, rng.millis(300, 2500)));
            assert_sound(&store, home.path(), &format!("after reindex round {round}"));
        }
        assert!(kills > 0, "no reindex was killed in the middle");
        let out = engram(home.path())
            .args(["--json", "reindex"])
            .env("ENGRAM_EMBED_MODEL", model_dir())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_sound(&store, home.path(), "after the last reindex");
        // Every text has its vector now: a search by meaning finds the trip notes.
        let out = engram(home.path())
            .args(["search", "--user", "u", "--json", "journey", "by", "boat"])
            .env("ENGRAM_EMBED_MODEL", model_dir())
            .output()
            .unwrap();
        assert!(out.status.success());
        let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!hits.as_array().unwrap().is_empty());
    }
}

/// A home with a model configured through the environment, for the agent's crashes.
fn agent_home(engine: Engine, test: &str, memory: &str) -> (TempDir, Store) {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[llm]\nretry_base_delay_ms = 10\nmax_attempts = 1\n\n[memory]\nmodel_merge = false\n\
             extract_every_turns = 0\n{memory}"
        ),
    )
    .unwrap();
    std::fs::create_dir(home.path().join("ws")).unwrap();
    let store = engine.prepare(home.path(), test);
    (home, store)
}

fn agent(home: &Path, server: &ScriptedServer) -> Command {
    let provider = Provider::OpenAi;
    let mut cmd = engram(home);
    cmd.env("ENGRAM_PROVIDER", provider.as_str())
        .env("ENGRAM_MODEL", SCRIPTED_MODEL)
        .env(provider.default_key_env(), SCRIPTED_KEY)
        .env(provider.base_url_env(), server.base_url(provider));
    cmd
}

/// The session as `engram sessions show --json` reads it: it must read, and only a torn last
/// line may be skipped.
fn session_reads(home: &Path, key: &str) -> Value {
    let out = engram(home)
        .args(["--json", "sessions", "show", key])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the session does not read: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let skipped = shown["skipped_lines"].as_array().unwrap();
    assert!(skipped.len() <= 1, "{skipped:?}");
    shown
}

fn current_facts(home: &Path) -> Vec<String> {
    let out = engram(home)
        .args([
            "--json", "list", "--user", "tester", "--kind", "fact", "--limit", "100",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    list.iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn extraction_killed_at_random_points_leaves_a_consistent_memory() {
    let mut rng = Rng::seeded("extraction");
    for engine in Engine::all() {
        let (home, store) = agent_home(engine, "extraction", "");
        let episodes = json!({"episodes": [
            {"summary": "The user said they moved to Lisbon", "category": "life", "importance": 4},
            {"summary": "The user said they drink green tea every morning", "category": "habit", "importance": 3}
        ]})
        .to_string();
        let profile = json!({
            "facts": [{"key": "home_city", "value": "Lisbon"}],
            "preferences": [{"key": "morning_drink", "value": "green tea"}]
        })
        .to_string();
        let mut kills = 0;
        for round in 0..5 {
            // Two exchanges, then /exit: the session's end extracts (two slow model calls).
            let server = ScriptedServer::spawn(vec![
                Turn::text("Noted."),
                Turn::text("Sounds good."),
                Turn::text(episodes.clone()).delay(Duration::from_millis(250)),
                Turn::text(profile.clone()).delay(Duration::from_millis(250)),
            ])
            .unwrap();
            let mut child = agent(home.path(), &server)
                .args(["chat", "--session", "cli:crash", "--workspace"])
                .arg(home.path().join("ws"))
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"I moved to Lisbon.\nI drink green tea every morning.\n/exit\n")
                .unwrap();
            kills += usize::from(kill_after(&mut child, rng.millis(100, 900)));
            assert_sound(
                &store,
                home.path(),
                &format!("after extraction round {round}"),
            );
            session_reads(home.path(), "cli:crash");
            // Never two current facts for one key, whatever was cut short.
            let facts = current_facts(home.path());
            let unique: BTreeSet<&String> = facts.iter().collect();
            assert_eq!(unique.len(), facts.len(), "round {round}: {facts:?}");
            assert!(facts.len() <= 1, "round {round}: {facts:?}");
        }
        assert!(kills > 0, "no extraction was killed in the middle");
    }
}

#[test]
fn summarisation_killed_at_random_points_keeps_the_conversation() {
    let mut rng = Rng::seeded("summarisation");
    for engine in Engine::all() {
        // A small window: each pass reads a large file, and the session must be summarised.
        let (home, store) = agent_home(
            engine,
            "summarisation",
            "context_window = 6000\nreply_reserve = 500\nsummary_max_tokens = 150\n",
        );
        let big: String = (0..300)
            .map(|i| format!("line {i}: lorem ipsum dolor\n"))
            .collect();
        std::fs::write(home.path().join("ws/big.txt"), big).unwrap();
        let summary =
            "The user had the assistant read big.txt; it holds numbered lorem ipsum lines.";
        let mut said: Vec<String> = Vec::new();
        let mut kills = 0;
        for round in 0..8 {
            // The summary (when one is due) comes slowly, so kills land while it is made.
            let server = ScriptedServer::spawn(vec![
                Turn::tool_call("read_file", json!({"path": "big.txt"}))
                    .with_text(summary)
                    .delay(Duration::from_millis(300)),
                Turn::text(format!("Answer {round}.")),
                Turn::text(format!("Answer {round}.")),
            ])
            .unwrap();
            let message = format!("Read big.txt, pass {round}.");
            let mut child = agent(home.path(), &server)
                .args(["run", "--session", "cli:long", "-m"])
                .arg(&message)
                .arg("--workspace")
                .arg(home.path().join("ws"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // Early rounds run to the end (to fill the window); later ones are killed.
            let wait = if round < 3 {
                Duration::from_secs(60)
            } else {
                rng.millis(100, 1200)
            };
            kills += usize::from(kill_after(&mut child, wait));
            assert_sound(&store, home.path(), &format!("after summary round {round}"));
            let shown = session_reads(home.path(), "cli:long");
            // Every message the user sent before is still in the file, in order; this run's
            // is there unless the run was killed before (or while) writing it.
            let users: Vec<String> = shown["records"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["_type"] == "message" && r["role"] == "user")
                .map(|r| r["content"].as_str().unwrap().to_string())
                .collect();
            let mut with_this = said.clone();
            with_this.push(message);
            assert!(
                users == with_this || users == said,
                "round {round}: {users:?}"
            );
            said = users;
        }
        assert!(kills > 0, "no run was killed in the middle");
        // The conversation goes on after the crashes: a last run answers and its requests
        // pair every tool result with its call.
        // (The first turn is the summary if one is due, else the answer.)
        let server = ScriptedServer::spawn(vec![
            Turn::text("Still here."),
            Turn::text("Still here."),
            Turn::text("Still here."),
        ])
        .unwrap();
        let out = agent(home.path(), &server)
            .args([
                "run",
                "--session",
                "cli:long",
                "-m",
                "Are you there?",
                "--workspace",
            ])
            .arg(home.path().join("ws"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("Still here."));
        server.check_tool_pairing().unwrap();
        assert_sound(&store, home.path(), "after the last run");
    }
}
