//! Turning a sequence's token vectors into one vector, as sentence-transformers' Pooling module
//! does (right-padded batches, no prompt exclusion).

use super::folder::PoolingMode;

/// Pools the first `len` token vectors of one sequence (`tokens` holds `len` or more rows of
/// `hidden` values); several modes are concatenated in the given order.
pub fn pool(tokens: &[f32], hidden: usize, len: usize, modes: &[PoolingMode]) -> Vec<f32> {
    let rows: Vec<&[f32]> = tokens.chunks_exact(hidden).take(len).collect();
    let mut out = Vec::with_capacity(hidden * modes.len());
    for mode in modes {
        match mode {
            PoolingMode::Cls => out.extend_from_slice(rows.first().copied().unwrap_or(&[])),
            PoolingMode::LastToken => out.extend_from_slice(rows.last().copied().unwrap_or(&[])),
            PoolingMode::Max => {
                let mut max = vec![f32::NEG_INFINITY; hidden];
                for row in &rows {
                    for (m, x) in max.iter_mut().zip(*row) {
                        *m = m.max(*x);
                    }
                }
                out.extend(max);
            }
            PoolingMode::Mean | PoolingMode::MeanSqrtLen | PoolingMode::WeightedMean => {
                let mut sum = vec![0.0f32; hidden];
                let mut total_weight = 0.0f32;
                for (position, row) in rows.iter().enumerate() {
                    let weight = match mode {
                        PoolingMode::WeightedMean => (position + 1) as f32,
                        _ => 1.0,
                    };
                    total_weight += weight;
                    for (s, x) in sum.iter_mut().zip(*row) {
                        *s += weight * x;
                    }
                }
                let denominator = match mode {
                    PoolingMode::MeanSqrtLen => total_weight.sqrt(),
                    _ => total_weight,
                }
                .max(1e-9);
                out.extend(sum.into_iter().map(|s| s / denominator));
            }
        }
    }
    // A zero-length sequence cannot reach here (every text has its special tokens), but keep the
    // promised length regardless.
    out.resize(hidden * modes.len(), 0.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Three tokens of width 2, then a padding row that must be ignored.
    const TOKENS: [f32; 8] = [1.0, -2.0, 3.0, 4.0, 5.0, 0.0, 100.0, 100.0];

    #[test]
    fn each_mode_matches_its_definition() {
        assert_eq!(pool(&TOKENS, 2, 3, &[PoolingMode::Cls]), vec![1.0, -2.0]);
        assert_eq!(
            pool(&TOKENS, 2, 3, &[PoolingMode::LastToken]),
            vec![5.0, 0.0]
        );
        assert_eq!(pool(&TOKENS, 2, 3, &[PoolingMode::Max]), vec![5.0, 4.0]);
        assert_eq!(
            pool(&TOKENS, 2, 3, &[PoolingMode::Mean]),
            vec![3.0, 2.0 / 3.0]
        );
        let sqrt3 = 3f32.sqrt();
        let got = pool(&TOKENS, 2, 3, &[PoolingMode::MeanSqrtLen]);
        assert!((got[0] - 9.0 / sqrt3).abs() < 1e-6 && (got[1] - 2.0 / sqrt3).abs() < 1e-6);
        // weights 1, 2, 3: (1 + 6 + 15) / 6, (-2 + 8 + 0) / 6
        let got = pool(&TOKENS, 2, 3, &[PoolingMode::WeightedMean]);
        assert!((got[0] - 22.0 / 6.0).abs() < 1e-6 && (got[1] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn modes_are_concatenated_in_order() {
        assert_eq!(
            pool(&TOKENS, 2, 3, &[PoolingMode::Cls, PoolingMode::Max]),
            vec![1.0, -2.0, 5.0, 4.0]
        );
    }
}
