//! How results are shown: aligned text for people, JSON for scripts.
//!
//! Everything goes to standard output through [`stdout`], which ends the process quietly (status
//! 0) when the reader has gone away (`engram list | head -1`): the reader chose to stop reading.
//! Text a user or a model wrote is shown to people through [`visible`], so escape sequences
//! stored in a memory cannot drive the terminal; JSON output keeps every character as stored.

use std::borrow::Cow;
use std::io::{self, Write};

use anyhow::Result;
use engram_core::{HistoryEvent, Memory};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Serialize;

/// Standard output, for writers: a closed pipe ends the process quietly.
pub fn stdout() -> Stdout {
    Stdout(io::stdout())
}

/// See [`stdout`].
#[derive(Debug)]
pub struct Stdout(io::Stdout);

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        quiet_on_closed_pipe(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        quiet_on_closed_pipe(self.0.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        quiet_on_closed_pipe(self.0.flush())
    }
}

/// Ends the process with status 0 when standard output's reader has gone away.
fn quiet_on_closed_pipe<T>(result: io::Result<T>) -> io::Result<T> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

/// What `println!` and `print!` call (see main.rs): a write error other than a closed pipe
/// ends the process with one `error:` line and status 1.
pub fn print_fmt(args: std::fmt::Arguments<'_>) {
    let mut out = stdout();
    if let Err(e) = out.write_fmt(args) {
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// Prints one JSON document, pretty-printed.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = io::BufWriter::new(stdout());
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Text a user or a model wrote, safe to show on a terminal: control characters other than
/// newline and tab (escape sequences, carriage returns, backspaces, C1 controls) are shown
/// escaped (`\u{1b}`), so they print as text instead of moving the cursor, recolouring,
/// retitling the window or hiding what came before.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden_control) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_hidden_control(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

fn is_hidden_control(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// A time in the local zone, to the minute.
pub fn local_time(ts: Timestamp) -> String {
    ts.to_zoned(TimeZone::system())
        .strftime("%Y-%m-%d %H:%M")
        .to_string()
}

/// Text on one line: newlines shown as spaces, control characters escaped ([`visible`]).
pub fn one_line(text: &str) -> String {
    visible(&text.split_whitespace().collect::<Vec<_>>().join(" ")).into_owned()
}

/// Text on one line, cut at `max` characters with an ellipsis.
pub fn one_line_cut(text: &str, max: usize) -> String {
    let joined = one_line(text);
    if joined.chars().count() <= max {
        return joined;
    }
    let cut: String = joined.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// Whether to style output on this stream: a terminal, and `NO_COLOR` unset.
pub fn use_style(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A memory's label: kind, category and importance.
fn label(memory: &Memory) -> String {
    match &memory.category {
        Some(category) => format!(
            "{}/{} ★{}",
            memory.kind,
            visible(category),
            memory.importance
        ),
        None => format!("{} ★{}", memory.kind, memory.importance),
    }
}

/// One line per memory, for listings.
pub fn memory_line(memory: &Memory) -> String {
    let closed = if memory.valid_to.is_some() {
        " [closed]"
    } else {
        ""
    };
    format!(
        "{}  {}  {}{}  {}",
        memory.id,
        local_time(memory.created_at),
        label(memory),
        closed,
        one_line(&memory.text)
    )
}

/// Every field of a memory, for `engram get`.
pub fn memory_detail(memory: &Memory) -> String {
    let mut lines = vec![
        format!("id          {}", memory.id),
        format!("user        {}", visible(&memory.scope.user_id)),
    ];
    if let Some(agent) = &memory.scope.agent_id {
        lines.push(format!("agent       {}", visible(agent)));
    }
    if let Some(session) = &memory.scope.session_id {
        lines.push(format!("session     {}", visible(session)));
    }
    lines.push(format!("kind        {}", memory.kind));
    if let Some(category) = &memory.category {
        lines.push(format!("category    {}", visible(category)));
    }
    lines.push(format!("importance  {}", memory.importance));
    lines.push(format!("created     {}", memory.created_at));
    lines.push(format!("updated     {}", memory.updated_at));
    lines.push(format!("valid from  {}", memory.valid_from));
    if let Some(to) = memory.valid_to {
        lines.push(format!("valid to    {to} (closed)"));
    }
    if let Some(expires) = memory.expires_at {
        lines.push(format!("expires     {expires}"));
    }
    lines.push(format!("source      {}", visible(&memory.source)));
    if !memory.metadata.is_empty() {
        let meta = serde_json::Value::Object(memory.metadata.clone());
        lines.push(format!("metadata    {}", visible(&meta.to_string())));
    }
    lines.push(String::new());
    lines.push(visible(&memory.text).into_owned());
    lines.join("\n")
}

/// One line per history event.
pub fn history_line(event: &HistoryEvent) -> String {
    let change = match (&event.old_text, &event.new_text) {
        (None, Some(new)) => format!("\"{}\"", one_line(new)),
        (Some(old), Some(new)) => format!("\"{}\" -> \"{}\"", one_line(old), one_line(new)),
        (Some(old), None) => format!("\"{}\"", one_line(old)),
        (None, None) => String::new(),
    };
    format!(
        "{}  {:<10}  by {:<8}  {}",
        local_time(event.at),
        event.event.as_str(),
        visible(&event.actor),
        change
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_joined_and_cut() {
        assert_eq!(one_line_cut("a\n b", 10), "a b");
        assert_eq!(one_line_cut("abcdefghijkl", 5), "abcd…");
    }
}
