//! Markdown for the terminal, rendered while it streams in.
//!
//! Answers arrive a few characters at a time and must show at once, so this renderer works
//! character by character and never re-draws: headings become bold (the `#` marks dropped),
//! `**bold**`, `*italic*` and `` `code` `` are styled with their marks hidden, list bullets
//! become `•`, quotes get a bar, and fenced code blocks are coloured and shown verbatim. It
//! holds back at most the few characters that decide what a line is (`###`, ` ``` `, `- `) and
//! a single `*`. Tables and links are left as written; they read fine as text. Styles never
//! run past the end of a line. Without styling (not a terminal, or `NO_COLOR`), text passes
//! through unchanged.

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const ITALIC: &str = "\x1b[3m";
const UNDERLINE: &str = "\x1b[4m";
const CYAN: &str = "\x1b[36m";

/// What kind of line is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Plain,
    Heading(u8),
    Quote,
    /// A line inside a fenced code block.
    Code,
    /// The ```` ``` ```` line that opens or closes a block.
    Fence,
}

/// How the start of a line was read.
enum Prefix {
    /// More characters are needed to tell.
    Undecided,
    /// The line is `kind`; the first `consumed` bytes of the buffer are markup (replaced by
    /// `shown`), the rest is content.
    Decided {
        kind: LineKind,
        consumed: usize,
        shown: &'static str,
    },
}

/// A streaming Markdown renderer; feed it text with [`MarkdownStream::push`], end an answer
/// with [`MarkdownStream::finish`].
#[derive(Debug, Clone)]
pub struct MarkdownStream {
    styled: bool,
    at_line_start: bool,
    held: String,
    in_fence: bool,
    line: LineKind,
    bold: bool,
    italic: bool,
    code: bool,
    pending_star: bool,
    previous: char,
}

impl MarkdownStream {
    /// A renderer that styles (`styled`) or passes text through.
    pub fn new(styled: bool) -> Self {
        Self {
            styled,
            at_line_start: true,
            held: String::new(),
            in_fence: false,
            line: LineKind::Plain,
            bold: false,
            italic: false,
            code: false,
            pending_star: false,
            previous: ' ',
        }
    }

    /// Renders `text`, appending what can be shown now to `out`.
    pub fn push(&mut self, text: &str, out: &mut String) {
        if !self.styled {
            out.push_str(text);
            return;
        }
        for ch in text.chars() {
            self.feed(ch, out);
        }
    }

    /// Shows whatever was held back, closes every style, and gets ready for the next answer.
    pub fn finish(&mut self, out: &mut String) {
        if !self.styled {
            return;
        }
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            self.start_line(LineKind::Plain, 0, "", &held, out);
        }
        self.flush_star(out);
        let styled = self.line != LineKind::Plain || self.bold || self.italic || self.code;
        if styled {
            out.push_str(RESET);
        }
        *self = Self::new(true);
    }

    fn feed(&mut self, ch: char, out: &mut String) {
        if self.at_line_start {
            self.held.push(ch);
            match self.read_prefix() {
                Prefix::Undecided => {}
                Prefix::Decided {
                    kind,
                    consumed,
                    shown,
                } => {
                    let held = std::mem::take(&mut self.held);
                    self.start_line(kind, consumed, shown, &held, out);
                }
            }
            return;
        }
        match self.line {
            LineKind::Code | LineKind::Fence => {
                if ch == '\n' {
                    self.end_line(out);
                } else {
                    out.push(ch);
                }
            }
            _ => self.inline(ch, out),
        }
    }

    /// Starts a line of `kind`: shows the replacement for its markup, then its content so far.
    fn start_line(
        &mut self,
        kind: LineKind,
        consumed: usize,
        shown: &str,
        held: &str,
        out: &mut String,
    ) {
        self.at_line_start = false;
        self.line = kind;
        let indent_len = held.len() - held.trim_start_matches(' ').len();
        let (markup, content) = held.split_at(consumed.min(held.len()));
        if kind == LineKind::Fence {
            self.in_fence = !self.in_fence;
        }
        if consumed > 0 || kind != LineKind::Plain {
            out.push_str(&held[..indent_len.min(markup.len())]);
            if kind != LineKind::Plain {
                self.restyle(out);
            }
            out.push_str(shown);
            if kind == LineKind::Fence {
                // The fence itself stays visible (dimmed), with its language.
                out.push_str(markup.trim_start_matches(' '));
            }
        }
        for ch in content.chars() {
            self.feed(ch, out);
        }
    }

    fn read_prefix(&self) -> Prefix {
        let held = self.held.as_str();
        let body = held.trim_start_matches(' ');
        let indent = held.len() - body.len();
        let decided = |kind, markup: usize, shown| Prefix::Decided {
            kind,
            consumed: indent + markup,
            shown,
        };
        let plain = decided(LineKind::Plain, 0, "");
        let Some(first) = body.chars().next() else {
            return Prefix::Undecided;
        };
        if self.in_fence {
            return if "```".starts_with(body) && body.len() < 3 {
                Prefix::Undecided
            } else if body.starts_with("```") {
                decided(LineKind::Fence, body.find('\n').unwrap_or(body.len()), "")
            } else {
                // Code is shown exactly as written, indentation included.
                Prefix::Decided {
                    kind: LineKind::Code,
                    consumed: 0,
                    shown: "",
                }
            };
        }
        if first == '\n' {
            return plain;
        }
        match first {
            '#' => {
                let hashes = body.chars().take_while(|c| *c == '#').count();
                match body[hashes..].chars().next() {
                    None if hashes <= 6 => Prefix::Undecided,
                    Some(' ') if hashes <= 6 => {
                        decided(LineKind::Heading(hashes as u8), hashes + 1, "")
                    }
                    _ => plain,
                }
            }
            '`' => {
                if body.len() < 3 && body.chars().all(|c| c == '`') {
                    Prefix::Undecided
                } else if body.starts_with("```") {
                    // Wait for the whole fence line (its language) before deciding.
                    match body.find('\n') {
                        None => Prefix::Undecided,
                        Some(end) => decided(LineKind::Fence, end, ""),
                    }
                } else {
                    plain
                }
            }
            '-' | '*' | '+' => match body.chars().nth(1) {
                None => Prefix::Undecided,
                Some(' ') => decided(LineKind::Plain, 2, "• "),
                _ => plain,
            },
            '>' => match body.chars().nth(1) {
                None => Prefix::Undecided,
                Some(' ') => decided(LineKind::Quote, 2, "│ "),
                _ => decided(LineKind::Quote, 1, "│ "),
            },
            _ => plain,
        }
    }

    fn inline(&mut self, ch: char, out: &mut String) {
        if ch == '\n' {
            self.flush_star(out);
            self.end_line(out);
            return;
        }
        if self.code {
            if ch == '`' {
                self.code = false;
                self.restyle(out);
            } else {
                out.push(ch);
            }
            self.previous = ch;
            return;
        }
        if ch == '*' {
            if self.pending_star {
                self.pending_star = false;
                self.bold = !self.bold;
                self.restyle(out);
            } else {
                self.pending_star = true;
            }
            return;
        }
        if self.pending_star {
            self.pending_star = false;
            let closes = self.italic && !self.previous.is_whitespace();
            let opens = !self.italic && !ch.is_whitespace();
            if closes || opens {
                self.italic = !self.italic;
                self.restyle(out);
            } else {
                out.push('*');
            }
        }
        if ch == '`' {
            self.code = true;
            self.restyle(out);
        } else {
            out.push(ch);
        }
        self.previous = ch;
    }

    fn flush_star(&mut self, out: &mut String) {
        if self.pending_star {
            self.pending_star = false;
            out.push('*');
        }
    }

    fn end_line(&mut self, out: &mut String) {
        let styled = self.line != LineKind::Plain || self.bold || self.italic || self.code;
        if styled {
            out.push_str(RESET);
        }
        out.push('\n');
        self.line = LineKind::Plain;
        self.bold = false;
        self.italic = false;
        self.code = false;
        self.previous = ' ';
        self.at_line_start = true;
    }

    /// Writes the escape codes for the current line and inline styles.
    fn restyle(&self, out: &mut String) {
        out.push_str(RESET);
        match self.line {
            LineKind::Plain => {}
            LineKind::Heading(1) => {
                out.push_str(BOLD);
                out.push_str(UNDERLINE);
            }
            LineKind::Heading(_) => out.push_str(BOLD),
            LineKind::Quote => out.push_str(DIM),
            LineKind::Code => out.push_str(CYAN),
            LineKind::Fence => out.push_str(DIM),
        }
        if self.bold {
            out.push_str(BOLD);
        }
        if self.italic {
            out.push_str(ITALIC);
        }
        if self.code {
            out.push_str(CYAN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn render(text: &str) -> String {
        let mut md = MarkdownStream::new(true);
        let mut out = String::new();
        md.push(text, &mut out);
        md.finish(&mut out);
        out
    }

    /// Escape codes made readable for snapshots.
    fn visible(text: &str) -> String {
        text.replace(RESET, "⟨/⟩")
            .replace(BOLD, "⟨b⟩")
            .replace(DIM, "⟨dim⟩")
            .replace(ITALIC, "⟨i⟩")
            .replace(UNDERLINE, "⟨u⟩")
            .replace(CYAN, "⟨code⟩")
    }

    fn strip_escapes(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find('\x1b') {
            out.push_str(&rest[..start]);
            let after = &rest[start..];
            rest = after.find('m').map_or("", |end| &after[end + 1..]);
        }
        out.push_str(rest);
        out
    }

    const SAMPLE: &str = "# Plan\n\nI read **two** files and found *one* problem in `main.rs`:\n\n- the loop never ends\n- 2 * 3 is not 5\n  * nested item\n\n> Quoted advice.\n\n## Fix\n\n```rust\nfn main() {\n    // **not bold** in code\n}\n```\n\n1. Build\n2. Run | a | table |\n#hashtag stays, ###### six is a heading? no: ####### seven is not\n";

    #[test]
    fn markdown_renders_for_the_terminal() {
        insta::assert_snapshot!(visible(&render(SAMPLE)));
    }

    #[test]
    fn plain_mode_passes_text_through() {
        let mut md = MarkdownStream::new(false);
        let mut out = String::new();
        md.push(SAMPLE, &mut out);
        md.finish(&mut out);
        assert_eq!(out, SAMPLE);
    }

    #[test]
    fn held_text_is_shown_at_the_end_and_styles_are_closed() {
        assert_eq!(visible(&render("##")), "##");
        assert_eq!(visible(&render("a *")), "a *");
        assert_eq!(visible(&render("**open")), "⟨/⟩⟨b⟩open⟨/⟩");
        assert_eq!(visible(&render("-")), "-");
    }

    #[test]
    fn text_shows_as_soon_as_the_line_kind_is_known() {
        let mut md = MarkdownStream::new(true);
        let mut out = String::new();
        md.push("Hel", &mut out);
        assert_eq!(out, "Hel", "plain text is not held back");
        md.push("lo ", &mut out);
        assert_eq!(out, "Hello ");
        md.push("wor", &mut out);
        assert_eq!(out, "Hello wor");
    }

    proptest! {
        #[test]
        fn chunking_never_changes_the_output(
            text in "[a-z #*`>\\-\n]{0,80}",
            cuts in proptest::collection::vec(0usize..80, 0..6),
        ) {
            let whole = render(&text);
            let mut md = MarkdownStream::new(true);
            let mut out = String::new();
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|c| *c < text.len()).collect();
            cuts.sort_unstable();
            let mut start = 0;
            for cut in cuts {
                md.push(&text[start..cut], &mut out);
                start = cut;
            }
            md.push(&text[start..], &mut out);
            md.finish(&mut out);
            prop_assert_eq!(out, whole);
        }

        #[test]
        fn letters_all_survive(text in "[a-z #*`>\\-\n]{0,80}") {
            let letters = |s: &str| s.chars().filter(char::is_ascii_lowercase).collect::<String>();
            prop_assert_eq!(letters(&strip_escapes(&render(&text))), letters(&text));
        }
    }
}
