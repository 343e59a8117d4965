#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The memory manager through a real SQLite store, real markdown files and the scripted model
//! server speaking the real wire formats.

use std::path::PathBuf;
use std::sync::Arc;

use engram_core::{
    Backend, ChatModel, ChatRequest, Clock, Filter, FixedClock, HistoryKind, Kind, Memory,
    MemoryStore, Message,
};
use engram_llm::Provider;
use engram_llm::scripted::{ScriptedServer, Turn};
use engram_memory::context::Section;
use engram_memory::{ManagerConfig, MemoryManager, Searcher};
use engram_store_sqlite::{SqliteStore, StoreOptions};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use tempfile::TempDir;

const USER: &str = "dana";

fn day_one() -> Timestamp {
    "2024-05-16T15:00:00Z".parse().unwrap()
}

struct World {
    dir: TempDir,
    clock: Arc<FixedClock>,
    store: Arc<dyn MemoryStore>,
}

impl World {
    fn new() -> Self {
        let dir = TempDir::new().unwrap();
        let clock = Arc::new(FixedClock::new(day_one()));
        let store = open_store(&dir, &clock).memories;
        Self { dir, clock, store }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    /// A manager as a new process would build it (its own store handle).
    fn manager(&self, model: Option<Arc<dyn ChatModel>>, config: ManagerConfig) -> MemoryManager {
        let backend = open_store(&self.dir, &self.clock);
        let store = backend.memories;
        let searcher = Searcher::new(store.clone()).with_clock(self.clock.clone(), TimeZone::UTC);
        std::fs::create_dir_all(self.workspace()).unwrap();
        MemoryManager::new(
            store,
            backend.claims,
            Arc::new(searcher),
            model,
            engram_workspace::Workspace::confined(self.workspace()).unwrap(),
            USER.to_string(),
            config,
        )
        .with_time_zone(TimeZone::UTC)
    }

    async fn current(&self, kinds: &[Kind]) -> Vec<Memory> {
        let filter = Filter {
            kinds: kinds.to_vec(),
            ..Filter::user(USER)
        };
        self.store.list(&filter, 1000, 0).await.unwrap()
    }

    async fn everything(&self, kinds: &[Kind]) -> Vec<Memory> {
        let filter = Filter {
            kinds: kinds.to_vec(),
            include_closed: true,
            ..Filter::user(USER)
        };
        self.store.list(&filter, 1000, 0).await.unwrap()
    }
}

/// The stores of the world's database, opened as a new process would.
fn open_store(dir: &TempDir, clock: &Arc<FixedClock>) -> Backend {
    SqliteStore::open_with(
        dir.path().join("engram.db"),
        StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap()
    .into_backend()
}

async fn scripted(provider: Provider, turns: Vec<Turn>) -> (ScriptedServer, Arc<dyn ChatModel>) {
    let server = ScriptedServer::start(turns).await.unwrap();
    let model = engram_llm::build(server.client_config(provider)).unwrap();
    (server, model)
}

fn json_turn(value: serde_json::Value) -> Turn {
    Turn::text(value.to_string())
}

fn session_one() -> Vec<Message> {
    vec![
        Message::system("You are engram's assistant."),
        Message::user("Hi! I'm a backend developer, I work with Python 3.12 and FastAPI."),
        Message::assistant("Nice to meet you. What are you working on?"),
        Message::user(
            "Can you help me split my FastAPI app into routers? I did the models yesterday.",
        ),
        Message::tool_result("call_1", "ls output: app/main.py app/models.py"),
        Message::assistant(
            "Sure: create app/routers/, one module per resource, and include them in main.py.",
        ),
        Message::user(
            "Great, the router layout works well, and I fixed the flaky login test. Please keep answers short.",
        ),
        Message::assistant("Will do."),
    ]
}

/// A conversation of one user message.
fn said(text: &str) -> Vec<Message> {
    vec![Message::user(text)]
}

fn profile_answer(facts: serde_json::Value, preferences: serde_json::Value) -> Turn {
    json_turn(json!({"facts": facts, "preferences": preferences}))
}

#[tokio::test]
async fn two_sessions_the_second_knows_what_the_first_learned() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let world = World::new();
        let (server, model) = scripted(
            provider,
            vec![
                json_turn(json!({"episodes": [{
                    "summary": "Helped the user split their FastAPI app into routers after they finished the models yesterday",
                    "category": "task_result", "importance": 3}]})),
                profile_answer(
                    json!([{"key": "role", "value": "backend developer"},
                           {"key": "Programming Language", "value": "Python 3.12"},
                           {"key": "web_framework", "value": "FastAPI"}]),
                    json!([]),
                ),
            ],
        )
        .await;

        // Session one: extraction after the conversation.
        let first = world.manager(Some(model.clone()), ManagerConfig::default());
        let report = first
            .extract_and_merge(&session_one(), "cli:direct", day_one())
            .await
            .unwrap();
        assert_eq!(report.episodes_added, 1, "{report:?}");
        assert_eq!(report.facts_added, 3, "{report:?}");
        assert!(report.unusable.is_empty());
        // Nothing similar was known: no merge call, just the two extraction calls.
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        let body = requests[0].body.to_string();
        assert!(
            body.contains("2024-05-16 (Thursday)"),
            "the prompt gives the conversation's date"
        );
        assert!(body.contains("did the models yesterday"));
        assert!(
            !body.contains("ls output"),
            "tool results are not shown to the extractor"
        );
        assert!(
            !body.contains("engram's assistant"),
            "system messages are not shown either"
        );
        if provider == Provider::OpenAi {
            assert_eq!(requests[0].body["response_format"]["type"], "json_object");
        }
        let episode = &world.current(&[Kind::Episode]).await[0];
        assert!(
            episode.text.contains("yesterday (2024-05-15)"),
            "{}",
            episode.text
        );
        assert_eq!(episode.category.as_deref(), Some("task_result"));
        assert_eq!(episode.metadata["session"], "cli:direct");
        let facts = world.current(&[Kind::Fact]).await;
        assert!(
            facts
                .iter()
                .any(|f| f.text == "programming_language: Python 3.12"
                    && f.metadata["key"] == "programming_language")
        );
        // The episode went to the daily note too.
        let note = first
            .mirror()
            .read_daily("2024-05-16".parse().unwrap())
            .unwrap()
            .unwrap();
        assert!(note.starts_with("# 2024-05-16\n"));
        assert!(note.contains("15:00 [task_result] Helped the user split"));

        // Session two, the next day, in a new process: the memory block carries the facts.
        world.clock.set("2024-05-17T09:00:00Z".parse().unwrap());
        let second = world.manager(Some(model.clone()), ManagerConfig::default());
        assert_eq!(
            second.known_summary().await.unwrap(),
            "I remember 3 facts, 0 preferences and 1 episode about you."
        );
        let block = second
            .context_block(
                "Which test framework should I use for my routers?",
                "2024-05-17T09:00:00Z".parse().unwrap(),
            )
            .await
            .unwrap()
            .unwrap();
        for fact in [
            "role: backend developer",
            "programming_language: Python 3.12",
            "web_framework: FastAPI",
        ] {
            assert!(
                block.text.contains(fact),
                "{fact} missing from\n{}",
                block.text
            );
        }
        assert!(block.text.contains("2024-05-16: Helped the user split"));
        assert!(
            block.text.contains("the user's\ncurrent words win")
                || block.text.contains("current words win")
        );
        assert_eq!(block.count(Section::Profile), 3);
        assert!(block.tokens <= 1500);

        // The request sent to the model with that block carries the facts.
        server.push(Turn::text("pytest, with httpx's AsyncClient for FastAPI."));
        model
            .chat(&ChatRequest::new(vec![
                Message::system("You are engram's assistant."),
                Message::system(block.text.clone()),
                Message::user("Which test framework should I use for my routers?"),
            ]))
            .await
            .unwrap();
        let sent = server.requests().last().unwrap().body.to_string();
        assert!(sent.contains("programming_language: Python 3.12"));
        assert!(sent.contains("web_framework: FastAPI"));
    }
}

#[tokio::test]
async fn a_changed_preference_leaves_one_current_fact_and_the_old_one_in_history() {
    for model_merge in [true, false] {
        let world = World::new();
        let mut turns = vec![
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([]),
                json!([{"key": "answer_style", "value": "detailed answers with examples"}]),
            ),
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([]),
                json!([{"key": "Answer Style", "value": "short answers"}]),
            ),
        ];
        if model_merge {
            turns.push(json_turn(
                json!({"decisions": [{"new": "a", "event": "UPDATE", "id": 0}]}),
            ));
        }
        let (server, model) = scripted(Provider::OpenAi, turns).await;
        let config = ManagerConfig {
            model_merge,
            ..ManagerConfig::default()
        };
        let manager = world.manager(Some(model), config);
        manager
            .extract_and_merge(
                &said("I like detailed answers with examples."),
                "cli:direct",
                day_one(),
            )
            .await
            .unwrap();
        world.clock.advance(SignedDuration::from_hours(24));
        let report = manager
            .extract_and_merge(
                &said("From today on I want short answers."),
                "cli:direct",
                world.clock.now(),
            )
            .await
            .unwrap();
        assert_eq!(
            (report.facts_added, report.facts_superseded),
            (1, 1),
            "{report:?}"
        );
        assert_eq!(report.decided_by_model, usize::from(model_merge));

        let current = world.current(&[Kind::Preference]).await;
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].text, "answer_style: short answers");
        let all = world.everything(&[Kind::Preference]).await;
        assert_eq!(all.len(), 2);
        let old = all.iter().find(|m| m.text.contains("detailed")).unwrap();
        assert!(old.valid_to.is_some());
        let history = world.store.history(old.id).await.unwrap();
        assert!(history.iter().any(|h| h.event == HistoryKind::Invalidate));
        // Why it closed: the user's words, and what replaced it.
        let old = world.store.get(old.id).await.unwrap();
        assert_eq!(
            old.metadata["closed_because"],
            "From today on I want short answers."
        );
        assert_eq!(old.metadata["superseded_by"], current[0].id.to_string());
        assert_eq!(
            current[0].metadata["evidence"],
            "From today on I want short answers."
        );
        if model_merge {
            // The model saw the known entry under a small id, never its real id.
            let merge_prompt = server.requests().last().unwrap().body.to_string();
            assert!(
                merge_prompt
                    .contains("[0] (preference) answer_style: detailed answers with examples")
            );
            assert!(!merge_prompt.contains(&old.id.to_string()));
        }
        let block = manager
            .context_block("hello", world.clock.now())
            .await
            .unwrap()
            .unwrap();
        assert!(block.text.contains("short answers") && !block.text.contains("detailed answers"));
    }
}

#[tokio::test]
async fn the_model_merge_keeps_an_addition_apart_from_a_replacement_and_delete_only_closes() {
    let world = World::new();
    let (_server, model) = scripted(
        Provider::Anthropic,
        vec![
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "programming_language", "value": "Python 3.9"},
                       {"key": "container_tool", "value": "Docker"}]),
                json!([]),
            ),
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "programming_language", "value": "Go"},
                       {"key": "programming_language_version", "value": "Python 3.12"},
                       {"key": "container_tool", "value": "no longer uses Docker"}]),
                json!([]),
            ),
            // Known entries are listed same-key first: [0] Python 3.9, [1] Docker.
            json_turn(json!({"decisions": [
                {"new": "a", "event": "ADD", "id": null},
                {"new": "b", "event": "UPDATE", "id": 0},
                {"new": "c", "event": "DELETE", "id": 1}]})),
        ],
    )
    .await;
    let manager = world.manager(Some(model), ManagerConfig::default());
    manager
        .extract_and_merge(
            &said("I write Python 3.9 and I use Docker for containers."),
            "s1",
            day_one(),
        )
        .await
        .unwrap();
    let report = manager
        .extract_and_merge(
            &said("I started writing Go too. I upgraded to Python 3.12. I no longer use Docker."),
            "s2",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.decided_by_model, 3, "{report:?}");
    assert_eq!(
        (
            report.facts_added,
            report.facts_superseded,
            report.facts_deleted
        ),
        (2, 1, 1)
    );
    let mut current: Vec<String> = world
        .current(&[Kind::Fact])
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    current.sort();
    assert_eq!(
        current,
        vec![
            "programming_language: Go",
            "programming_language_version: Python 3.12"
        ]
    );
    // Nothing was destroyed: the replaced and the deleted entries are closed, not gone.
    assert_eq!(world.everything(&[Kind::Fact]).await.len(), 4);
}

#[tokio::test]
async fn malformed_extraction_output_is_repaired_or_kept_aside_never_a_crash() {
    let repaired = [
        "```json\n{\"episodes\": [{\"summary\": \"Fixed the flaky login test\", \"category\": \"task_result\", \"importance\": 4}]}\n```",
        "Here is the JSON you asked for:\n{\"episodes\": [{\"summary\": \"Fixed the flaky login test\", \"category\": \"task_result\", \"importance\": 4}]}\nLet me know!",
        "{episodes: [{summary: 'Fixed the flaky login test', category: 'task_result', importance: 4,}]",
    ];
    for answer in repaired {
        let world = World::new();
        let (_server, model) = scripted(
            Provider::OpenAi,
            vec![
                Turn::text(answer),
                Turn::text("{\"facts\": [], \"preferences\": []}"),
            ],
        )
        .await;
        let manager = world.manager(Some(model), ManagerConfig::default());
        let report = manager
            .extract_and_merge(&session_one(), "s", day_one())
            .await
            .unwrap();
        assert_eq!(report.episodes_added, 1, "{answer}: {report:?}");
        assert!(report.unusable.is_empty());
    }

    let garbage = [
        "I'm sorry, I can't help with that.",
        "{\"result\": \"ok\"}",
        "\u{1}\u{2}}{][",
        "{\"facts\": \"Python\"}",
    ];
    for answer in garbage {
        let world = World::new();
        let (_server, model) = scripted(
            Provider::OpenAi,
            vec![Turn::text(answer), Turn::text(answer)],
        )
        .await;
        let manager = world.manager(Some(model), ManagerConfig::default());
        let report = manager
            .extract_and_merge(&session_one(), "s", day_one())
            .await
            .unwrap();
        assert_eq!(
            (report.episodes_added, report.facts_added),
            (0, 0),
            "{answer}"
        );
        assert_eq!(report.unusable.len(), 2, "{answer}: {report:?}");
        let log = std::fs::read_to_string(report.rejected_log.unwrap()).unwrap();
        let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
        assert_eq!(first["raw"], answer);
        assert_eq!(first["call"], "episodes");
        assert!(world.everything(&[]).await.is_empty());
    }

    // A merge answer that cannot be used falls back to the key rule.
    let world = World::new();
    let (_server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": []})),
            profile_answer(json!([{"key": "editor", "value": "vim"}]), json!([])),
            json_turn(json!({"episodes": []})),
            profile_answer(json!([{"key": "editor", "value": "helix"}]), json!([])),
            Turn::text("UPDATE the first one I guess"),
        ],
    )
    .await;
    let manager = world.manager(Some(model), ManagerConfig::default());
    manager
        .extract_and_merge(&said("My editor is vim."), "s", day_one())
        .await
        .unwrap();
    let report = manager
        .extract_and_merge(&said("I switched from vim to helix."), "s", day_one())
        .await
        .unwrap();
    assert_eq!(
        (
            report.facts_added,
            report.facts_superseded,
            report.decided_by_model
        ),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(report.unusable.len(), 1);
    assert_eq!(world.current(&[Kind::Fact]).await[0].text, "editor: helix");
}

#[tokio::test]
async fn one_message_is_enough_and_only_missing_words_or_models_skip() {
    let world = World::new();
    let (server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "daughter_name", "value": "Ines"},
                       {"key": "daughter_allergy", "value": "allergic to peanuts"}]),
                json!([]),
            ),
        ],
    )
    .await;
    let manager = world.manager(Some(model), ManagerConfig::default());
    let report = manager
        .extract_and_merge(
            &said("Please remember: my daughter Ines is allergic to peanuts"),
            "api",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.skipped, None);
    assert_eq!(report.facts_added, 2, "{report:?}");
    assert_eq!(server.requests().len(), 2);
    // Only the assistant spoke, or nobody did: nothing the user said to learn from.
    for conversation in [vec![Message::assistant("hello")], vec![]] {
        let report = manager
            .extract_and_merge(&conversation, "s", day_one())
            .await
            .unwrap();
        assert!(report.skipped.unwrap().contains("no user message"));
    }
    assert_eq!(server.requests().len(), 2);
    let without = world.manager(None, ManagerConfig::default());
    let report = without
        .extract_and_merge(&session_one(), "s", day_one())
        .await
        .unwrap();
    assert!(report.skipped.unwrap().contains("model"));
}

#[tokio::test]
async fn facts_only_the_assistant_or_the_prompt_said_never_enter_the_profile() {
    let world = World::new();
    let (_server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": [
                {"summary": "Planned the user's night shifts in Berlin", "category": "task_result", "importance": 3},
                {"summary": "Deployed the Django app to Kubernetes", "category": "task_result", "importance": 4}]})),
            profile_answer(
                json!([{"key": "role", "value": "nurse"},
                       {"key": "location", "value": "Berlin"},
                       {"key": "web_framework", "value": "<user's words>"},
                       {"key": "programming_language", "value": "Python 3.12"},
                       {"key": "employer", "value": "Porto"},
                       {"key": "next_location", "value": "Munich"},
                       {"key": "occupation", "value": "AI assistant"}]),
                json!([]),
            ),
        ],
    )
    .await;
    let manager = world.manager(Some(model), ManagerConfig::default());
    let conversation = vec![
        Message::user(
            "I'm a nurse in Berlin. Can you plan my night shifts for next week? If I moved to Porto, would it be easier?",
        ),
        Message::assistant(
            "Sure, here is a plan for your night shifts. Many nurses also like Munich, and Porto has good hospitals. You are an AI assistant's favourite user!",
        ),
    ];
    let report = manager
        .extract_and_merge(&conversation, "s", day_one())
        .await
        .unwrap();
    let mut current: Vec<String> = world
        .current(&[Kind::Fact])
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    current.sort();
    assert_eq!(
        current,
        vec!["location: Berlin", "role: nurse"],
        "{report:?}"
    );
    let codes: Vec<(&str, &str)> = report
        .rejected
        .iter()
        .map(|r| (r.text.as_str(), r.code.as_str()))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("Deployed the Django app to Kubernetes", "not_said"),
            ("web_framework: <user's words>", "prompt_example"),
            ("programming_language: Python 3.12", "not_said"),
            ("employer: Porto", "not_stated"),
            ("next_location: Munich", "assistant_only"),
            ("occupation: AI assistant", "assistant_only"),
        ]
    );
    assert_eq!(report.episodes_added, 1);
    // Each rejection is logged with its reason.
    let log = std::fs::read_to_string(report.rejected_log.unwrap()).unwrap();
    assert_eq!(log.lines().count(), 6);
    assert!(log.contains("only the assistant said it (munich)"));
}

#[tokio::test]
async fn a_change_needs_support_a_revocation_closes_and_a_contradiction_waits_as_a_candidate() {
    let world = World::new();
    let (_server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "vegetarian", "value": "true"},
                       {"key": "role", "value": "backend developer"},
                       {"key": "web_framework", "value": "FastAPI"}]),
                json!([]),
            ),
            // The user revokes two things; the model names one as ended and one not at all.
            json_turn(json!({"episodes": []})),
            json_turn(json!({"facts": [{"key": "diet", "value": "pescatarian"}],
                             "preferences": [],
                             "ended": [{"key": "vegetarian", "value": "true"},
                                       {"key": "web_framework", "value": "FastAPI"}]})),
            // A contradiction pieced together from two clauses (what is said of someone else
            // is refused outright: see the test of losses and attribution below).
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "role", "value": "frontend developer"}]),
                json!([]),
            ),
        ],
    )
    .await;
    let config = ManagerConfig {
        model_merge: false,
        ..ManagerConfig::default()
    };
    let manager = world.manager(Some(model), config);
    // A person's own line in MEMORY.md, before engram writes its section.
    let memory_md = manager.mirror().long_term_path();
    std::fs::create_dir_all(memory_md.parent().unwrap()).unwrap();
    std::fs::write(&memory_md, "# Long-term memory\n\n- Standup is at 9:30\n").unwrap();
    manager
        .extract_and_merge(
            &said("I'm vegetarian. I'm a backend developer and we use FastAPI."),
            "s1",
            day_one(),
        )
        .await
        .unwrap();
    let report = manager
        .extract_and_merge(
            &said("I'm not vegetarian any more, I eat fish now: pescatarian. Also we dropped FastAPI."),
            "s2",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(
        (report.facts_added, report.facts_deleted),
        (1, 2),
        "{report:?}"
    );
    let report = manager
        .extract_and_merge(
            &said("I helped out on the frontend this week. Our team has one developer per area."),
            "s3",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.candidates, 1, "{report:?}");
    let mut profile: Vec<String> = manager
        .overview()
        .await
        .unwrap()
        .facts
        .into_iter()
        .map(|m| m.text)
        .collect();
    profile.sort();
    assert_eq!(
        profile,
        vec!["diet: pescatarian", "role: backend developer"]
    );
    // The candidate is stored, marked, and kept out of the profile and the memory block.
    let candidate = world
        .current(&[Kind::Fact])
        .await
        .into_iter()
        .find(|m| m.text == "role: frontend developer")
        .unwrap();
    assert_eq!(candidate.metadata["status"], "candidate");
    let block = manager
        .context_block("what do I do?", day_one())
        .await
        .unwrap()
        .unwrap();
    assert!(!block.text.contains("frontend"));
    // MEMORY.md's managed section mirrors the profile; the person's line is theirs and read back,
    // and the profile is in the block once.
    let text = std::fs::read_to_string(&memory_md).unwrap();
    assert!(
        text.starts_with("# Long-term memory\n\n- Standup is at 9:30\n"),
        "{text}"
    );
    assert!(
        text.contains("- diet: pescatarian\n- role: backend developer\n"),
        "{text}"
    );
    assert!(!text.contains("vegetarian: true") && !text.contains("frontend"));
    assert!(block.text.contains("Standup is at 9:30"));
    assert_eq!(
        block.text.matches("diet: pescatarian").count(),
        1,
        "{}",
        block.text
    );
    // Nothing was destroyed: the revoked facts are closed, with the user's words.
    let closed: Vec<Memory> = world
        .everything(&[Kind::Fact])
        .await
        .into_iter()
        .filter(|m| m.valid_to.is_some())
        .collect();
    assert_eq!(closed.len(), 2);
    assert!(closed.iter().all(|m| {
        m.metadata["closed_because"]
            .as_str()
            .unwrap()
            .contains("vegetarian")
            || m.metadata["closed_because"]
                .as_str()
                .unwrap()
                .contains("dropped FastAPI")
    }));
}

#[tokio::test]
async fn what_the_user_ends_closes_even_when_the_model_forgets_to_say_so() {
    let world = World::new();
    let (_server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "diet", "value": "vegan"},
                       {"key": "web_framework", "value": "FastAPI"},
                       {"key": "programming_language", "value": "Python"}]),
                json!([]),
            ),
            // A small model's answer: nothing new, and no "ended" list at all.
            json_turn(json!({"episodes": []})),
            profile_answer(json!([]), json!([])),
        ],
    )
    .await;
    let config = ManagerConfig {
        model_merge: false,
        ..ManagerConfig::default()
    };
    let manager = world.manager(Some(model), config);
    manager
        .extract_and_merge(
            &said("I'm vegan. We build the service with FastAPI, and I write Python."),
            "s1",
            day_one(),
        )
        .await
        .unwrap();
    let report = manager
        .extract_and_merge(
            &said(
                "I'm not vegan any more, doctor's orders. We dropped FastAPI last sprint. \
                 I don't like Python's packaging though.",
            ),
            "s2",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.facts_deleted, 2, "{report:?}");
    let profile: Vec<String> = world
        .current(&[Kind::Fact])
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(
        profile,
        vec!["programming_language: Python"],
        "a plain dislike ends nothing"
    );
    let closed: Vec<Memory> = world
        .everything(&[Kind::Fact])
        .await
        .into_iter()
        .filter(|m| m.valid_to.is_some())
        .collect();
    assert_eq!(closed.len(), 2);
    for memory in &closed {
        let because = memory.metadata["closed_because"].as_str().unwrap();
        assert!(
            because.contains("not vegan any more") || because.contains("dropped FastAPI"),
            "{because}"
        );
    }
}

#[tokio::test]
async fn a_loss_or_a_move_in_other_words_closes_and_what_others_do_is_not_learned() {
    let world = World::new();
    let (_server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "pet", "value": "dog named Pepper"},
                       {"key": "wohnort", "value": "Köln"},
                       {"key": "role", "value": "backend developer"}]),
                json!([]),
            ),
            // A small model's answers: nothing ended, and what a colleague uses as the user's
            // (filed under the colleague), or as someone else's (refused).
            json_turn(json!({"episodes": []})),
            profile_answer(json!([]), json!([])),
            json_turn(json!({"episodes": []})),
            profile_answer(json!([]), json!([])),
            json_turn(json!({"episodes": []})),
            profile_answer(
                json!([{"key": "tools", "value": "Svelte"},
                       {"key": "role", "value": "frontend developer"},
                       {"key": "sister_editor", "value": "Svelte"},
                       {"key": "colleague", "value": "Priyanka"}]),
                json!([]),
            ),
        ],
    )
    .await;
    let config = ManagerConfig {
        model_merge: false,
        ..ManagerConfig::default()
    };
    let manager = world.manager(Some(model), config);
    let report = manager
        .extract_and_merge(
            &said("We have a dog named Pepper. Ich wohne in Köln. I'm a backend developer."),
            "s1",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.facts_added, 3, "{report:?}");
    let report = manager
        .extract_and_merge(
            &said("Sad news, Pepper died last week. My grandfather died in May too."),
            "s2",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.facts_deleted, 1, "{report:?}");
    let report = manager
        .extract_and_merge(
            &said("Wir sind letzte Woche von Köln nach Leipzig umgezogen."),
            "s3",
            day_one(),
        )
        .await
        .unwrap();
    assert_eq!(report.facts_deleted, 1, "{report:?}");
    let report = manager
        .extract_and_merge(
            &said(
                "My colleague Priyanka is a frontend developer and she swears by Svelte. \
                 Should our team try it?",
            ),
            "s4",
            day_one(),
        )
        .await
        .unwrap();
    let codes: Vec<(&str, &str)> = report
        .rejected
        .iter()
        .map(|r| (r.text.as_str(), r.code.as_str()))
        .collect();
    assert_eq!(codes, vec![("sister_editor: Svelte", "about_someone_else")]);
    let log = std::fs::read_to_string(report.rejected_log.unwrap()).unwrap();
    assert!(log.contains("the user said it of someone else"), "{log}");
    let mut profile: Vec<String> = world
        .current(&[Kind::Fact])
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    profile.sort();
    assert_eq!(
        profile,
        vec![
            "colleague: Priyanka",
            "colleague_role: frontend developer",
            "colleague_tools: Svelte",
            "role: backend developer"
        ]
    );
    let closed: Vec<Memory> = world
        .everything(&[Kind::Fact])
        .await
        .into_iter()
        .filter(|m| m.valid_to.is_some())
        .collect();
    let mut because: Vec<&str> = closed
        .iter()
        .map(|m| m.metadata["closed_because"].as_str().unwrap())
        .collect();
    because.sort();
    assert_eq!(
        because,
        vec![
            "Sad news, Pepper died last week.",
            "Wir sind letzte Woche von Köln nach Leipzig umgezogen."
        ]
    );
}

#[tokio::test]
async fn an_edited_memory_md_is_seen_on_the_next_turn_and_indexed() {
    let world = World::new();
    let manager = world.manager(None, ManagerConfig::default());
    let path = manager.mirror().long_term_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        "# Long-term memory\n\n- Deploys to Fly.io every Friday\n- Team lead is Priya\n",
    )
    .unwrap();

    let block = manager
        .context_block("when do we deploy?", day_one())
        .await
        .unwrap()
        .unwrap();
    assert!(
        block
            .text
            .contains("## Long-term notes (MEMORY.md)\n- Deploys to Fly.io every Friday")
    );
    let notes = world.current(&[Kind::Note]).await;
    assert_eq!(notes.len(), 2);
    assert!(
        notes
            .iter()
            .all(|n| n.metadata["source_file"] == "MEMORY.md")
    );

    // A person edits the file between two turns.
    std::fs::write(
        &path,
        "# Long-term memory\n\n- Deploys to Render every Monday\n- Team lead is Priya\n",
    )
    .unwrap();
    let block = manager
        .context_block("when do we deploy?", day_one())
        .await
        .unwrap()
        .unwrap();
    assert!(block.text.contains("Deploys to Render every Monday"));
    assert!(!block.text.contains("Fly.io"));
    let mut current: Vec<String> = world
        .current(&[Kind::Note])
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    current.sort();
    assert_eq!(
        current,
        vec!["Deploys to Render every Monday", "Team lead is Priya"]
    );
    // The old line is closed, not gone; the new one is searchable.
    assert_eq!(world.everything(&[Kind::Note]).await.len(), 3);
    let hits = world
        .store
        .search_lexical(&Filter::user(USER), "Render", 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);

    // A new process syncs again without duplicating anything.
    let again = world.manager(None, ManagerConfig::default());
    again.context_block("hi", day_one()).await.unwrap();
    assert_eq!(world.everything(&[Kind::Note]).await.len(), 3);

    // Removing the file closes its notes.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        again.context_block("deploy", day_one()).await.unwrap(),
        None
    );
    assert!(world.current(&[Kind::Note]).await.is_empty());
}

#[tokio::test]
async fn daily_notes_overview_and_forget() {
    let world = World::new();
    let manager = world.manager(None, ManagerConfig::default());
    manager
        .append_daily_note("Decided to move CI to GitHub Actions", day_one())
        .unwrap();
    let block = manager
        .context_block("ci", day_one())
        .await
        .unwrap()
        .unwrap();
    assert!(
        block
            .text
            .contains("## Today's notes\n- 15:00 Decided to move CI to GitHub Actions")
    );
    // Tomorrow it is no longer today's note.
    let tomorrow = day_one() + SignedDuration::from_hours(24);
    assert_eq!(manager.context_block("ci", tomorrow).await.unwrap(), None);

    world
        .store
        .add(
            engram_core::NewMemory::new(engram_core::Scope::user(USER), "role: designer")
                .with_kind(Kind::Fact),
            "test",
        )
        .await
        .unwrap();
    let overview = manager.overview().await.unwrap();
    assert_eq!(overview.facts.len(), 1);
    assert!(overview.to_string().contains("Facts:\n  - role: designer"));
    assert_eq!(manager.forget().await.unwrap(), 1);
    assert!(world.everything(&[]).await.is_empty());
    assert!(
        !manager
            .mirror()
            .daily_path("2024-05-16".parse().unwrap())
            .exists()
    );
    assert_eq!(
        manager.known_summary().await.unwrap(),
        "I don't remember anything about you yet."
    );
}

#[tokio::test]
async fn the_overview_shows_the_profile_the_last_episodes_and_counts() {
    let world = World::new();
    let (_server, model) = scripted(
        Provider::OpenAi,
        vec![
            json_turn(json!({"episodes": [
                {"summary": "Split the FastAPI app into routers", "category": "task_result", "importance": 3},
                {"summary": "The user said the router layout works well", "category": "user_feedback", "importance": 2}]})),
            profile_answer(
                json!([{"key": "role", "value": "backend developer"}]),
                json!([{"key": "answer_style", "value": "short answers"}]),
            ),
        ],
    )
    .await;
    let manager = world.manager(Some(model), ManagerConfig::default());
    manager
        .extract_and_merge(&session_one(), "cli:direct", day_one())
        .await
        .unwrap();
    insta::assert_snapshot!(manager.overview().await.unwrap().to_string(), @r"
    Memory of dana: 1 fact, 1 preference, 2 episodes, 0 notes (0 older entries in history)

    Facts:
      - role: backend developer

    Preferences:
      - answer_style: short answers

    Last episodes:
      - 2024-05-16 [user_feedback, importance 2] The user said the router layout works well
      - 2024-05-16 [task_result, importance 3] Split the FastAPI app into routers
    ");
    assert_eq!(
        manager.known_summary().await.unwrap(),
        "I remember 1 fact, 1 preference and 2 episodes about you."
    );
}

#[tokio::test]
async fn the_block_brings_back_relevant_and_recent_episodes_once_and_skips_trivia() {
    let world = World::new();
    let add = async |text: &str, importance: i64, hours_ago: i64| {
        world
            .store
            .add(
                engram_core::NewMemory::new(engram_core::Scope::user(USER), text)
                    .with_importance(engram_core::Importance::new(importance).unwrap())
                    .at(day_one() - SignedDuration::from_hours(hours_ago)),
                "test",
            )
            .await
            .unwrap();
    };
    add("Moved the deploy pipeline to GitHub Actions", 4, 24 * 40).await;
    add("Chatted about the weather before the deploy", 1, 1).await;
    add("Reviewed the billing service pull request", 3, 2).await;
    add("Fixed the flaky login test", 3, 3).await;
    add("Upgraded PostgreSQL to 16", 3, 4).await;
    add("Wrote the onboarding guide", 3, 5).await;
    let manager = world.manager(None, ManagerConfig::default());
    let block = manager
        .context_block("how does our deploy pipeline work again?", day_one())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(block.count(Section::Relevant), 1, "{}", block.text);
    assert!(block.text.contains(
        "## Earlier episodes that may be relevant\n- 2024-04-06: Moved the deploy pipeline"
    ));
    // The three latest episodes worth remembering, not the one already shown, not the trivia.
    assert_eq!(block.count(Section::Recent), 3);
    assert!(block.text.contains("Reviewed the billing service"));
    assert!(block.text.contains("Fixed the flaky login test"));
    assert!(block.text.contains("Upgraded PostgreSQL"));
    assert!(!block.text.contains("onboarding"));
    assert!(!block.text.contains("weather"));
    assert_eq!(block.text.matches("deploy pipeline").count(), 1);
    // A tiny budget still holds, keeping the most relevant line.
    let small = world.manager(
        None,
        ManagerConfig {
            context_budget_tokens: 120,
            ..ManagerConfig::default()
        },
    );
    let block = small
        .context_block("how does our deploy pipeline work again?", day_one())
        .await
        .unwrap()
        .unwrap();
    assert!(block.tokens <= 120, "{}", block.tokens);
    assert!(
        block.text.contains("Moved the deploy pipeline"),
        "{}",
        block.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_extracted_once_whichever_process_asks() {
    let world = World::new();
    let nothing = || {
        [
            json_turn(json!({"episodes": []})),
            profile_answer(json!([]), json!([])),
        ]
    };
    let (server, model) = scripted(
        Provider::OpenAi,
        vec![
            // Slow, so that the second process asks while the first extracts.
            json_turn(json!({"episodes": []})).delay(std::time::Duration::from_millis(600)),
            profile_answer(
                json!([{"key": "pet", "value": "a cat called Miso"}]),
                json!([]),
            ),
        ],
    )
    .await;
    // Two processes: each manager has a store handle of its own on the same database.
    let first = world.manager(Some(model.clone()), ManagerConfig::default());
    let second = world.manager(Some(model.clone()), ManagerConfig::default());
    let batch = said("I have a cat called Miso.");
    let (a, b) = tokio::join!(first.extract_batch(&batch, "api", day_one()), async {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        second.extract_batch(&batch, "api", day_one()).await
    });
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.facts_added, 1, "{a:?}");
    assert_eq!(a.messages, Some([0, 1]));
    assert!(
        b.skipped.as_deref().unwrap().contains("another process"),
        "{b:?}"
    );
    assert_eq!(server.requests().len(), 2);
    // The same messages again, through either: nothing asked of the model, nothing added.
    for manager in [&first, &second] {
        let again = manager
            .extract_batch(&batch, "api", day_one())
            .await
            .unwrap();
        assert!(again.skipped.unwrap().contains("already extracted"));
    }
    assert_eq!(server.requests().len(), 2);
    assert_eq!(world.current(&[Kind::Fact]).await.len(), 1);

    // An extraction that fails gives its messages back at once.
    let moved = said("I moved to Lisbon last month.");
    server.push(Turn::unauthorized());
    assert!(first.extract_batch(&moved, "api", day_one()).await.is_err());
    server.push_all([
        json_turn(json!({"episodes": []})),
        profile_answer(json!([{"key": "city", "value": "Lisbon"}]), json!([])),
    ]);
    let retried = second
        .extract_batch(&moved, "api", day_one())
        .await
        .unwrap();
    assert_eq!(retried.facts_added, 1, "{retried:?}");

    // A session's messages are claimed in order: what is new after the last extraction only.
    let session = session_one();
    server.push_all(nothing());
    let early = first
        .extract_session(&session[..4], "cli:one", 0, day_one())
        .await
        .unwrap();
    assert_eq!(early.messages, Some([0, 4]));
    server.push_all(nothing());
    let rest = second
        .extract_session(&session, "cli:one", 0, day_one())
        .await
        .unwrap();
    assert_eq!(rest.messages, Some([4, 8]));
    let requests = server.requests().len();
    let again = first
        .extract_session(&session, "cli:one", 0, day_one())
        .await
        .unwrap();
    assert!(again.skipped.unwrap().contains("already extracted"));
    assert_eq!(server.requests().len(), requests);

    // A process that died holding a claim: its messages wait for the lease, then are extracted.
    let claims = open_store(&world.dir, &world.clock).claims;
    let outcome = claims
        .claim(
            USER,
            "cli:two",
            0..2,
            engram_memory::manager::EXTRACTION_LEASE,
        )
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        engram_core::store::claims::ClaimOutcome::Granted(_)
    ));
    let waiting = first
        .extract_session(&session[..2], "cli:two", 0, day_one())
        .await
        .unwrap();
    assert!(waiting.skipped.unwrap().contains("another process"));
    world.clock.advance(SignedDuration::from_mins(31));
    server.push_all(nothing());
    let taken = second
        .extract_session(&session[..2], "cli:two", 0, day_one())
        .await
        .unwrap();
    assert_eq!(taken.messages, Some([0, 2]));
}
