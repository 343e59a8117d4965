#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `engram cron`, `engram gateway`, `engram skills` and `engram onboard` as real processes on
//! real homes. The gateway runs with the echo stand-in for the model
//! (`ENGRAM_GATEWAY_RUNNER=echo`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("engram"));
    cmd.arg("--home").arg(home);
    for var in [
        "ENGRAM_HOME",
        "ENGRAM_GATEWAY_RUNNER",
        "ENGRAM_MODEL",
        "ENGRAM_PROVIDER",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(cmd: &mut Command) -> Value {
    let out = ok(cmd.arg("--json"));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn add(home: &Path, args: &[&str]) -> String {
    let v = json(engram(home).args(["cron", "add"]).args(args));
    v["id"].as_str().unwrap().to_string()
}

fn runs(home: &Path, id: &str) -> Vec<Value> {
    json(engram(home).args(["cron", "runs", id]))
        .as_array()
        .unwrap()
        .clone()
}

fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running `engram gateway`, killed when dropped.
struct Gateway {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    /// Lines before this index were matched already.
    cursor: usize,
}

impl Gateway {
    fn start(home: &Path, extra: &[&str]) -> Self {
        Self::start_as(home, &["gateway"], extra)
    }

    /// The gateway inside another command (`engram serve --gateway`).
    fn start_as(home: &Path, command: &[&str], extra: &[&str]) -> Self {
        let mut child = engram(home)
            .args(command)
            .args(extra)
            .env("ENGRAM_GATEWAY_RUNNER", "echo")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut gateway = Self {
            child,
            lines,
            seen: Vec::new(),
            cursor: 0,
        };
        gateway.expect("gateway started");
        // What the gateway logged while starting (recovered runs) can still be expected.
        gateway.cursor = 0;
        gateway
    }

    /// Waits for an output line containing `text` after the last one matched; returns it.
    fn expect(&mut self, text: &str) -> String {
        if let Some(i) = self.seen[self.cursor..]
            .iter()
            .position(|l| l.contains(text))
        {
            self.cursor += i + 1;
            return self.seen[self.cursor - 1].clone();
        }
        self.cursor = self.seen.len();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    self.cursor = self.seen.len();
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {text:?}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        wait_for("the gateway to exit", timeout, || {
            self.child.try_wait().unwrap()
        })
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn jobs_live_their_whole_life_through_the_cli() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let job = json(engram(h).args([
        "cron",
        "add",
        "--name",
        "standup",
        "--message",
        "summarise",
        "--cron",
        "0 9 * * mon-fri",
        "--tz",
        "Asia/Tokyo",
        "--missed",
        "skip",
    ]));
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["schedule"]["kind"], "cron");
    assert_eq!(job["schedule"]["tz"], "Asia/Tokyo");
    assert_eq!(job["payload"]["kind"], "agent_turn");
    assert_eq!(job["session_key"], format!("cron:{id}"));
    assert_eq!(job["missed"], "skip");
    assert!(
        job["state"]["next_run_at"]
            .as_str()
            .unwrap()
            .contains("T09:00:00+09:00[Asia/Tokyo]")
    );

    // Text listings show the next run in the job's own zone.
    let out = ok(engram(h).args(["cron", "list"]));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&id) && text.contains("09:00 JST"), "{text}");

    ok(engram(h).args(["cron", "disable", &id]));
    assert_eq!(json(engram(h).args(["cron", "list"])), Value::Array(vec![]));
    assert_eq!(
        json(engram(h).args(["cron", "list", "--all"]))[0]["enabled"],
        false
    );
    let enabled = json(engram(h).args(["cron", "enable", &id]));
    assert_eq!(enabled["enabled"], true);
    assert!(runs(h, &id).is_empty());
    ok(engram(h).args(["cron", "remove", &id]));
    let out = engram(h).args(["cron", "remove", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "no such job");
}

#[test]
fn bad_schedules_are_refused_at_once_in_one_line() {
    let home = TempDir::new().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--cron", "0 0 30 2 *"], "day 30 never occurs in February"),
        (
            &["--cron", "0 25 * * *"],
            "25 is out of range for the hour field (0-23)",
        ),
        (
            &["--cron", "0 9 * * *", "--tz", "Europe/Atlantis"],
            "unknown time zone 'Europe/Atlantis'",
        ),
        (&["--every", "0s"], "cannot use '0s' as an interval"),
        (&["--at", "2001-01-01T00:00:00Z"], "has already passed"),
    ];
    for (schedule, want) in cases {
        let out = engram(home.path())
            .args(["cron", "add", "--name", "x", "--message", "y"])
            .args(*schedule)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{schedule:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(want), "{schedule:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // Two schedules at once is a usage error from the argument parser.
    let out = engram(home.path())
        .args([
            "cron",
            "add",
            "--name",
            "x",
            "--message",
            "y",
            "--every",
            "1m",
            "--at",
            "now",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        json(engram(home.path()).args(["cron", "list", "--all"])),
        Value::Array(vec![])
    );
}

#[test]
fn the_bundled_time_zone_database_works_without_the_systems() {
    let home = TempDir::new().unwrap();
    let job = json(
        engram(home.path())
            .env("TZDIR", home.path().join("no-zoneinfo-here"))
            .args([
                "cron",
                "add",
                "--name",
                "ny",
                "--message",
                "m",
                "--cron",
                "30 2 * * *",
            ])
            .args(["--tz", "America/New_York"]),
    );
    assert!(
        job["state"]["next_run_at"]
            .as_str()
            .unwrap()
            .ends_with("[America/New_York]")
    );
}

#[test]
fn the_gateway_needs_a_model_unless_the_test_runner_is_chosen() {
    let home = TempDir::new().unwrap();
    let out = engram(home.path()).arg("gateway").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no language model configured"), "{err}");
    assert!(err.contains("ENGRAM_MODEL"), "{err}");
}

#[test]
fn a_running_gateway_picks_up_jobs_added_from_another_process() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let mut gateway = Gateway::start(h, &["--heartbeat", "0"]);

    let added = Instant::now();
    let id = add(
        h,
        &["--name", "ping", "--message", "hello there", "--at", "now"],
    );
    let line = gateway.expect(&format!("job {id} (ping): run #"));
    assert!(line.contains("started"), "{line}");
    gateway.expect(&format!("job {id} (ping): run #"));
    gateway.expect("  | echo: hello there");
    // Found through the one-second change check, not a restart.
    assert!(added.elapsed() < Duration::from_secs(5));
    let history = runs(h, &id);
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["status"], "ok");
    assert_eq!(history[0]["output"], "echo: hello there");
    // A one-shot job is gone after its run; its history stays.
    let out = engram(h)
        .args(["cron", "list", "--all"])
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        Value::Array(vec![])
    );

    // A failing job is recorded and the gateway carries on.
    let bad = add(
        h,
        &[
            "--name",
            "bad",
            "--message",
            "fail: out of luck",
            "--at",
            "now",
        ],
    );
    let line = gateway.expect(&format!("job {bad} (bad): run #2 error"));
    assert!(line.ends_with(": out of luck"), "{line}");
    let good = add(
        h,
        &["--name", "good", "--message", "still here", "--every", "1s"],
    );
    gateway.expect("  | echo: still here");
    gateway.expect("  | echo: still here");
    let history = runs(h, &good);
    assert!(history.len() >= 2);
    // Every-second runs stay on their whole-second grid.
    let scheduled: Vec<i64> = history
        .iter()
        .map(|r| r["scheduled_at_ms"].as_i64().unwrap())
        .collect();
    assert!(
        scheduled.windows(2).all(|w| (w[0] - w[1]) % 1000 == 0),
        "{scheduled:?}"
    );

    // A second gateway on the same home is refused.
    let out = engram(h)
        .arg("gateway")
        .env("ENGRAM_GATEWAY_RUNNER", "echo")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already running"));

    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(15)).success());
    gateway.expect("gateway stopped");
}

#[test]
fn sigterm_mid_run_records_the_run_as_interrupted() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let id = add(
        h,
        &[
            "--name",
            "slow",
            "--message",
            "sleep:60 slow",
            "--at",
            "now",
        ],
    );
    let mut gateway = Gateway::start(h, &["--heartbeat", "0", "--shutdown-grace", "1"]);
    gateway.expect(&format!("job {id} (slow): run #1 started"));
    gateway.signal("TERM");
    let status = gateway.wait(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    gateway.expect("interrupted");
    let history = runs(h, &id);
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["status"], "interrupted");
    assert!(history[0]["finished_at_ms"].is_i64());
}

#[test]
fn a_gateway_killed_mid_run_is_recovered_on_restart() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let id = add(
        h,
        &[
            "--name",
            "work",
            "--message",
            "sleep:1 finished",
            "--at",
            "now",
            "--keep",
        ],
    );
    let mut first = Gateway::start(h, &["--heartbeat", "0"]);
    first.expect(&format!("job {id} (work): run #1 started"));
    first.signal("KILL");
    first.wait(Duration::from_secs(10));
    let history = runs(h, &id);
    assert_eq!(
        history[0]["status"], "running",
        "left half-done by the killed process"
    );

    let mut second = Gateway::start(h, &["--heartbeat", "0"]);
    // It was gone for less than a minute, so the job simply runs again.
    second.expect(&format!("job {id} (work): run #1 was cut off"));
    second.expect("  | echo: finished");
    let history = runs(h, &id);
    let statuses: Vec<&str> = history
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "interrupted"]);
    let job = json(engram(h).args(["cron", "list", "--all"]));
    assert_eq!(
        job[0]["enabled"], false,
        "kept one-shot, disabled after its run"
    );
    drop(second);
}

#[test]
fn cron_run_runs_a_job_now_without_touching_its_schedule() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let id = add(
        h,
        &[
            "--name",
            "daily",
            "--message",
            "good morning",
            "--cron",
            "@daily",
            "--tz",
            "UTC",
        ],
    );
    let before = json(engram(h).args(["cron", "list"]))[0]["state"]["next_run_at_ms"].clone();
    let out = ok(engram(h)
        .env("ENGRAM_GATEWAY_RUNNER", "echo")
        .args(["cron", "run", &id]));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "echo: good morning"
    );
    let after = json(engram(h).args(["cron", "list"]))[0].clone();
    assert_eq!(after["state"]["next_run_at_ms"], before);
    assert_eq!(after["state"]["last_status"], "ok");
    assert_eq!(runs(h, &id)[0]["trigger"], "manual");

    let fail = add(
        h,
        &["--name", "f", "--message", "fail: nope", "--every", "1h"],
    );
    let out = engram(h)
        .env("ENGRAM_GATEWAY_RUNNER", "echo")
        .args(["cron", "run", &fail])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

#[test]
fn the_heartbeat_only_calls_the_model_when_there_are_tasks() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    ok(engram(h).arg("onboard"));
    // The onboard template has no tasks.
    let mut gateway = Gateway::start(h, &["--heartbeat", "1s"]);
    gateway.expect("heartbeat: no tasks in HEARTBEAT.md; no turn");
    std::fs::write(h.join("workspace/HEARTBEAT.md"), "- [ ] check the oven\n").unwrap();
    gateway.expect("heartbeat: turn finished");
    gateway.expect("check the oven");
}

#[test]
fn skills_list_reports_broken_files_and_shows_availability() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let skill = |name: &str, text: &str| {
        let dir = h.join("workspace/skills").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("SKILL.md"), text).unwrap();
    };
    skill("broken", "---\ndescription: 'unterminated\n---\n");
    skill(
        "needs-gh",
        "---\ndescription: GitHub work\nrequires:\n  bins: [engram-no-such-tool]\n---\nx\n",
    );
    let out = ok(engram(h).args(["skills", "list", "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cron", "memory", "needs-gh"]);
    assert_eq!(v["skills"][2]["available"], false);
    assert_eq!(v["skills"][2]["missing"][0], "command engram-no-such-tool");
    assert!(
        v["errors"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("skills/broken/SKILL.md")
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("broken/SKILL.md"), "{stderr}");

    let out = ok(engram(h).args(["skills", "list"]));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("unavailable: missing command engram-no-such-tool"),
        "{text}"
    );
}

#[test]
fn onboard_creates_a_home_and_never_overwrites() {
    let home = TempDir::new().unwrap();
    let h = home.path().join("new-home");
    std::fs::create_dir_all(&h).unwrap();
    std::fs::write(h.join("config.toml"), "# mine\n").unwrap();
    let v = json(engram(&h).arg("onboard"));
    let created: Vec<String> = v["created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    for file in [
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "TOOLS.md",
        "HEARTBEAT.md",
        "memory/MEMORY.md",
    ] {
        let path = h.join("workspace").join(file);
        assert!(path.is_file(), "{file}");
        assert!(created.contains(&path.display().to_string()), "{file}");
    }
    assert_eq!(
        std::fs::read_to_string(h.join("config.toml")).unwrap(),
        "# mine\n"
    );
    assert_eq!(v["kept"][0], h.join("config.toml").display().to_string());
    // The commented template is a valid configuration that engram reads without a warning.
    let fresh = home.path().join("fresh");
    ok(engram(&fresh).arg("onboard"));
    let out = ok(engram(&fresh).args(["cron", "list"]));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ok(engram(&fresh).args(["skills", "list"]));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(h.join("workspace/USER.md"), "Alice").unwrap();
    let again = json(engram(&h).arg("onboard"));
    assert_eq!(again["created"], Value::Array(vec![]));
    assert_eq!(
        std::fs::read_to_string(h.join("workspace/USER.md")).unwrap(),
        "Alice"
    );
}

#[test]
fn serve_with_gateway_runs_jobs_and_stops_both_on_sigterm() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let mut both = Gateway::start_as(h, &["serve", "--gateway", "--listen", "127.0.0.1:0"], &[]);
    let id = add(h, &["--name", "ping", "--message", "served", "--at", "now"]);
    both.expect(&format!("job {id} (ping): run #"));
    both.expect("  | echo: served");
    // The same home has its gateway: another is refused.
    let out = engram(h)
        .arg("gateway")
        .env("ENGRAM_GATEWAY_RUNNER", "echo")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    both.signal("TERM");
    assert!(both.wait(Duration::from_secs(15)).success());
    both.expect("gateway stopped");
}
