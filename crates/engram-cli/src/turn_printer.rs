//! How `engram run`, `engram chat` and `engram bench agent` show a turn as it happens.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use engram_agent::AgentEvent;
use engram_core::{ToolCall, ToolOutput};

use crate::markdown::MarkdownStream;
use crate::output::{one_line_cut, use_style};

/// Shows a turn as it happens: answer text on `out` (Markdown rendered when styled), tool
/// activity and notices on `err`.
pub struct TurnPrinter<O: Write, E: Write> {
    out: O,
    err: E,
    markdown: MarkdownStream,
    err_styled: bool,
    show_answer: bool,
    out_at_line_start: bool,
    buffer: String,
    /// When each piece of answer text had been written and flushed (for benchmarks).
    pub text_written: Option<Vec<Instant>>,
}

impl TurnPrinter<std::io::Stdout, std::io::Stderr> {
    /// A printer on the process's stdout and stderr, styled where they are terminals.
    /// `show_answer: false` keeps the answer off stdout (for `--json`).
    pub fn terminal(show_answer: bool) -> Self {
        Self::new(
            std::io::stdout(),
            std::io::stderr(),
            use_style(std::io::stdout().is_terminal()),
            use_style(std::io::stderr().is_terminal()),
            show_answer,
        )
    }
}

impl<O: Write, E: Write> TurnPrinter<O, E> {
    /// A printer on any writers.
    pub fn new(out: O, err: E, out_styled: bool, err_styled: bool, show_answer: bool) -> Self {
        Self {
            out,
            err,
            markdown: MarkdownStream::new(out_styled),
            err_styled,
            show_answer,
            out_at_line_start: true,
            buffer: String::new(),
            text_written: None,
        }
    }

    /// Handles one agent event. Write errors (a closed pipe) are ignored: the run goes on and
    /// its end is still reported.
    pub fn on_event(&mut self, event: AgentEvent<'_>) {
        match event {
            AgentEvent::Text(text) => {
                if self.show_answer {
                    self.buffer.clear();
                    self.markdown.push(text, &mut self.buffer);
                    self.write_out();
                }
                if let Some(times) = &mut self.text_written {
                    times.push(Instant::now());
                }
            }
            AgentEvent::Answer(_) => self.end_answer(),
            AgentEvent::ToolStarted { call } => {
                self.end_answer();
                let line = format!("→ {} {}", call.name, summarize_arguments(call));
                self.note(&line);
            }
            AgentEvent::ToolFinished {
                call,
                output,
                elapsed,
            } => {
                let line = tool_result_line(call, output, elapsed);
                self.note(&line);
            }
            AgentEvent::Thought(thought) => {
                self.end_answer();
                self.note(&format!("· {}", one_line_cut(thought, 200)));
            }
            AgentEvent::Retrying {
                attempt,
                delay,
                reason,
            } => self.note(&format!(
                "retrying (attempt {attempt}) in {:.1} s: {}",
                delay.as_secs_f64(),
                one_line_cut(reason, 200)
            )),
            AgentEvent::Notice(text) => self.note(&format!("warning: {text}")),
            _ => {}
        }
    }

    /// Flushes held-back answer text and ends its line.
    pub fn end_answer(&mut self) {
        if !self.show_answer {
            return;
        }
        self.buffer.clear();
        self.markdown.finish(&mut self.buffer);
        if !self.out_at_line_start || !self.buffer.is_empty() {
            if !self.buffer.ends_with('\n') {
                self.buffer.push('\n');
            }
            self.write_out();
        }
    }

    /// A line on the progress stream (dimmed on a terminal).
    pub fn note(&mut self, line: &str) {
        if !self.out_at_line_start {
            self.buffer.clear();
            self.buffer.push('\n');
            self.write_out();
        }
        let _ = if self.err_styled {
            writeln!(self.err, "\x1b[2m{line}\x1b[0m")
        } else {
            writeln!(self.err, "{line}")
        };
        let _ = self.err.flush();
    }

    fn write_out(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        self.out_at_line_start = self.buffer.ends_with('\n');
        let _ = self.out.write_all(self.buffer.as_bytes());
        let _ = self.out.flush();
    }

    /// The writers back.
    #[cfg(test)]
    pub fn into_inner(self) -> (O, E) {
        (self.out, self.err)
    }
}

/// A tool call's arguments on one line, cut to a readable length.
fn summarize_arguments(call: &ToolCall) -> String {
    let compact = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .map_or_else(|_| call.arguments.clone(), |v| v.to_string());
    one_line_cut(&compact, 120)
}

fn tool_result_line(call: &ToolCall, output: &ToolOutput, elapsed: Duration) -> String {
    let ms = elapsed.as_millis();
    if output.success {
        format!("  ✓ {} ({ms} ms)", call.name)
    } else {
        let error = output.error.as_deref().unwrap_or(&output.content);
        format!("  ✗ {} ({ms} ms): {}", call.name, one_line_cut(error, 160))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn printed(events: Vec<AgentEvent<'_>>) -> (String, String) {
        let mut printer = TurnPrinter::new(Vec::new(), Vec::new(), false, false, true);
        for event in events {
            printer.on_event(event);
        }
        let (out, err) = printer.into_inner();
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn answers_go_to_stdout_and_tool_activity_to_stderr() {
        let call = ToolCall::with_value("c1", "read_file", &json!({"path": "a.txt"}));
        let ok = ToolOutput::ok("1\thello");
        let failed = ToolOutput::error("no such file: b.txt\nsecond line");
        let (out, err) = printed(vec![
            AgentEvent::Text("Let me look."),
            AgentEvent::ToolStarted { call: &call },
            AgentEvent::ToolFinished {
                call: &call,
                output: &ok,
                elapsed: Duration::from_millis(3),
            },
            AgentEvent::ToolFinished {
                call: &call,
                output: &failed,
                elapsed: Duration::from_millis(4),
            },
            AgentEvent::Text("It says "),
            AgentEvent::Text("hello."),
            AgentEvent::Answer("It says hello."),
        ]);
        assert_eq!(out, "Let me look.\nIt says hello.\n");
        assert_eq!(
            err,
            "→ read_file {\"path\":\"a.txt\"}\n  ✓ read_file (3 ms)\n  ✗ read_file (4 ms): no such file: b.txt second line\n"
        );
    }

    #[test]
    fn a_hidden_answer_still_reports_progress() {
        let mut printer = TurnPrinter::new(Vec::new(), Vec::new(), false, false, false);
        printer.on_event(AgentEvent::Text("secret"));
        printer.on_event(AgentEvent::Notice("cut off"));
        printer.on_event(AgentEvent::Answer("secret"));
        let (out, err) = printer.into_inner();
        assert!(out.is_empty());
        assert_eq!(String::from_utf8(err).unwrap(), "warning: cut off\n");
    }
}
