//! A workspace in a temporary directory, a real SQLite store beside it, and the built-in tools.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_agent::tools::{BuiltinOptions, NoteMemory, ToolRegistry, Workspace};
use engram_core::{MemoryStore, Scope, ToolOutput};
use engram_store_sqlite::SqliteStore;
use serde_json::Value;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    /// base/ws, canonical.
    pub ws: PathBuf,
    /// base, canonical: the workspace's parent, outside it.
    pub base: PathBuf,
    pub store: Arc<SqliteStore>,
    pub registry: ToolRegistry,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with_options(BuiltinOptions::default())
    }

    pub fn with_options(options: BuiltinOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("ws");
        std::fs::create_dir(&ws).unwrap();
        let store = Arc::new(SqliteStore::open(base.join("engram.db")).unwrap());
        let workspace = Workspace::confined(&ws).unwrap();
        let memory = NoteMemory {
            store: Arc::clone(&store) as Arc<dyn MemoryStore>,
            scope: Scope::user("alice").with_agent("coder"),
        };
        let registry = ToolRegistry::with_builtins(&workspace, &options, memory).unwrap();
        Self {
            dir,
            ws,
            base,
            store,
            registry,
        }
    }

    pub async fn call(&self, tool: &str, args: Value) -> ToolOutput {
        self.registry.call(tool, args).await
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.ws.join(relative)
    }

    pub fn write(&self, relative: &str, content: &str) {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, content).unwrap();
    }
}

/// The error text of a failed call (panics with the output when the call succeeded).
pub fn error_of(output: &ToolOutput) -> &str {
    assert!(!output.success, "expected a failure, got {output:?}");
    output.error.as_deref().unwrap()
}

/// The content of a successful call (panics with the output when the call failed).
pub fn content_of(output: &ToolOutput) -> &str {
    assert!(output.success, "expected success, got {output:?}");
    &output.content
}

/// True once the process is gone or a zombie (a container's init may never reap it).
pub fn process_is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Waits up to `seconds` for the process to die.
pub async fn wait_until_dead(pid: i32, seconds: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while std::time::Instant::now() < deadline {
        if process_is_dead(pid) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    process_is_dead(pid)
}

/// Reads a pid a command wrote to a file, waiting for the file to appear.
pub async fn read_pid(path: &Path) -> i32 {
    for _ in 0..250 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no pid written to {}", path.display());
}
