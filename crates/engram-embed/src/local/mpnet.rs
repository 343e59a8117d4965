//! MPNet (sentence-transformers `all-mpnet-base-v2` and its kin) on the BERT encoder.
//!
//! An MPNet encoder is a BERT encoder with three differences, all handled here:
//! - its weights have other names (`attention.attn.q` for `attention.self.query`, ...);
//! - positions count from the padding id plus one (RoBERTa's convention) and there are no
//!   token types;
//! - every layer's attention adds a bias that depends on the distance between query and key,
//!   read from one small table (`encoder.relative_attention_bias`, buckets x heads) shared by
//!   all layers. Distances are put in buckets as T5 does: one bucket per distance up to 7, then
//!   logarithmically wider ones up to 128, separately for keys before and after the query.
//!
//! candle has no MPNet; this follows Hugging Face transformers' `MPNetModel`, and the test in
//! tests/mpnet.rs checks the result against sentence-transformers' own vectors.

use engram_core::EmbedError;

use super::bert::{LayerNames, Weights};
use super::folder::BertConfig;

/// Hugging Face `MPNetModel` names of a layer's attention weights.
pub(super) const LAYER: LayerNames = LayerNames {
    qkv: ["attention.attn.q", "attention.attn.k", "attention.attn.v"],
    attention_out: "attention.attn.o",
    attention_norm: "attention.LayerNorm",
};

/// Distances beyond this share the last bucket (transformers' `max_distance`).
const MAX_DISTANCE: i64 = 128;

/// The attention bias by relative position.
pub(super) struct RelativeBias {
    /// `buckets x heads`, row-major.
    table: Vec<f32>,
    buckets: usize,
    heads: usize,
}

/// The position-embedding row of the first token: the padding id plus one.
pub(super) fn position_offset(config: &BertConfig) -> usize {
    config.pad_token_id.unwrap_or(1) + 1
}

/// Reads `encoder.relative_attention_bias.weight`.
pub(super) fn relative_bias(
    weights: &Weights<'_>,
    config: &BertConfig,
) -> Result<RelativeBias, EmbedError> {
    let buckets = config.relative_attention_num_buckets.unwrap_or(32);
    let heads = config.num_attention_heads;
    Ok(RelativeBias {
        table: weights.vec("encoder.relative_attention_bias.weight", &[buckets, heads])?,
        buckets,
        heads,
    })
}

/// The bucket of a key `relative` positions after its query (negative: before it), as
/// transformers' `MPNetEncoder.relative_position_bucket` computes it (in f32, as it does).
pub(super) fn bucket(relative: i64, buckets: usize) -> usize {
    let half = (buckets / 2) as i64;
    let n = -relative;
    let (side, n) = if n < 0 { (half, -n) } else { (0, n) };
    let max_exact = half / 2;
    let within = if n < max_exact {
        n
    } else {
        let log_ratio = ((n as f32) / (max_exact as f32)).ln()
            / ((MAX_DISTANCE as f64) / (max_exact as f64)).ln() as f32;
        let large = max_exact + (log_ratio * (half - max_exact) as f32) as i64;
        large.min(half - 1)
    };
    (side + within) as usize
}

impl RelativeBias {
    /// The bias for a padded length: per head, `2 * seq_len - 1` values indexed by
    /// `key - query + seq_len - 1` (the layout [`super::kernels::AttentionShape`] takes).
    pub fn by_distance(&self, seq_len: usize) -> Vec<f32> {
        let span = (2 * seq_len).saturating_sub(1);
        let mut out = vec![0.0f32; self.heads * span];
        for at in 0..span {
            let relative = at as i64 - (seq_len as i64 - 1);
            let b = bucket(relative, self.buckets).min(self.buckets - 1);
            for head in 0..self.heads {
                out[head * span + at] = self.table[b * self.heads + head];
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where transformers' buckets change between distances -520 and 520 (from
    /// tests/fixtures/mpnet_reference.json, made by make_mpnet_reference.py).
    #[test]
    fn buckets_match_transformers() {
        let reference: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/mpnet_reference.json"))
                .unwrap();
        let runs: Vec<(i64, usize)> = reference["relative_position_buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_i64().unwrap(), r[1].as_u64().unwrap() as usize))
            .collect();
        assert!(runs.len() > 10);
        for relative in -520i64..=520 {
            let expected = runs
                .iter()
                .take_while(|(from, _)| *from <= relative)
                .last()
                .unwrap()
                .1;
            assert_eq!(bucket(relative, 32), expected, "distance {relative}");
        }
    }

    #[test]
    fn the_bias_is_laid_out_by_distance() {
        let bias = RelativeBias {
            table: (0..32 * 2).map(|i| i as f32).collect(),
            buckets: 32,
            heads: 2,
        };
        let out = bias.by_distance(3);
        // Distances -2..=2 for head 0, then head 1.
        let expect = |head: usize, relative: i64| (bucket(relative, 32) * 2 + head) as f32;
        for (at, relative) in (-2i64..=2).enumerate() {
            assert_eq!(out[at], expect(0, relative));
            assert_eq!(out[5 + at], expect(1, relative));
        }
    }
}
