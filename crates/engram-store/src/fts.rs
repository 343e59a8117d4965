//! Turning text into what the FTS5 index sees, and queries into FTS5 match expressions.
//!
//! The index uses SQLite's `porter unicode61` tokenizer: case folding, diacritics removed,
//! punctuation as separators and English (Porter) stemming. Scripts written without spaces
//! (Chinese, Japanese, Korean, Thai) would otherwise become one giant token per run, so before
//! indexing we put a space between their characters, and a query's run of such characters becomes
//! a phrase: consecutive characters must appear consecutively, which is substring search.

/// A word-ish piece of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    /// A word of a spaced script, matched after stemming.
    Word(String),
    /// A run of unspaced-script characters, matched as a phrase.
    Run(Vec<char>),
}

/// True for characters of scripts written without spaces between words.
fn is_unspaced_script(c: char) -> bool {
    matches!(c as u32,
        0x0E00..=0x0EFF       // Thai, Lao
        | 0x1100..=0x11FF     // Hangul Jamo
        | 0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3100..=0x312F     // Bopomofo
        | 0x3130..=0x318F     // Hangul compatibility Jamo
        | 0x3400..=0x4DBF     // CJK extension A
        | 0x4E00..=0x9FFF     // CJK unified ideographs
        | 0xAC00..=0xD7AF     // Hangul syllables
        | 0xF900..=0xFAFF     // CJK compatibility ideographs
        | 0x20000..=0x2FFFF   // CJK extensions B..
    )
}

/// The text as it is handed to the index: unspaced-script characters separated by spaces.
pub fn index_text(text: &str) -> String {
    if !text.chars().any(is_unspaced_script) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if is_unspaced_script(c) {
            out.push(' ');
            out.push(c);
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The token that ties an index row to its user, so a search only walks that user's postings.
pub fn scope_token(user_id: &str) -> String {
    let hash = blake3::hash(user_id.as_bytes());
    // Digits only: no stemmer or case folding can change it.
    let bytes = hash.as_bytes();
    let mut n = [0u8; 8];
    n.copy_from_slice(&bytes[..8]);
    format!("u{}", u64::from_le_bytes(n))
}

fn split_terms(query: &str) -> Vec<Term> {
    let mut terms = Vec::new();
    let mut word = String::new();
    let mut run: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, terms: &mut Vec<Term>| {
        if !word.is_empty() {
            terms.push(Term::Word(std::mem::take(word)));
        }
    };
    let flush_run = |run: &mut Vec<char>, terms: &mut Vec<Term>| {
        if !run.is_empty() {
            terms.push(Term::Run(std::mem::take(run)));
        }
    };
    for c in query.chars() {
        if is_unspaced_script(c) {
            flush_word(&mut word, &mut terms);
            run.push(c);
        } else if c.is_alphanumeric() || is_combining_mark(c) {
            flush_run(&mut run, &mut terms);
            word.extend(c.to_lowercase());
        } else {
            flush_word(&mut word, &mut terms);
            flush_run(&mut run, &mut terms);
        }
    }
    flush_word(&mut word, &mut terms);
    flush_run(&mut run, &mut terms);
    terms
}

fn is_combining_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x0900..=0x0DFF)
}

/// Common English words that carry no meaning for retrieval. Dropped from queries (not from the
/// index) unless the query has nothing else.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "done",
    "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "might", "my", "no", "nor",
    "not", "of", "on", "or", "our", "ours", "she", "should", "so", "some", "such", "than", "that",
    "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to",
    "too", "us", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why",
    "will", "with", "would", "you", "your", "yours",
];

fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// An FTS5 expression matching any meaningful term of `query` (OR), restricted to `scope_token`'s
/// rows. `None` when the query has no searchable term at all.
pub fn match_expression(query: &str, scope_token: &str) -> Option<String> {
    let terms = split_terms(query);
    let meaningful: Vec<&Term> = terms
        .iter()
        .filter(|t| !matches!(t, Term::Word(w) if is_stopword(w)))
        .collect();
    let chosen: Vec<&Term> = if meaningful.is_empty() {
        terms.iter().collect()
    } else {
        meaningful
    };
    let mut seen = std::collections::HashSet::new();
    let alternatives: Vec<String> = chosen
        .into_iter()
        .filter_map(|term| {
            let phrase = match term {
                Term::Word(w) => w.clone(),
                Term::Run(chars) => chars
                    .iter()
                    .map(char::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            seen.insert(phrase.clone()).then(|| quote(&phrase))
        })
        .collect();
    if alternatives.is_empty() {
        return None;
    }
    Some(format!(
        "scope : {} AND body : ({})",
        quote(scope_token),
        alternatives.join(" OR ")
    ))
}

/// An FTS5 string literal: double quotes, with inner quotes doubled. Everything inside is taken
/// as text, never as query syntax.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn queries_or_their_meaningful_words() {
        let expr = match_expression("What did Caroline paint?", "u1").unwrap();
        assert_eq!(expr, r#"scope : "u1" AND body : ("caroline" OR "paint")"#);
    }

    #[test]
    fn all_stopword_queries_keep_their_words() {
        let expr = match_expression("who are you", "u1").unwrap();
        assert!(expr.contains("\"who\" OR \"are\" OR \"you\""));
    }

    #[test]
    fn punctuation_and_syntax_are_never_operators() {
        let expr = match_expression("NOT a AND b* \"x\" (y) col:z", "u1").unwrap();
        assert!(expr.contains("\"b\""));
        assert!(!expr.contains('*'));
        assert!(match_expression("?!* ()", "u1").is_none());
        assert!(match_expression("", "u1").is_none());
    }

    #[test]
    fn unspaced_scripts_become_phrases() {
        assert_eq!(index_text("我住在北京"), " 我  住  在  北  京 ");
        let expr = match_expression("北京 tea", "u1").unwrap();
        assert!(expr.contains("\"北 京\""), "{expr}");
        assert!(expr.contains("\"tea\""));
    }

    #[test]
    fn scope_tokens_differ_per_user() {
        assert_ne!(scope_token("alice"), scope_token("bob"));
        assert!(
            scope_token("alice@example.com")
                .chars()
                .skip(1)
                .all(|c| c.is_ascii_digit())
        );
    }

    proptest! {
        #[test]
        fn expressions_are_balanced(query in "\\PC{0,80}") {
            if let Some(expr) = match_expression(&query, "u1") {
                prop_assert_eq!(expr.matches('"').count() % 2, 0);
            }
            let _ = index_text(&query);
        }
    }
}
