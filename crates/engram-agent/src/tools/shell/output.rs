//! Bounded capture of command output: the beginning and the end, with a count of what was
//! dropped in between (errors usually show at the end, context at the beginning).

use std::collections::VecDeque;

/// Keeps the first and the last bytes of a stream, within a fixed budget.
#[derive(Debug, Clone)]
pub(crate) struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl HeadTail {
    /// A buffer keeping at most `cap` bytes: half from the start, half from the end.
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            total: 0,
        }
    }

    /// Adds bytes from the stream.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let take = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Every byte seen so far, kept or not.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// True when nothing was seen.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The kept text, with a note in the middle when bytes were dropped.
    pub(crate) fn render(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if kept == self.total {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let omitted = self.total - kept;
        format!(
            "{}\n[... {omitted} bytes of output omitted ...]\n{}",
            String::from_utf8_lossy(without_cut_char_at_end(&self.head)),
            String::from_utf8_lossy(without_cut_char_at_start(&tail)),
        )
    }
}

/// Drops a multi-byte character cut in half at the end of `bytes`.
fn without_cut_char_at_end(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() => &bytes[..e.valid_up_to()],
        _ => bytes,
    }
}

/// Drops the continuation bytes of a character cut in half at the start of `bytes`.
fn without_cut_char_at_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut buffer = HeadTail::new(10);
        buffer.push(b"abc");
        buffer.push(b"defg");
        assert_eq!(buffer.render(), "abcdefg");
        assert_eq!(buffer.total(), 7);
    }

    #[test]
    fn long_output_keeps_both_ends() {
        let mut buffer = HeadTail::new(6);
        for chunk in [b"abcd".as_slice(), b"efgh", b"ijkl"] {
            buffer.push(chunk);
        }
        assert_eq!(
            buffer.render(),
            "abc\n[... 6 bytes of output omitted ...]\njkl"
        );
    }

    #[test]
    fn characters_cut_at_the_edges_are_dropped_not_garbled() {
        let mut buffer = HeadTail::new(6);
        buffer.push("ééééééé".as_bytes());
        let text = buffer.render();
        assert!(!text.contains('\u{fffd}'), "{text}");
        assert!(text.starts_with('é') && text.ends_with('é'), "{text}");
    }

    proptest! {
        // Whatever the chunking, the kept bytes are the true head and tail of the stream.
        #[test]
        fn head_and_tail_are_exact(
            chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..20),
            cap in 0usize..64,
        ) {
            let mut buffer = HeadTail::new(cap);
            let mut all = Vec::new();
            for chunk in &chunks {
                buffer.push(chunk);
                all.extend_from_slice(chunk);
            }
            prop_assert_eq!(buffer.total(), all.len() as u64);
            let head_len = buffer.head.len();
            prop_assert_eq!(&buffer.head[..], &all[..head_len]);
            let tail: Vec<u8> = buffer.tail.iter().copied().collect();
            prop_assert_eq!(&tail[..], &all[all.len() - tail.len()..]);
            prop_assert!(buffer.head.len() + buffer.tail.len() <= cap);
            if all.len() <= cap {
                prop_assert_eq!(buffer.head.len() + tail.len(), all.len());
            }
        }
    }
}
