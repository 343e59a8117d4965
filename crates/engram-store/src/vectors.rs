//! Dense vectors in the database: encoding, storage and exact similarity search.
//!
//! Vectors are stored as little-endian `f32` blobs, one per (model, content hash). Search reads
//! the vectors of the memories that pass the filter and keeps the best `k` in a small heap, so
//! the filter is always applied before top-k.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use engram_core::{StoreError, StoredVector};

/// Encodes a vector as the blob stored in `embeddings.vector`.
pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(vector.len() * 4);
    for x in vector {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes
}

/// Decodes a stored blob; `None` when its length is not a whole number of floats.
#[cfg_attr(not(test), allow(dead_code))] // the in-memory index loads vectors with it
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Dot product of a query with a stored blob, without decoding it into a vector first.
/// `None` when the blob does not hold exactly `query.len()` floats.
pub(crate) fn dot_blob(query: &[f32], bytes: &[u8]) -> Option<f32> {
    if bytes.len() != query.len() * 4 {
        return None;
    }
    // Eight independent accumulators let the compiler vectorise the loop.
    let mut lanes = [0.0f32; 8];
    let mut q = query.chunks_exact(8);
    let mut b = bytes.chunks_exact(32);
    for (qc, bc) in (&mut q).zip(&mut b) {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let o = i * 4;
            let v = f32::from_le_bytes([bc[o], bc[o + 1], bc[o + 2], bc[o + 3]]);
            *lane += qc[i] * v;
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, c) in q.remainder().iter().zip(b.remainder().chunks_exact(4)) {
        sum += x * f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    Some(sum)
}

/// Checks vectors before they are stored: the right length, finite numbers.
pub(crate) fn validate(
    model: &str,
    dimension: usize,
    vectors: &[StoredVector],
) -> Result<(), StoreError> {
    if model.trim().is_empty() {
        return Err(StoreError::BadQuery(
            "an embedding model id is empty".to_string(),
        ));
    }
    if dimension == 0 {
        return Err(StoreError::BadQuery(format!(
            "model {model} has dimension 0"
        )));
    }
    for v in vectors {
        if v.vector.len() != dimension {
            return Err(StoreError::BadQuery(format!(
                "a vector from {model} has {} dimensions, expected {dimension}",
                v.vector.len()
            )));
        }
        if v.vector.iter().any(|x| !x.is_finite()) {
            return Err(StoreError::BadQuery(format!(
                "a vector from {model} contains NaN or infinity"
            )));
        }
    }
    Ok(())
}

/// A candidate in the top-k heap: ordered so the heap's top is the worst kept candidate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scored {
    pub similarity: f32,
    pub rowid: i64,
    pub truncated: bool,
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reverse: a higher similarity is "less", so the max-heap's top is the weakest. Among
        // equals the newer row (higher rowid) is stronger.
        other
            .similarity
            .total_cmp(&self.similarity)
            .then(other.rowid.cmp(&self.rowid))
    }
}

/// Keeps the `k` most similar candidates.
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Scored>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    pub(crate) fn offer(&mut self, candidate: Scored) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(candidate);
        } else if let Some(worst) = self.heap.peek()
            && candidate < *worst
        {
            self.heap.pop();
            self.heap.push(candidate);
        }
    }

    /// Best first.
    pub(crate) fn into_sorted(self) -> Vec<Scored> {
        let mut all = self.heap.into_vec();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blobs_round_trip_and_dot_matches() {
        let v = vec![0.5f32, -1.25, 3.0, 0.0, 1e-3, 7.5, -2.0, 0.25, 9.0, -0.5];
        let blob = encode(&v);
        assert_eq!(decode(&blob).unwrap(), v);
        let q: Vec<f32> = (0..10).map(|i| i as f32 * 0.1).collect();
        let expected: f32 = q.iter().zip(&v).map(|(a, b)| a * b).sum();
        assert!((dot_blob(&q, &blob).unwrap() - expected).abs() < 1e-5);
        assert!(dot_blob(&q[..9], &blob).is_none());
        assert!(decode(&blob[..7]).is_none());
    }

    proptest! {
        #[test]
        fn top_k_keeps_the_best(scores in proptest::collection::vec(-1.0f32..1.0, 0..200), k in 0usize..20) {
            let mut top = TopK::new(k);
            for (i, s) in scores.iter().enumerate() {
                top.offer(Scored { similarity: *s, rowid: i as i64, truncated: false });
            }
            let kept: Vec<f32> = top.into_sorted().iter().map(|c| c.similarity).collect();
            let mut all = scores.clone();
            all.sort_by(|a, b| b.total_cmp(a));
            all.truncate(k);
            prop_assert_eq!(kept, all);
        }
    }
}
