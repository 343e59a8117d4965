#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `engram` binary over real stores in temporary homes.

use std::path::Path;
use std::process::{Command, Stdio};

use assert_cmd::prelude::*;
use predicates::prelude::*;
use serde_json::Value;
use tempfile::TempDir;

fn engram(home: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("engram"));
    cmd.arg("--home").arg(home);
    cmd.env_remove("ENGRAM_HOME").env_remove("ENGRAM_USER");
    cmd
}

fn json_out(cmd: &mut Command) -> Value {
    let out = cmd.arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn add(home: &Path, user: &str, text: &str) -> String {
    let v = json_out(engram(home).args(["add", "--user", user, text]));
    v["id"].as_str().unwrap().to_string()
}

#[test]
fn a_memory_lives_its_whole_life_through_the_cli() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let id = add(h, "alice", "Alice uses Python 3.9 for data work");
    add(h, "alice", "Alice went hiking in the Alps");

    let hits = json_out(engram(h).args(["search", "--user", "alice", "python"]));
    assert_eq!(hits.as_array().unwrap().len(), 1);
    assert_eq!(hits[0]["id"], id.as_str());
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);

    engram(h)
        .args(["update", &id, "Alice uses Python 3.12 for data work"])
        .assert()
        .success();
    let got = json_out(engram(h).args(["get", &id]));
    assert_eq!(got["text"], "Alice uses Python 3.12 for data work");

    engram(h).args(["invalidate", &id]).assert().success();
    engram(h)
        .args(["invalidate", &id])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("already invalidated"));
    let hits = json_out(engram(h).args(["search", "--user", "alice", "python"]));
    assert!(hits.as_array().unwrap().is_empty());
    let hits = json_out(engram(h).args(["search", "--user", "alice", "--all", "python"]));
    assert_eq!(hits.as_array().unwrap().len(), 1);

    engram(h).args(["delete", &id]).assert().success();
    engram(h).args(["get", &id]).assert().code(3);
    let history = json_out(engram(h).args(["history", &id]));
    let events: Vec<_> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["add", "update", "invalidate", "delete"]);
    assert_eq!(
        history[1]["old_text"],
        "Alice uses Python 3.9 for data work"
    );
    engram(h)
        .args(["history", &id])
        .assert()
        .success()
        .stdout(predicate::str::contains("update").and(predicate::str::contains("by cli")));
}

#[test]
fn adding_the_same_text_twice_reports_the_first() {
    let home = TempDir::new().unwrap();
    let id = add(home.path(), "u", "likes tea");
    // A conflict, exit 4 (as the README says), still naming the memory that holds the text.
    let out = engram(home.path())
        .args(["add", "--user", "u", "likes", "tea", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["status"], "duplicate");
    assert_eq!(again["id"], id.as_str());
    engram(home.path())
        .args(["add", "--user", "u", "likes", "tea"])
        .assert()
        .code(4)
        .stdout(predicate::str::contains(format!("already stored as {id}")));
}

#[test]
fn add_takes_every_field() {
    let home = TempDir::new().unwrap();
    let v = json_out(engram(home.path()).args([
        "add",
        "--user",
        "u",
        "--agent",
        "a",
        "--session",
        "s",
        "--kind",
        "fact",
        "--category",
        "user_info",
        "--importance",
        "5",
        "--at",
        "2023-05-08T13:56:00Z",
        "--meta",
        "dia_id=D1:3",
        "--meta",
        "turn=3",
        "--source",
        "test",
        "Caroline went to a support group",
    ]));
    let m = &v["memory"];
    assert_eq!(m["agent_id"], "a");
    assert_eq!(m["session_id"], "s");
    assert_eq!(m["kind"], "fact");
    assert_eq!(m["importance"], 5);
    assert_eq!(m["created_at"], "2023-05-08T13:56:00Z");
    assert_eq!(
        m["metadata"],
        serde_json::json!({"dia_id": "D1:3", "turn": 3})
    );
    let hits = json_out(engram(home.path()).args([
        "search",
        "--user",
        "u",
        "--where",
        "dia_id=D1:3",
        "--kind",
        "fact",
        "--since",
        "2023-05-01",
        "--until",
        "2023-06-01",
        "--min-importance",
        "4",
        "support",
    ]));
    assert_eq!(hits.as_array().unwrap().len(), 1);
}

#[test]
fn import_keeps_good_lines_and_names_bad_ones() {
    let home = TempDir::new().unwrap();
    let file = home.path().join("in.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"user_id": "u", "text": "first memory", "created_at": "2023-05-08T13:56:00Z", "metadata": {"dia_id": "D1:1"}}"#, "\n",
            "this is not json\n",
            "\n",
            r#"{"user_id": "u", "text": "second memory", "kind": "fact", "importance": 4}"#, "\n",
            r#"{"user_id": "u", "text": "bad importance", "importance": 9}"#, "\n",
            r#"{"text": "no user"}"#, "\n",
            r#"{"user_id": "u", "text": "first memory"}"#, "\n",
            r#"{"user_id": "u", "text": "typo field", "usr": 1}"#, "\n",
            r#"{"user_id": "u", "text": "bad time", "created_at": "yesterday-ish"}"#, "\n",
        ),
    )
    .unwrap();
    let out = engram(home.path())
        .arg("import")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "line 2: not valid JSON",
        "line 5: importance must be an integer from 1 to 5",
        "line 6: missing field `user_id`",
        "line 8: unknown field `usr`",
        "line 9: created_at: cannot read 'yesterday-ish'",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("2 added, 1 duplicates, 5 rejected"),
        "{stdout}"
    );
    let list = json_out(engram(home.path()).args(["list", "--user", "u"]));
    assert_eq!(list.as_array().unwrap().len(), 2);
}

#[test]
fn import_reads_standard_input_and_reports_json() {
    let home = TempDir::new().unwrap();
    let mut cmd = engram(home.path());
    cmd.args(["--json", "import", "-"]);
    let out = assert_cmd::Command::from_std(cmd)
        .write_stdin("{\"user_id\":\"u\",\"text\":\"one\"}\n{\"user_id\":\"u\",\"text\":\"two\"}\n")
        .output()
        .unwrap();
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["added"], 2);
    assert_eq!(summary["rejected"], serde_json::json!([]));
}

#[test]
fn export_then_import_reproduces_the_same_file() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    add(h, "u", "plain memory");
    json_out(engram(h).args([
        "add",
        "--user",
        "u",
        "--session",
        "s1",
        "--kind",
        "preference",
        "--category",
        "style",
        "--meta",
        "nested={\"a\":[1,2.5,\"x\"]}",
        "--meta",
        "z=true",
        "--at",
        "2021-02-03T04:05:06.789Z",
        "prefers tabs",
    ]));
    let closed = add(h, "u", "lived in Paris");
    engram(h).args(["invalidate", &closed]).assert().success();
    add(h, "other", "someone else");

    let first = engram(h).args(["export", "--user", "u"]).output().unwrap();
    assert!(first.status.success());
    assert_eq!(String::from_utf8_lossy(&first.stdout).lines().count(), 3);

    let copy = TempDir::new().unwrap();
    let file = copy.path().join("export.jsonl");
    std::fs::write(&file, &first.stdout).unwrap();
    engram(copy.path())
        .arg("import")
        .arg(&file)
        .assert()
        .success();
    let second = engram(copy.path())
        .args(["export", "--user", "u"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&second.stdout)
    );
    // Importing the same export again changes nothing.
    engram(copy.path())
        .arg("import")
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 added, 3 duplicates"));
    // --output writes the same bytes to a file.
    let out_file = copy.path().join("again.jsonl");
    engram(copy.path())
        .args(["export", "--user", "u", "--output"])
        .arg(&out_file)
        .assert()
        .success();
    assert_eq!(std::fs::read(&out_file).unwrap(), first.stdout);
}

#[test]
fn batch_search_answers_every_line_in_order() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let data = h.join("data.jsonl");
    std::fs::write(
        &data,
        concat!(
            r#"{"user_id":"a","text":"apples are red","metadata":{"dia_id":"D1:1"},"created_at":"2023-01-01T00:00:00Z"}"#, "\n",
            r#"{"user_id":"a","text":"bananas are yellow"}"#, "\n",
            r#"{"user_id":"b","text":"apples are green"}"#, "\n",
        ),
    )
    .unwrap();
    engram(h).arg("import").arg(&data).assert().success();
    let queries = h.join("q.jsonl");
    std::fs::write(
        &queries,
        concat!(
            r#"{"user_id":"a","query":"apples"}"#,
            "\n",
            r#"{"user_id":"b","query":"apples"}"#,
            "\n",
            r#"{"user_id":"a","query":"???"}"#,
            "\n",
            r#"{"user_id":"a","query":"yellow bananas"}"#,
            "\n",
        ),
    )
    .unwrap();
    let out = engram(h)
        .args(["search", "--batch"])
        .arg(&queries)
        .args(["--limit", "5", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "a bad line makes the run partial"
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0][0]["text"], "apples are red");
    assert_eq!(lines[0][0]["metadata"]["dia_id"], "D1:1");
    assert_eq!(lines[0][0]["created_at"], "2023-01-01T00:00:00Z");
    assert_eq!(lines[1][0]["text"], "apples are green");
    assert_eq!(lines[2], serde_json::json!([]));
    assert_eq!(lines[3][0]["text"], "bananas are yellow");
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3:"));
}

#[test]
fn bad_requests_get_one_line_errors_and_distinct_statuses() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    add(h, "u", "something");
    let cases: &[(&[&str], i32, &str)] = &[
        (&["search", "anything"], 2, "--user is required"),
        (&["search", "--user", "u", "  "], 2, "query is empty"),
        (
            &["search", "--user", "u", "?!"],
            2,
            "no words to search for",
        ),
        (
            &["get", "0193a5b2-7c1e-7d3a-9f00-2b6c1d9e4a10"],
            3,
            "no memory with id",
        ),
        (&["get", "not-an-id"], 2, "is not a memory id"),
        (
            &["add", "--user", "u", "--importance", "7", "x"],
            2,
            "importance must be",
        ),
        (
            &["add", "--user", "u", "--kind", "memo", "x"],
            2,
            "unknown kind",
        ),
        (&["add", "--user", "u", "   "], 2, "text is empty"),
        (
            &["list", "--user", "u", "--since", "someday"],
            2,
            "cannot read 'someday'",
        ),
        (
            &["import", "/nonexistent/file.jsonl"],
            1,
            "cannot open /nonexistent/file.jsonl",
        ),
    ];
    for (args, code, message) in cases {
        let out = engram(h).args(*args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_corrupt_database_is_refused_and_left_as_it_was() {
    let home = TempDir::new().unwrap();
    let db = home.path().join("engram.db");
    let garbage = b"definitely not sqlite ".repeat(500);
    std::fs::write(&db, &garbage).unwrap();
    for args in [
        &["list", "--user", "u"][..],
        &["add", "--user", "u", "x"][..],
    ] {
        engram(home.path())
            .args(args)
            .assert()
            .code(1)
            .stderr(predicate::str::contains("is damaged or not a database"));
    }
    assert!(
        std::fs::read(&db).unwrap() == garbage,
        "the file was changed"
    );
}

#[test]
fn another_programs_database_is_not_touched() {
    let home = TempDir::new().unwrap();
    let db = home.path().join("engram.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    engram(home.path())
        .args(["list", "--user", "u"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is not an engram database"));
    assert!(
        std::fs::read(&db).unwrap() == before,
        "the file was changed"
    );
}

#[test]
fn a_home_that_is_a_file_is_a_clear_error() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    engram(&file)
        .args(["add", "--user", "u", "x"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is not a directory"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn forget_asks_unless_told_and_then_erases_only_that_user() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    add(h, "alice", "alice thing");
    add(h, "bob", "bob thing");
    engram(h)
        .args(["forget", "--user", "alice"])
        .stdin(Stdio::null())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--yes"));
    assert_eq!(
        json_out(engram(h).args(["list", "--user", "alice"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    engram(h)
        .args(["forget", "--user", "alice", "--yes"])
        .assert()
        .success()
        .stdout(predicate::str::contains("erased 1 memories of alice"));
    assert!(
        json_out(engram(h).args(["list", "--user", "alice"]))
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        json_out(engram(h).args(["list", "--user", "bob"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn stats_and_help_describe_the_store() {
    let home = TempDir::new().unwrap();
    add(home.path(), "u", "x");
    let stats = json_out(engram(home.path()).arg("stats"));
    assert_eq!(stats["memories"], 1);
    assert_eq!(stats["users"], 1);
    engram(home.path()).arg("--help").assert().success().stdout(
        predicate::str::contains("Exit status").and(predicate::str::contains("ENGRAM_HOME")),
    );
}

#[test]
fn concurrent_processes_each_add_exactly_once() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    // Create the store first so every process opens an existing database... and then also
    // race on creation in a second home.
    for fresh in [false, true] {
        let home = TempDir::new().unwrap();
        let h2 = if fresh { home.path() } else { h };
        let children: Vec<_> = (0..24)
            .map(|i| {
                engram(h2)
                    .args(["add", "--user", "u", &format!("memory number {i}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let list = json_out(engram(h2).args(["list", "--user", "u", "--limit", "100"]));
        let mut texts: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect();
        texts.sort();
        let mut expected: Vec<String> = (0..24).map(|i| format!("memory number {i}")).collect();
        expected.sort();
        assert_eq!(texts, expected);
    }
}

#[test]
fn concurrent_imports_of_overlapping_files_store_each_text_once() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let files: Vec<_> = (0..4)
        .map(|f| {
            let path = h.join(format!("in-{f}.jsonl"));
            let mut body = String::new();
            for i in 0..300 {
                // Half the lines are shared by every file, half are the file's own.
                let text = if i % 2 == 0 {
                    format!("shared memory {i}")
                } else {
                    format!("file {f} memory {i}")
                };
                body.push_str(&serde_json::json!({"user_id": "u", "text": text}).to_string());
                body.push('\n');
            }
            std::fs::write(&path, body).unwrap();
            path
        })
        .collect();
    let children: Vec<_> = files
        .iter()
        .map(|file| {
            engram(h)
                .args(["import", "--batch-size", "50"])
                .arg(file)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stats = json_out(engram(h).arg("stats"));
    assert_eq!(stats["memories"], 150 + 4 * 150);
}

/// Runs `engram` with a standard output whose reader is already gone (as `engram ... | head -c1`
/// becomes once head has read its byte): status and standard error.
fn run_with_closed_stdout(cmd: &mut Command) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cmd.stdout(writer).stderr(Stdio::piped()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_standard_output_ends_every_command_quietly() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let lines: String = (0..300)
        .map(|i| format!("{{\"user_id\": \"u\", \"text\": \"memory {i} about gardens\"}}\n"))
        .collect();
    let file = h.join("in.jsonl");
    std::fs::write(&file, lines).unwrap();
    engram(h).arg("import").arg(&file).assert().success();
    let id = add(h, "u", "one more memory about gardens");
    for args in [
        vec!["list", "--user", "u", "--limit", "300"],
        vec!["list", "--user", "u", "--json"],
        vec!["search", "--user", "u", "gardens"],
        vec!["search", "--user", "u", "gardens", "--json"],
        vec!["get", &id],
        vec!["history", &id],
        vec!["stats"],
        vec!["export", "--user", "u"],
        vec!["sessions", "list"],
        vec!["--help"],
    ] {
        let (status, stderr) = run_with_closed_stdout(engram(h).args(&args));
        assert_eq!(status, Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn escape_sequences_in_memories_are_shown_as_text_to_people_and_kept_in_json() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let text =
        "red \u{1b}[31malert\u{1b}[0m \u{1b}]0;owned\u{7} back\u{8}\u{8}\u{8}\u{8} \u{9b}2J done";
    let id = add(h, "u", text);
    engram(h)
        .args(["update", &id, "--category", "cat\u{1b}[1m"])
        .assert()
        .success();
    for args in [
        vec!["list", "--user", "u"],
        vec!["search", "--user", "u", "red", "done"],
        vec!["get", &id],
        vec!["history", &id],
    ] {
        let out = engram(h).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            !stdout
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{args:?} printed a control character: {stdout:?}"
        );
        assert!(stdout.contains("\\u{1b}[31malert"), "{args:?}: {stdout}");
    }
    // Scripts get the text exactly as stored.
    let memory = json_out(engram(h).args(["get", &id]));
    assert_eq!(memory["text"], text);
}

#[test]
fn an_import_line_with_the_id_of_another_users_memory_is_refused_by_name() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let id = add(h, "alice", "alice keeps the spare key in the shed");
    let file = h.join("in.jsonl");
    std::fs::write(
        &file,
        format!(
            "{{\"id\": \"{id}\", \"user_id\": \"bob\", \"text\": \"bob's note\"}}\n\
             {{\"user_id\": \"bob\", \"text\": \"bob's other note\"}}\n"
        ),
    )
    .unwrap();
    let out = engram(h).arg("import").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "line 1: id {id} is already used by a memory of another user"
        )),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 added, 0 duplicates, 1 rejected"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let memory = json_out(engram(h).args(["get", &id]));
    assert_eq!(memory["user_id"], "alice");
    assert_eq!(memory["text"], "alice keeps the spare key in the shed");
    // Importing alice's own export again is still a duplicate, not an error.
    let export = h.join("alice.jsonl");
    engram(h)
        .args(["export", "--user", "alice", "--output"])
        .arg(&export)
        .assert()
        .success();
    engram(h)
        .arg("import")
        .arg(&export)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 added, 1 duplicates"));
}

#[test]
fn an_import_file_may_start_with_a_byte_order_mark() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let file = h.join("bom.jsonl");
    std::fs::write(
        &file,
        "\u{feff}{\"user_id\": \"u\", \"text\": \"first line after the mark\"}\n{\"user_id\": \"u\", \"text\": \"second\"}\n",
    )
    .unwrap();
    engram(h)
        .arg("import")
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::contains("2 added"));
    // Only a leading mark: one in the middle of a file is an error of that line.
    std::fs::write(
        &file,
        "{\"user_id\": \"u\", \"text\": \"third\"}\n\u{feff}{\"user_id\": \"u\", \"text\": \"fourth\"}\n",
    )
    .unwrap();
    engram(h)
        .arg("import")
        .arg(&file)
        .assert()
        .code(5)
        .stderr(predicate::str::contains("line 2: not valid JSON"));
}

#[test]
fn out_of_range_numbers_get_messages_that_repeat_them() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    engram(h)
        .args([
            "add",
            "--user",
            "u",
            "--importance",
            "99999999999999999999",
            "x",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "importance must be an integer from 1 to 5, got 99999999999999999999",
        ));
    add(h, "u", "something to list");
    for command in ["list", "search"] {
        let mut args = vec![command, "--user", "u", "--limit", "0"];
        if command == "search" {
            args.push("something");
        }
        engram(h)
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--limit"))
            .stderr(predicate::str::contains("0 is not in 1.."));
    }
}

/// The benchmarks' store arguments fail at once, before any data is made, with one line that
/// names the cause.
#[test]
fn bench_arguments_that_cannot_work_fail_at_once_in_one_line() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    let one_line = |stderr: &[u8]| {
        let text = String::from_utf8_lossy(stderr).to_string();
        assert_eq!(text.trim_end().lines().count(), 1, "not one line: {text}");
        assert!(text.starts_with("error: "), "{text}");
        text
    };
    // Nothing listens on port 1; a URL that is no PostgreSQL URL at all.
    let refused = "postgres://engram@127.0.0.1:1/engram";
    for bench in ["hybrid", "server"] {
        for url in [refused, "no database here"] {
            let out = engram(h)
                .env_remove("ENGRAM_DATABASE_URL")
                .env_remove("ENGRAM_EMBED_MODEL")
                .args(["bench", bench, "--database-url", url])
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(1),
                "bench {bench} --database-url {url}"
            );
            let text = one_line(&out.stderr);
            if url == refused {
                assert!(text.contains("127.0.0.1"), "{text}");
            } else {
                assert!(text.contains("not a PostgreSQL URL"), "{text}");
            }
        }
    }

    // No load generator: the error names the script that installs it.
    let out = engram(h)
        .args(["bench", "server", "--wrk", "/nonexistent/wrk"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = one_line(&out.stderr);
    assert!(text.contains("/nonexistent/wrk"), "{text}");
    assert!(text.contains("scripts/setup-bench-tools.sh"), "{text}");

    // Instance counts and combinations that make no sense are usage errors.
    for args in [
        vec!["--instances", "0"],
        vec!["--instances", "2", "--faults", "stalled=10"],
        vec!["--database-url", refused, "--faults", "db-lock=100/1000"],
    ] {
        let out = engram(h)
            .args(["bench", "server", "--wrk", "/nonexistent/wrk"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}"
        );
    }
}
