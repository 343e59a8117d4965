//! read_file: a text file with line numbers, a window at a time.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use super::workspace::Workspace;
use super::{parse_args, run_blocking};

/// How much read_file shows at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLimits {
    /// Lines shown when the model gives no `limit`.
    pub default_lines: usize,
    /// Longest line shown in full, in characters; longer lines are cut with a note.
    pub max_line_chars: usize,
    /// Largest output, in bytes; the window stops at the last whole line that fits.
    pub max_output_bytes: usize,
    /// Bytes scanned to count the file's lines; past this the total is reported as unknown.
    pub max_scan_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            default_lines: 2000,
            max_line_chars: 2000,
            max_output_bytes: 50_000,
            max_scan_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Bytes looked at to tell a binary file from text.
const SNIFF_BYTES: usize = 8192;

/// The `read_file` tool.
#[derive(Debug, Clone)]
pub struct ReadFileTool {
    workspace: Workspace,
    limits: ReadLimits,
    description: String,
}

impl ReadFileTool {
    /// read_file over `workspace` with the given limits.
    pub fn new(workspace: Workspace, limits: ReadLimits) -> Self {
        let description = format!(
            "Read a text file from the workspace. Each line is shown with its line number, \
             right-aligned, followed by an arrow, e.g. `    12→fn main() {{`; the number and arrow \
             are not part of the file, so leave them out when you copy text into edit_file. By \
             default up to {} lines are shown starting at line 1; for long files use `offset` \
             (the 1-based line to start at) and `limit` (how many lines). When output is cut, a \
             note at the end says which offset to use next. Paths are relative to the workspace.",
            limits.default_lines
        );
        Self {
            workspace,
            limits,
            description,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[async_trait]
impl Tool for ReadFileTool {
    fn name(&self) -> &str {
        "read_file"
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
                    "description": "File to read, relative to the workspace (or absolute inside it)."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "1-based line number to start reading at. Default 1."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": format!(
                        "Maximum number of lines to return. Default {}.",
                        self.limits.default_lines
                    )
                }
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: ReadArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let path = match self.workspace.resolve(&args.path) {
            Ok(path) => path,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let shown = self.workspace.display(&path);
        let limits = self.limits.clone();
        let window = Window {
            offset: args.offset.unwrap_or(1).max(1),
            limit: args.limit.unwrap_or(limits.default_lines).max(1),
        };
        run_blocking(move || read_window(&path, &shown, window, &limits)).await
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    offset: usize,
    limit: usize,
}

fn read_window(path: &Path, shown: &str, window: Window, limits: &ReadLimits) -> ToolOutput {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!(
                "file not found: {shown}. Use list_dir to see which files exist."
            ));
        }
        Err(e) => return ToolOutput::error(format!("cannot read {shown}: {e}")),
    };
    if meta.is_dir() {
        return ToolOutput::error(format!(
            "{shown} is a directory, not a file; use list_dir to see what it contains"
        ));
    }
    if !meta.is_file() {
        // A FIFO would block forever and a device could stream without end.
        return ToolOutput::error(format!(
            "{shown} is not a regular file (a device, pipe or socket); read_file reads files only"
        ));
    }
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) => return ToolOutput::error(format!("cannot open {shown}: {e}")),
    };
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    match reader.fill_buf() {
        Ok(head) if looks_binary(&head[..head.len().min(SNIFF_BYTES)]) => {
            return ToolOutput::error(format!(
                "{shown} is a binary file ({} bytes); read_file shows text files only",
                meta.len()
            ));
        }
        Ok([]) => return ToolOutput::ok(format!("{shown} is empty.")),
        Ok(_) => {}
        Err(e) => return ToolOutput::error(format!("cannot read {shown}: {e}")),
    }

    let mut out = String::new();
    let mut line = Vec::new();
    let mut line_no = 0usize;
    let mut last_shown = 0usize;
    let mut cut_for_size = false;
    let mut lossy = false;
    let mut scanned = 0u64;
    let mut counted_all = true;
    let window_end = window.offset.saturating_add(window.limit);

    loop {
        line.clear();
        // Keep enough bytes of each line for `max_line_chars` characters of UTF-8, so one
        // enormous line (minified code, a log without newlines) cannot fill memory.
        let keep = limits.max_line_chars.saturating_mul(4).saturating_add(4);
        let read = match read_line_bounded(&mut reader, &mut line, keep) {
            Ok(read) => read,
            Err(e) => return ToolOutput::error(format!("cannot read {shown}: {e}")),
        };
        if read == 0 {
            break;
        }
        line_no += 1;
        scanned += read as u64;
        if line_no >= window.offset && line_no < window_end && !cut_for_size {
            let text = render_line(&line, read, limits.max_line_chars, &mut lossy);
            let rendered = format!("{line_no:>6}→{text}\n");
            if out.len() + rendered.len() > limits.max_output_bytes && last_shown > 0 {
                cut_for_size = true;
            } else {
                out.push_str(&rendered);
                last_shown = line_no;
            }
        }
        if line_no >= window_end && scanned > limits.max_scan_bytes {
            counted_all = false;
            break;
        }
    }

    let total = line_no;
    if window.offset > total {
        return ToolOutput::error(format!(
            "offset {} is past the end of {shown}, which has {total} lines",
            window.offset
        ));
    }
    let total_text = if counted_all {
        total.to_string()
    } else {
        format!("at least {total}")
    };
    let more_follows = last_shown < total || !counted_all;
    if cut_for_size {
        out.push_str(&format!(
            "\n[Output cut at {} bytes: showing lines {}-{last_shown} of {total_text}. Call read_file with offset={} to read more.]\n",
            limits.max_output_bytes,
            window.offset,
            last_shown + 1
        ));
    } else if more_follows {
        out.push_str(&format!(
            "\n[Showing lines {}-{last_shown} of {total_text}. Call read_file with offset={} to read more.]\n",
            window.offset,
            last_shown + 1
        ));
    }
    if lossy {
        out.push_str("[Some bytes were not valid UTF-8 and are shown as �.]\n");
    }
    ToolOutput::ok(out)
}

/// Reads one line (up to and including `\n`) into `line`, keeping at most `keep` bytes of it;
/// returns how many bytes the line really had (0 at end of file).
fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..=at], true),
            None => (available, false),
        };
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        total += used;
        reader.consume(used);
        if done {
            // A cut line still ends with its newline, so callers strip it the same way.
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            return Ok(total);
        }
    }
}

/// A NUL byte in the first few kilobytes means binary (what git and grep use too).
fn looks_binary(head: &[u8]) -> bool {
    head.contains(&0)
}

/// One line without its line ending, cut to `max_chars` characters. `raw` may be only the
/// start of the line; `full_len` is the whole line's length in bytes.
fn render_line(raw: &[u8], full_len: usize, max_chars: usize, lossy: &mut bool) -> String {
    let mut bytes = raw;
    let mut full_len = full_len;
    if let Some(rest) = bytes.strip_suffix(b"\n") {
        bytes = rest;
        full_len -= 1;
    }
    if let Some(rest) = bytes.strip_suffix(b"\r") {
        bytes = rest;
        full_len -= 1;
    }
    let text = String::from_utf8_lossy(bytes);
    let complete = bytes.len() == full_len;
    if complete && matches!(text, std::borrow::Cow::Owned(_)) {
        *lossy = true;
    }
    if complete && text.chars().count() <= max_chars {
        return text.into_owned();
    }
    let kept: String = text.chars().take(max_chars).collect();
    if kept.contains('\u{fffd}') {
        *lossy = true;
    }
    format!("{kept}… [line cut: {full_len} bytes in all]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ReadLimits {
        ReadLimits::default()
    }

    fn read(content: &[u8], offset: usize, limit: usize, limits: &ReadLimits) -> ToolOutput {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, content).unwrap();
        read_window(&path, "f.txt", Window { offset, limit }, limits)
    }

    #[test]
    fn lines_are_numbered_and_endings_stripped() {
        let out = read(b"alpha\r\nbeta\ngamma", 1, 10, &limits());
        assert!(out.success);
        assert_eq!(out.content, "     1→alpha\n     2→beta\n     3→gamma\n");
    }

    #[test]
    fn a_window_in_the_middle_says_how_to_continue() {
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let out = read(text.as_bytes(), 4, 3, &limits());
        assert_eq!(
            out.content,
            "     4→line 4\n     5→line 5\n     6→line 6\n\n[Showing lines 4-6 of 10. Call read_file with offset=7 to read more.]\n"
        );
    }

    #[test]
    fn output_is_cut_at_whole_lines() {
        let text: String = (1..=100).map(|i| format!("{i:0>20}\n")).collect();
        let small = ReadLimits {
            max_output_bytes: 100,
            ..limits()
        };
        let out = read(text.as_bytes(), 1, 50, &small);
        // Each rendered line is 6 + 3 (arrow) + 20 + 1 = 30 bytes; three fit in 100.
        assert!(out.content.starts_with("     1→"));
        assert!(out.content.contains(
            "[Output cut at 100 bytes: showing lines 1-3 of 100. Call read_file with offset=4 to read more.]"
        ), "{}", out.content);
    }

    #[test]
    fn long_lines_are_cut_with_a_note() {
        let out = read(
            "é".repeat(10).as_bytes(),
            1,
            10,
            &ReadLimits {
                max_line_chars: 4,
                ..limits()
            },
        );
        assert_eq!(out.content, "     1→éééé… [line cut: 20 bytes in all]\n");
    }

    #[test]
    fn binary_empty_and_invalid_utf8_files() {
        let out = read(b"\x7fELF\x00\x01", 1, 10, &limits());
        assert!(!out.success);
        assert!(out.error.unwrap().contains("binary file (6 bytes)"));
        let out = read(b"", 1, 10, &limits());
        assert_eq!(out.content, "f.txt is empty.");
        let out = read(b"caf\xe9\n", 1, 10, &limits());
        assert_eq!(
            out.content,
            "     1→caf�\n[Some bytes were not valid UTF-8 and are shown as �.]\n"
        );
    }

    #[test]
    fn offset_past_the_end_is_an_error() {
        let out = read(b"a\nb\n", 5, 10, &limits());
        assert_eq!(
            out.error.as_deref(),
            Some("offset 5 is past the end of f.txt, which has 2 lines")
        );
    }

    #[test]
    fn a_huge_single_line_is_cut_without_reading_it_all_into_memory() {
        let mut text = "x".repeat(1_000_000);
        text.push_str("\nsecond\n");
        let out = read(
            text.as_bytes(),
            1,
            10,
            &ReadLimits {
                max_line_chars: 10,
                ..limits()
            },
        );
        assert_eq!(
            out.content,
            "     1→xxxxxxxxxx… [line cut: 1000000 bytes in all]\n     2→second\n"
        );
    }

    #[test]
    fn devices_and_pipes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let out = read_window(
            &fifo,
            "fifo",
            Window {
                offset: 1,
                limit: 10,
            },
            &limits(),
        );
        assert!(out.error.unwrap().contains("is not a regular file"));
        let out = read_window(
            Path::new("/dev/zero"),
            "/dev/zero",
            Window {
                offset: 1,
                limit: 10,
            },
            &limits(),
        );
        assert!(out.error.unwrap().contains("is not a regular file"));
    }

    #[test]
    fn counting_stops_at_the_scan_limit() {
        let text: String = (1..=1000).map(|i| format!("{i}\n")).collect();
        let out = read(
            text.as_bytes(),
            1,
            2,
            &ReadLimits {
                max_scan_bytes: 100,
                ..limits()
            },
        );
        assert!(out.content.contains("of at least"), "{}", out.content);
        assert!(out.content.contains("offset=3"));
    }
}
