//! `engram sessions list|show|delete`: the conversations kept under ENGRAM_HOME/sessions.

use anyhow::Result;
use clap::{Args, Subcommand};
use engram_core::Message;
use engram_memory::session::{SessionKey, SessionLog, SessionRecord};
use serde_json::json;

use crate::context::Context;
use crate::exit::{Failure, Status, usage};
use crate::output::one_line_cut;

/// `engram sessions ...`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the sessions, most recently used first: key, messages, last use.
    List,
    /// Show a session's conversation: every message, tool calls and results included, and
    /// where the working memory summarised it.
    Show(SessionKeyArgs),
    /// Delete a session's file (and its archive). Memories extracted from it stay.
    Delete(SessionKeyArgs),
}

/// A session named on the command line.
#[derive(Debug, Args)]
pub struct SessionKeyArgs {
    /// The session key, `channel:chat_id` (a key without a colon means `cli:KEY`).
    pub key: String,
}

/// Reads a session key given by a person; a bad one is a usage error.
pub fn parse_key(text: &str) -> Result<SessionKey> {
    SessionKey::parse(text).map_err(|e| usage(e.to_string()))
}

/// Runs `engram sessions ...`.
pub fn run(ctx: &Context, command: SessionsCommand) -> Result<Status> {
    let sessions = ctx.sessions()?;
    match command {
        SessionsCommand::List => {
            let list = ctx.block_on(sessions.list())??;
            if ctx.json {
                crate::output::json(&list)?;
            } else if list.is_empty() {
                println!("no sessions yet (engram chat and engram run keep one)");
            } else {
                for info in &list {
                    println!(
                        "{:<28} {:>4} messages ({} from the user)  {}{}",
                        info.key.as_str(),
                        info.messages,
                        info.user_messages,
                        info.updated_at
                            .map_or_else(|| "-".to_string(), crate::output::local_time),
                        info.user
                            .as_deref()
                            .map(|u| format!("  user {u}"))
                            .unwrap_or_default()
                    );
                }
            }
            Ok(Status::Success)
        }
        SessionsCommand::Show(args) => {
            let key = parse_key(&args.key)?;
            let Some(log) = ctx.block_on(sessions.load(&key))?? else {
                return Err(not_found(&key));
            };
            for warning in &log.warnings {
                eprintln!("warning: {warning}");
            }
            if ctx.json {
                crate::output::json(&log_json(&log)?)?;
            } else {
                print_log(&log);
            }
            Ok(Status::Success)
        }
        SessionsCommand::Delete(args) => {
            let key = parse_key(&args.key)?;
            if !ctx.block_on(sessions.delete(&key))?? {
                return Err(not_found(&key));
            }
            if ctx.json {
                crate::output::json(&json!({"deleted": key.as_str()}))?;
            } else {
                println!("deleted session {key}");
            }
            Ok(Status::Success)
        }
    }
}

fn not_found(key: &SessionKey) -> anyhow::Error {
    Failure {
        status: Status::NotFound,
        message: format!("there is no session {key}; engram sessions list shows them"),
    }
    .into()
}

/// The session as JSON: its summary fields and every record, as in the file.
fn log_json(log: &SessionLog) -> Result<serde_json::Value> {
    let records = log
        .records
        .iter()
        .map(|r| Ok(serde_json::from_str::<serde_json::Value>(&r.to_line()?)?))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({
        "key": log.key,
        "location": log.location,
        "created_at": log.created_at(),
        "updated_at": log.updated_at(),
        "metadata": log.metadata.as_ref().map(|m| &m.metadata),
        "records": records,
        "skipped_lines": log.warnings.iter().map(|w| json!({"line": w.line, "reason": w.reason})).collect::<Vec<_>>(),
    }))
}

fn print_log(log: &SessionLog) {
    println!(
        "session {} · {} messages · {}",
        log.key,
        log.messages().len(),
        log.location
    );
    let mut count = 0usize;
    for record in &log.records {
        match record {
            SessionRecord::Message(m) => {
                count += 1;
                let time = crate::output::local_time(m.timestamp);
                match &m.message {
                    Message::System { content } => {
                        println!("{time}  system: {}", one_line_cut(content, 200));
                    }
                    Message::User { content } => {
                        println!("{time}  you: {}", crate::output::visible(content));
                    }
                    Message::Assistant(a) => {
                        if !a.content.is_empty() {
                            println!("{time}  engram: {}", crate::output::visible(&a.content));
                        }
                        for call in &a.tool_calls {
                            println!(
                                "{time}    → {} {}",
                                call.name,
                                one_line_cut(&call.arguments, 160)
                            );
                        }
                    }
                    Message::Tool(t) => println!(
                        "{time}    {} {}",
                        if t.is_error { "✗" } else { "←" },
                        one_line_cut(&t.content, 160)
                    ),
                }
            }
            SessionRecord::Summary(s) => println!(
                "-- summarised messages 1-{} {}: {}",
                s.through,
                if s.archived.is_some() {
                    "(archived, the model could not summarise)"
                } else {
                    ""
                },
                one_line_cut(&s.summary, 300)
            ),
            SessionRecord::Extracted { through, .. } => {
                println!("-- memories extracted from messages 1-{through}");
            }
            SessionRecord::Ended { .. } => {
                println!("-- conversation ended after message {count} (/new)");
            }
            SessionRecord::Metadata(_) => {}
        }
    }
}
