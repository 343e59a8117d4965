//! Vectors kept as 8-bit integers with one scale per vector, and the dot products over them.
//!
//! An `f32` vector `x` becomes `q = round(x / s)` with `s = max|x| / 127`, so every component
//! lands in `-127..=127` and `x ≈ s * q`. For the unit vectors embedders produce this keeps a
//! quarter of the memory and changes dot products by about 1e-3, which is far below the gaps that
//! decide a ranking; where exact order matters, the best candidates are scored again with the
//! stored `f32` vectors (see [`RoundingBound`]).
//!
//! The kernels are plain loops over independent lanes that the compiler vectorises; they are
//! marked `#[inline(always)]` so that a caller running under [`pulp::Arch::dispatch`] gets them
//! compiled for the best instruction set the CPU has (about 7x faster than baseline x86-64).
//! The callers keep closures out of those dispatched regions: a closure is a function of its
//! own, compiled for baseline x86-64 unless the optimiser happens to inline it.

/// A vector quantised to `i8` with its scale.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quantized {
    /// The components, `-127..=127`.
    pub values: Vec<i8>,
    /// The factor that turns `values` back into the original magnitudes.
    pub scale: f32,
}

/// Quantises `vector` into `out` (which must be as long) and returns the scale. An all-zero or
/// non-finite vector quantises to zeros with scale 0, so it is similar to nothing.
pub(crate) fn quantize_into(vector: &[f32], out: &mut [i8]) -> f32 {
    let max = vector.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if !(max.is_finite() && max > 0.0) || vector.iter().any(|x| !x.is_finite()) {
        out.iter_mut().for_each(|o| *o = 0);
        return 0.0;
    }
    let scale = max / 127.0;
    let inverse = 127.0 / max;
    for (o, x) in out.iter_mut().zip(vector) {
        *o = (x * inverse).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// Quantises a vector into a new buffer.
pub(crate) fn quantize(vector: &[f32]) -> Quantized {
    let mut values = vec![0i8; vector.len()];
    let scale = quantize_into(vector, &mut values);
    Quantized { values, scale }
}

/// Exact integer dot product of two equally long `i8` vectors (the longer one's extra elements
/// are ignored). Never overflows for vectors up to 133,000 components long.
#[inline(always)]
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    // 32 independent lanes: one AVX-512 register of 16-bit products widened to 32 bits.
    let mut lanes = [0i32; 32];
    let chunks_a = a.chunks_exact(32);
    let chunks_b = b.chunks_exact(32);
    let tail: i32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for ((lane, x), y) in lanes.iter_mut().zip(ca).zip(cb) {
            *lane += i32::from(i16::from(*x) * i16::from(*y));
        }
    }
    lanes.iter().sum::<i32>() + tail
}

/// A query prepared for scoring against quantised vectors.
#[derive(Debug, Clone)]
pub(crate) struct QuantQuery {
    /// The quantised query.
    pub query: Quantized,
    /// Sum of the absolute values of the original query's components (for [`RoundingBound`]).
    pub l1: f32,
}

impl QuantQuery {
    /// Prepares `query`.
    pub fn new(query: &[f32]) -> Self {
        Self {
            query: quantize(query),
            l1: query.iter().map(|x| x.abs()).sum(),
        }
    }

    /// Approximate dot product with a quantised vector of scale `scale`.
    #[cfg(test)]
    pub fn similarity(&self, values: &[i8], scale: f32) -> f32 {
        dot_i8(&self.query.values, values) as f32 * (self.query.scale * scale)
    }
}

/// How far an approximate (quantised) similarity can be from the exact `f32` one.
///
/// With `x = s q + e` (`|e_i| <= s / 2`) for the stored vector and `y = t p + f` for the query,
/// `x·y - s t (q·p) = e·y + s q·f`, so the error is at most
/// `(s / 2) |y|_1 + (t / 2) s |q|_1`, and `s |q|_1 <= |x|_1 + d s / 2 <= sqrt(d) |x|_2 + d s / 2`.
/// The bound uses the largest scale in the store and the vectors' largest norm, so it holds for
/// every vector at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundingBound(pub f32);

impl RoundingBound {
    /// The bound for `query` against vectors of at most `max_scale` and Euclidean length at most
    /// `max_norm`, of dimension `dimension`.
    pub fn new(query: &QuantQuery, max_scale: f32, max_norm: f32, dimension: usize) -> Self {
        let d = dimension as f32;
        let stored_l1 = d.sqrt() * max_norm + d * max_scale / 2.0;
        let bound = max_scale / 2.0 * query.l1 + query.query.scale / 2.0 * stored_l1;
        // Float rounding in both computations, with a generous margin.
        Self(bound * 1.01 + 1e-6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn quantisation_keeps_the_extremes_and_zero_vectors_stay_zero() {
        let q = quantize(&[0.5, -1.0, 0.25, 0.0]);
        assert_eq!(q.values, vec![64, -127, 32, 0]);
        assert!((q.scale - 1.0 / 127.0).abs() < 1e-9);
        let zero = quantize(&[0.0; 5]);
        assert_eq!((zero.values, zero.scale), (vec![0; 5], 0.0));
        let bad = quantize(&[f32::NAN, 1.0]);
        assert_eq!(bad.scale, 0.0);
    }

    #[test]
    fn integer_dot_handles_every_length_and_the_extremes() {
        for len in [0usize, 1, 31, 32, 33, 384, 1000] {
            let a: Vec<i8> = (0..len).map(|i| ((i * 37) % 255) as i8).collect();
            let b: Vec<i8> = (0..len).map(|i| ((i * 91 + 5) % 255) as i8).collect();
            let plain: i64 = a.iter().zip(&b).map(|(x, y)| *x as i64 * *y as i64).sum();
            assert_eq!(i64::from(dot_i8(&a, &b)), plain, "length {len}");
        }
        let extreme = vec![-127i8; 4096];
        assert_eq!(dot_i8(&extreme, &extreme), 127 * 127 * 4096);
    }

    proptest! {
        #[test]
        fn approximate_similarity_stays_within_the_rounding_bound(
            pairs in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 1..400)
        ) {
            let (x, y): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            prop_assume!(x.iter().any(|v| v.abs() > 1e-3) && y.iter().any(|v| v.abs() > 1e-3));
            let (x, y) = (unit(&x), unit(&y));
            let stored = quantize(&x);
            let query = QuantQuery::new(&y);
            let exact: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            let approx = query.similarity(&stored.values, stored.scale);
            let bound = RoundingBound::new(&query, stored.scale, 1.0, x.len());
            prop_assert!((exact - approx).abs() <= bound.0, "{exact} vs {approx}, bound {}", bound.0);
        }
    }
}
