//! list_dir: what a directory holds, with types and sizes.

use std::path::Path;

use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use super::workspace::Workspace;
use super::{parse_args, run_blocking};

/// Entries listed before the rest are summarised in a count.
pub const DEFAULT_MAX_ENTRIES: usize = 500;

/// The `list_dir` tool.
#[derive(Debug, Clone)]
pub struct ListDirTool {
    workspace: Workspace,
    max_entries: usize,
    description: String,
}

impl ListDirTool {
    /// list_dir over `workspace`, showing at most `max_entries` entries per call.
    pub fn new(workspace: Workspace, max_entries: usize) -> Self {
        let max_entries = max_entries.max(1);
        let description = format!(
            "List a directory in the workspace: one entry per line, sorted by name, each marked \
             `dir`, `file` (with its size in bytes) or `link` (with its target). Hidden entries \
             are included. Very large directories are cut after the first {max_entries} entries \
             with a count of the rest. Paths are relative to the workspace; omit `path` for the \
             workspace itself."
        );
        Self {
            workspace,
            max_entries,
            description,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    path: Option<String>,
}

#[async_trait]
impl Tool for ListDirTool {
    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Directory to list, relative to the workspace. Default: the workspace itself."
                }
            },
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: ListArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let given = args.path.unwrap_or_else(|| ".".to_string());
        let path = match self.workspace.resolve(&given) {
            Ok(path) => path,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let shown = self.workspace.display(&path);
        let max_entries = self.max_entries;
        run_blocking(move || list_dir(&path, &shown, max_entries)).await
    }
}

struct Entry {
    name: String,
    line: String,
}

fn list_dir(path: &Path, shown: &str, max_entries: usize) -> ToolOutput {
    let reader = match std::fs::read_dir(path) {
        Ok(reader) => reader,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("directory not found: {shown}"));
        }
        Err(e) if path.is_file() => {
            return ToolOutput::error(format!(
                "{shown} is a file, not a directory; use read_file to read it ({e})"
            ));
        }
        Err(e) => return ToolOutput::error(format!("cannot list {shown}: {e}")),
    };
    let mut entries = Vec::new();
    for item in reader {
        let item = match item {
            Ok(item) => item,
            Err(e) => return ToolOutput::error(format!("cannot list {shown}: {e}")),
        };
        let name = item.file_name().to_string_lossy().into_owned();
        let line = match item.metadata() {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(item.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".to_string());
                format!("link  {name} -> {target}")
            }
            Ok(meta) if meta.is_dir() => format!("dir   {name}/"),
            Ok(meta) if meta.is_file() => format!("file  {name} ({} bytes)", meta.len()),
            Ok(_) => format!("other {name}"),
            Err(e) => format!("?     {name} (cannot read its type: {e})"),
        };
        entries.push(Entry { name, line });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));

    let total = entries.len();
    if total == 0 {
        return ToolOutput::ok(format!("{shown} is empty."));
    }
    let noun = if total == 1 { "entry" } else { "entries" };
    let mut out = format!("{shown} ({total} {noun}):\n");
    for entry in entries.iter().take(max_entries) {
        out.push_str(&entry.line);
        out.push('\n');
    }
    if total > max_entries {
        out.push_str(&format!(
            "[... {} more entries not shown; list a subdirectory or use bash (e.g. `ls | grep`) to narrow down.]\n",
            total - max_entries
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_sorted_typed_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("b.txt"), "hello").unwrap();
        std::fs::write(dir.path().join(".hidden"), "").unwrap();
        std::os::unix::fs::symlink("b.txt", dir.path().join("a-link")).unwrap();
        let out = list_dir(dir.path(), ".", 10);
        assert_eq!(
            out.content,
            ". (4 entries):\nfile  .hidden (0 bytes)\nlink  a-link -> b.txt\nfile  b.txt (5 bytes)\ndir   src/\n"
        );
        let out = list_dir(dir.path(), ".", 2);
        assert!(out.content.ends_with(
            "[... 2 more entries not shown; list a subdirectory or use bash (e.g. `ls | grep`) to narrow down.]\n"
        ));
    }

    #[test]
    fn files_missing_and_empty_directories() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(list_dir(dir.path(), ".", 10).content, ". is empty.");
        std::fs::write(dir.path().join("f"), "").unwrap();
        let out = list_dir(&dir.path().join("f"), "f", 10);
        assert!(out.error.unwrap().contains("is a file, not a directory"));
        let out = list_dir(&dir.path().join("nope"), "nope", 10);
        assert_eq!(out.error.as_deref(), Some("directory not found: nope"));
    }
}
