//! The heartbeat: every so often the agent reads HEARTBEAT.md and acts on the tasks in it.
//!
//! A file without tasks costs no model call. A line is *not* a task when, after HTML comments
//! (`<!-- ... -->`, across lines; an unclosed one runs to the end) are removed, it is:
//! - blank;
//! - a heading (`# ...`) or a heading underline / thematic break (`===`, `---`, `***`, `___`);
//! - a bare list marker (`-`, `*`, `+`, `1.`), alone or with an empty check box (`- [ ]`,
//!   `- [x]`) and no text;
//! - a ticked check box item (`- [x] done thing`, `- [X] ...`): done, nothing to do.
//!
//! Every other line is a task: prose, list items, unticked check boxes with text.

use std::path::Path;

/// The heartbeat file's name in the workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";
/// The session heartbeat turns run in.
pub const HEARTBEAT_SESSION: &str = "heartbeat";
/// How many messages of the heartbeat session's history the agent keeps.
pub const HEARTBEAT_HISTORY_LIMIT: usize = 20;
/// Minutes between heartbeats unless `[scheduler] heartbeat_minutes` says otherwise.
pub const DEFAULT_HEARTBEAT_MINUTES: u64 = 30;

const PROMPT: &str = include_str!("../../templates/heartbeat_prompt.md");

/// The lines of HEARTBEAT.md that are tasks (see the module documentation), trimmed.
pub fn tasks(content: &str) -> Vec<String> {
    strip_comments(content)
        .lines()
        .map(str::trim)
        .filter(|line| is_task(line))
        .map(str::to_string)
        .collect()
}

/// The message for a heartbeat turn over the file's content.
pub fn heartbeat_message(path: &Path, content: &str) -> String {
    PROMPT
        .replace("{path}", &path.display().to_string())
        .replace("{content}", content.trim())
}

fn strip_comments(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    let mut rest = content;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start + 4..].find("-->") {
            Some(end) => {
                rest = &rest[start + 4 + end + 3..];
                // Keep line structure so a comment never glues two lines together.
                out.push('\n');
            }
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

fn is_task(line: &str) -> bool {
    if line.is_empty() || line.starts_with('#') || is_rule(line) {
        return false;
    }
    let Some(after_marker) = strip_list_marker(line) else {
        return true;
    };
    let item = after_marker.trim_start();
    if item.is_empty() {
        return false;
    }
    for (box_text, ticked) in [("[ ]", false), ("[x]", true), ("[X]", true)] {
        if let Some(text) = item.strip_prefix(box_text) {
            return !ticked && !text.trim().is_empty();
        }
    }
    true
}

/// `---`, `***`, `___`, `===` (three or more, spaces allowed).
fn is_rule(line: &str) -> bool {
    let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    compact.len() >= 3
        && ['-', '*', '_', '=']
            .iter()
            .any(|&c| compact.chars().all(|x| x == c))
}

/// The rest of a list item's line, if `line` starts with a list marker.
fn strip_list_marker(line: &str) -> Option<&str> {
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return Some(rest);
        }
    }
    if matches!(line, "-" | "*" | "+") {
        return Some("");
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &line[digits..];
        for marker in [".", ")"] {
            if let Some(after) = rest.strip_prefix(marker)
                && (after.is_empty() || after.starts_with(' '))
            {
                return Some(after);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_with_only_structure_has_no_tasks() {
        let file = "# Heartbeat tasks\n\n<!-- Add tasks below.\n - [ ] like this\n-->\n\n## Daily\n- [ ]\n-\n* [x]\n1.\n---\n   \n## Done\n- [x] paid the bills\n";
        assert!(tasks(file).is_empty(), "{:?}", tasks(file));
        assert!(tasks("").is_empty());
        assert!(tasks("<!-- never closed\n- [ ] check mail").is_empty());
    }

    #[test]
    fn real_tasks_are_found() {
        let file = "# Tasks\n- [ ] check the build <!-- nightly -->\n- [x] done already\nRemind me to stretch.\n2. call mum\n";
        assert_eq!(
            tasks(file),
            [
                "- [ ] check the build",
                "Remind me to stretch.",
                "2. call mum"
            ]
        );
        assert_eq!(tasks("-not a marker"), ["-not a marker"]);
        assert_eq!(tasks("a<!-- x -->b"), ["a", "b"]);
    }

    #[test]
    fn the_message_carries_the_file() {
        let msg = heartbeat_message(Path::new("/w/HEARTBEAT.md"), "- [ ] water plants\n");
        assert!(msg.contains("/w/HEARTBEAT.md"));
        assert!(msg.contains("<heartbeat_file>\n- [ ] water plants\n</heartbeat_file>"));
        assert!(msg.contains("HEARTBEAT_OK"));
    }
}
