#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! record_note and recall_notes: the reference file format, safety of the file, and the copy of
//! every note in the real SQLite store.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{Fixture, content_of, error_of};
use engram_agent::tools::{BuiltinOptions, NotesFile};
use engram_core::{Filter, Kind, MemoryStore};
use serde_json::{Value, json};

const NOTES: &str = ".agent_memory.json";

#[tokio::test]
async fn notes_are_recorded_lazily_and_recalled_in_the_reference_format() {
    let f = Fixture::new();
    let out = f.call("recall_notes", json!({})).await;
    assert_eq!(content_of(&out), "No notes recorded yet.");
    assert!(!f.path(NOTES).exists(), "recall must not create the file");

    let out = f
        .call(
            "record_note",
            json!({"content": "User is a Rust developer", "category": "user_info"}),
        )
        .await;
    assert_eq!(
        content_of(&out),
        "Recorded note: User is a Rust developer (category: user_info)"
    );
    let out = f
        .call("record_note", json!({"content": "Prefers short answers"}))
        .await;
    assert_eq!(
        content_of(&out),
        "Recorded note: Prefers short answers (category: general)"
    );

    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(f.path(NOTES)).unwrap()).unwrap();
    let entries = file.as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let keys: Vec<&str> = entries[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["timestamp", "category", "content"]);
    let stamp = entries[0]["timestamp"].as_str().unwrap();
    assert!(
        stamp.parse::<jiff::Timestamp>().is_ok(),
        "not ISO 8601: {stamp}"
    );

    let out = f.call("recall_notes", json!({})).await;
    let stamps: Vec<&str> = entries
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap())
        .collect();
    assert_eq!(
        content_of(&out),
        format!(
            "Recorded Notes:\n1. [user_info] User is a Rust developer (recorded at {})\n2. [general] Prefers short answers (recorded at {})",
            stamps[0], stamps[1]
        )
    );
    let out = f.call("recall_notes", json!({"category": "general"})).await;
    assert_eq!(
        content_of(&out),
        format!(
            "Recorded Notes:\n1. [general] Prefers short answers (recorded at {})",
            stamps[1]
        )
    );
    let out = f
        .call("recall_notes", json!({"category": "decision"}))
        .await;
    assert_eq!(content_of(&out), "No notes found in category: decision");
}

#[tokio::test]
async fn every_note_is_also_a_note_memory_in_the_store() {
    let f = Fixture::new();
    let out = f
        .call(
            "record_note",
            json!({"content": "Project uses SQLite", "category": "project_info"}),
        )
        .await;
    content_of(&out);
    let memories = f.store.list(&Filter::user("alice"), 10, 0).await.unwrap();
    assert_eq!(memories.len(), 1);
    let memory = &memories[0];
    assert_eq!(memory.kind, Kind::Note);
    assert_eq!(memory.text, "Project uses SQLite");
    assert_eq!(memory.category.as_deref(), Some("project_info"));
    assert_eq!(memory.source, "agent");
    assert_eq!(memory.scope.agent_id.as_deref(), Some("coder"));
    // The memory carries the note's own timestamp.
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(f.path(NOTES)).unwrap()).unwrap();
    let stamp: jiff::Timestamp = file[0]["timestamp"].as_str().unwrap().parse().unwrap();
    assert_eq!(memory.created_at, stamp);
    let history = f.store.history(memory.id).await.unwrap();
    assert_eq!(history[0].actor, "agent");

    // Recording the same note twice keeps both in the file (as the reference does) and one
    // memory in the store.
    content_of(
        &f.call(
            "record_note",
            json!({"content": "Project uses SQLite", "category": "project_info"}),
        )
        .await,
    );
    assert_eq!(f.store.count(&Filter::user("alice")).await.unwrap(), 1);
}

#[tokio::test]
async fn a_note_the_store_refuses_is_not_written_to_the_file_either() {
    let f = Fixture::new();
    let huge = "x".repeat(engram_core::memory::MAX_TEXT_BYTES + 1);
    let out = f.call("record_note", json!({"content": huge})).await;
    assert!(error_of(&out).starts_with("the note cannot be recorded: text is"));
    assert!(!f.path(NOTES).exists());
    let out = f.call("record_note", json!({"content": "   "})).await;
    assert_eq!(error_of(&out), "the note cannot be recorded: text is empty");
    assert_eq!(f.store.count(&Filter::user("alice")).await.unwrap(), 0);
}

#[tokio::test]
async fn a_corrupt_notes_file_is_an_error_and_is_never_overwritten() {
    let f = Fixture::new();
    let corrupt: &[u8] = b"[{\"content\": \"important\", \"category\": \"user_info\"},\n {\"cont";
    std::fs::write(f.path(NOTES), corrupt).unwrap();

    let out = f.call("record_note", json!({"content": "new fact"})).await;
    let error = error_of(&out);
    assert!(
        error.starts_with(&format!(
            "the notes file {} is not a valid list of notes (invalid JSON:",
            f.path(NOTES).display()
        )),
        "{error}"
    );
    assert!(error.ends_with("it was left untouched. Repair it or move it aside, then try again"));
    let out = f.call("recall_notes", json!({})).await;
    assert!(error_of(&out).contains("is not a valid list of notes"));

    assert_eq!(
        std::fs::read(f.path(NOTES)).unwrap(),
        corrupt,
        "the file changed"
    );
    assert_eq!(f.store.count(&Filter::user("alice")).await.unwrap(), 0);

    std::fs::write(f.path(NOTES), b"{\"notes\": []}").unwrap();
    let out = f.call("record_note", json!({"content": "new fact"})).await;
    assert!(error_of(&out).contains("(expected a JSON array, found an object)"));
    assert_eq!(std::fs::read(f.path(NOTES)).unwrap(), b"{\"notes\": []}");
}

#[tokio::test]
async fn the_notes_path_is_configurable_and_its_folder_created_on_first_note() {
    let f0 = Fixture::new();
    let custom = f0.base.join("memory/notes.json");
    let f = Fixture::with_options(BuiltinOptions {
        notes_path: Some(custom.clone()),
        ..BuiltinOptions::default()
    });
    content_of(
        &f.call("record_note", json!({"content": "kept elsewhere"}))
            .await,
    );
    assert!(custom.exists());
    assert!(!f.path(NOTES).exists());
}

#[tokio::test]
async fn a_later_agent_on_the_same_file_recalls_earlier_notes() {
    let f = Fixture::new();
    content_of(
        &f.call("record_note", json!({"content": "from session one"}))
            .await,
    );
    let later = NotesFile::new(f.path(NOTES));
    let notes = later.notes().unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].content, "from session one");
}

const WRITERS: usize = 4;
const NOTES_EACH: usize = 25;

fn assert_all_notes_present(path: &std::path::Path) {
    let notes = NotesFile::new(path).notes().unwrap();
    assert_eq!(notes.len(), WRITERS * NOTES_EACH, "notes were lost");
    for writer in 0..WRITERS {
        for i in 0..NOTES_EACH {
            let wanted = format!("writer {writer} note {i}");
            assert!(
                notes.iter().any(|n| n.content == wanted),
                "missing {wanted}"
            );
        }
    }
}

#[test]
fn concurrent_threads_with_separate_handles_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("nested/notes.json"));
    let threads: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let path = Arc::clone(&path);
            std::thread::spawn(move || {
                let notes = NotesFile::new(path.as_path());
                for i in 0..NOTES_EACH {
                    notes
                        .record(&format!("writer {writer} note {i}"), None)
                        .unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_all_notes_present(&path);
}

/// Run by `concurrent_processes_lose_nothing` in child processes; does nothing otherwise.
#[test]
fn child_process_writer() {
    let (Ok(path), Ok(writer)) = (
        std::env::var("ENGRAM_TEST_NOTES_PATH"),
        std::env::var("ENGRAM_TEST_NOTES_WRITER"),
    ) else {
        return;
    };
    let notes = NotesFile::new(path);
    for i in 0..NOTES_EACH {
        notes
            .record(&format!("writer {writer} note {i}"), None)
            .unwrap();
    }
}

#[test]
fn concurrent_processes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.json");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|writer| {
            Command::new(&exe)
                .args([
                    "child_process_writer",
                    "--exact",
                    "--test-threads=1",
                    "--quiet",
                ])
                .env("ENGRAM_TEST_NOTES_PATH", &path)
                .env("ENGRAM_TEST_NOTES_WRITER", writer.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    assert_all_notes_present(&path);
}
