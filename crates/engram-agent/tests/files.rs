#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! read_file, write_file, edit_file and list_dir through the registry, on real files.

mod common;

use common::{Fixture, content_of, error_of};
use engram_agent::tools::{BuiltinOptions, ReadLimits};
use serde_json::json;

fn numbered_lines(count: usize) -> String {
    (1..=count).map(|i| format!("line {i}\n")).collect()
}

#[tokio::test]
async fn read_file_numbers_lines_from_the_offset_and_says_how_to_continue() {
    let f = Fixture::new();
    f.write("long.txt", &numbered_lines(30));
    let out = f
        .call(
            "read_file",
            json!({"path": "long.txt", "offset": 10, "limit": 3}),
        )
        .await;
    assert_eq!(
        content_of(&out),
        "    10→line 10\n    11→line 11\n    12→line 12\n\n[Showing lines 10-12 of 30. Call read_file with offset=13 to read more.]\n"
    );
    // Reading on from the suggested offset to the end needs no note.
    let out = f
        .call("read_file", json!({"path": "long.txt", "offset": 28}))
        .await;
    assert_eq!(
        content_of(&out),
        "    28→line 28\n    29→line 29\n    30→line 30\n"
    );
}

#[tokio::test]
async fn read_file_stops_at_the_default_line_limit() {
    let f = Fixture::new();
    f.write("huge.txt", &numbered_lines(2500));
    let out = f.call("read_file", json!({"path": "huge.txt"})).await;
    let text = content_of(&out);
    assert!(text.starts_with("     1→line 1\n"));
    assert!(text.contains("  2000→line 2000\n"));
    assert!(!text.contains("line 2001"));
    assert!(text.ends_with(
        "[Showing lines 1-2000 of 2500. Call read_file with offset=2001 to read more.]\n"
    ));
}

#[tokio::test]
async fn read_file_cuts_large_output_with_a_note() {
    let options = BuiltinOptions {
        read: ReadLimits {
            max_output_bytes: 1000,
            ..ReadLimits::default()
        },
        ..BuiltinOptions::default()
    };
    let f = Fixture::with_options(options);
    let wide: String = (1..=100)
        .map(|i| format!("{i:03} {}\n", "x".repeat(90)))
        .collect();
    f.write("wide.txt", &wide);
    let out = f.call("read_file", json!({"path": "wide.txt"})).await;
    let text = content_of(&out);
    // Each rendered line is 104 bytes, so nine fit in 1000.
    assert!(text.contains("     9→009 "));
    assert!(!text.contains("    10→"));
    assert!(text.ends_with(
        "[Output cut at 1000 bytes: showing lines 1-9 of 100. Call read_file with offset=10 to read more.]\n"
    ), "{text}");
}

#[tokio::test]
async fn read_file_errors_are_clear() {
    let f = Fixture::new();
    std::fs::write(f.path("image.png"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").unwrap();
    std::fs::create_dir(f.path("dir")).unwrap();
    f.write("short.txt", "a\nb\n");
    let cases = [
        (
            json!({"path": "missing.txt"}),
            "file not found: missing.txt. Use list_dir to see which files exist.",
        ),
        (
            json!({"path": "image.png"}),
            "image.png is a binary file (16 bytes); read_file shows text files only",
        ),
        (
            json!({"path": "dir"}),
            "dir is a directory, not a file; use list_dir to see what it contains",
        ),
        (
            json!({"path": "short.txt", "offset": 3}),
            "offset 3 is past the end of short.txt, which has 2 lines",
        ),
    ];
    for (args, expected) in cases {
        let out = f.call("read_file", args).await;
        assert_eq!(error_of(&out), expected);
    }
    let out = f
        .call("read_file", json!({"path": "short.txt", "offset": 0}))
        .await;
    assert!(error_of(&out).contains("field 'offset' must be at least 1, got 0"));
}

#[tokio::test]
async fn write_file_creates_parents_and_replaces_atomically() {
    let f = Fixture::new();
    let out = f
        .call(
            "write_file",
            json!({"path": "a/b/c.txt", "content": "hello\nworld\n"}),
        )
        .await;
    assert_eq!(content_of(&out), "Created a/b/c.txt (12 bytes, 2 lines).");
    let out = f
        .call("write_file", json!({"path": "a/b/c.txt", "content": "bye"}))
        .await;
    assert_eq!(content_of(&out), "Overwrote a/b/c.txt (3 bytes, 1 line).");
    assert_eq!(std::fs::read_to_string(f.path("a/b/c.txt")).unwrap(), "bye");
    // No temporary files are left beside it.
    let names: Vec<String> = std::fs::read_dir(f.path("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["c.txt"]);
}

#[tokio::test]
async fn write_file_keeps_a_readers_view_whole() {
    // A reader racing many rewrites only ever sees one complete version or the other.
    let f = Fixture::new();
    let a = "a".repeat(200_000);
    let b = "b".repeat(200_000);
    f.write("race.txt", &a);
    let path = f.path("race.txt");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let (a, b) = (a.clone(), b.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let seen = std::fs::read_to_string(&path).unwrap();
                assert!(seen == a || seen == b, "torn read of {} bytes", seen.len());
                reads += 1;
            }
            reads
        })
    };
    for i in 0..40 {
        let content = if i % 2 == 0 { &b } else { &a };
        let out = f
            .call(
                "write_file",
                json!({"path": "race.txt", "content": content}),
            )
            .await;
        content_of(&out);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

#[tokio::test]
async fn edit_file_requires_a_unique_match_and_says_how_many() {
    let f = Fixture::new();
    f.write("code.rs", "let x = 1;\nlet y = 1;\nlet z = 2;\n");

    let out = f
        .call(
            "edit_file",
            json!({"path": "code.rs", "old_text": "= 1;", "new_text": "= 3;"}),
        )
        .await;
    assert_eq!(
        error_of(&out),
        "old_text matches 2 places in code.rs; it must match exactly one, so nothing was changed. \
         Add surrounding lines to old_text to make it unique, or set replace_all to true to replace all 2."
    );
    let out = f
        .call(
            "edit_file",
            json!({"path": "code.rs", "old_text": "let w", "new_text": "let v"}),
        )
        .await;
    assert_eq!(
        error_of(&out),
        "old_text was not found in code.rs (0 matches); nothing was changed. It must match exactly, \
         including whitespace and indentation: read the file again and copy the text without the \
         line-number prefixes."
    );
    assert_eq!(
        std::fs::read_to_string(f.path("code.rs")).unwrap(),
        "let x = 1;\nlet y = 1;\nlet z = 2;\n"
    );

    let out = f
        .call(
            "edit_file",
            json!({"path": "code.rs", "old_text": "let y = 1;", "new_text": "let y = 5;"}),
        )
        .await;
    assert!(content_of(&out).starts_with("Edited code.rs: replaced 1 occurrence."));
    assert!(out.content.contains("     2→let y = 5;\n"));

    let out = f
        .call(
            "edit_file",
            json!({"path": "code.rs", "old_text": "let ", "new_text": "const ", "replace_all": true}),
        )
        .await;
    assert!(content_of(&out).starts_with("Edited code.rs: replaced 3 occurrences."));
    assert_eq!(
        std::fs::read_to_string(f.path("code.rs")).unwrap(),
        "const x = 1;\nconst y = 5;\nconst z = 2;\n"
    );
}

#[tokio::test]
async fn edit_file_refuses_missing_and_binary_files() {
    let f = Fixture::new();
    let out = f
        .call(
            "edit_file",
            json!({"path": "nope.txt", "old_text": "a", "new_text": "b"}),
        )
        .await;
    assert_eq!(
        error_of(&out),
        "file not found: nope.txt. Use write_file to create a new file."
    );
    std::fs::write(f.path("blob.bin"), b"\xff\xfe\x00a").unwrap();
    let out = f
        .call(
            "edit_file",
            json!({"path": "blob.bin", "old_text": "a", "new_text": "b"}),
        )
        .await;
    assert!(error_of(&out).contains("is not a UTF-8 text file"));
    assert_eq!(std::fs::read(f.path("blob.bin")).unwrap(), b"\xff\xfe\x00a");
}

#[tokio::test]
async fn list_dir_shows_types_sizes_and_a_cap() {
    let options = BuiltinOptions {
        list_max_entries: 3,
        ..BuiltinOptions::default()
    };
    let f = Fixture::with_options(options);
    f.write("src/main.rs", "fn main() {}\n");
    f.write("Cargo.toml", "[package]\n");
    std::os::unix::fs::symlink("src/main.rs", f.path("entry")).unwrap();
    let out = f.call("list_dir", json!({})).await;
    assert_eq!(
        content_of(&out),
        ". (3 entries):\nfile  Cargo.toml (10 bytes)\nlink  entry -> src/main.rs\ndir   src/\n"
    );
    f.write("zz.txt", "");
    let out = f.call("list_dir", json!({"path": "."})).await;
    assert!(content_of(&out).ends_with("[... 1 more entries not shown; list a subdirectory or use bash (e.g. `ls | grep`) to narrow down.]\n"));
    let out = f.call("list_dir", json!({"path": "src"})).await;
    assert_eq!(
        content_of(&out),
        "src (1 entry):\nfile  main.rs (13 bytes)\n"
    );
}
