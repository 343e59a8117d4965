//! BM25 over one user's memories.
//!
//! SQLite's built-in `bm25()` takes its document count and average length from the whole table,
//! so with many users a word common in one user's memories still looks rare. engram instead reads
//! term positions from the index (`fts5vocab`, per-user terms — see fts.rs) and scores them with
//! the user's own statistics (document count, average length, document frequency) through
//! `engram_text::bm25`, the scoring every engine shares.

use std::collections::HashMap;

pub(crate) use engram_text::bm25::{idf, term_score};

/// Per-document counts from a stream of document ids in which each document's occurrences
/// are consecutive (as an index lists them), sorted by document.
pub(crate) fn count_runs<E>(
    documents: impl IntoIterator<Item = Result<i64, E>>,
) -> Result<Vec<(i64, u32)>, E> {
    let mut counts: Vec<(i64, u32)> = Vec::new();
    for doc in documents {
        let doc = doc?;
        match counts.last_mut() {
            Some((last, n)) if *last == doc => *n += 1,
            _ => counts.push((doc, 1)),
        }
    }
    // An index lists documents in order; sorting (and merging repeats) keeps the result right
    // even if one ever did not.
    if !counts.is_sorted_by(|a, b| a.0 < b.0) {
        counts.sort_unstable_by_key(|&(doc, _)| doc);
        counts.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 += later.1;
            }
            same
        });
    }
    Ok(counts)
}

/// Positions of each term in each document: term -> document -> sorted offsets.
pub(crate) type Postings = HashMap<String, HashMap<i64, Vec<u32>>>;

/// How often the phrase `terms` (consecutive positions) occurs in each document.
pub(crate) fn phrase_frequencies(postings: &Postings, terms: &[String]) -> HashMap<i64, u32> {
    let Some((first, rest)) = terms.split_first() else {
        return HashMap::new();
    };
    let Some(starts) = postings.get(first) else {
        return HashMap::new();
    };
    let mut out = HashMap::new();
    for (&doc, offsets) in starts {
        let count = offsets
            .iter()
            .filter(|&&start| {
                rest.iter().enumerate().all(|(i, term)| {
                    postings
                        .get(term)
                        .and_then(|docs| docs.get(&doc))
                        .is_some_and(|o| o.binary_search(&(start + i as u32 + 1)).is_ok())
                })
            })
            .count() as u32;
        if count > 0 {
            out.insert(doc, count);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn postings(entries: &[(&str, i64, &[u32])]) -> Postings {
        let mut p = Postings::new();
        for (term, doc, offsets) in entries {
            p.entry(term.to_string())
                .or_default()
                .insert(*doc, offsets.to_vec());
        }
        p
    }

    #[test]
    fn phrases_need_consecutive_positions() {
        let p = postings(&[
            ("a", 1, &[0, 5]),
            ("b", 1, &[1, 9]),
            ("a", 2, &[3]),
            ("b", 2, &[7]),
        ]);
        let terms = ["a".to_string(), "b".to_string()];
        let f = phrase_frequencies(&p, &terms);
        assert_eq!(f.get(&1), Some(&1));
        assert_eq!(f.get(&2), None);
    }

    proptest! {
        #[test]
        fn counted_runs_are_the_occurrences_per_document(
            mut docs in proptest::collection::vec(0i64..20, 0..60),
            sorted in any::<bool>(),
        ) {
            if sorted {
                docs.sort_unstable();
            }
            let counts = count_runs(docs.iter().map(|&d| Ok::<_, ()>(d))).unwrap();
            let mut expected: Vec<(i64, u32)> = Vec::new();
            for doc in 0..20 {
                let n = docs.iter().filter(|&&d| d == doc).count() as u32;
                if n > 0 {
                    expected.push((doc, n));
                }
            }
            prop_assert_eq!(counts, expected);
        }
    }
}
