//! A server-sent-events decoder (the `text/event-stream` format both providers stream in).
//!
//! Bytes go in as they arrive, in chunks of any size; complete events come out. Lines may end in
//! `\n`, `\r\n` or `\r`, a chunk may split a line (or a UTF-8 character) anywhere, comments and
//! unknown fields are skipped. At the end of the stream an event missing its final blank line is
//! still delivered: some servers close right after the last `data:` line.

/// Longest line accepted, in bytes; a server that sends more without a newline is broken.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One event: its type (the `event:` field, if any) and its data lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server sent one.
    pub event: Option<String>,
    /// The `data:` lines joined by newlines.
    pub data: String,
}

/// The stream broke the format beyond repair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event-stream line is longer than {MAX_LINE_BYTES} bytes")]
pub struct LineTooLong;

/// An incremental event-stream decoder.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The last byte seen was a `\r`, so a `\n` right after it ends nothing.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes; complete events are appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LineTooLong> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.line.extend_from_slice(&rest[..end]);
                    self.after_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, out);
                }
                None => {
                    self.line.extend_from_slice(rest);
                    rest = &[];
                }
            }
            if self.line.len() > MAX_LINE_BYTES {
                return Err(LineTooLong);
            }
        }
        Ok(())
    }

    /// Ends the stream: a last line without its newline, and an event without its blank line,
    /// are delivered.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
        }
        self.dispatch(out);
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // a comment (keep-alive)
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {} // id, retry and unknown fields mean nothing to a chat stream
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_in_pieces(text: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        let mut start = 0;
        for &cut in cuts {
            let cut = cut.clamp(start, text.len());
            decoder.push(&text[start..cut], &mut out).unwrap();
            start = cut;
        }
        decoder.push(&text[start..], &mut out).unwrap();
        decoder.finish(&mut out);
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn decodes_events_data_and_comments() {
        let text = b": keep-alive\n\nevent: message_start\ndata: {\"a\":1}\n\ndata: one\ndata:two\nid: 7\n\ndata: [DONE]\n\n";
        assert_eq!(
            decode_in_pieces(text, &[]),
            vec![
                ev(Some("message_start"), "{\"a\":1}"),
                ev(None, "one\ntwo"),
                ev(None, "[DONE]"),
            ]
        );
    }

    #[test]
    fn handles_crlf_cr_and_a_missing_final_blank_line() {
        let text = b"data: a\r\n\r\ndata: b\r\rdata: c";
        assert_eq!(
            decode_in_pieces(text, &[7, 8]),
            vec![ev(None, "a"), ev(None, "b"), ev(None, "c")]
        );
    }

    #[test]
    fn an_event_field_without_data_is_not_an_event() {
        assert_eq!(decode_in_pieces(b"event: ping\n\n", &[]), vec![]);
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_events(
            events in prop::collection::vec(("[a-z_]{0,8}", "[^\r\n]{0,20}"), 0..6),
            cuts in prop::collection::vec(0usize..200, 0..8),
            crlf in any::<bool>(),
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut text = String::new();
            let mut expected = Vec::new();
            for (name, data) in &events {
                if !name.is_empty() {
                    text.push_str(&format!("event: {name}{eol}"));
                }
                text.push_str(&format!("data: {data}{eol}{eol}"));
                expected.push(ev(Some(name.as_str()).filter(|n| !n.is_empty()), data));
            }
            let mut cuts = cuts;
            cuts.sort_unstable();
            prop_assert_eq!(decode_in_pieces(text.as_bytes(), &cuts), expected);
        }

        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
            let _ = decode_in_pieces(&bytes, &[cut]);
        }
    }
}
