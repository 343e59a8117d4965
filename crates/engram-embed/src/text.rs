//! Small text helpers shared by the embedders.

/// The start of `text`, at most `limit` bytes, ending at a character boundary (and at
/// whitespace when there is some in the last quarter, so no word is split).
pub(crate) fn cut_long_text(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind(char::is_whitespace) {
        Some(space) if space >= end - end / 4 => &head[..space],
        _ => head,
    }
}

/// At most `limit` characters of `text` on one line, for error messages.
pub(crate) fn excerpt(text: &str, limit: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = one_line.chars().take(limit).collect();
    if one_line.chars().count() > limit {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn long_texts_are_cut_at_whitespace_on_a_char_boundary() {
        assert_eq!(cut_long_text("short", 100), "short");
        assert_eq!(cut_long_text("aaaa bbbb cccc", 12), "aaaa bbbb");
        // No whitespace near the end: cut at the character boundary before the limit.
        assert_eq!(cut_long_text("ééééé", 5), "éé");
    }

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(excerpt("a\n  b\tc", 10), "a b c");
        assert_eq!(excerpt("abcdefghijkl", 5), "abcde...");
    }

    proptest! {
        #[test]
        fn a_cut_is_a_prefix_within_the_limit(text in "\\PC{0,200}", limit in 0usize..300) {
            let cut = cut_long_text(&text, limit);
            prop_assert!(text.starts_with(cut));
            prop_assert!(cut.len() <= limit);
            prop_assert_eq!(cut.len() == text.len(), text.len() <= limit);
        }
    }
}
