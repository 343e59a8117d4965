//! BM25 over one user's memories: the scoring every storage engine uses, so that the same
//! memories score the same in each (see docs/architecture.md, "Lexical ranking").
//!
//! An engine supplies, for one user: the number of documents N and their average length in
//! terms, each query alternative's document frequency n, and each candidate's term frequency and
//! length. A "document" is a memory's analysed text followed by that of the turn before it in
//! its conversation (see the engines' indexing); closed memories stay indexed and count.

/// Term-frequency saturation.
pub const K1: f64 = 1.2;
/// Length normalisation.
pub const B: f64 = 0.75;

/// Inverse document frequency, always positive (the Lucene form, so a word in most of a user's
/// memories still counts a little instead of going negative).
pub fn idf(documents: f64, frequency: f64) -> f64 {
    (1.0 + (documents - frequency + 0.5) / (frequency + 0.5)).ln()
}

/// One term's contribution to a document's score.
pub fn term_score(idf: f64, tf: f64, length: f64, average_length: f64) -> f64 {
    let norm = if average_length > 0.0 {
        1.0 - B + B * length / average_length
    } else {
        1.0
    };
    idf * tf * (K1 + 1.0) / (tf + K1 * norm)
}

/// How often `phrase` (consecutive terms) occurs in a document's terms, overlapping
/// occurrences included (the phrase `a a` occurs twice in `a a a`).
pub fn phrase_occurrences<T: AsRef<str>>(document: &[T], phrase: &[String]) -> u32 {
    if phrase.is_empty() || phrase.len() > document.len() {
        return 0;
    }
    document
        .windows(phrase.len())
        .filter(|window| window.iter().zip(phrase).all(|(a, b)| a.as_ref() == b))
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rarer_words_and_shorter_documents_score_higher() {
        assert!(idf(100.0, 2.0) > idf(100.0, 50.0));
        assert!(idf(100.0, 100.0) > 0.0);
        let i = idf(100.0, 5.0);
        assert!(term_score(i, 1.0, 5.0, 10.0) > term_score(i, 1.0, 20.0, 10.0));
        assert!(term_score(i, 3.0, 10.0, 10.0) > term_score(i, 1.0, 10.0, 10.0));
    }

    #[test]
    fn phrases_need_consecutive_terms() {
        let doc = ["北", "京", "x", "北", "x", "京"];
        let phrase = ["北".to_string(), "京".to_string()];
        assert_eq!(phrase_occurrences(&doc, &phrase), 1);
        let repeated = ["a", "a", "a"];
        let pair = ["a".to_string(), "a".to_string()];
        assert_eq!(phrase_occurrences(&repeated, &pair), 2);
        assert_eq!(phrase_occurrences(&repeated[..1], &pair), 0);
        assert_eq!(phrase_occurrences(&repeated, &[]), 0);
    }

    proptest! {
        #[test]
        fn scores_are_positive_and_saturate(tf in 1.0f64..1000.0, len in 1.0f64..500.0, avg in 1.0f64..100.0, n in 1.0f64..10_000.0) {
            let df = (n / 3.0).max(1.0);
            let s = term_score(idf(n, df), tf, len, avg);
            prop_assert!(s > 0.0);
            prop_assert!(s <= idf(n, df) * (K1 + 1.0) + 1e-9);
        }

        #[test]
        fn a_one_term_phrase_counts_the_term(doc in proptest::collection::vec("[ab]", 0..20)) {
            let n = doc.iter().filter(|t| *t == "a").count() as u32;
            prop_assert_eq!(phrase_occurrences(&doc, &["a".to_string()]), n);
        }
    }
}
