#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `engram run` and `engram chat` as child processes, against the scripted model server (real
//! HTTP on 127.0.0.1, both wire formats), with real workspaces and stores in temporary homes.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use engram_core::Message;
use engram_core::llm::check_tool_pairing;
use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedCall, ScriptedServer, Turn};
use serde_json::{Value, json};
use tempfile::TempDir;

const PROVIDERS: [Provider; 2] = [Provider::OpenAi, Provider::Anthropic];

/// A home (with fast retries configured) and a workspace, both temporary.
struct Home {
    dir: TempDir,
}

impl Home {
    fn new() -> Self {
        let home = Self {
            dir: TempDir::new().unwrap(),
        };
        home.write_config("[llm]\nretry_base_delay_ms = 10\n");
        std::fs::create_dir(home.workspace()).unwrap();
        home
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn workspace(&self) -> PathBuf {
        self.path().join("ws")
    }

    fn write_config(&self, text: &str) {
        std::fs::write(self.path().join("config.toml"), text).unwrap();
    }

    /// `engram --home HOME ...` with no model settings from the surrounding environment.
    fn engram(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_engram"));
        cmd.arg("--home").arg(self.path());
        for var in [
            "ENGRAM_HOME",
            "ENGRAM_USER",
            "ENGRAM_PROVIDER",
            "ENGRAM_MODEL",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "NO_COLOR",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("USER", "tester");
        cmd
    }

    /// `engram` pointed at `server` speaking `provider`'s format, through the environment.
    fn engram_with(&self, server: &ScriptedServer, provider: Provider) -> Command {
        let mut cmd = self.engram();
        cmd.env("ENGRAM_PROVIDER", provider.as_str())
            .env("ENGRAM_MODEL", SCRIPTED_MODEL)
            .env(provider.default_key_env(), SCRIPTED_KEY)
            .env(provider.base_url_env(), server.base_url(provider));
        cmd
    }

    fn run(&self, server: &ScriptedServer, provider: Provider, task: &str) -> Command {
        let mut cmd = self.engram_with(server, provider);
        cmd.args(["run", "-m", task, "--workspace"])
            .arg(self.workspace())
            .arg("--dump")
            .arg(self.dump_path());
        cmd
    }

    fn dump_path(&self) -> PathBuf {
        self.path().join("dump.json")
    }

    fn dump(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dump_path()).unwrap()).unwrap()
    }

    fn dumped_history(&self) -> Vec<Message> {
        serde_json::from_value(self.dump()["history"].clone()).unwrap()
    }
}

fn output(cmd: &mut Command) -> (Output, String, String) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

#[test]
fn run_does_a_task_with_a_tool_end_to_end_in_each_wire_format() {
    for provider in PROVIDERS {
        let home = Home::new();
        let server = ScriptedServer::spawn(vec![
            Turn::tool_call(
                "write_file",
                json!({"path": "out/hello.txt", "content": "hello, file"}),
            )
            .usage(120, 30),
            Turn::text("I wrote **out/hello.txt**.")
                .chunk_chars(4)
                .usage(200, 10),
            // Then the run is extracted: episodes, then the profile.
            Turn::text(r#"{"episodes": []}"#),
            Turn::text(r#"{"facts": [], "preferences": []}"#),
        ])
        .unwrap();
        let (out, stdout, stderr) =
            output(&mut home.run(&server, provider, "Write hello to out/hello.txt"));
        assert!(out.status.success(), "{provider}: {stderr}");
        assert_eq!(
            stdout, "I wrote **out/hello.txt**.\n",
            "plain text when not a terminal"
        );
        assert!(
            stderr
                .contains("→ write_file {\"content\":\"hello, file\",\"path\":\"out/hello.txt\"}")
                || stderr.contains(
                    "→ write_file {\"path\":\"out/hello.txt\",\"content\":\"hello, file\"}"
                ),
            "{stderr}"
        );
        assert!(stderr.contains("✓ write_file"), "{stderr}");
        assert!(
            stderr.contains("2 steps · 320 in / 40 out tokens"),
            "{stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(home.workspace().join("out/hello.txt")).unwrap(),
            "hello, file"
        );

        let requests = server.requests();
        assert_eq!(requests.len(), 4, "two steps, then two extraction calls");
        assert_eq!(requests[0].provider(), Some(provider));
        match provider {
            Provider::OpenAi => assert_eq!(
                requests[0].header("authorization"),
                Some(format!("Bearer {SCRIPTED_KEY}").as_str())
            ),
            Provider::Anthropic => assert_eq!(requests[0].header("x-api-key"), Some(SCRIPTED_KEY)),
        }
        assert!(
            requests[0]
                .tool_names()
                .contains(&"recall_notes".to_string())
        );
        assert!(requests[0].is_stream(), "answers are streamed");
        server.check_tool_pairing().unwrap();

        let dump = home.dump();
        assert_eq!(dump["format"], "engram-run/1");
        assert_eq!(dump["status"]["status"], "answered");
        assert_eq!(dump["done"], true);
        assert_eq!(dump["progress"]["steps"], 2);
        assert_eq!(dump["progress"]["usage"]["input_tokens"], 320);
        let system = dump["instructions"][0]["content"].as_str().unwrap();
        assert!(system.contains("record_note"), "{system}");
        assert!(
            system.contains(
                &home
                    .workspace()
                    .canonicalize()
                    .unwrap()
                    .display()
                    .to_string()
            )
        );
        let history = home.dumped_history();
        assert_eq!(history.len(), 4, "user, call, result, answer: {history:?}");
        check_tool_pairing(&history, true).unwrap();
    }
}

#[test]
fn run_retries_after_a_429_and_a_dropped_stream() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![
        Turn::rate_limited(),
        Turn::text("never seen").drop_after(0),
        Turn::text("Third time lucky."),
        Turn::text(r#"{"episodes": []}"#),
        Turn::text(r#"{"facts": [], "preferences": []}"#),
    ])
    .unwrap();
    let (out, stdout, stderr) = output(&mut home.run(&server, Provider::OpenAi, "Say hi"));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Third time lucky.\n");
    assert_eq!(
        stderr.matches("retrying (attempt ").count(),
        2,
        "both failures were retried: {stderr}"
    );
    assert!(stderr.contains("rate limit"), "{stderr}");
    assert_eq!(
        server.requests().len(),
        5,
        "three attempts, then two extraction calls"
    );
}

#[test]
fn run_exit_statuses_say_how_the_run_ended() {
    // Bad key: a classified error, status 1.
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![Turn::unauthorized()]).unwrap();
    let (out, stdout, stderr) = output(&mut home.run(&server, Provider::Anthropic, "hi"));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty());
    let error_line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert!(error_line.contains("rejected the API key"), "{error_line}");
    assert!(error_line.contains("ANTHROPIC_API_KEY"), "{error_line}");
    assert_eq!(home.dump()["status"]["kind"], "auth");

    // The step limit: status 6, with a consistent history.
    let server = ScriptedServer::spawn(vec![
        Turn::tool_call("list_dir", json!({})),
        Turn::tool_call("list_dir", json!({})),
    ])
    .unwrap();
    let (out, _, stderr) = output(
        home.run(&server, Provider::OpenAi, "Look around")
            .args(["--max-steps", "2"]),
    );
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("error: the agent used all 2 steps without giving an answer"),
        "{stderr}"
    );
    check_tool_pairing(&home.dumped_history(), true).unwrap();
    assert_eq!(home.dump()["status"]["status"], "max_steps");

    // A stream cut after part of the answer was shown is not retried: status 1.
    let server =
        ScriptedServer::spawn(vec![Turn::text("one two three four").drop_after(2)]).unwrap();
    let (out, stdout, stderr) = output(&mut home.run(&server, Provider::OpenAi, "Count"));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.starts_with("one "), "{stdout}");
    assert!(
        stderr.contains("error: the answer stopped halfway"),
        "{stderr}"
    );

    // An empty task is bad usage: status 2.
    let (out, _, stderr) = output(
        home.engram_with(&server, Provider::OpenAi)
            .args(["run", "-m", " "]),
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
}

#[test]
fn without_a_model_both_commands_say_exactly_what_to_set() {
    let home = Home::new();
    let expected = format!(
        "error: no language model configured: set ENGRAM_PROVIDER=openai|anthropic, ENGRAM_MODEL and OPENAI_API_KEY (or ANTHROPIC_API_KEY), or the [llm] section of {}.\n",
        home.path().join("config.toml").display()
    );
    for args in [&["run", "-m", "hi"][..], &["chat"][..]] {
        let (out, stdout, stderr) = output(home.engram().args(args).stdin(Stdio::null()));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr, expected, "{args:?}");
        assert!(stdout.is_empty());
    }
    // A provider without a model: the message names the missing variable.
    let (out, _, stderr) = output(
        home.engram()
            .env("ENGRAM_PROVIDER", "openai")
            .args(["run", "-m", "hi"]),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("set ENGRAM_MODEL"), "{stderr}");
}

#[test]
fn a_bad_config_file_is_named_and_kept_and_unknown_keys_only_warn() {
    let home = Home::new();
    let broken = "[llm]\nmodel = \"x\"\nmax_tokens = \"lots\"\n";
    home.write_config(broken);
    let server = ScriptedServer::spawn(vec![Turn::text("ok")]).unwrap();
    let (out, _, stderr) = output(&mut home.run(&server, Provider::OpenAi, "hi"));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let config = home.path().join("config.toml");
    assert!(
        stderr.starts_with(&format!(
            "error: the configuration file {}:3:14 is invalid:",
            config.display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), broken);

    home.write_config("[llm]\nretry_base_delay_ms = 10\ncolour = 'blue'\n[agent]\nmax_steps = 5\n");
    let (out, stdout, stderr) = output(&mut home.run(&server, Provider::OpenAi, "hi"));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "ok\n");
    assert!(
        stderr.contains(&format!(
            "warning: {}:3:1: unknown key 'colour' in [llm] is ignored",
            config.display()
        )),
        "{stderr}"
    );
}

#[test]
fn run_json_reports_answer_status_and_usage() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![Turn::text("Forty-two.").usage(7, 3)]).unwrap();
    let (out, stdout, stderr) =
        output(home.run(&server, Provider::OpenAi, "Answer?").arg("--json"));
    assert!(out.status.success(), "{stderr}");
    let value: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["answer"], "Forty-two.");
    assert_eq!(value["status"], "answered");
    assert_eq!(value["error"], Value::Null);
    assert_eq!(value["steps"], 1);
    assert_eq!(
        value["usage"],
        json!({"input_tokens": 7, "output_tokens": 3})
    );
}

#[test]
fn run_speaks_the_json_protocol_when_configured() {
    let home = Home::new();
    home.write_config("[llm]\nretry_base_delay_ms = 10\n[agent]\ntool_mode = \"json\"\n");
    let server = ScriptedServer::spawn(vec![
        Turn::text(r#"{"thought": "note it", "tool": "record_note", "params": {"content": "The user likes tea", "category": "user_preference"}}"#),
        Turn::text(r#"{"thought": "done", "tool": "chat", "params": {"response": "Noted: you like tea."}}"#),
    ])
    .unwrap();
    let (out, stdout, stderr) = output(&mut home.run(&server, Provider::OpenAi, "I like tea"));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Noted: you like tea.\n");
    assert!(stderr.contains("· note it"), "{stderr}");
    assert!(server.request(1).unwrap().tool_names().is_empty());
    // The note landed in the workspace notes file and in the store, for the user.
    let notes = std::fs::read_to_string(home.workspace().join(".agent_memory.json")).unwrap();
    assert!(notes.contains("The user likes tea"), "{notes}");
    let (out, listed, _) = output(home.engram().args(["list", "--user", "tester", "--json"]));
    assert!(out.status.success());
    assert!(listed.contains("The user likes tea"), "{listed}");
}

/// Reads `reader` line by line on a thread, sending each line.
fn lines_of(reader: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return;
            }
        }
    }
    panic!("no line with {needle:?} in {seen:?}");
}

fn interrupt(child: &Child) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
}

fn wait_with_timeout(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("engram did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigint_during_a_tool_cancels_cleanly_and_leaves_a_consistent_dump() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![Turn::tool_calls([
        ScriptedCall::new("bash", json!({"command": "sleep 300"})).with_id("c_sleep"),
        ScriptedCall::new("bash", json!({"command": "echo done-quickly"})).with_id("c_quick"),
    ])])
    .unwrap();
    let mut child = home
        .run(&server, Provider::Anthropic, "Sleep")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = lines_of(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    wait_for_line(&stderr, "✓ bash", &mut seen);
    interrupt(&child);
    let status = wait_with_timeout(&mut child);
    seen.extend(stderr.iter());
    assert_eq!(status.code(), Some(130), "{seen:?}");
    assert!(
        seen.iter().any(|l| l == "error: the run was cancelled."),
        "{seen:?}"
    );

    let dump = home.dump();
    assert_eq!(dump["status"]["status"], "cancelled");
    let history = home.dumped_history();
    check_tool_pairing(&history, true).unwrap();
    let results: Vec<(&str, &str)> = history
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_call_id.as_str(), t.content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results[0].0, "c_sleep");
    assert!(results[0].1.contains("cancelled"), "{results:?}");
    assert_eq!(results[1].0, "c_quick");
    assert!(results[1].1.contains("done-quickly"), "{results:?}");
}

#[test]
fn sigint_while_the_answer_streams_keeps_what_was_shown() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![
        Turn::text("alpha beta gamma delta epsilon zeta eta theta iota kappa")
            .chunk_delay(Duration::from_millis(150)),
    ])
    .unwrap();
    let mut child = home
        .run(&server, Provider::OpenAi, "Greek letters, slowly")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 5];
    stdout.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"alpha", "the answer streams before it is complete");
    interrupt(&child);
    let status = wait_with_timeout(&mut child);
    assert_eq!(status.code(), Some(130));
    let history = home.dumped_history();
    let last = history.last().unwrap().text();
    assert!(last.starts_with("alpha"), "{history:?}");
    assert!(last.ends_with("[interrupted by the user]"), "{last}");
    assert!(!last.contains("kappa"), "cancelled before the end: {last}");
}

#[test]
fn chat_keeps_a_conversation_with_commands_and_multi_line_input() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![
        Turn::text("Hello, tester!"),
        Turn::tool_call("list_dir", json!({"path": "."})).with_text("Looking."),
        Turn::text("The workspace is empty."),
        Turn::text("Got two lines."),
        Turn::text("Got a block."),
        // /new extracts memories from the conversation first: episodes, then the profile.
        Turn::text(r#"{"episodes": []}"#),
        Turn::text(r#"{"facts": [], "preferences": []}"#),
        Turn::text("Fresh start."),
        // /exit extracts the new conversation's one exchange.
        Turn::text(r#"{"episodes": []}"#),
        Turn::text(r#"{"facts": [], "preferences": []}"#),
    ])
    .unwrap();
    let mut child = home
        .engram_with(&server, Provider::OpenAi)
        .args(["chat", "--workspace"])
        .arg(home.workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = "hi\nwhat is in the workspace?\n/history\nfirst line \\\nsecond line\n\"\"\"\nblock one\n\nblock two\n\"\"\"\n/stats\n/new\n/bogus\nagain\n/exit\nnever sent\n";
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    for answer in [
        "Hello, tester!",
        "Looking.",
        "The workspace is empty.",
        "Got two lines.",
        "Got a block.",
        "Fresh start.",
    ] {
        assert!(stdout.contains(answer), "{answer}: {stdout}");
    }
    assert!(
        stdout.contains("you: hi\nengram: Hello, tester!"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  → list_dir {\"path\": \".\"}")
            || stdout.contains("  → list_dir {\"path\":\".\"}"),
        "{stdout}"
    );
    assert!(stdout.contains("this chat  4 turns, 5 steps"), "{stdout}");
    assert!(stderr.contains("→ list_dir"), "{stderr}");
    assert!(stderr.contains("unknown command /bogus"), "{stderr}");
    assert!(stderr.contains("(new conversation)"), "{stderr}");

    let requests = server.requests();
    assert_eq!(requests.len(), 10, "/exit stops before 'never sent'");
    let last_user = |n: usize| {
        requests[n]
            .messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(last_user(3), "first line \nsecond line");
    assert_eq!(last_user(4), "block one\n\nblock two");
    // The conversation carried over between turns, and /new started afresh.
    assert_eq!(
        requests[4]
            .messages()
            .iter()
            .filter(|m| m["role"] == "user")
            .count(),
        4
    );
    assert_eq!(
        requests[7].messages().len(),
        2,
        "system prompt and the new message"
    );
    server.check_tool_pairing().unwrap();

    let history = std::fs::read_to_string(home.path().join("chat_history.jsonl")).unwrap();
    assert!(
        history.contains("\"block one\\n\\nblock two\""),
        "{history}"
    );
    assert!(history.lines().any(|l| l == "\"/exit\""), "{history}");
}

#[test]
fn sigint_in_chat_cancels_the_turn_and_the_conversation_goes_on() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![
        Turn::tool_call("bash", json!({"command": "sleep 300"})),
        Turn::text("Still here."),
        Turn::text(r#"{"episodes": []}"#),
        Turn::text(r#"{"facts": [], "preferences": []}"#),
    ])
    .unwrap();
    let mut child = home
        .engram_with(&server, Provider::Anthropic)
        .args(["chat", "--workspace"])
        .arg(home.workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stderr = lines_of(child.stderr.take().unwrap());
    let stdout = lines_of(child.stdout.take().unwrap());
    stdin.write_all(b"Sleep for a while.\n").unwrap();
    stdin.flush().unwrap();
    let mut seen = Vec::new();
    wait_for_line(&stderr, "→ bash", &mut seen);
    interrupt(&child);
    wait_for_line(&stderr, "(cancelled)", &mut seen);
    stdin.write_all(b"Are you there?\n/exit\n").unwrap();
    drop(stdin);
    let status = wait_with_timeout(&mut child);
    assert!(status.success(), "the REPL survived the Ctrl-C: {seen:?}");
    let answers: Vec<String> = stdout.iter().collect();
    assert!(answers.iter().any(|l| l == "Still here."), "{answers:?}");
    // The second request carried the cancelled call's result, so the server accepted it; then
    // the conversation was extracted at /exit.
    assert_eq!(server.requests().len(), 4);
    server.check_tool_pairing().unwrap();
    let second = server.request(2).unwrap().body.to_string();
    assert!(second.contains("did not finish"), "{second}");
}

#[test]
fn the_system_prompt_carries_bootstrap_files_and_skills_and_the_agent_has_cron_and_load_skill() {
    let home = Home::new();
    let workspace = home.workspace();
    std::fs::write(workspace.join("AGENTS.md"), "Always answer in haiku.\n").unwrap();
    let skill = workspace.join("skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: Ship the site to production\n---\nRun make deploy.\n",
    )
    .unwrap();
    let server = ScriptedServer::spawn(vec![Turn::text("Done.")]).unwrap();
    let (out, _, stderr) = output(&mut home.run(&server, Provider::OpenAi, "Hello"));
    assert!(out.status.success(), "{stderr}");

    let request = &server.requests()[0];
    let system = request.messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("Always answer in haiku."), "{system}");
    assert!(
        system.contains("deploy: Ship the site to production"),
        "{system}"
    );
    assert!(
        system.contains("memory"),
        "built-in skills listed: {system}"
    );
    let tools = request.tool_names();
    for name in ["cron", "load_skill", "record_note"] {
        assert!(tools.contains(&name.to_string()), "{name} in {tools:?}");
    }
}

#[test]
fn scheduled_turns_keep_their_jobs_session() {
    let home = Home::new();
    let server = ScriptedServer::spawn(vec![
        Turn::text("Watered the plants."),
        Turn::text("Watered them again."),
    ])
    .unwrap();
    let added = home
        .engram()
        .args(["cron", "add", "--json", "--name", "plants", "--message"])
        .args(["Water the plants", "--every", "1d"])
        .output()
        .unwrap();
    assert!(added.status.success());
    let id = serde_json::from_slice::<Value>(&added.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for answer in ["Watered the plants.", "Watered them again."] {
        let (out, stdout, stderr) = output(
            home.engram_with(&server, Provider::OpenAi)
                .args(["cron", "run", &id]),
        );
        assert!(out.status.success(), "{stderr}");
        assert_eq!(stdout.trim(), answer);
    }

    // The second run saw the first one's conversation: same session, cron:<id>.
    let requests = server.requests();
    let second: Vec<&str> = requests[1]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(second.contains(&"Watered the plants."), "{second:?}");
    assert_eq!(
        second.iter().filter(|m| **m == "Water the plants").count(),
        2
    );
    let (out, stdout, _) = output(home.engram().args(["sessions", "list", "--json"]));
    assert!(out.status.success());
    assert!(stdout.contains(&format!("cron:{id}")), "{stdout}");
}

#[test]
fn the_bash_tool_never_sees_the_model_key() {
    let home = Home::new();
    home.write_config(
        "[llm]\nretry_base_delay_ms = 10\n[agent]\nshell_env = [\"OPENAI_API_KEY\", \"ENGRAM_TEST_PASSED\"]\n",
    );
    let server = ScriptedServer::spawn(vec![
        Turn::tool_call("bash", json!({"command": "env"})),
        Turn::text("done"),
    ])
    .unwrap();
    let (out, _, stderr) = output(
        home.run(&server, Provider::OpenAi, "show the environment")
            .env("ENGRAM_TEST_PASSED", "visible")
            .env("ENGRAM_TEST_SECRET", "hidden"),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("shell_env names OPENAI_API_KEY, which holds the model's API key"),
        "{stderr}"
    );
    let history = home.dumped_history();
    let result = history
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.contains("PATH="), "{result}");
    assert!(result.contains("ENGRAM_TEST_PASSED=visible"), "{result}");
    for secret in [
        SCRIPTED_KEY,
        "OPENAI_API_KEY",
        "ENGRAM_TEST_SECRET",
        "hidden",
    ] {
        assert!(
            !result.contains(secret),
            "{secret} reached the command: {result}"
        );
    }
}

#[test]
fn files_linked_out_of_the_workspace_are_never_sent_written_or_erased() {
    let home = Home::new();
    let outside = TempDir::new().unwrap();
    let files = [
        ("MEMORY.md", "- OUTSIDE-MEMORY-SECRET\n"),
        ("2020-01-01.md", "# 2020-01-01\n\n- an outside daily note\n"),
        ("agents.txt", "OUTSIDE-AGENTS-SECRET"),
    ];
    for (name, text) in files {
        std::fs::write(outside.path().join(name), text).unwrap();
    }
    std::os::unix::fs::symlink(outside.path(), home.workspace().join("memory")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("agents.txt"),
        home.workspace().join("AGENTS.md"),
    )
    .unwrap();
    // /forget extracts the conversation so far before anything else (one exchange is enough),
    // and so does /exit.
    let server = ScriptedServer::spawn(vec![
        Turn::text("Hello."),
        Turn::text(r#"{"episodes": []}"#),
        Turn::text(r#"{"facts": [], "preferences": []}"#),
        Turn::text("Still here."),
        Turn::text(r#"{"episodes": []}"#),
        Turn::text(r#"{"facts": [], "preferences": []}"#),
    ])
    .unwrap();
    let mut child = home
        .engram_with(&server, Provider::OpenAi)
        .args(["chat", "--workspace"])
        .arg(home.workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hi\n/forget\ny\nare you there?\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("Still here."), "the chat goes on: {stdout}");
    assert!(stderr.contains("AGENTS.md is not read"), "{stderr}");
    assert!(stderr.contains("outside the workspace"), "{stderr}");
    assert!(stderr.contains("cannot erase your memories"), "{stderr}");

    // Nothing from outside reached the model.
    for request in server.requests() {
        let sent = serde_json::to_string(&request.messages()).unwrap();
        assert!(!sent.contains("OUTSIDE-"), "{sent}");
    }
    // Nothing outside was changed or removed, and nothing was added there.
    let mut names: Vec<String> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["2020-01-01.md", "MEMORY.md", "agents.txt"]);
    for (name, text) in files {
        assert_eq!(
            std::fs::read_to_string(outside.path().join(name)).unwrap(),
            text
        );
    }
}
