//! The best k documents of an OR query without scoring every document that has a query word.
//!
//! A word in a quarter of a user's memories (their own name, "work", "today") has a posting list
//! of tens of thousands of documents; scoring all of them costs time in proportion to the list,
//! whatever k is. Here each query alternative's contributions are kept sorted from the largest
//! down (its *impacts*), and the lists are read from the top in step (Fagin's threshold
//! algorithm): each document met is scored in full by looking its contribution up in every
//! list, and reading stops as soon as the k-th best score beats what any document not yet met
//! could still reach, the sum of the contributions at the lists' current positions. The work
//! then depends on k and on how far the best documents stand out, not on the lists' lengths.
//!
//! The result is exactly the exhaustive one, scores included: a document's score is the same
//! sum, in the same order, of the same contributions, and the stopping rule is exact in floating
//! point because addition is monotone (each contribution of a document not yet met is at most
//! the one at its list's position, summed in the same order).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One query alternative's contribution to the score of each document that has it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Impacts {
    /// `(contribution, document)`, largest contribution first.
    by_impact: Vec<(f64, u32)>,
    /// Documents in increasing order, for lookups ...
    docs: Vec<u32>,
    /// ... and their contributions.
    contributions: Vec<f64>,
    /// For a list holding at least one document in [`DENSE_SHARE`] of its range: every
    /// document's contribution by position (0 without the alternative). The threshold
    /// algorithm looks a document up in every list; a common word's list answers at once
    /// instead of by a binary search over tens of thousands of documents.
    dense: Vec<f64>,
}

/// A list is kept dense when it holds at least one in this many of the documents up to its
/// last (at most this many times the sparse form's 12 bytes a document, over 8 a slot).
const DENSE_SHARE: usize = 8;

impl Impacts {
    /// From `(document, contribution)` pairs in any order, one per document.
    pub fn new(mut entries: Vec<(u32, f64)>) -> Self {
        entries.sort_unstable_by_key(|&(doc, _)| doc);
        let mut by_impact: Vec<(f64, u32)> = entries.iter().map(|&(d, c)| (c, d)).collect();
        by_impact.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let range = entries.last().map_or(0, |&(doc, _)| doc as usize + 1);
        let dense = if entries.len() * DENSE_SHARE >= range {
            let mut dense = vec![0.0; range];
            for &(doc, contribution) in &entries {
                dense[doc as usize] = contribution;
            }
            dense
        } else {
            Vec::new()
        };
        let (docs, contributions) = entries.into_iter().unzip();
        Self {
            by_impact,
            docs,
            contributions,
            dense,
        }
    }

    /// The contribution to `doc`'s score, 0 when the document does not have the alternative.
    pub fn get(&self, doc: u32) -> f64 {
        if !self.dense.is_empty() {
            return self.dense.get(doc as usize).copied().unwrap_or(0.0);
        }
        match self.docs.binary_search(&doc) {
            Ok(at) => self.contributions[at],
            Err(_) => 0.0,
        }
    }

    /// How many documents have the alternative.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.by_impact.len() * 16 + self.docs.len() * 12 + self.dense.len() * 8
    }

    fn impact_at(&self, position: usize) -> f64 {
        self.by_impact.get(position).map_or(0.0, |e| e.0)
    }
}

/// A scored document; `Ord` puts the better one first-greater: higher score, then the newer
/// (the larger tie key: creation time, then row).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ranked {
    score: f64,
    tie: (i64, i64),
    doc: u32,
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(self.tie.cmp(&other.tie))
            .then(other.doc.cmp(&self.doc))
    }
}

/// The score of `doc`: its contributions summed in the lists' order (as the exhaustive scoring
/// sums them).
fn score(lists: &[&Impacts], doc: u32) -> f64 {
    lists.iter().map(|l| l.get(doc)).filter(|c| *c > 0.0).sum()
}

/// The best `k` documents having any alternative, among those `admits` lets through, best
/// first: higher score, then larger `tie` (creation time, row). Returns `(document, score)`.
pub(crate) fn top_k(
    lists: &[&Impacts],
    k: usize,
    admits: impl Fn(u32) -> bool,
    tie: impl Fn(u32) -> (i64, i64),
) -> Vec<(u32, f64)> {
    if k == 0 {
        return Vec::new();
    }
    let mut positions = vec![0usize; lists.len()];
    // A bit per document met. Documents are positions among the user's facts, dense from 0,
    // and a common word's search meets thousands of them: hashing each into a set cost 15%
    // of the batch form's time.
    let universe = lists
        .iter()
        .filter_map(|l| l.docs.last())
        .max()
        .map_or(0, |&d| d as usize + 1);
    let mut seen = vec![0u64; universe.div_ceil(64)];
    // The k best so far, the worst on top.
    let mut best: BinaryHeap<std::cmp::Reverse<Ranked>> = BinaryHeap::with_capacity(k + 1);
    loop {
        // What a document not met yet could still score, summed in the lists' order.
        let threshold: f64 = lists
            .iter()
            .zip(&positions)
            .map(|(l, &p)| l.impact_at(p))
            .filter(|c| *c > 0.0)
            .sum();
        if best.len() == k && best.peek().is_some_and(|worst| worst.0.score > threshold) {
            break;
        }
        // Read on in the list whose next contribution is largest.
        let Some(list) = (0..lists.len())
            .filter(|&i| positions[i] < lists[i].by_impact.len())
            .max_by(|&a, &b| {
                lists[a]
                    .impact_at(positions[a])
                    .total_cmp(&lists[b].impact_at(positions[b]))
            })
        else {
            break; // every list read to its end
        };
        let (_, doc) = lists[list].by_impact[positions[list]];
        positions[list] += 1;
        let (word, bit) = (doc as usize / 64, 1u64 << (doc % 64));
        if seen[word] & bit != 0 {
            continue;
        }
        seen[word] |= bit;
        if !admits(doc) {
            continue;
        }
        let ranked = Ranked {
            score: score(lists, doc),
            tie: tie(doc),
            doc,
        };
        if best.len() < k {
            best.push(std::cmp::Reverse(ranked));
        } else if best.peek().is_some_and(|worst| ranked > worst.0) {
            best.pop();
            best.push(std::cmp::Reverse(ranked));
        }
    }
    let mut out: Vec<Ranked> = best.into_iter().map(|r| r.0).collect();
    out.sort_unstable_by(|a, b| b.cmp(a));
    out.into_iter().map(|r| (r.doc, r.score)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every document scored, sorted, cut: what the threshold algorithm must equal.
    fn exhaustive(
        lists: &[&Impacts],
        k: usize,
        admits: impl Fn(u32) -> bool,
        tie: impl Fn(u32) -> (i64, i64),
    ) -> Vec<(u32, f64)> {
        let mut docs: Vec<u32> = lists.iter().flat_map(|l| l.docs.clone()).collect();
        docs.sort_unstable();
        docs.dedup();
        let mut scored: Vec<Ranked> = docs
            .into_iter()
            .filter(|&d| admits(d))
            .map(|doc| Ranked {
                score: score(lists, doc),
                tie: tie(doc),
                doc,
            })
            .collect();
        scored.sort_unstable_by(|a, b| b.cmp(a));
        scored.truncate(k);
        scored.into_iter().map(|r| (r.doc, r.score)).collect()
    }

    #[test]
    fn reading_stops_early_when_the_best_stand_out() {
        // Two long lists; documents 0..10 have both words with high contributions.
        let long = |offset: f64| {
            Impacts::new(
                (0..10_000u32)
                    .map(|d| (d, if d < 10 { 5.0 + offset } else { 1.0 }))
                    .collect(),
            )
        };
        let (a, b) = (long(0.0), long(0.5));
        let found = top_k(&[&a, &b], 5, |_| true, |d| (0, i64::from(d)));
        assert_eq!(found.len(), 5);
        assert!(
            found
                .iter()
                .all(|(d, s)| *d < 10 && (*s - 10.5).abs() < 1e-12)
        );
        // Ties go to the larger tie key.
        assert_eq!(
            found.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
            [9, 8, 7, 6, 5]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Same documents, same order, same scores to the last bit as scoring everything.
        #[test]
        fn the_threshold_algorithm_finds_exactly_the_exhaustive_top_k(
            lists in proptest::collection::vec(
                proptest::collection::btree_map(0u32..300, 1u8..8, 0..120), 1..5),
            k in 1usize..40,
            filtered in any::<bool>(),
            coarse_ties in any::<bool>(),
        ) {
            // Few distinct contributions make many ties; the tie key decides them.
            let impacts: Vec<Impacts> = lists
                .iter()
                .map(|l| Impacts::new(l.iter().map(|(&d, &c)| (d, f64::from(c) * 0.37)).collect()))
                .collect();
            let refs: Vec<&Impacts> = impacts.iter().collect();
            let admits = |d: u32| !filtered || !d.is_multiple_of(3);
            let tie = |d: u32| if coarse_ties { (i64::from(d % 7), i64::from(d)) } else { (0, i64::from(d)) };
            let got = top_k(&refs, k, admits, tie);
            let want = exhaustive(&refs, k, admits, tie);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.0, w.0);
                prop_assert_eq!(g.1.to_bits(), w.1.to_bits());
            }
        }

        /// Dense (a common word's) or sparse, a list answers each document's contribution.
        #[test]
        fn a_list_answers_each_documents_contribution(
            entries in proptest::collection::btree_map(0u32..2000, 1u8..8, 0..400),
        ) {
            let list = Impacts::new(entries.iter().map(|(&d, &c)| (d, f64::from(c))).collect());
            for doc in 0..2100u32 {
                prop_assert_eq!(list.get(doc), entries.get(&doc).map_or(0.0, |&c| f64::from(c)));
            }
        }
    }
}
