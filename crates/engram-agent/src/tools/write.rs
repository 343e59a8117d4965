//! write_file and edit_file: changing files in the workspace, always atomically.

use std::path::Path;

use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use super::atomic::write_atomically;
use super::workspace::Workspace;
use super::{parse_args, run_blocking};

/// Largest file edit_file loads (it holds the file and the edited copy in memory).
const MAX_EDIT_BYTES: u64 = 32 * 1024 * 1024;

/// Lines of context shown around an edit so the model can check it.
const SNIPPET_CONTEXT_LINES: usize = 3;

/// The `write_file` tool.
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    workspace: Workspace,
}

impl WriteFileTool {
    /// write_file over `workspace`.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create a file or replace its entire content. Missing parent directories are created. \
         The write is atomic: the file holds either the old or the new content, never a mix. \
         To change part of an existing file, prefer edit_file. Paths are relative to the workspace."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "File to write, relative to the workspace (or absolute inside it)."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: WriteArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let path = match self.workspace.resolve(&args.path) {
            Ok(path) => path,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let shown = self.workspace.display(&path);
        run_blocking(move || write_file(&path, &shown, &args.content)).await
    }
}

fn write_file(path: &Path, shown: &str, content: &str) -> ToolOutput {
    if path.is_dir() {
        return ToolOutput::error(format!(
            "{shown} is a directory; give the path of a file inside it"
        ));
    }
    let existed = path.exists();
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!("cannot create the directory for {shown}: {e}"));
    }
    if let Err(e) = write_atomically(path, content.as_bytes()) {
        return ToolOutput::error(format!("cannot write {shown}: {e}"));
    }
    let verb = if existed { "Overwrote" } else { "Created" };
    let lines = count_lines(content);
    let noun = if lines == 1 { "line" } else { "lines" };
    ToolOutput::ok(format!(
        "{verb} {shown} ({} bytes, {lines} {noun}).",
        content.len()
    ))
}

/// The `edit_file` tool.
#[derive(Debug, Clone)]
pub struct EditFileTool {
    workspace: Workspace,
}

impl EditFileTool {
    /// edit_file over `workspace`.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_text: String,
    new_text: String,
    #[serde(default)]
    replace_all: bool,
}

#[async_trait]
impl Tool for EditFileTool {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace exact text in an existing file. `old_text` must match the file exactly, including \
         whitespace and indentation (copy it from read_file output without the line-number prefix), \
         and must occur exactly once unless `replace_all` is true. If it matches nowhere or in \
         several places, nothing is changed and the result says how many matches there were; add \
         surrounding lines to `old_text` to make it unique. The write is atomic. Returns the edited \
         region with line numbers."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "File to edit, relative to the workspace (or absolute inside it)."
                },
                "old_text": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The exact text to replace."
                },
                "new_text": {
                    "type": "string",
                    "description": "The text to put in its place (may be empty to delete)."
                },
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring exactly one. Default false."
                }
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: EditArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let path = match self.workspace.resolve(&args.path) {
            Ok(path) => path,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let shown = self.workspace.display(&path);
        run_blocking(move || edit_file(&path, &shown, &args)).await
    }
}

fn edit_file(path: &Path, shown: &str, args: &EditArgs) -> ToolOutput {
    if args.old_text.is_empty() {
        return ToolOutput::error(
            "old_text is empty; give the exact text to replace (use write_file to create a file)",
        );
    }
    if args.old_text == args.new_text {
        return ToolOutput::error("old_text and new_text are identical; nothing would change");
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return ToolOutput::error(format!("{shown} is a directory, not a file"));
        }
        Ok(meta) if !meta.is_file() => {
            return ToolOutput::error(format!(
                "{shown} is not a regular file (a device, pipe or socket); edit_file edits files only"
            ));
        }
        Ok(meta) if meta.len() > MAX_EDIT_BYTES => {
            return ToolOutput::error(format!(
                "{shown} is {} bytes, more than edit_file handles ({MAX_EDIT_BYTES}); use bash \
                 (for example sed) to change it",
                meta.len()
            ));
        }
        _ => {}
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!(
                "file not found: {shown}. Use write_file to create a new file."
            ));
        }
        Err(e) => return ToolOutput::error(format!("cannot read {shown}: {e}")),
    };
    let Ok(original) = String::from_utf8(bytes) else {
        return ToolOutput::error(format!(
            "{shown} is not a UTF-8 text file; edit_file only changes text files"
        ));
    };

    // Models write "\n"; a Windows-style file has "\r\n". Match in the file's own convention.
    let (old_text, new_text) = if !original.contains(&args.old_text)
        && original.contains("\r\n")
        && args.old_text.contains('\n')
        && !args.old_text.contains("\r\n")
    {
        (
            args.old_text.replace('\n', "\r\n"),
            args.new_text.replace('\n', "\r\n"),
        )
    } else {
        (args.old_text.clone(), args.new_text.clone())
    };

    let matches = original.matches(old_text.as_str()).count();
    if matches == 0 {
        return ToolOutput::error(format!(
            "old_text was not found in {shown} (0 matches); nothing was changed. It must match \
             exactly, including whitespace and indentation: read the file again and copy the text \
             without the line-number prefixes."
        ));
    }
    if matches > 1 && !args.replace_all {
        return ToolOutput::error(format!(
            "old_text matches {matches} places in {shown}; it must match exactly one, so nothing \
             was changed. Add surrounding lines to old_text to make it unique, or set replace_all \
             to true to replace all {matches}."
        ));
    }
    let first_at = original.find(old_text.as_str()).unwrap_or(0);
    let updated = if args.replace_all {
        original.replace(old_text.as_str(), &new_text)
    } else {
        original.replacen(old_text.as_str(), &new_text, 1)
    };
    if let Err(e) = write_atomically(path, updated.as_bytes()) {
        return ToolOutput::error(format!("cannot write {shown}: {e}"));
    }
    let what = if matches == 1 {
        "1 occurrence".to_string()
    } else {
        format!("{matches} occurrences")
    };
    let snippet = snippet_around(&updated, first_at, new_text.len());
    ToolOutput::ok(format!(
        "Edited {shown}: replaced {what}. The first edited region now reads:\n{snippet}"
    ))
}

/// The lines holding `start..start+len` of `text`, with a few lines either side, numbered like
/// read_file output.
fn snippet_around(text: &str, start: usize, len: usize) -> String {
    let first_line = text[..start.min(text.len())].matches('\n').count();
    let end = (start + len).min(text.len());
    let last_line = text[..end].matches('\n').count();
    let from = first_line.saturating_sub(SNIPPET_CONTEXT_LINES);
    let to = last_line + SNIPPET_CONTEXT_LINES;
    text.lines()
        .enumerate()
        .skip(from)
        .take(to + 1 - from)
        .map(|(index, line)| format!("{:>6}→{}\n", index + 1, line.trim_end_matches('\r')))
        .collect()
}

fn count_lines(content: &str) -> usize {
    content.lines().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(content: &str, old: &str, new: &str, all: bool) -> (ToolOutput, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, content).unwrap();
        let args = EditArgs {
            path: "f.txt".into(),
            old_text: old.into(),
            new_text: new.into(),
            replace_all: all,
        };
        let out = edit_file(&path, "f.txt", &args);
        (out, std::fs::read_to_string(&path).unwrap())
    }

    #[test]
    fn a_unique_match_is_replaced_and_shown() {
        let (out, after) = edit("a\nb\nc\nd\ne\nf\ng\nh\n", "e", "E", false);
        assert!(out.success, "{out:?}");
        assert_eq!(after, "a\nb\nc\nd\nE\nf\ng\nh\n");
        assert_eq!(
            out.content,
            "Edited f.txt: replaced 1 occurrence. The first edited region now reads:\n     2→b\n     3→c\n     4→d\n     5→E\n     6→f\n     7→g\n     8→h\n"
        );
    }

    #[test]
    fn crlf_files_match_lf_old_text() {
        let (out, after) = edit("one\r\ntwo\r\nthree\r\n", "one\ntwo", "1\n2", false);
        assert!(out.success, "{out:?}");
        assert_eq!(after, "1\r\n2\r\nthree\r\n");
    }

    #[test]
    fn identical_and_empty_texts_are_refused() {
        let (out, after) = edit("x", "x", "x", false);
        assert!(out.error.unwrap().contains("identical"));
        assert_eq!(after, "x");
        let (out, _) = edit("x", "", "y", false);
        assert!(out.error.unwrap().contains("old_text is empty"));
    }

    #[test]
    fn write_reports_created_then_overwrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.txt");
        let out = write_file(&path, "a/b/c.txt", "x\ny\n");
        assert_eq!(out.content, "Created a/b/c.txt (4 bytes, 2 lines).");
        let out = write_file(&path, "a/b/c.txt", "");
        assert_eq!(out.content, "Overwrote a/b/c.txt (0 bytes, 0 lines).");
        let out = write_file(dir.path(), ".", "x");
        assert!(out.error.unwrap().contains("is a directory"));
    }
}
