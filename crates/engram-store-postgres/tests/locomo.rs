#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Both engines rank LoCoMo's questions alike: the development split's conversations stored in
//! SQLite and in PostgreSQL the way `engram bench locomo` stores them (every turn an episode of
//! its session, "<speaker>: <text>"), each question (categories 1-4) searched in both, and the
//! top 10 compared memory by memory and score by score.
//!
//! The data (benchmark data, never shipped) is read from ENGRAM_LOCOMO_DATA, or from
//! `shared/data/locomo/locomo10-dev.json` beside the repository (or beside a folder holding it).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Server, TestDb};
use engram_core::{Filter, FixedClock, Kind, MemoryId, MemoryStore, NewMemory, Scope};
use engram_store_postgres::{PgOptions, PgStore};
use engram_store_sqlite::{Database as SqliteStore, StoreOptions};
use jiff::Timestamp;
use serde_json::{Value, json};

fn data_file() -> PathBuf {
    if let Ok(path) = std::env::var("ENGRAM_LOCOMO_DATA") {
        return PathBuf::from(path);
    }
    let relative = "shared/data/locomo/locomo10-dev.json";
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|dir| dir.join(relative))
        .find(|path| path.exists())
        .unwrap_or_else(|| manifest.join("../../..").join(relative))
}

fn session_time(text: &str) -> Timestamp {
    jiff::civil::DateTime::strptime("%I:%M %p on %d %B, %Y", text.trim())
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .unwrap()
        .timestamp()
}

struct Conversation {
    id: String,
    turns: Vec<NewMemory>,
    questions: Vec<(String, Vec<String>)>,
}

fn load() -> Vec<Conversation> {
    let path = data_file();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the LoCoMo development split at {} ({e}); set ENGRAM_LOCOMO_DATA",
            path.display()
        )
    });
    let samples: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for sample in samples {
        let id = sample["sample_id"].as_str().unwrap().to_string();
        let conv = &sample["conversation"];
        let mut turns = Vec::new();
        for session in 1u32.. {
            let key = format!("session_{session}");
            let Some(list) = conv.get(&key) else {
                if conv.get(format!("{key}_date_time")).is_some() {
                    continue;
                }
                break;
            };
            let at = session_time(conv[format!("{key}_date_time")].as_str().unwrap());
            for turn in list.as_array().into_iter().flatten() {
                let (Some(speaker), Some(dia_id)) =
                    (turn["speaker"].as_str(), turn["dia_id"].as_str())
                else {
                    continue;
                };
                let mut text = format!("{speaker}: {}", turn["text"].as_str().unwrap_or(""));
                if let Some(caption) = turn["blip_caption"].as_str() {
                    text.push_str(&format!(" [shares an image: {caption}]"));
                }
                let scope = Scope::user(id.clone()).with_session(format!("session-{session}"));
                let mut memory = NewMemory::new(scope, text)
                    .with_kind(Kind::Episode)
                    .with_source("locomo")
                    .at(at)
                    .with_meta("dia_id", json!(dia_id));
                memory.valid_from = Some(at);
                // The same ids in both engines.
                memory.id = Some(MemoryId::new());
                turns.push(memory);
            }
        }
        let questions = sample["qa"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|qa| (1..=4).contains(&qa["category"].as_u64().unwrap_or(0)))
            .filter_map(|qa| {
                let evidence = qa["evidence"]
                    .as_array()?
                    .iter()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect();
                Some((qa["question"].as_str()?.to_string(), evidence))
            })
            .collect();
        out.push(Conversation {
            id,
            turns,
            questions,
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_rank_locomo_questions_alike() {
    let conversations = load();
    assert_eq!(conversations.len(), 7);
    let clock = Arc::new(FixedClock::new("2024-06-01T12:00:00Z".parse().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open_with(
        dir.path().join("engram.db"),
        StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let db = TestDb::new(Server::Pgvector).await;
    let pg = PgStore::open(
        &db.url,
        PgOptions {
            clock,
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    for conv in &conversations {
        for outcome in sqlite.add_many(conv.turns.clone(), "bench").unwrap() {
            outcome.unwrap();
        }
        for outcome in pg.add_many(conv.turns.clone(), "bench").await.unwrap() {
            outcome.unwrap();
        }
    }

    let (mut questions, mut same, mut found) = (0, 0, [0usize; 2]);
    let (mut evidence_total, mut evidence_found) = (0usize, [0usize; 2]);
    for conv in &conversations {
        let filter = Filter::user(conv.id.clone());
        for (question, evidence) in &conv.questions {
            let Ok(a) = sqlite.search_lexical(&filter, question, 10) else {
                continue; // a question without words (none in this split, but not for us to say)
            };
            let b = pg.search_lexical(&filter, question, 10).await.unwrap();
            questions += 1;
            let a: Vec<(String, f64)> = a
                .iter()
                .map(|h| (h.memory.metadata["dia_id"].to_string(), h.bm25))
                .collect();
            let b: Vec<(String, f64)> = b
                .iter()
                .map(|h| (h.memory.metadata["dia_id"].to_string(), h.bm25))
                .collect();
            if a == b {
                same += 1;
            } else {
                eprintln!(
                    "{}: {question}\n  sqlite   {a:?}\n  postgres {b:?}",
                    conv.id
                );
            }
            for (engine, hits) in [&a, &b].into_iter().enumerate() {
                found[engine] += usize::from(!hits.is_empty());
                evidence_found[engine] += evidence
                    .iter()
                    .filter(|e| {
                        hits.iter()
                            .any(|(dia, _)| dia.trim_matches('"') == e.as_str())
                    })
                    .count();
            }
            evidence_total += evidence.len();
        }
    }
    eprintln!(
        "{questions} questions: {same} ranked identically; evidence in the top 10: \
         SQLite {}/{evidence_total}, PostgreSQL {}/{evidence_total}",
        evidence_found[0], evidence_found[1]
    );
    assert!(questions > 1_000, "{questions}");
    assert!(found[0] > 1_000, "{found:?}");
    assert_eq!(
        same, questions,
        "every question ranks alike in both engines"
    );
    assert_eq!(evidence_found[0], evidence_found[1]);
}
