#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every kind of path escape is refused by every file tool, with a message that says why.

mod common;

use std::os::unix::fs::symlink;

use common::{Fixture, content_of, error_of};
use serde_json::json;

/// Calls each file tool on `path` and checks all of them refuse with `expected` in the message.
async fn all_tools_refuse(f: &Fixture, path: &str, expected: &str) {
    let calls = [
        ("read_file", json!({"path": path})),
        ("write_file", json!({"path": path, "content": "pwned"})),
        (
            "edit_file",
            json!({"path": path, "old_text": "secret", "new_text": "pwned"}),
        ),
        ("list_dir", json!({"path": path})),
    ];
    for (tool, args) in calls {
        let out = f.call(tool, args).await;
        let error = error_of(&out);
        assert!(
            error.contains(expected),
            "{tool} on {path:?}: expected {expected:?} in {error:?}"
        );
    }
}

fn outside_with_secret(f: &Fixture) -> std::path::PathBuf {
    let outside = f.base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    outside
}

#[tokio::test]
async fn dot_dot_escapes_are_refused() {
    let f = Fixture::new();
    outside_with_secret(&f);
    f.write("sub/file.txt", "x");
    for path in [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "..",
        "./sub/../..",
    ] {
        all_tools_refuse(&f, path, "outside the workspace").await;
    }
    assert_eq!(
        std::fs::read_to_string(f.base.join("outside/secret.txt")).unwrap(),
        "secret"
    );
}

#[tokio::test]
async fn absolute_paths_outside_are_refused_and_inside_allowed() {
    let f = Fixture::new();
    let outside = outside_with_secret(&f);
    let secret = outside.join("secret.txt").display().to_string();
    all_tools_refuse(&f, &secret, "outside the workspace").await;
    all_tools_refuse(&f, "/etc/passwd", "outside the workspace").await;

    let inside = f.path("notes.txt").display().to_string();
    let out = f
        .call("write_file", json!({"path": inside, "content": "hi"}))
        .await;
    assert_eq!(content_of(&out), "Created notes.txt (2 bytes, 1 line).");
}

#[tokio::test]
async fn symlinks_pointing_outside_are_refused() {
    let f = Fixture::new();
    let outside = outside_with_secret(&f);
    symlink(&outside, f.path("dir_link")).unwrap();
    symlink(outside.join("secret.txt"), f.path("file_link")).unwrap();
    // Relative link text that climbs out.
    symlink("../outside/secret.txt", f.path("relative_link")).unwrap();
    for path in [
        "dir_link/secret.txt",
        "file_link",
        "relative_link",
        "dir_link",
    ] {
        all_tools_refuse(&f, path, "(through a symbolic link)").await;
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
}

#[tokio::test]
async fn a_dangling_symlink_cannot_create_a_file_outside() {
    let f = Fixture::new();
    let target = f.base.join("created-through-link.txt");
    symlink(&target, f.path("dangling")).unwrap();
    let out = f
        .call("write_file", json!({"path": "dangling", "content": "x"}))
        .await;
    assert!(error_of(&out).contains("outside the workspace"));
    assert!(!target.exists());
    // The same through a link to a directory that does not exist yet.
    symlink(f.base.join("later"), f.path("later_link")).unwrap();
    let out = f
        .call(
            "write_file",
            json!({"path": "later_link/x.txt", "content": "x"}),
        )
        .await;
    assert!(error_of(&out).contains("outside the workspace"));
    assert!(!f.base.join("later").exists());
}

#[tokio::test]
async fn symlink_loops_are_reported_not_followed_forever() {
    let f = Fixture::new();
    symlink("loop_b", f.path("loop_a")).unwrap();
    symlink("loop_a", f.path("loop_b")).unwrap();
    symlink("self", f.path("self")).unwrap();
    for path in ["loop_a", "loop_b/x", "self"] {
        all_tools_refuse(&f, path, "too many levels of symbolic links").await;
    }
}

#[tokio::test]
async fn a_sibling_directory_with_a_common_prefix_is_outside() {
    let f = Fixture::new();
    // ws-evil starts with the same characters as ws but is a different directory.
    let evil = f.base.join("ws-evil");
    std::fs::create_dir(&evil).unwrap();
    std::fs::write(evil.join("secret.txt"), "secret").unwrap();
    let path = evil.join("secret.txt").display().to_string();
    all_tools_refuse(&f, &path, "outside the workspace").await;
    all_tools_refuse(&f, "../ws-evil/secret.txt", "outside the workspace").await;
    symlink(&evil, f.path("evil_link")).unwrap();
    all_tools_refuse(&f, "evil_link/secret.txt", "outside the workspace").await;
}

#[tokio::test]
async fn links_that_stay_inside_work_and_write_through_to_the_target() {
    let f = Fixture::new();
    f.write("real/data.txt", "one\n");
    symlink("real", f.path("alias")).unwrap();
    symlink("real/data.txt", f.path("data_link")).unwrap();
    let out = f
        .call(
            "edit_file",
            json!({"path": "alias/data.txt", "old_text": "one", "new_text": "two"}),
        )
        .await;
    content_of(&out);
    let out = f.call("read_file", json!({"path": "data_link"})).await;
    assert_eq!(content_of(&out), "     1→two\n");
    // The link is still a link: the write went to its target.
    assert!(
        std::fs::symlink_metadata(f.path("data_link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Going out and straight back in is fine.
    let out = f
        .call("read_file", json!({"path": "../ws/real/data.txt"}))
        .await;
    assert_eq!(content_of(&out), "     1→two\n");
}

#[tokio::test]
async fn the_error_message_names_the_path_the_target_and_the_rule() {
    let f = Fixture::new();
    let out = f.call("read_file", json!({"path": "../x"})).await;
    assert_eq!(
        error_of(&out),
        format!(
            "the path '../x' resolves to {}, which is outside the workspace {}; only paths inside the workspace may be used",
            f.base.join("x").display(),
            f.ws.display()
        )
    );
}

#[tokio::test]
async fn an_unconfined_workspace_reaches_outside_when_asked() {
    use engram_agent::tools::{BuiltinOptions, NoteMemory, ToolRegistry, Workspace};
    let f = Fixture::new();
    let outside = outside_with_secret(&f);
    let workspace = Workspace::unconfined(&f.ws).unwrap();
    let memory = NoteMemory {
        store: f.store.clone(),
        scope: engram_core::Scope::user("alice"),
    };
    let registry =
        ToolRegistry::with_builtins(&workspace, &BuiltinOptions::default(), memory).unwrap();
    let out = registry
        .call("read_file", json!({"path": "../outside/secret.txt"}))
        .await;
    assert_eq!(content_of(&out), "     1→secret\n");
    let path = outside.join("secret.txt").display().to_string();
    let out = registry
        .call("list_dir", json!({"path": outside.display().to_string()}))
        .await;
    assert!(content_of(&out).contains("secret.txt (6 bytes)"), "{path}");
}
