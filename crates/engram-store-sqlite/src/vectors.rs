//! Dense vectors in the database: encoding, storage and exact similarity search.
//!
//! Vectors are stored as little-endian `f32` blobs, one per (model, content hash). Exact search
//! reads the vectors of the memories that pass the filter and keeps the best `k` in a small heap,
//! so the filter is always applied before top-k. Large scopes go to the in-process index
//! instead (see `ann`), which uses [`dot_blob`] too for its final, exact scores.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use engram_core::{Filter, StoreError, StoredVector, VectorHit};
use jiff::Timestamp;
use rusqlite::Connection;
use rusqlite::types::Value;

use crate::rows::{MEMORY_COLUMNS, filter_sql, memory_from_row};

/// Encodes a vector as the blob stored in `embeddings.vector`.
pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(vector.len() * 4);
    for x in vector {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes
}

/// Decodes a stored blob; `None` when its length is not a whole number of floats.
#[cfg(test)]
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<f32>> {
    let mut out = Vec::new();
    decode_into(bytes, &mut out).then_some(out)
}

/// Decodes a stored blob into `out` (replacing its contents); false when its length is not a
/// whole number of floats.
pub(crate) fn decode_into(bytes: &[u8], out: &mut Vec<f32>) -> bool {
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    out.clear();
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    true
}

/// Dot product of a query with a stored blob, without decoding it into a vector first.
/// `None` when the blob does not hold exactly `query.len()` floats.
///
/// Every exact similarity the store reports comes from this one function, so the exact SQL path
/// and the index's final scoring agree to the last bit (and so rank ties alike).
#[inline(always)]
pub(crate) fn dot_blob(query: &[f32], bytes: &[u8]) -> Option<f32> {
    if bytes.len() != query.len() * 4 {
        return None;
    }
    // Sixteen independent accumulators let the compiler vectorise the loop (one AVX-512
    // register, or two AVX2 ones, under `dot_blob_dispatched`).
    let mut lanes = [0.0f32; 16];
    let mut q = query.chunks_exact(16);
    let mut b = bytes.chunks_exact(64);
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

/// [`dot_blob`] compiled for the best SIMD level the CPU has (chosen at run time).
pub(crate) fn dot_blob_dispatched(query: &[f32], bytes: &[u8]) -> Option<f32> {
    struct DotBlob<'a>(&'a [f32], &'a [u8]);
    impl pulp::WithSimd for DotBlob<'_> {
        type Output = Option<f32>;
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _simd: S) -> Option<f32> {
            dot_blob(self.0, self.1)
        }
    }
    pulp::Arch::new().dispatch(DotBlob(query, bytes))
}

/// Refuses query vectors no stored vector can be compared with.
pub(crate) fn check_query(query: &[f32]) -> Result<(), StoreError> {
    if query.is_empty() || query.iter().any(|x| !x.is_finite()) {
        return Err(StoreError::BadQuery(
            "the query vector is empty or not finite".to_string(),
        ));
    }
    Ok(())
}

/// The error for a query whose length differs from the model's vectors.
pub(crate) fn dimension_mismatch(model: &str, query: usize, stored: usize) -> StoreError {
    StoreError::BadQuery(format!(
        "the query vector has {query} dimensions but {model}'s vectors have {stored}"
    ))
}

/// What an exact SQL search found.
#[derive(Debug)]
pub(crate) enum Exact {
    /// The best hits, and how many candidate vectors were scored.
    Hits {
        /// Best first.
        hits: Vec<VectorHit>,
        /// Memories that passed the filter and have a vector for the model.
        scanned: usize,
    },
    /// More than `stop_after` candidates: the caller searches another way.
    Stopped,
}

/// Exact search in SQL: every memory passing the filter that has a vector for `model` is
/// scored, and the best `limit` kept. With `stop_after`, gives up once more candidates than
/// that turn up. `err` maps SQLite errors to store errors.
#[allow(clippy::too_many_arguments)]
pub(crate) fn exact_search(
    conn: &Connection,
    model: &str,
    filter: &Filter,
    query: &[f32],
    limit: usize,
    now: Timestamp,
    stop_after: Option<usize>,
    err: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<Exact, StoreError> {
    let (conditions, filter_values) = filter_sql(filter, now)?;
    let sql = format!(
        "SELECT m.rowid, e.vector, e.truncated FROM memories m \
         JOIN embeddings e ON e.model = ? AND e.content_hash = m.content_hash \
         WHERE {conditions}"
    );
    let mut values = Vec::with_capacity(filter_values.len() + 1);
    values.push(Value::Text(model.to_string()));
    values.extend(filter_values);
    let mut top = TopK::new(limit);
    let mut stmt = conn.prepare_cached(&sql).map_err(err)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(values))
        .map_err(err)?;
    let stop_after = stop_after.unwrap_or(usize::MAX);
    let mut scanned = 0usize;
    let mut stopped = false;
    while let Some(row) = rows.next().map_err(err)? {
        if scanned >= stop_after {
            stopped = true;
            break;
        }
        scanned += 1;
        let rowid: i64 = row.get(0).map_err(err)?;
        let blob = row.get_ref(1).and_then(|v| Ok(v.as_blob()?)).map_err(err)?;
        let Some(similarity) = dot_blob_dispatched(query, blob) else {
            return Err(dimension_mismatch(model, query.len(), blob.len() / 4));
        };
        let truncated: bool = row.get(2).map_err(err)?;
        top.offer(Scored {
            similarity,
            rowid,
            truncated,
        });
    }
    let scanned = (!stopped).then_some(scanned);
    drop(rows);
    match scanned {
        None => Ok(Exact::Stopped),
        Some(scanned) => Ok(Exact::Hits {
            hits: fetch_hits(conn, top.into_sorted(), None, err)?,
            scanned,
        }),
    }
}

/// Reads the memories of ranked candidates. With `verify`, each must still pass those filter
/// conditions (given as SQL and values, as [`filter_sql`] makes them); one that no longer does
/// (changed by another process a moment ago) is left out.
pub(crate) fn fetch_hits(
    conn: &Connection,
    ranked: Vec<Scored>,
    verify: Option<(&str, &[Value])>,
    err: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<Vec<VectorHit>, StoreError> {
    let sql = match verify {
        Some((conditions, _)) => {
            format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.rowid = ? AND {conditions}")
        }
        None => format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.rowid = ?"),
    };
    let mut fetch = conn.prepare_cached(&sql).map_err(err)?;
    let mut hits = Vec::with_capacity(ranked.len());
    for c in ranked {
        let mut values = vec![Value::Integer(c.rowid)];
        if let Some((_, filter_values)) = verify {
            values.extend_from_slice(filter_values);
        }
        let mut rows = fetch
            .query(rusqlite::params_from_iter(values))
            .map_err(err)?;
        if let Some(row) = rows.next().map_err(err)? {
            hits.push(VectorHit {
                memory: memory_from_row(row).map_err(err)?,
                similarity: c.similarity,
                truncated: c.truncated,
            });
        }
    }
    Ok(hits)
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

    /// True once `k` candidates are kept (a new one must beat [`TopK::worst`]).
    pub(crate) fn is_full(&self) -> bool {
        self.heap.len() >= self.k
    }

    /// The weakest candidate kept.
    pub(crate) fn worst(&self) -> Option<&Scored> {
        self.heap.peek()
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
