//! `engram bench context`: the memory manager's cost on each turn. A store of synthetic memories
//! for one user (episodes over a year, a profile, closed facts in history, notes), a MEMORY.md and
//! today's daily note; then, for a stream of user messages: the time to build the memory block,
//! and a turn's whole added latency from memory (block, session appends, starting the background
//! extraction every 10 turns — everything but the model's answer), and the block's size in tokens
//! next to what sending the full conversation history would cost.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::Args;
use engram_backend::StoreConfig;
use engram_core::{Importance, Kind, MemoryStore, Message, NewMemory, Scope};
use engram_llm::Provider;
use engram_llm::scripted::{LatencySummary, ScriptedServer, Turn};
use engram_memory::session::{SessionKey, SessionStore};
use engram_memory::token_count::{count_tokens, messages_tokens};
use engram_memory::{ManagerConfig, MemoryManager, Searcher};
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use serde_json::{Value, json};

use crate::bench::agent::Figure;
use crate::bench::store::{SplitMix, Vocabulary};
use crate::context::Context;
use crate::exit::Status;
use crate::output;

const USER: &str = "bench";
/// Current facts and preferences in the synthetic profile.
const PROFILE_FACTS: usize = 40;
const PROFILE_PREFERENCES: usize = 10;
/// Extraction runs in the background every this many turns, as `[memory] extract_every_turns`.
const EXTRACT_EVERY: usize = 10;

/// `engram bench context`.
#[derive(Debug, Args)]
pub struct BenchContextArgs {
    /// Memories of the one user the turns are for.
    #[arg(long, default_value = "100000", value_parser = clap::value_parser!(u64).range(100..))]
    pub memories: u64,
    /// User turns measured (after 10 warm-up turns).
    #[arg(long, default_value = "300", value_parser = clap::value_parser!(u64).range(10..))]
    pub turns: u64,
    /// The memory block's budget in tokens.
    #[arg(long, default_value = "1500")]
    pub budget: usize,
}

#[derive(Debug, Serialize)]
struct TokenRow {
    turn: usize,
    memory_block_tokens: usize,
    full_history_tokens: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    memories: u64,
    load_seconds: f64,
    figures: Vec<Figure>,
    block_tokens_median: usize,
    block_tokens_max: usize,
    budget: usize,
    all_current_memories_tokens: usize,
    tokens_by_turn: Vec<TokenRow>,
    background_extraction_ms_median: f64,
    extractions: usize,
    /// Median time of each part of the block, in milliseconds.
    block_parts_ms_median: Vec<(&'static str, f64)>,
}

/// Runs `engram bench context`.
pub fn run(ctx: &Context, args: BenchContextArgs) -> Result<Status> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let runtime = ctx.runtime()?;
    let backend =
        engram_backend::open_blocking(&StoreConfig::sqlite(dir.path().join("engram.db")))?;
    let store: Arc<dyn MemoryStore> = backend.memories.clone();
    let now = Timestamp::now();
    let mut rng = SplitMix(0x5eed_c0de);
    let vocabulary = Vocabulary::new(20_000, &mut rng);

    eprintln!("storing {} memories...", args.memories);
    let started = Instant::now();
    let all_tokens = runtime.block_on(load(&store, args.memories, now, &vocabulary, &mut rng))?;
    let load_seconds = started.elapsed().as_secs_f64();

    let workspace = dir.path().join("workspace");
    write_markdown(&workspace, now, &vocabulary, &mut rng)?;
    let server = runtime.block_on(ScriptedServer::start(Vec::new()))?;
    let model = engram_llm::build(server.client_config(Provider::OpenAi))?;
    let searcher = Arc::new(Searcher::new(store.clone()));
    let config = ManagerConfig {
        context_budget_tokens: args.budget,
        ..ManagerConfig::default()
    };
    let manager = Arc::new(MemoryManager::new(
        store.clone(),
        backend.claims.clone(),
        searcher,
        Some(model),
        engram_agent::tools::Workspace::confined(&workspace)?,
        USER.to_string(),
        config,
    ));
    let sessions = SessionStore::files(dir.path().join("sessions"));
    let key = SessionKey::parse("bench:context")?;
    let session = sessions.session(key.clone(), serde_json::Map::new());

    let turns = usize::try_from(args.turns).unwrap_or(usize::MAX);
    let warm_up = 10;
    let mut build = Vec::new();
    let mut added = Vec::new();
    let mut block_tokens = Vec::new();
    let mut token_rows = Vec::new();
    let mut history: Vec<Message> = Vec::new();
    let mut extractions = Vec::new();
    let mut parts: Vec<[u64; 6]> = Vec::new();
    for turn in 0..warm_up + turns {
        let message = user_message(&vocabulary, &mut rng);
        let reply = (0..3)
            .map(|_| vocabulary.sentence(&mut rng))
            .collect::<Vec<_>>()
            .join(" ");
        let at = Timestamp::now();

        // The turn's memory work before the model is called.
        let turn_start = Instant::now();
        runtime.block_on(session.append_message(&Message::user(message.clone()), at))?;
        let block_start = Instant::now();
        let block = runtime.block_on(manager.context_block(&message, at))?;
        let block_time = block_start.elapsed();
        // ... the model answers here (not measured) ...
        let after_start = Instant::now();
        runtime.block_on(session.append_message(&Message::assistant(reply.clone()), at))?;
        history.push(Message::user(message.clone()));
        history.push(Message::assistant(reply));
        if (turn + 1) % EXTRACT_EVERY == 0 {
            // One answer that satisfies both extraction calls, in whatever order they arrive.
            let answer = extraction_answer(turn);
            server.push(Turn::text(answer.clone()));
            server.push(Turn::text(answer));
            let manager = manager.clone();
            let conversation = history[history.len().saturating_sub(2 * EXTRACT_EVERY)..].to_vec();
            let key = key.as_str().to_string();
            extractions.push(runtime.spawn(async move {
                let started = Instant::now();
                manager
                    .extract_and_merge(&conversation, &key, at)
                    .await
                    .map(|_| started.elapsed())
            }));
        }
        let turn_time = block_start.duration_since(turn_start) + block_time + after_start.elapsed();

        let tokens = block.as_ref().map_or(0, |b| b.tokens);
        if [1, 10, 50, 100, 200, 300, 500, 1000].contains(&(turn + 1)) {
            token_rows.push(TokenRow {
                turn: turn + 1,
                memory_block_tokens: tokens,
                full_history_tokens: messages_tokens(&history),
            });
        }
        if turn >= warm_up {
            build.push(block_time);
            added.push(turn_time);
            block_tokens.push(tokens);
            if let Some(t) = block.as_ref().map(|b| b.timings) {
                parts.push([
                    t.long_term_us,
                    t.profile_us,
                    t.relevant_us,
                    t.recent_us,
                    t.today_us,
                    t.assemble_us,
                ]);
            }
        }
    }
    let mut background = Vec::new();
    for handle in extractions {
        background.push(runtime.block_on(handle)??);
    }

    block_tokens.sort_unstable();
    let names = [
        "MEMORY.md",
        "profile",
        "relevant search",
        "recent episodes",
        "today's note",
        "assemble",
    ];
    let block_parts_ms_median = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut values: Vec<u64> = parts.iter().map(|p| p[i]).collect();
            values.sort_unstable();
            let median = values.get(values.len() / 2).copied().unwrap_or(0);
            (*name, median as f64 / 1000.0)
        })
        .collect();
    let figures = vec![
        Figure::of("context block at this size", &build, Some(20.0))?,
        Figure::of(
            "added latency per turn (everything but the model)",
            &added,
            Some(30.0),
        )?,
    ];
    let report = Report {
        memories: args.memories,
        load_seconds,
        block_tokens_median: block_tokens[block_tokens.len() / 2],
        block_tokens_max: block_tokens.last().copied().unwrap_or(0),
        budget: args.budget,
        all_current_memories_tokens: all_tokens,
        tokens_by_turn: token_rows,
        background_extraction_ms_median: LatencySummary::of(&background)
            .map_or(0.0, |s| s.median.as_secs_f64() * 1e3),
        extractions: background.len(),
        block_parts_ms_median,
        figures,
    };
    if ctx.json {
        output::json(&report)?;
        return Ok(Status::Success);
    }
    print_report(&report);
    Ok(Status::Success)
}

fn print_report(report: &Report) {
    println!(
        "{} memories for one user, stored in {:.1} s; budget {} tokens",
        report.memories, report.load_seconds, report.budget
    );
    println!("| figure | target | median | p95 | max |");
    println!("|---|---|---|---|---|");
    for f in &report.figures {
        let target = f
            .target_ms
            .map_or("-".to_string(), |t| format!("<= {t} ms"));
        println!(
            "| {} ({} turns) | {target} | {:.2} ms | {:.2} ms | {:.2} ms |",
            f.name, f.samples, f.median_ms, f.p95_ms, f.max_ms
        );
    }
    let parts: Vec<String> = report
        .block_parts_ms_median
        .iter()
        .map(|(name, ms)| format!("{name} {ms:.2} ms"))
        .collect();
    println!("block parts (medians): {}", parts.join(", "));
    println!(
        "memory block: median {} tokens, max {}; all current memories would be {} tokens",
        report.block_tokens_median, report.block_tokens_max, report.all_current_memories_tokens
    );
    println!("| turn | memory block tokens | full history tokens |");
    println!("|---|---|---|");
    for row in &report.tokens_by_turn {
        println!(
            "| {} | {} | {} |",
            row.turn, row.memory_block_tokens, row.full_history_tokens
        );
    }
    println!(
        "background extraction (off the turn's path): {} runs, median {:.1} ms",
        report.extractions, report.background_extraction_ms_median
    );
}

fn extraction_answer(turn: usize) -> String {
    json!({
        "episodes": [{"summary": format!("Worked through benchmark topic number {turn} with the user"),
                      "category": "task_result", "importance": 3}],
        "facts": [],
        "preferences": []
    })
    .to_string()
}

/// A user message: a question of 6-25 words from the same vocabulary as the memories.
fn user_message(vocabulary: &Vocabulary, rng: &mut SplitMix) -> String {
    let words = rng.range(6, 25);
    let mut text: Vec<&str> = Vec::new();
    for _ in 0..words {
        text.push(vocabulary.sample(rng));
    }
    format!("{}?", text.join(" "))
}

/// A profile value: 2 to 8 words, as "Python 3.12 with FastAPI" is.
fn phrase(vocabulary: &Vocabulary, rng: &mut SplitMix) -> String {
    let words = rng.range(2, 8);
    (0..words)
        .map(|_| vocabulary.sample(rng).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Stores the synthetic memories; returns the tokens of all current ones (what putting every
/// memory into the prompt would cost).
async fn load(
    store: &Arc<dyn MemoryStore>,
    count: u64,
    now: Timestamp,
    vocabulary: &Vocabulary,
    rng: &mut SplitMix,
) -> Result<usize> {
    let categories = ["task_result", "user_feedback", "error", "discovery"];
    let total = usize::try_from(count).unwrap_or(usize::MAX);
    let closed_facts = total / 20;
    let notes = total / 20;
    let mut batch = Vec::with_capacity(2000);
    let mut tokens = 0;
    let flush = async |batch: &mut Vec<NewMemory>| -> Result<()> {
        for outcome in store.add_many(std::mem::take(batch), "bench").await? {
            outcome?;
        }
        Ok(())
    };
    for i in 0..total {
        let age =
            SignedDuration::from_secs(i64::try_from(rng.range(60, 365 * 86_400)).unwrap_or(60));
        let at = now.checked_sub(age).unwrap_or(now);
        let importance =
            Importance::new(i64::try_from(rng.range(1, 5)).unwrap_or(3)).unwrap_or_default();
        let memory = if i < PROFILE_FACTS + PROFILE_PREFERENCES {
            let kind = if i < PROFILE_FACTS {
                Kind::Fact
            } else {
                Kind::Preference
            };
            let key = format!("topic_{i}");
            NewMemory::new(
                Scope::user(USER),
                format!("{key}: {}", phrase(vocabulary, rng)),
            )
            .with_kind(kind)
            .with_importance(Importance::new(4).unwrap_or_default())
            .with_meta("key", Value::String(key))
        } else if i < PROFILE_FACTS + PROFILE_PREFERENCES + closed_facts {
            // Superseded facts: kept in history, never shown.
            let key = format!("topic_{}", i % PROFILE_FACTS);
            let mut memory = NewMemory::new(
                Scope::user(USER),
                format!("{key}: {}", phrase(vocabulary, rng)),
            )
            .with_kind(Kind::Fact)
            .with_meta("key", Value::String(key));
            memory.valid_to = Some(
                at.checked_add(SignedDuration::from_secs(30))
                    .unwrap_or(at)
                    .min(now),
            );
            memory
        } else if i < PROFILE_FACTS + PROFILE_PREFERENCES + closed_facts + notes {
            NewMemory::new(Scope::user(USER), vocabulary.sentence(rng)).with_kind(Kind::Note)
        } else {
            let category = categories[usize::try_from(rng.range(0, 3)).unwrap_or(0)];
            NewMemory::new(
                Scope::user(USER).with_session(format!("cli:s{}", i % 500)),
                vocabulary.sentence(rng),
            )
            .with_kind(Kind::Episode)
            .with_category(category)
            .with_meta("session", Value::String(format!("cli:s{}", i % 500)))
        };
        let memory = memory
            .with_importance(importance)
            .at(at)
            .with_source("bench");
        if memory.valid_to.is_none() {
            tokens += count_tokens(&memory.text);
        }
        batch.push(memory);
        if batch.len() == 2000 {
            flush(&mut batch).await?;
        }
    }
    flush(&mut batch).await?;
    Ok(tokens)
}

fn write_markdown(
    workspace: &std::path::Path,
    now: Timestamp,
    vocabulary: &Vocabulary,
    rng: &mut SplitMix,
) -> Result<()> {
    std::fs::create_dir_all(workspace)?;
    let mirror = engram_memory::mirror::MarkdownMirror::new(
        &engram_agent::tools::Workspace::confined(workspace)?,
    );
    let mut long_term = String::from("# Long-term memory\n\n");
    for _ in 0..30 {
        long_term.push_str("- ");
        long_term.push_str(&vocabulary.sentence(rng));
        long_term.push('\n');
    }
    mirror.write_long_term(&long_term)?;
    let today = now.to_zoned(jiff::tz::TimeZone::system()).date();
    for _ in 0..10 {
        mirror.append_daily(today, &vocabulary.sentence(rng))?;
    }
    Ok(())
}
