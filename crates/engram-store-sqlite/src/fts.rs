//! Turning text into index terms, and queries into FTS5 match expressions.
//!
//! engram analyses text itself instead of leaving it to an FTS5 tokenizer, for two reasons:
//!
//! - **Scope.** Every term is prefixed with a short hash of its user (`k3x9f_coffee`), so each
//!   user has posting lists of their own. A search walks only that user's postings, and BM25's
//!   document frequencies are the user's own: latency follows the size of one user's memory, not
//!   the size of the store.
//! - **Words.** Case is folded, Latin diacritics are dropped (`café` = `cafe`), English words are
//!   stemmed (Snowball English: `running` = `runs` = `run`), and scripts written without spaces
//!   (Chinese, Japanese, Korean, Thai) are indexed character by character; a query's run of such
//!   characters becomes a phrase, which is substring search.
//!
//! The FTS5 table uses the `ascii` tokenizer with `_` as a token character, so the terms written
//! here reach the index unchanged.

use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// A piece of analysed text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word of a spaced script, normalised and stemmed.
    Word {
        /// The lowercased word as written (for the stopword check).
        surface: String,
        /// What is indexed.
        term: String,
    },
    /// A run of unspaced-script characters.
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

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || is_combining_mark(c)
}

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Lowercases, drops Latin/Greek/Cyrillic diacritics, and stems plain ASCII words.
fn normalise_word(raw: &str) -> (String, String) {
    let surface = raw.to_lowercase();
    let folded: String = if surface.is_ascii() {
        surface.clone()
    } else {
        surface
            .nfd()
            .filter(|c| !matches!(*c as u32, 0x0300..=0x036F))
            .nfc()
            .collect()
    };
    let term = if folded.bytes().all(|b| b.is_ascii_lowercase()) {
        stemmer().stem(&folded).into_owned()
    } else {
        folded
    };
    (surface, term)
}

fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut run: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, out: &mut Vec<Token>| {
        if !word.is_empty() {
            let (surface, term) = normalise_word(word);
            word.clear();
            if !term.is_empty() {
                out.push(Token::Word { surface, term });
            }
        }
    };
    let flush_run = |run: &mut Vec<char>, out: &mut Vec<Token>| {
        if !run.is_empty() {
            out.push(Token::Run(std::mem::take(run)));
        }
    };
    for c in text.chars() {
        if is_unspaced_script(c) {
            flush_word(&mut word, &mut out);
            run.push(c);
        } else if is_word_char(c) {
            flush_run(&mut run, &mut out);
            word.push(c);
        } else {
            flush_word(&mut word, &mut out);
            flush_run(&mut run, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_run(&mut run, &mut out);
    out
}

/// The prefix that gives a user posting lists of their own: 64 bits of BLAKE3, base 36.
/// Two users sharing a prefix would only share statistics; rows are still filtered by user.
pub fn user_prefix(user_id: &str) -> String {
    let hash = blake3::hash(user_id.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.as_bytes()[..8]);
    let mut n = u64::from_le_bytes(bytes);
    let mut digits = Vec::with_capacity(13);
    loop {
        let d = (n % 36) as u8;
        digits.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8_lossy(&digits).into_owned()
}

/// The text as the index receives it: one prefixed term per word or unspaced character.
///
/// This runs for every memory stored, so it writes straight into one string instead of
/// building a token list.
pub fn index_text(user_id: &str, text: &str) -> String {
    let prefix = user_prefix(user_id);
    let mut out = String::with_capacity(text.len() * 2 + 16);
    let mut word = String::new();
    let push = |out: &mut String, term: &str| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&prefix);
        out.push('_');
        out.push_str(term);
    };
    let flush = |out: &mut String, word: &mut String| {
        if word.is_empty() {
            return;
        }
        if word.bytes().all(|b| b.is_ascii_alphabetic()) {
            word.make_ascii_lowercase();
            let stem = stemmer().stem(word);
            push(out, &stem);
        } else {
            let (_, term) = normalise_word(word);
            if !term.is_empty() {
                push(out, &term);
            }
        }
        word.clear();
    };
    let mut buf = [0u8; 4];
    for c in text.chars() {
        if is_unspaced_script(c) {
            flush(&mut out, &mut word);
            push(&mut out, c.encode_utf8(&mut buf));
        } else if is_word_char(c) {
            word.push(c);
        } else {
            flush(&mut out, &mut word);
        }
    }
    flush(&mut out, &mut word);
    out
}

/// Common English words (and contraction tails) that carry no meaning for retrieval. Dropped from
/// queries, not from the index, unless a query has nothing else.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "can", "could", "d", "did", "do", "does", "doing",
    "done", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "ll", "m", "me", "might",
    "my", "no", "nor", "not", "of", "on", "or", "our", "ours", "re", "s", "she", "should", "so",
    "some", "such", "t", "than", "that", "the", "their", "theirs", "them", "then", "there",
    "these", "they", "this", "those", "to", "too", "us", "ve", "was", "we", "were", "what", "when",
    "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
];

fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Bumped whenever the analysis above changes what is indexed; a database indexed by another
/// version is re-indexed when it is opened.
pub const ANALYZER_VERSION: &str = "2";

/// The meaningful terms of a query, each alternative a list of consecutive index terms: one
/// term for a word, several for a run of unspaced-script characters (a phrase). Stopwords are
/// dropped unless the query has nothing else; duplicates are dropped.
pub fn query_terms(user_id: &str, query: &str) -> Vec<Vec<String>> {
    let all = tokens(query);
    let meaningful: Vec<&Token> = all
        .iter()
        .filter(|t| !matches!(t, Token::Word { surface, .. } if is_stopword(surface)))
        .collect();
    let chosen: Vec<&Token> = if meaningful.is_empty() {
        all.iter().collect()
    } else {
        meaningful
    };
    let prefix = user_prefix(user_id);
    let mut alternatives: Vec<Vec<String>> = Vec::new();
    for token in chosen {
        let terms = match token {
            Token::Word { term, .. } => vec![format!("{prefix}_{term}")],
            Token::Run(chars) => chars.iter().map(|c| format!("{prefix}_{c}")).collect(),
        };
        if !alternatives.contains(&terms) {
            alternatives.push(terms);
        }
    }
    alternatives
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn terms(text: &str) -> Vec<String> {
        let prefix = format!("{}_", user_prefix("u"));
        index_text("u", text)
            .split(' ')
            .map(|t| t.trim_start_matches(prefix.as_str()).to_string())
            .collect()
    }

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn words_are_folded_and_stemmed() {
        assert_eq!(
            terms("She was RUNNING marathons, Café!"),
            ["she", "was", "run", "marathon", "cafe"]
        );
        assert_eq!(terms("Я люблю книги"), ["я", "люблю", "книги"]);
        assert_eq!(terms("我住北京"), ["我", "住", "北", "京"]);
    }

    #[test]
    fn queries_keep_their_meaningful_stems() {
        let p = user_prefix("u");
        let terms = query_terms("u", "What did Caroline paint? Paints!");
        assert_eq!(
            terms,
            [vec![format!("{p}_carolin")], vec![format!("{p}_paint")]]
        );
    }

    #[test]
    fn all_stopword_queries_keep_their_words() {
        assert_eq!(query_terms("u", "who are you").len(), 3);
    }

    #[test]
    fn punctuation_is_never_a_term() {
        let terms = query_terms("u", "NOT a AND b* \"x\" (y) col:z");
        assert!(
            terms
                .iter()
                .flatten()
                .all(|t| !t.contains(['*', '(', ':', '"']))
        );
        assert!(query_terms("u", "?!* ()").is_empty());
        assert!(query_terms("u", "").is_empty());
    }

    #[test]
    fn unspaced_runs_become_phrases() {
        let p = user_prefix("u");
        let terms = query_terms("u", "北京 tea");
        assert_eq!(terms[0], [format!("{p}_北"), format!("{p}_京")]);
    }

    #[test]
    fn prefixes_differ_per_user_and_are_plain_ascii() {
        assert_ne!(user_prefix("alice"), user_prefix("bob"));
        assert!(
            user_prefix("alice@example.com")
                .bytes()
                .all(|b| b.is_ascii_alphanumeric())
        );
    }

    /// The fast indexing path and the query path must analyse text identically.
    fn slow_index_text(text: &str) -> String {
        let prefix = user_prefix("u");
        let mut terms = Vec::new();
        for token in tokens(text) {
            match token {
                Token::Word { term, .. } => terms.push(format!("{prefix}_{term}")),
                Token::Run(chars) => terms.extend(chars.iter().map(|c| format!("{prefix}_{c}"))),
            }
        }
        terms.join(" ")
    }

    proptest! {
        #[test]
        fn indexing_and_querying_analyse_alike(text in "\\PC{0,80}") {
            prop_assert_eq!(index_text("u", &text), slow_index_text(&text));
        }

        #[test]
        fn indexed_terms_are_plain_tokens(query in "\\PC{0,80}") {
            let indexed = index_text("u", &query);
            prop_assert!(!indexed.contains(['"', '\n', '\t']));
            for term in query_terms("u", &query).iter().flatten() {
                prop_assert!(!term.contains(' '));
            }
        }
    }
}
