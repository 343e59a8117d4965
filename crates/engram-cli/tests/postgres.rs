#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Several engram processes on one PostgreSQL database act as one service: two `engram serve`
//! and two `engram gateway` processes, each with a home of its own, all with the same
//! ENGRAM_DATABASE_URL (a fresh database on the test script's PostgreSQL 16).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

mod common;
use common::Database;

const ENGRAM: &str = env!("CARGO_BIN_EXE_engram");

fn engram(home: &Path, url: &str) -> Command {
    let mut cmd = Command::new(ENGRAM);
    cmd.arg("--home").arg(home).env("ENGRAM_DATABASE_URL", url);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_GATEWAY_RUNNER",
        "ENGRAM_MODEL",
        "ENGRAM_PROVIDER",
        "ENGRAM_EMBED_MODEL",
        "ENGRAM_USER",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A running engram process whose output lines can be waited for; killed when dropped.
struct Process {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Process {
    fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (sender, lines) = channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let sender = sender.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `text` (seen before or arriving); returns it.
    fn expect(&mut self, text: &str, within: Duration) -> String {
        if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
            return line.clone();
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {text:?}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Every line so far.
    fn drain(&mut self) -> &[String] {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        &self.seen
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `engram serve` on a random port; returns it and its address.
fn serve(home: &Path, url: &str) -> (Process, String) {
    let mut cmd = engram(home, url);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("ENGRAM_LOG", "warn");
    let mut process = Process::start(cmd);
    let line = process.expect("engram is listening on ", Duration::from_secs(60));
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    (process, address)
}

/// One HTTP/1.1 request with a JSON body; the status and the JSON answer.
fn http(address: &str, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let (status, text) = http_text(address, method, path, token, body);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// One HTTP/1.1 request with a JSON body; the status and the answer's text.
fn http_text(
    address: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, String) {
    try_http_text(address, method, path, token, body).unwrap()
}

/// [`http_text`], with the connection's failures as errors.
fn try_http_text(
    address: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status: u16 = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {response}")))?;
    let (_, body) = response.split_once("\r\n\r\n").unwrap_or(("", ""));
    let body = if response
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

fn token(home: &Path, url: &str, user: &str) -> String {
    ok(engram(home, url).args(["token", "create", "--user", user]))
        .trim()
        .to_string()
}

#[test]
fn two_servers_and_two_gateways_on_one_database_act_as_one() {
    let db = Database::new("shared");
    let (home_a, home_b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (a, b) = (home_a.path(), home_b.path());
    let alice = token(a, &db.url, "alice");
    let (_server_a, at_a) = serve(a, &db.url);
    let (_server_b, at_b) = serve(b, &db.url);

    // A memory added through one server is found through the other at once.
    let (status, added) = http(
        &at_a,
        "POST",
        "/v1/memories",
        &alice,
        Some(json!({"user_id": "alice", "text": "Alice adopted a beagle named Rex"})),
    );
    assert!(status == 200 || status == 201, "{status} {added}");
    let (status, found) = http(
        &at_b,
        "POST",
        "/v1/memories/search",
        &alice,
        Some(json!({"user_id": "alice", "query": "beagle"})),
    );
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        found["results"][0]["text"],
        "Alice adopted a beagle named Rex"
    );

    // A token made on one host works on every server; revoked, it stops working everywhere
    // within a second.
    let bob = token(b, &db.url, "bob");
    let search = json!({"user_id": "bob", "query": "anything"});
    for at in [&at_a, &at_b] {
        assert_eq!(
            http(
                at,
                "POST",
                "/v1/memories/search",
                &bob,
                Some(search.clone())
            )
            .0,
            200
        );
    }
    let id = bob.split('_').nth(1).unwrap().to_string();
    ok(engram(a, &db.url).args(["token", "revoke", &id]));
    let revoked = Instant::now();
    for at in [&at_a, &at_b] {
        loop {
            let (status, _) = http(
                at,
                "POST",
                "/v1/memories/search",
                &bob,
                Some(search.clone()),
            );
            if status == 401 {
                break;
            }
            assert!(
                revoked.elapsed() < Duration::from_secs(1),
                "still {status} at {at}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!(
        "the revocation held on both servers after {:?}",
        revoked.elapsed()
    );

    // Two gateways: a job added from anywhere is picked up within a second, and no
    // occurrence runs twice.
    let gateway = |home: &Path| {
        let mut cmd = engram(home, &db.url);
        cmd.args(["gateway", "--heartbeat", "0"])
            .env("ENGRAM_GATEWAY_RUNNER", "echo");
        let mut process = Process::start(cmd);
        process.expect("gateway started", Duration::from_secs(60));
        process
    };
    let mut gateway_a = gateway(a);
    let mut gateway_b = gateway(b);
    let added = Instant::now();
    let once = ok(engram(b, &db.url).args([
        "cron",
        "add",
        "--name",
        "ping",
        "--message",
        "hello",
        "--at",
        "now",
        "--json",
    ]));
    let once: Value = serde_json::from_str(&once).unwrap();
    let once = once["id"].as_str().unwrap().to_string();
    let started = format!("job {once} (ping): run #");
    let mut picked = None;
    while picked.is_none() {
        for gateway in [&mut gateway_a, &mut gateway_b] {
            if gateway.drain().iter().any(|l| l.contains(&started)) {
                picked = Some(added.elapsed());
            }
        }
        assert!(
            added.elapsed() < Duration::from_secs(5),
            "the job was not picked up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("picked up after {picked:?} (the `engram cron add` process included)");
    assert!(picked.unwrap() < Duration::from_secs(2), "{picked:?}");

    let every = ok(engram(a, &db.url).args([
        "cron",
        "add",
        "--name",
        "tick",
        "--message",
        "tock",
        "--every",
        "1s",
        "--json",
    ]));
    let every: Value = serde_json::from_str(&every).unwrap();
    let every = every["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(6));
    let runs: Value = serde_json::from_str(&ok(
        engram(b, &db.url).args(["cron", "runs", &every, "--json"])
    ))
    .unwrap();
    let runs = runs.as_array().unwrap();
    assert!(runs.len() >= 4, "{runs:?}");
    let mut occurrences: HashMap<i64, usize> = HashMap::new();
    for run in runs {
        *occurrences
            .entry(run["scheduled_at_ms"].as_i64().unwrap_or(-1))
            .or_default() += 1;
    }
    assert!(
        occurrences.values().all(|&n| n == 1),
        "an occurrence ran twice: {runs:?}"
    );
    // Both gateways took part (each claims what is due when it looks; over several seconds
    // each gets some), and no run is left running.
    let ran_on = |gateway: &mut Process| {
        gateway
            .drain()
            .iter()
            .filter(|l| l.contains(&format!("job {every} (tick): run #")))
            .count()
    };
    eprintln!(
        "runs of the every-second job: {} by one gateway, {} by the other",
        ran_on(&mut gateway_a),
        ran_on(&mut gateway_b)
    );
}

#[test]
fn a_server_killed_mid_batch_loses_nothing_it_acknowledged() {
    let db = Database::new("kill");
    let (home_a, home_b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (a, b) = (home_a.path(), home_b.path());
    let alice = token(a, &db.url, "alice");
    let (mut server_a, at_a) = serve(a, &db.url);
    let (_server_b, at_b) = serve(b, &db.url);

    // Batches go to the first server one after another, on a thread, until it is killed.
    let (acks, acknowledged) = channel::<usize>();
    let sender_token = alice.clone();
    let sender = std::thread::spawn(move || {
        for batch in 0.. {
            let memories: Vec<Value> = (0..500)
                .map(|i| json!({"user_id": "alice", "text": format!("batch {batch} line {i}")}))
                .collect();
            let result = try_http_text(
                &at_a,
                "POST",
                "/v1/memories/batch",
                &sender_token,
                Some(json!({"memories": memories})),
            );
            match result {
                Ok((200, _)) | Ok((201, _)) => {
                    if acks.send(batch).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    });
    // Some batches acknowledged, then kill -9 in the middle of the next.
    let mut done = Vec::new();
    while done.len() < 3 {
        done.push(acknowledged.recv_timeout(Duration::from_secs(60)).unwrap());
    }
    server_a.child.kill().unwrap();
    let _ = server_a.child.wait();
    let _ = sender.join();
    done.extend(acknowledged.try_iter());

    // Everything acknowledged is there, through the other server; the batch in flight is
    // there whole or not at all.
    let next = done.iter().max().unwrap() + 1;
    let (status, exported) = http_text(&at_b, "GET", "/v1/export?user_id=alice", &alice, None);
    assert_eq!(status, 200, "{exported}");
    let texts: Vec<String> = exported
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|m| m["text"].as_str().map(str::to_string))
        .collect();
    for batch in &done {
        let prefix = format!("batch {batch} line ");
        assert_eq!(
            texts.iter().filter(|t| t.starts_with(&prefix)).count(),
            500,
            "batch {batch} was acknowledged"
        );
    }
    let in_flight = texts
        .iter()
        .filter(|t| t.starts_with(&format!("batch {next} line ")))
        .count();
    assert!(
        in_flight == 0 || in_flight == 500,
        "half a batch: {in_flight}"
    );
    eprintln!(
        "{} batches acknowledged before the kill; the one in flight: {in_flight} of 500 stored",
        done.len()
    );
}

/// `engram` on a home's own SQLite file (no database URL).
fn on_sqlite(home: &Path) -> Command {
    let mut cmd = engram(home, "");
    cmd.env_remove("ENGRAM_DATABASE_URL");
    cmd
}

#[test]
fn a_home_copied_to_postgresql_and_back_exports_the_same() {
    let db = Database::new("copy");
    let (first, second, third) = (
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
    );
    let data = first.path().join("memories.jsonl");
    let mut lines = String::new();
    for i in 0..300 {
        let tag = ["a", "b"][i % 2];
        let line = json!({
            "user_id": format!("user-{}", i % 3),
            "session_id": format!("s{}", i % 4),
            "text": format!("memory {i}: tea, gardens and the café on day {}", i % 17),
            "importance": 1 + i % 5,
            "created_at": format!("2024-01-{:02}T10:{:02}:00Z", 1 + i % 28, i % 60),
            "valid_to": if i % 10 == 0 { json!("2024-03-01T00:00:00Z") } else { Value::Null },
            "metadata": {"n": i, "tag": tag},
        });
        lines.push_str(&format!("{line}\n"));
    }
    std::fs::write(&data, lines).unwrap();
    ok(on_sqlite(first.path()).arg("import").arg(&data));
    token(first.path(), "", "user-0");

    // SQLite -> PostgreSQL -> SQLite.
    ok(on_sqlite(first.path()).args(["copy", "--to", &db.url]));
    let back = third.path().join("engram.db");
    ok(engram(second.path(), &db.url)
        .args(["copy", "--to"])
        .arg(&back));
    for user in ["user-0", "user-1", "user-2"] {
        let original = ok(on_sqlite(first.path()).args(["export", "--user", user]));
        assert_eq!(original.lines().count(), 100);
        let shared = ok(engram(second.path(), &db.url).args(["export", "--user", user]));
        let returned = ok(on_sqlite(third.path()).args(["export", "--user", user]));
        assert_eq!(shared, original, "{user} on PostgreSQL");
        assert_eq!(returned, original, "{user} back on SQLite");
    }
    let tokens = |cmd: &mut Command| ok(cmd.args(["token", "list", "--json"]));
    assert_eq!(
        tokens(&mut engram(second.path(), &db.url)),
        tokens(&mut on_sqlite(first.path()))
    );

    // Into a store that holds something: refused, one line, nothing changed.
    let out = on_sqlite(first.path())
        .args(["copy", "--to", &db.url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already holds data"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A PostgreSQL server of this test's own (stopped and started by it), on a Unix socket in a
/// folder of its own; stopped and deleted when dropped.
struct PrivateCluster {
    dir: TempDir,
    bin: std::path::PathBuf,
    os_user: String,
}

impl PrivateCluster {
    fn start() -> Self {
        let bin =
            std::path::PathBuf::from(std::env::var("ENGRAM_TEST_PG_BIN").unwrap_or_else(|_| {
                panic!("ENGRAM_TEST_PG_BIN is not set: run the tests through scripts/test.sh")
            }));
        let os_user = std::env::var("ENGRAM_TEST_PG_OS_USER").unwrap_or_default();
        let dir = tempfile::Builder::new()
            .prefix("engram-cli-pg-")
            .tempdir_in("/tmp")
            .unwrap();
        let cluster = Self { dir, bin, os_user };
        if !cluster.os_user.is_empty() {
            assert!(
                Command::new("chown")
                    .arg(&cluster.os_user)
                    .arg(cluster.dir.path())
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                &format!("--pgdata={data}"),
                "--username=postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{data}/postgresql.conf"))
            .and_then(|mut f| {
                writeln!(
                    f,
                    "listen_addresses = ''\nunix_socket_directories = '{}'\nfsync = off",
                    cluster.dir.path().display()
                )
            })
            .unwrap();
        cluster.resume();
        cluster
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    fn run(&self, program: &str, args: &[&str]) {
        let mut cmd = if self.os_user.is_empty() {
            Command::new(self.bin.join(program))
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", &self.os_user, "--"])
                .arg(self.bin.join(program));
            c
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn url(&self) -> String {
        let dir: String = self
            .dir
            .path()
            .display()
            .to_string()
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("postgresql://postgres@{dir}/postgres")
    }

    fn stop(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }

    fn resume(&self) {
        let data = self.data();
        let log = format!("{data}/server.log");
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-t", "60", "start"],
        );
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = self.data();
        let pg_ctl = self.bin.join("pg_ctl");
        let mut cmd = if self.os_user.is_empty() {
            Command::new(&pg_ctl)
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", &self.os_user, "--"]).arg(&pg_ctl);
            c
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
    }
}

#[test]
fn the_server_answers_503_while_the_database_is_away_and_recovers_by_itself() {
    let cluster = PrivateCluster::start();
    let url = cluster.url();
    let home = TempDir::new().unwrap();
    let alice = token(home.path(), &url, "alice");
    let (_server, at) = serve(home.path(), &url);
    let add = |text: &str| {
        http(
            &at,
            "POST",
            "/v1/memories",
            &alice,
            Some(json!({"user_id": "alice", "text": text})),
        )
    };
    assert!(add("before the outage").0 < 300);

    cluster.stop();
    let (status, body) = add("during the outage");
    assert_eq!(status, 503, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot reach the database"), "{body}");
    let search = json!({"user_id": "alice", "query": "outage"});
    assert_eq!(
        http(
            &at,
            "POST",
            "/v1/memories/search",
            &alice,
            Some(search.clone())
        )
        .0,
        503
    );

    cluster.resume();
    let back = Instant::now();
    loop {
        let (status, body) = http(
            &at,
            "POST",
            "/v1/memories/search",
            &alice,
            Some(search.clone()),
        );
        if status == 200 {
            let texts: Vec<&str> = body["results"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|h| h["text"].as_str())
                .collect();
            assert_eq!(texts, ["before the outage"], "nothing half-written");
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "still {status}: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "answering again {:?} after the database came back",
        back.elapsed()
    );
    assert!(add("after the outage").0 < 300);
}

/// `engram bench hybrid --database-url` measures both engines on the same embedded store: the
/// SQLite store is copied into a schema of the database and searched there through pgvector.
#[test]
fn bench_hybrid_measures_sqlite_and_postgresql_side_by_side() {
    let model = std::env::var("ENGRAM_TEST_MODEL_DIR").unwrap_or_else(|_| {
        panic!(
            "ENGRAM_TEST_MODEL_DIR is not set: run the tests with scripts/test.sh, or export \
             ENGRAM_TEST_MODEL_DIR=\"$(scripts/fetch-test-model.sh)\""
        )
    });
    let db = Database::new("bench_hybrid");
    let home = TempDir::new().unwrap();
    let mut cmd = engram(home.path(), &db.url);
    cmd.env_remove("ENGRAM_DATABASE_URL")
        .env("ENGRAM_EMBED_MODEL", &model)
        .args(["--json", "bench", "hybrid", "--size", "300", "--users", "3"])
        .args(["--queries", "5", "--database-url", &db.url]);
    let report: Value = serde_json::from_str(&ok(&mut cmd)).unwrap();
    let engines = report["engines"].as_array().unwrap();
    let names: Vec<&str> = engines
        .iter()
        .map(|e| e["engine"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sqlite", "postgresql"], "{report}");
    for engine in engines {
        assert_eq!(engine["memories"], 300, "{engine}");
        assert_eq!(engine["user_memories"], 100, "{engine}");
        assert!(engine["hybrid_p50_ms"].as_f64().unwrap() > 0.0, "{engine}");
        let dense_searches = ["exact_in_database", "exact_in_memory", "approximate"]
            .iter()
            .map(|path| engine[format!("dense_{path}")].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!(
            dense_searches, 5,
            "one dense search per timed query: {engine}"
        );
    }
    let dense = engines[1]["dense_search"].as_str().unwrap();
    assert!(dense.starts_with("pgvector"), "{dense}");
}
