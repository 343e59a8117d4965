//! Showing a JSON-protocol reply while it streams in.
//!
//! Under the JSON protocol the model writes `{"thought": ..., "tool": "chat", "params":
//! {"response": "..."}}`; the user should see the response as it arrives, not the JSON. This
//! watcher passes on, as soon as it is known, the decoded `response` string of a `"chat"`
//! object, or prose written outside any object (up to the first `{`, which may start a tool
//! call). Anything else waits for the end of the answer, when the full parse decides and
//! [`ReplyStream::remainder`] says what is still to be shown.

use engram_core::llm::json_protocol::{CHAT_TOOL, ProtocolAction, ProtocolReply};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing but whitespace so far.
    Start,
    /// Plain text, shown up to byte `pos`.
    Prose { pos: usize },
    /// A JSON object (or a fenced one): looking for a chat reply's response string.
    Seeking,
    /// Inside the response string, decoded up to byte `pos`.
    Response { pos: usize },
    /// Nothing more is shown until the end (a tool call, or the string ended).
    Held,
}

/// Watches one JSON-protocol answer as it streams.
#[derive(Debug, Clone)]
pub(super) struct ReplyStream {
    text: String,
    mode: Mode,
    shown: String,
}

impl ReplyStream {
    pub(super) fn new() -> Self {
        Self {
            text: String::new(),
            mode: Mode::Start,
            shown: String::new(),
        }
    }

    /// Adds a delta of the model's text; returns what can be shown now (often empty).
    pub(super) fn push(&mut self, delta: &str) -> String {
        self.text.push_str(delta);
        let mut visible = String::new();
        loop {
            let before = self.mode;
            match self.mode {
                Mode::Start => {
                    let Some(start) = self.text.find(|c: char| !c.is_whitespace()) else {
                        break;
                    };
                    self.mode = match self.text[start..].chars().next() {
                        Some('{' | '`') => Mode::Seeking,
                        _ => Mode::Prose { pos: start },
                    };
                }
                Mode::Prose { pos } => {
                    let rest = &self.text[pos..];
                    match rest.find('{') {
                        Some(brace) => {
                            visible.push_str(&rest[..brace]);
                            self.mode = Mode::Held;
                        }
                        None => {
                            visible.push_str(rest);
                            self.mode = Mode::Prose {
                                pos: self.text.len(),
                            };
                        }
                    }
                }
                Mode::Seeking => {
                    self.mode = match string_value_start(&self.text, "tool") {
                        None => Mode::Seeking,
                        Some(start) => match closed_string(&self.text[start..]) {
                            None => Mode::Seeking,
                            Some(tool) if tool.trim() != CHAT_TOOL => Mode::Held,
                            Some(_) => match string_value_start(&self.text, "response") {
                                Some(pos) => Mode::Response { pos },
                                None => Mode::Seeking,
                            },
                        },
                    };
                }
                Mode::Response { pos } => {
                    let (decoded, consumed, closed) = decode_partial(&self.text[pos..]);
                    visible.push_str(&decoded);
                    self.mode = if closed {
                        Mode::Held
                    } else {
                        Mode::Response {
                            pos: pos + consumed,
                        }
                    };
                }
                Mode::Held => {}
            }
            if self.mode == before {
                break;
            }
        }
        self.shown.push_str(&visible);
        visible
    }

    /// What is left to show once the whole answer is parsed: for a reply, the part not shown
    /// yet (all of it if nothing was, or after a line break if what was shown turned out to be
    /// something else); nothing for a tool call.
    pub(super) fn remainder(&self, reply: &ProtocolReply) -> Option<String> {
        let ProtocolAction::Reply(text) = &reply.action else {
            return None;
        };
        let shown = self.shown.as_str();
        let rest = match text
            .strip_prefix(shown)
            .or_else(|| text.strip_prefix(shown.trim_end()))
        {
            Some(rest) => rest.to_string(),
            // What was shown was not the reply (prose before a reply object).
            None if shown.ends_with('\n') => text.clone(),
            None => format!("\n{text}"),
        };
        (!rest.is_empty()).then_some(rest)
    }
}

/// The byte offset just after the opening quote of `"key": "`, if the text has it.
fn string_value_start(text: &str, key: &str) -> Option<usize> {
    let quoted = format!("\"{key}\"");
    let mut from = 0;
    while let Some(found) = text[from..].find(&quoted) {
        let after_key = from + found + quoted.len();
        let rest = &text[after_key..];
        let trimmed = rest.trim_start();
        if let Some(after_colon) = trimmed.strip_prefix(':') {
            let value = after_colon.trim_start();
            if value.starts_with('"') {
                return Some(text.len() - value.len() + 1);
            }
        }
        from = after_key;
    }
    None
}

/// The decoded string starting at `text` (just after its opening quote), if it is closed.
fn closed_string(text: &str) -> Option<String> {
    let (decoded, _, closed) = decode_partial(text);
    closed.then_some(decoded)
}

/// Decodes a JSON string body as far as it can: returns the text, the bytes consumed, and
/// whether the closing quote was reached. An escape cut off by the end of the text waits.
fn decode_partial(text: &str) -> (String, usize, bool) {
    let mut out = String::new();
    let mut chars = text.char_indices();
    let mut consumed = 0;
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, i + 1, true),
            '\\' => {
                let Some((_, escaped)) = chars.next() else {
                    break;
                };
                match escaped {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'u' => {
                        let hex = text.get(i + 2..i + 6);
                        let Some(hex) = hex.filter(|h| h.len() == 4) else {
                            break;
                        };
                        // A surrogate half (emoji) is left to the final parse.
                        if let Some(ch) = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
                        {
                            out.push(ch);
                        }
                        for _ in 0..4 {
                            chars.next();
                        }
                    }
                    other => out.push(other),
                }
                consumed = chars.clone().next().map_or(text.len(), |(j, _)| j);
                continue;
            }
            other => out.push(other),
        }
        consumed = i + c.len_utf8();
    }
    (out, consumed, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::llm::json_protocol::{parse_reply, render_reply};
    use proptest::prelude::*;

    /// Streams `text` in pieces of `size` characters; returns everything shown, including the
    /// remainder after the final parse.
    fn stream(text: &str, size: usize) -> (Vec<String>, String) {
        let mut watcher = ReplyStream::new();
        let chars: Vec<char> = text.chars().collect();
        let mut pieces = Vec::new();
        for chunk in chars.chunks(size.max(1)) {
            let shown = watcher.push(&chunk.iter().collect::<String>());
            if !shown.is_empty() {
                pieces.push(shown);
            }
        }
        let mut all: String = pieces.concat();
        if let Some(rest) = watcher.remainder(&parse_reply(text)) {
            all.push_str(&rest);
        }
        (pieces, all)
    }

    #[test]
    fn a_chat_reply_streams_its_response_only() {
        let text = r#"{"thought": "greet", "tool": "chat", "params": {"response": "Hello \"there\",\nfriend \u00e9!"}}"#;
        let (pieces, all) = stream(text, 3);
        assert!(pieces.len() > 3, "{pieces:?}");
        assert_eq!(all, "Hello \"there\",\nfriend é!");
        assert!(
            pieces.concat().starts_with("Hello"),
            "no JSON shown: {pieces:?}"
        );
    }

    #[test]
    fn a_tool_call_shows_nothing() {
        let text =
            r#"{"thought": "look", "tool": "read_file", "params": {"path": "a", "response": "x"}}"#;
        let (pieces, all) = stream(text, 2);
        assert!(pieces.is_empty(), "{pieces:?}");
        assert_eq!(all, "");
    }

    #[test]
    fn prose_streams_and_a_fenced_reply_is_unwrapped() {
        let (pieces, all) = stream("Just a plain answer.", 4);
        assert!(pieces.len() > 1);
        assert_eq!(all, "Just a plain answer.");
        let fenced = "```json\n{\"thought\": \"\", \"tool\": \"chat\", \"params\": {\"response\": \"Fenced.\"}}\n```";
        assert_eq!(stream(fenced, 5).1, "Fenced.");
        // Braces in prose hold the rest until the end, which then shows it.
        assert_eq!(stream("Use {curly} braces.", 3).1, "Use {curly} braces.");
        // Prose before a reply object: the reply follows on a new line.
        let mixed = "Sure.\n{\"tool\": \"chat\", \"params\": {\"response\": \"Done.\"}}";
        assert_eq!(stream(mixed, 4).1, "Sure.\nDone.");
    }

    proptest! {
        #[test]
        fn whatever_the_chunking_the_user_sees_the_reply(
            response in "[a-zA-Z0-9 .,!?\"\\\\\n\té{}:]{0,60}",
            thought in "[a-z ]{0,20}",
            size in 1usize..12,
        ) {
            let reply = ProtocolReply { thought: Some(thought), action: ProtocolAction::Reply(response) };
            let text = render_reply(&reply);
            let expected = match parse_reply(&text).action {
                ProtocolAction::Reply(t) => t,
                other => panic!("{other:?}"),
            };
            prop_assert_eq!(stream(&text, size).1, expected);
        }

        #[test]
        fn never_panics_on_any_text(text in ".{0,80}", size in 1usize..8) {
            let _ = stream(&text, size);
        }
    }
}
