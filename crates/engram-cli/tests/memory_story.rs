#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Memory across sessions, through the real `engram` binary and the scripted model server:
//! what the user said in one session is in the memory block of the next; a changed preference
//! leaves one current fact and the old one in history; a long session with tool calls is
//! summarised without orphaning a tool result; unusable extraction output is kept and nothing
//! crashes; a killed process leaves its session readable; an edited MEMORY.md is seen at once;
//! every N turns the session is extracted in the background while the chat goes on.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engram_core::llm::check_tool_pairing;
use engram_core::{Memory, Message};
use engram_llm::Provider;
use engram_llm::scripted::{SCRIPTED_KEY, SCRIPTED_MODEL, ScriptedServer, Turn};
use serde_json::{Value, json};
use tempfile::TempDir;

struct Home {
    dir: TempDir,
}

impl Home {
    /// A home whose extraction is deterministic: no model merge, no extraction mid-session.
    fn new(memory: &str) -> Self {
        Self::with_memory_section(&format!(
            "model_merge = false\nextract_every_turns = 0\n{memory}"
        ))
    }

    /// A home whose config's `[memory]` section is `section`.
    fn with_memory_section(section: &str) -> Self {
        let home = Self {
            dir: TempDir::new().unwrap(),
        };
        std::fs::write(
            home.path().join("config.toml"),
            format!("[llm]\nretry_base_delay_ms = 10\nmax_attempts = 1\n\n[memory]\n{section}"),
        )
        .unwrap();
        std::fs::create_dir(home.workspace()).unwrap();
        home
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn workspace(&self) -> PathBuf {
        self.path().join("ws")
    }

    fn engram(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_engram"));
        cmd.arg("--home").arg(self.path());
        for var in [
            "ENGRAM_HOME",
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

    fn engram_with(&self, server: &ScriptedServer) -> Command {
        let provider = Provider::OpenAi;
        let mut cmd = self.engram();
        cmd.env("ENGRAM_PROVIDER", provider.as_str())
            .env("ENGRAM_MODEL", SCRIPTED_MODEL)
            .env(provider.default_key_env(), SCRIPTED_KEY)
            .env(provider.base_url_env(), server.base_url(provider));
        cmd
    }

    /// `engram chat --session KEY` fed `script` on stdin; returns (stdout, stderr).
    fn chat(&self, server: &ScriptedServer, session: &str, script: &str) -> (String, String) {
        let mut child = self
            .engram_with(server)
            .args(["chat", "--session", session, "--workspace"])
            .arg(self.workspace())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        (stdout, stderr)
    }

    /// `engram run --session KEY -m TASK`; returns (stdout, stderr).
    fn run(&self, server: &ScriptedServer, session: &str, task: &str) -> (String, String) {
        let out = self
            .engram_with(server)
            .args(["run", "--session", session, "-m", task, "--workspace"])
            .arg(self.workspace())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8_lossy(&out.stdout).to_string(), stderr)
    }

    /// `engram --json ARGS...` parsed.
    fn json(&self, args: &[&str]) -> Value {
        let out = self.engram().arg("--json").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn memories(&self, extra: &[&str]) -> Vec<Memory> {
        let mut args = vec!["list", "--user", "tester", "--limit", "100"];
        args.extend_from_slice(extra);
        serde_json::from_value(self.json(&args)).unwrap()
    }

    fn session_file(&self, key: &str) -> PathBuf {
        let name: String = key
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        self.path().join("sessions").join(format!("{name}.jsonl"))
    }
}

/// The system messages of a recorded request, joined.
fn system_text(request: &engram_llm::scripted::RecordedRequest) -> String {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn episodes(list: &[(&str, &str, u8)]) -> Turn {
    let items: Vec<Value> = list
        .iter()
        .map(|(summary, category, importance)| {
            json!({"summary": summary, "category": category, "importance": importance})
        })
        .collect();
    Turn::text(json!({ "episodes": items }).to_string())
}

fn profile(facts: &[(&str, &str)], preferences: &[(&str, &str)]) -> Turn {
    let pairs = |list: &[(&str, &str)]| -> Vec<Value> {
        list.iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect()
    };
    Turn::text(json!({"facts": pairs(facts), "preferences": pairs(preferences)}).to_string())
}

#[test]
fn what_the_user_said_in_one_session_is_in_the_memory_block_of_the_next() {
    let home = Home::new("");
    // Session one: two exchanges, then extraction at exit (episodes, then profile).
    let one = ScriptedServer::spawn(vec![
        Turn::text("Nice to meet you!"),
        Turn::text("FastAPI pairs well with Pydantic v2."),
        episodes(&[(
            "The user started a FastAPI service on Python 3.12",
            "discovery",
            3,
        )]),
        profile(
            &[
                ("role", "backend developer"),
                ("python version", "3.12"),
                ("web framework", "FastAPI"),
            ],
            &[],
        ),
    ])
    .unwrap();
    let (stdout, _) = home.chat(
        &one,
        "cli:one",
        "I'm a backend developer; I work in Python 3.12 with FastAPI.\nAny tips for validation?\n/exit\n",
    );
    assert!(stdout.contains("FastAPI pairs well"), "{stdout}");
    assert_eq!(
        one.requests().len(),
        4,
        "two turns and two extraction calls"
    );
    let transcript = one.requests()[2].messages()[..]
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect::<String>();
    assert!(transcript.contains("Python 3.12"), "{transcript}");

    // Session two, a different session key and process: the request carries the facts.
    let two = ScriptedServer::spawn(vec![
        Turn::text("Stick with FastAPI."),
        episodes(&[]),
        profile(&[], &[]),
    ])
    .unwrap();
    let (stdout, _) = home.run(
        &two,
        "cli:two",
        "Which web framework should I use for my new API?",
    );
    assert!(stdout.contains("Stick with FastAPI."), "{stdout}");
    let requests = two.requests();
    assert_eq!(
        requests.len(),
        3,
        "one exchange is extracted too: the answer, then two extraction calls"
    );
    let messages = requests[0].messages();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[1]["role"], "system",
        "the memory block follows the prompt"
    );
    let block = messages[1]["content"].as_str().unwrap();
    for fact in ["backend developer", "3.12", "FastAPI"] {
        assert!(
            block.contains(fact),
            "{fact} missing from the memory block:\n{block}"
        );
    }
    assert!(
        !messages
            .iter()
            .any(|m| m["role"] == "user" && m["content"].as_str().unwrap().contains("Any tips")),
        "session one's conversation is not replayed in session two"
    );

    // The sessions are listed with their messages, tool-free here.
    let list = home.json(&["sessions", "list"]);
    let keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"cli:one") && keys.contains(&"cli:two"),
        "{keys:?}"
    );
    let shown = home.json(&["sessions", "show", "one"]);
    let records = shown["records"].as_array().unwrap();
    assert!(records.iter().any(|r| r["_type"] == "extracted"), "{shown}");
    assert_eq!(
        records.iter().filter(|r| r["_type"] == "message").count(),
        4
    );
}

#[test]
fn every_n_turns_the_session_is_extracted_in_the_background_while_it_goes_on() {
    let home = Home::with_memory_section("model_merge = false\nextract_every_turns = 2\n");
    let server = ScriptedServer::spawn(vec![
        Turn::text("Hello!"),
        Turn::text("Rust it is."),
        episodes(&[("The user chose Rust for the new CLI", "discovery", 4)]),
        profile(&[("cli language", "Rust")], &[]),
        Turn::text("Clap is a good choice."),
        episodes(&[]),
        profile(&[], &[]),
    ])
    .unwrap();
    let mut child = home
        .engram_with(&server)
        .args(["chat", "--session", "cli:every", "--workspace"])
        .arg(home.workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"Hi there.\nI will write the new CLI in Rust.\n")
        .unwrap();
    stdin.flush().unwrap();

    // After the second turn, with the chat still open and waiting for its next line, the
    // extraction calls arrive and the memories are stored.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.requests().len() < 4 {
        assert!(
            Instant::now() < deadline,
            "no extraction after two turns: {} requests",
            server.requests().len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let transcript: String = server.requests()[2]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(transcript.contains("new CLI in Rust"), "{transcript}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let facts = home.memories(&["--kind", "fact"]);
        if facts.iter().any(|m| m.text.contains("Rust")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fact was not stored mid-session"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the chat is still running"
    );

    // The third turn goes on; at the end only the new exchange is extracted: what was
    // extracted is not extracted twice.
    stdin.write_all(b"Which argument parser?\n/exit\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Clap is a good choice."), "{stdout}");
    assert_eq!(
        server.requests().len(),
        7,
        "three turns and two extractions"
    );
    let last: String = server.requests()[5]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(last.contains("Which argument parser?"), "{last}");
    assert!(!last.contains("new CLI in Rust"), "{last}");
    assert_eq!(
        home.memories(&["--kind", "episode"])
            .iter()
            .filter(|m| m.text.contains("chose Rust"))
            .count(),
        1
    );
}

#[test]
fn a_changed_preference_leaves_one_current_fact_and_the_old_one_in_history() {
    let home = Home::new("");
    let first = ScriptedServer::spawn(vec![
        Turn::text("Vim it is."),
        Turn::text("Sure."),
        episodes(&[]),
        profile(&[], &[("editor", "vim")]),
    ])
    .unwrap();
    home.chat(
        &first,
        "cli:a",
        "I edit everything in vim.\nThanks.\n/exit\n",
    );
    let second = ScriptedServer::spawn(vec![
        Turn::text("Helix, noted."),
        Turn::text("Sure."),
        episodes(&[]),
        profile(&[], &[("Editor", "helix")]),
    ])
    .unwrap();
    home.chat(
        &second,
        "cli:b",
        "I switched to helix last month.\nThanks.\n/exit\n",
    );

    let current = home.memories(&["--kind", "preference"]);
    assert_eq!(current.len(), 1, "{current:?}");
    assert!(current[0].text.contains("helix"), "{:?}", current[0].text);
    let all = home.memories(&["--kind", "preference", "--all"]);
    assert_eq!(all.len(), 2, "{all:?}");
    let old = all.iter().find(|m| m.text.contains("vim")).unwrap();
    assert!(
        old.valid_to.is_some(),
        "the old preference is closed, not deleted"
    );

    // The next request sees helix only.
    let third =
        ScriptedServer::spawn(vec![Turn::text("ok"), episodes(&[]), profile(&[], &[])]).unwrap();
    home.run(&third, "cli:c", "Which editor do I use?");
    let block = system_text(&third.requests()[0]);
    assert!(block.contains("helix") && !block.contains("vim"), "{block}");
}

#[test]
fn a_long_session_with_tool_calls_is_summarised_without_orphaned_tool_results() {
    // A small window: a few turns reading a large file overflow it.
    let home = Home::new("context_window = 6000\nreply_reserve = 500\nsummary_max_tokens = 150\n");
    let big: String = (0..300)
        .map(|i| format!("line {i}: lorem ipsum dolor\n"))
        .collect();
    std::fs::write(home.workspace().join("big.txt"), big).unwrap();
    let summary = "The user had the assistant read big.txt several times; it holds numbered lorem ipsum lines.";
    let mut summarised_at = None;
    for i in 0..8 {
        // If this run starts by summarising, the first turn is taken as the summary (its text)
        // and the next as the answer; otherwise the first is a tool call, the second the answer.
        let server = ScriptedServer::spawn(vec![
            Turn::tool_call("read_file", json!({"path": "big.txt"})).with_text(summary),
            Turn::text(format!("Answer {i}.")),
            Turn::text(format!("Answer {i}.")),
        ])
        .unwrap();
        let (_, stderr) = home.run(&server, "cli:long", &format!("Read big.txt, pass {i}."));
        for request in server.requests() {
            let messages: Vec<Message> = request
                .messages()
                .iter()
                .filter_map(openai_message)
                .collect();
            check_tool_pairing(&messages, false).unwrap_or_else(|e| panic!("run {i}: {e}"));
        }
        server.check_tool_pairing().unwrap();
        if stderr.contains("(summarised ") {
            summarised_at.get_or_insert(i);
            // The agent's requests after the summary carry it, then a user message: no tool
            // result without its call. (The run's closing extraction asks the model too.)
            let requests = server.requests();
            let asked = requests
                .iter()
                .filter(|r| system_text(r).contains("Summary of the earlier conversation"))
                .collect::<Vec<_>>();
            assert!(!asked.is_empty(), "{stderr}");
            for request in asked {
                let text = system_text(request);
                assert!(text.contains("numbered lorem ipsum"), "{text}");
                let messages = request.messages();
                let first_turn = messages.iter().find(|m| m["role"] != "system").unwrap();
                assert_eq!(first_turn["role"], "user", "{messages:?}");
            }
        }
    }
    let at = summarised_at.expect("the session was never summarised");
    assert!(at >= 1, "summarised before the window was full");

    // Every user message is still in the session file, verbatim, with every tool result.
    let shown = home.json(&["sessions", "show", "cli:long"]);
    let records = shown["records"].as_array().unwrap();
    let users: Vec<&str> = records
        .iter()
        .filter(|r| r["_type"] == "message" && r["role"] == "user")
        .map(|r| r["content"].as_str().unwrap())
        .collect();
    assert_eq!(users.len(), 8);
    assert_eq!(users[0], "Read big.txt, pass 0.");
    assert!(records.iter().any(|r| r["_type"] == "summary"));
    let messages: Vec<Message> = records
        .iter()
        .filter(|r| r["_type"] == "message")
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("_type");
            r.as_object_mut().unwrap().remove("timestamp");
            serde_json::from_value(r).unwrap()
        })
        .collect();
    check_tool_pairing(&messages, true).unwrap();
}

/// An OpenAI wire message as engram's [`Message`] (for the pairing check).
fn openai_message(m: &Value) -> Option<Message> {
    match m["role"].as_str()? {
        "system" => Some(Message::system(m["content"].as_str().unwrap_or(""))),
        "user" => Some(Message::user(m["content"].as_str().unwrap_or(""))),
        "assistant" => {
            let calls = m["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| {
                            engram_core::ToolCall::new(
                                c["id"].as_str().unwrap(),
                                c["function"]["name"].as_str().unwrap(),
                                c["function"]["arguments"].as_str().unwrap_or("{}"),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(Message::Assistant(engram_core::AssistantMessage {
                content: m["content"].as_str().unwrap_or("").to_string(),
                tool_calls: calls,
                ..Default::default()
            }))
        }
        "tool" => Some(Message::tool_result(
            m["tool_call_id"].as_str().unwrap(),
            m["content"].as_str().unwrap_or(""),
        )),
        _ => None,
    }
}

#[test]
fn unusable_extraction_output_is_kept_and_nothing_crashes() {
    let home = Home::new("");
    let server = ScriptedServer::spawn(vec![
        Turn::text("Hello."),
        Turn::text("Sure."),
        Turn::text("I could not find any episodes, sorry!"),
        Turn::text("```json\n{\"facts\": [{\"key\": \"role\", \"value\": \n```"),
    ])
    .unwrap();
    let (_, stderr) = home.chat(&server, "cli:bad", "Hi, I am a designer.\nThanks.\n/exit\n");
    assert_eq!(server.requests().len(), 4, "{stderr}");
    assert!(home.memories(&[]).iter().all(|m| m.kind.as_str() != "fact"));
    let rejected = std::fs::read_to_string(home.workspace().join("logs/memory-rejected.jsonl"))
        .unwrap_or_else(|e| panic!("no rejected log ({e}): {stderr}"));
    assert!(
        rejected.contains("could not find any episodes"),
        "{rejected}"
    );
    assert!(rejected.contains("facts"), "{rejected}");
}

#[test]
fn a_killed_session_keeps_everything_before_and_a_torn_line_is_reported_and_skipped() {
    let home = Home::new("");
    let server = ScriptedServer::spawn(vec![
        Turn::text("First answer."),
        // The second answer never comes: the process is killed while it waits.
        Turn {
            delay_ms: 30_000,
            ..Turn::text("never")
        },
    ])
    .unwrap();
    let mut child = home
        .engram_with(&server)
        .args(["chat", "--session", "cli:crash", "--workspace"])
        .arg(home.workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"remember the blue door\n").unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !line.contains("First answer.") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "chat ended early");
        assert!(Instant::now() < deadline);
    }
    stdin.write_all(b"and the red key\n").unwrap();
    // Wait until the second request reaches the model, then kill the process outright.
    while server.requests().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the second turn never reached the model"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    child.wait().unwrap();

    let file = home.session_file("cli:crash");
    let shown = home.json(&["sessions", "show", "cli:crash"]);
    let contents: Vec<&str> = shown["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["_type"] == "message")
        .map(|r| r["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        ["remember the blue door", "First answer.", "and the red key"],
        "everything said before the kill is kept"
    );

    // A write torn by a crash: reported with file and line, skipped, and the next append
    // starts on a fresh line.
    let mut text = std::fs::read_to_string(&file).unwrap();
    let torn_line = text.lines().count() + 1;
    text.push_str(r#"{"_type":"message","timestamp":"2026-01-01T00:00:00Z","role":"assis"#);
    std::fs::write(&file, text).unwrap();
    let next = ScriptedServer::spawn(vec![Turn::text("The blue door and the red key.")]).unwrap();
    let (_, stderr) = home.run(&next, "cli:crash", "What did I ask you to remember?");
    assert!(
        stderr.contains(&format!("{} line {torn_line}", file.display())),
        "{stderr}"
    );
    let requests = next.requests();
    let users: Vec<&str> = requests[0]
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        users,
        [
            "remember the blue door",
            "and the red key",
            "What did I ask you to remember?"
        ]
    );
    next.check_tool_pairing().unwrap();
    let out = home
        .engram()
        .args(["sessions", "show", "cli:crash"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("line {torn_line}")), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("The blue door and the red key."),
        "appended after the torn line"
    );
}

#[test]
fn an_edited_memory_md_is_seen_on_the_next_turn() {
    let home = Home::new("");
    let memory_dir = home.workspace().join("memory");
    std::fs::create_dir_all(&memory_dir).unwrap();
    std::fs::write(
        memory_dir.join("MEMORY.md"),
        "# Long-term memory\n\n- The user's cat is called Miso.\n",
    )
    .unwrap();
    // Each one-shot run is extracted after its answer (nothing worth keeping here).
    let server = ScriptedServer::spawn(vec![
        Turn::text("Miso!"),
        episodes(&[]),
        profile(&[], &[]),
        Turn::text("Pixel!"),
        episodes(&[]),
        profile(&[], &[]),
    ])
    .unwrap();
    home.run(&server, "cli:pets", "What is my cat called?");
    assert!(system_text(&server.requests()[0]).contains("Miso"));

    std::fs::write(
        memory_dir.join("MEMORY.md"),
        "# Long-term memory\n\n- The user's cat is called Pixel.\n",
    )
    .unwrap();
    home.run(&server, "cli:pets", "And now?");
    let text = system_text(&server.requests()[3]);
    assert!(text.contains("Pixel"), "{text}");
    assert!(!text.contains("called Miso"), "{text}");
}

#[test]
fn the_repl_shows_what_it_knows_and_forgets_on_request() {
    let home = Home::new("");
    let first = ScriptedServer::spawn(vec![
        Turn::text("Go is a fine choice."),
        Turn::text("Sure."),
        episodes(&[(
            "The user chose Go for the billing service",
            "task_result",
            4,
        )]),
        profile(&[("programming_language", "Go")], &[]),
    ])
    .unwrap();
    home.chat(
        &first,
        "cli:one",
        "I write Go for a living; I picked it for the billing service.\nThanks.\n/exit\n",
    );

    // No model call is needed for any of these commands.
    let idle = ScriptedServer::spawn(vec![]).unwrap();
    let (stdout, stderr) = home.chat(
        &idle,
        "cli:two",
        "/memory\n/sessions\n/forget\nn\n/forget\ny\n/memory\n/exit\n",
    );
    assert!(
        stderr.contains("I remember"),
        "the start line says what is known: {stderr}"
    );
    assert!(stdout.contains("Go"), "/memory shows the profile: {stdout}");
    assert!(
        stdout.contains("billing service"),
        "/memory shows episodes: {stdout}"
    );
    assert!(
        stdout.contains("cli:one"),
        "/sessions lists the sessions: {stdout}"
    );
    assert!(stderr.contains("(nothing was erased)"), "{stderr}");
    assert!(stderr.contains("(erased "), "{stderr}");
    assert!(idle.requests().is_empty());
    assert!(home.memories(&[]).is_empty());
    assert!(
        !home.session_file("cli:one").exists(),
        "the user's sessions are erased too"
    );
}
