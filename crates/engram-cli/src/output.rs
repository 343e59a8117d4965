//! How results are shown: aligned text for people, JSON for scripts.

use std::io::Write;

use anyhow::Result;
use engram_core::{HistoryEvent, Memory};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Serialize;

/// Prints one JSON document, pretty-printed.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// A time in the local zone, to the minute.
pub fn local_time(ts: Timestamp) -> String {
    ts.to_zoned(TimeZone::system())
        .strftime("%Y-%m-%d %H:%M")
        .to_string()
}

/// Text on one line: newlines shown as spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A memory's label: kind, category and importance.
fn label(memory: &Memory) -> String {
    match &memory.category {
        Some(category) => format!("{}/{} ★{}", memory.kind, category, memory.importance),
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
        format!("user        {}", memory.scope.user_id),
    ];
    if let Some(agent) = &memory.scope.agent_id {
        lines.push(format!("agent       {agent}"));
    }
    if let Some(session) = &memory.scope.session_id {
        lines.push(format!("session     {session}"));
    }
    lines.push(format!("kind        {}", memory.kind));
    if let Some(category) = &memory.category {
        lines.push(format!("category    {category}"));
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
    lines.push(format!("source      {}", memory.source));
    if !memory.metadata.is_empty() {
        let meta = serde_json::Value::Object(memory.metadata.clone());
        lines.push(format!("metadata    {meta}"));
    }
    lines.push(String::new());
    lines.push(memory.text.clone());
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
        event.actor,
        change
    )
}
