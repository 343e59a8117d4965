//! How engram turns text into search terms: one analysis for every engine and for grounding.
//!
//! - Case is folded, Latin/Greek/Cyrillic diacritics are dropped (`café` = `cafe`), plain ASCII
//!   words are stemmed (Snowball English: `running` = `runs` = `run`).
//! - Scripts written without spaces between words (Chinese, Japanese, Korean, Thai) become one
//!   term per character; a query's run of such characters is a phrase (substring search).
//! - Queries drop common English words unless nothing else is left.
//!
//! Storage engines index what [`for_each_term`] yields and search with [`query_terms`]; the
//! extraction's grounding check compares the same terms. Whatever changes what is indexed must
//! bump [`ANALYZER_VERSION`], so stores re-index.

pub mod bm25;

use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// A piece of analysed text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
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

/// Lowercases, drops Latin/Greek/Cyrillic diacritics, and stems plain ASCII words: returns the
/// lowercased word as written and the term to index.
pub fn normalise_word(raw: &str) -> (String, String) {
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

/// The text as tokens, in order: words of spaced scripts (normalised and stemmed) and runs of
/// unspaced-script characters.
pub fn tokens(text: &str) -> Vec<Token> {
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

/// Calls `emit` with each index term of `text`, in order: one per word or unspaced-script
/// character. This runs for every memory stored, so it reuses one buffer instead of building
/// tokens.
pub fn for_each_term(text: &str, mut emit: impl FnMut(&str)) {
    let mut word = String::new();
    let flush = |word: &mut String, emit: &mut dyn FnMut(&str)| {
        if word.is_empty() {
            return;
        }
        if word.bytes().all(|b| b.is_ascii_alphabetic()) {
            word.make_ascii_lowercase();
            let stem = stemmer().stem(word);
            emit(&stem);
        } else {
            let (_, term) = normalise_word(word);
            if !term.is_empty() {
                emit(&term);
            }
        }
        word.clear();
    };
    let mut buf = [0u8; 4];
    for c in text.chars() {
        if is_unspaced_script(c) {
            flush(&mut word, &mut emit);
            emit(c.encode_utf8(&mut buf));
        } else if is_word_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut emit);
        }
    }
    flush(&mut word, &mut emit);
}

/// The index terms of `text`, in order.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_string()));
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

/// True for a common English word that carries no meaning for retrieval (lowercase input).
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Bumped whenever the analysis above changes what is indexed; a database indexed by another
/// version is re-indexed when it is opened.
pub const ANALYZER_VERSION: &str = "2";

/// The meaningful terms of a query, each alternative a list of consecutive index terms: one
/// term for a word, several for a run of unspaced-script characters (a phrase). Stopwords are
/// dropped unless the query has nothing else; duplicates are dropped.
pub fn query_terms(query: &str) -> Vec<Vec<String>> {
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
    let mut alternatives: Vec<Vec<String>> = Vec::new();
    for token in chosen {
        let terms = match token {
            Token::Word { term, .. } => vec![term.clone()],
            Token::Run(chars) => chars.iter().map(|c| c.to_string()).collect(),
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
        assert_eq!(
            query_terms("What did Caroline paint? Paints!"),
            [vec!["carolin".to_string()], vec!["paint".to_string()]]
        );
    }

    #[test]
    fn all_stopword_queries_keep_their_words() {
        assert_eq!(query_terms("who are you").len(), 3);
    }

    #[test]
    fn punctuation_is_never_a_term() {
        let terms = query_terms("NOT a AND b* \"x\" (y) col:z");
        assert!(
            terms
                .iter()
                .flatten()
                .all(|t| !t.contains(['*', '(', ':', '"']))
        );
        assert!(query_terms("?!* ()").is_empty());
        assert!(query_terms("").is_empty());
    }

    #[test]
    fn unspaced_runs_become_phrases() {
        assert_eq!(query_terms("北京 tea")[0], ["北", "京"]);
    }

    /// The fast indexing path and the token path must analyse text identically.
    fn slow_terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for token in tokens(text) {
            match token {
                Token::Word { term, .. } => out.push(term),
                Token::Run(chars) => out.extend(chars.iter().map(|c| c.to_string())),
            }
        }
        out
    }

    proptest! {
        #[test]
        fn indexing_and_querying_analyse_alike(text in "\\PC{0,80}") {
            prop_assert_eq!(terms(&text), slow_terms(&text));
        }

        #[test]
        fn terms_are_plain_tokens(text in "\\PC{0,80}") {
            for term in terms(&text) {
                prop_assert!(!term.is_empty());
                prop_assert!(!term.contains([' ', '"', '\n', '\t']));
            }
        }
    }
}
