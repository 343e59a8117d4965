//! The encoder's element-wise work, fused so each activation is read once: bias + activation,
//! bias + residual + layer norm, and masked multi-head attention. Matrix products stay with candle
//! (gemm); everything here runs over rows in parallel (rayon) with the best SIMD level the CPU has
//! (pulp's safe runtime dispatch), and is written branch-free so the compiler vectorises it.

use candle_core::{CpuStorage, CustomOp1, InplaceOp1, InplaceOp2, Layout, Shape, bail};
use rayon::prelude::*;

use super::folder::Activation;

/// Rows handed to one rayon task: enough work to amortise scheduling.
const ROWS_PER_TASK: usize = 16;
/// Floats per register block in the attention kernel (one AVX-512 register, two AVX2 ones).
const LANES: usize = 16;

/// e^x with relative error below 4e-7 over the whole f32 range (saturating at the ends).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and removing 1.5 * 2^23 rounds to the nearest integer with plain adds (no libm
    // call, so it vectorises at every SIMD level).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    // x = n ln2 + r with |r| <= ln2 / 2, e^x = 2^n e^r.
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_2e-4_f32 * r + 1.398_2e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e_r = p * (r * r) + r + 1.0;
    // n is in [-126, 127] after the clamp, so the exponent bits are valid.
    let two_n = f32::from_bits(((n as i32 + 127) as u32) << 23);
    e_r * two_n
}

/// erf(x) with absolute error below 3e-7, and relative error below 1e-6 near zero.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    // Near zero: the Maclaurin series, x^13 term included (next term < 5e-10 for a < 0.5).
    let a2 = a * a;
    let series = (-1.0f32 / 9360.0) * a2 + 1.0 / 1320.0;
    let series = series * a2 - 1.0 / 216.0;
    let series = series * a2 + 1.0 / 42.0;
    let series = series * a2 - 1.0 / 10.0;
    let series = series * a2 + 1.0 / 3.0;
    let series = (1.0 - a2 * series) * a * std::f32::consts::FRAC_2_SQRT_PI;
    // Elsewhere: Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7).
    let t = 1.0 / (0.327_591_1 * a + 1.0);
    let poly = 1.061_405_4_f32 * t - 1.453_152_1;
    let poly = poly * t + 1.421_413_8;
    let poly = poly * t - 0.284_496_74;
    let poly = poly * t + 0.254_829_6;
    let rational = 1.0 - poly * t * exp(-a2);
    // Both are computed so that this is a select, not a branch, and the loop vectorises.
    let y = if a < 0.5 { series } else { rational };
    y.copysign(x)
}

/// The activation applied to one value.
#[inline(always)]
fn activate(activation: Activation, x: f32) -> f32 {
    match activation {
        Activation::GeluErf => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        Activation::GeluTanh => {
            const SQRT_2_OVER_PI: f32 = 0.797_884_6;
            let z = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
            // tanh(z) = 1 - 2 / (e^{2z} + 1), stable at both ends thanks to exp's saturation.
            let tanh = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
            0.5 * x * (1.0 + tanh)
        }
        Activation::Relu => x.max(0.0),
    }
}

// Each kernel is a `pulp::WithSimd` whose body is inlined into a function compiled for the best
// instruction set the CPU has (AVX-512, AVX2+FMA, or baseline), chosen at run time.

/// `row = activation(row + bias)` over some rows.
struct BiasActivationKernel<'a> {
    rows: &'a mut [f32],
    bias: &'a [f32],
    activation: Activation,
}

impl pulp::WithSimd for BiasActivationKernel<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        for row in self.rows.chunks_exact_mut(self.bias.len()) {
            match self.activation {
                // One loop per activation, so each is a straight vectorisable loop.
                Activation::GeluErf => {
                    for (x, b) in row.iter_mut().zip(self.bias) {
                        *x = activate(Activation::GeluErf, *x + b);
                    }
                }
                Activation::GeluTanh => {
                    for (x, b) in row.iter_mut().zip(self.bias) {
                        *x = activate(Activation::GeluTanh, *x + b);
                    }
                }
                Activation::Relu => {
                    for (x, b) in row.iter_mut().zip(self.bias) {
                        *x = (*x + b).max(0.0);
                    }
                }
            }
        }
    }
}

/// `row = activation(row + bias)` for every row.
pub fn bias_activation_rows(data: &mut [f32], bias: &[f32], activation: Activation) {
    let width = bias.len();
    if width == 0 {
        return;
    }
    data.par_chunks_mut(width * ROWS_PER_TASK).for_each(|rows| {
        pulp::Arch::new().dispatch(BiasActivationKernel {
            rows,
            bias,
            activation,
        })
    });
}

/// Layer norm parameters.
pub struct Norm<'a> {
    /// Scale (gamma).
    pub weight: &'a [f32],
    /// Shift (beta).
    pub bias: &'a [f32],
    /// Added to the variance.
    pub eps: f32,
}

/// Normalises one row in place: (x - mean) / sqrt(var + eps) * weight + bias.
#[inline(always)]
pub fn layer_norm_row(row: &mut [f32], norm: &Norm<'_>) {
    let n = row.len() as f32;
    let mean = lane_sum(row, |x| x) / n;
    // Two passes: the variance of centred values does not cancel catastrophically.
    let variance = lane_sum(row, |x| (x - mean) * (x - mean)) / n;
    let inv_std = 1.0 / (variance + norm.eps).sqrt();
    for ((x, w), b) in row.iter_mut().zip(norm.weight).zip(norm.bias) {
        *x = (*x - mean) * inv_std * w + b;
    }
}

/// Sum of `f(x)` with independent lanes, so it vectorises.
#[inline(always)]
fn lane_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = values.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().map(|x| f(*x)).sum();
    for chunk in chunks {
        for (lane, x) in lanes.iter_mut().zip(chunk) {
            *lane += f(*x);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `row = layer_norm(row + bias + residual)` over some rows.
struct ResidualNormKernel<'a> {
    rows: &'a mut [f32],
    residual: &'a [f32],
    bias: &'a [f32],
    norm: &'a Norm<'a>,
}

impl pulp::WithSimd for ResidualNormKernel<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let width = self.bias.len();
        for (row, residual) in self
            .rows
            .chunks_exact_mut(width)
            .zip(self.residual.chunks_exact(width))
        {
            for ((x, r), b) in row.iter_mut().zip(residual).zip(self.bias) {
                *x += r + b;
            }
            layer_norm_row(row, self.norm);
        }
    }
}

/// `row = layer_norm(row + bias + residual)` for every row.
pub fn bias_residual_norm_rows(data: &mut [f32], residual: &[f32], bias: &[f32], norm: &Norm<'_>) {
    let width = bias.len();
    if width == 0 {
        return;
    }
    data.par_chunks_mut(width * ROWS_PER_TASK)
        .zip(residual.par_chunks(width * ROWS_PER_TASK))
        .for_each(|(rows, residual)| {
            pulp::Arch::new().dispatch(ResidualNormKernel {
                rows,
                residual,
                bias,
                norm,
            })
        });
}

/// Shape of a padded batch for attention.
pub struct AttentionShape<'a> {
    /// Padded length of every sequence.
    pub seq_len: usize,
    /// Real length of each sequence (the rest is padding, masked out).
    pub lengths: &'a [usize],
    /// Attention heads.
    pub heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Added to the score of query `i` and key `j` in head `h`, when the model has one (MPNet):
    /// `heads` rows of `2 * seq_len - 1`, indexed by `j - i + seq_len - 1`.
    pub position_bias: Option<&'a [f32]>,
}

/// Multi-head self-attention over a padded batch.
///
/// `qkv` holds, per token row, the query, key and value projections side by side (each
/// `heads * head_dim` wide, bias not yet added); `bias` is the matching `3 * hidden` bias.
/// Writes the attention output (`hidden` wide per row) into `out`. Padding keys are masked out;
/// padding query rows are left at zero (nothing downstream reads them).
pub fn attention(qkv: &[f32], bias: &[f32], shape: &AttentionShape<'_>, out: &mut [f32]) {
    let hidden = shape.heads * shape.head_dim;
    out.par_chunks_mut(shape.seq_len * hidden)
        .zip(qkv.par_chunks(shape.seq_len * 3 * hidden))
        .zip(shape.lengths.par_iter())
        .for_each(|((out, qkv), &len)| {
            pulp::Arch::new().dispatch(AttentionKernel {
                qkv,
                bias,
                heads: shape.heads,
                head_dim: shape.head_dim,
                len,
                seq_len: shape.seq_len,
                position_bias: shape.position_bias,
                out,
            })
        });
}

/// Attention for one sequence, all heads.
struct AttentionKernel<'a> {
    qkv: &'a [f32],
    bias: &'a [f32],
    heads: usize,
    head_dim: usize,
    len: usize,
    seq_len: usize,
    position_bias: Option<&'a [f32]>,
    out: &'a mut [f32],
}

impl pulp::WithSimd for AttentionKernel<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let Self {
            qkv,
            bias,
            heads,
            head_dim: d,
            len,
            seq_len,
            position_bias,
            out,
        } = self;
        let hidden = heads * d;
        let width = 3 * hidden;
        let scale = 1.0 / (d as f32).sqrt();
        out.fill(0.0);
        if len == 0 || d == 0 {
            return;
        }
        // Work in blocks of LANES floats held in registers: keys are transposed (d rows of
        // len, padded to whole blocks) so a block of scores is d multiply-adds of blocks, and
        // a block of output is len multiply-adds of value blocks. Accumulating in a local block
        // instead of in memory avoids a store-to-load chain per step.
        let len_blocks = len.div_ceil(LANES);
        let dim_blocks = d.div_ceil(LANES);
        let mut keys_t = vec![[0.0f32; LANES]; d * len_blocks];
        let mut values = vec![[0.0f32; LANES]; len * dim_blocks];
        let mut query = vec![0.0f32; d];
        let mut scores = vec![[0.0f32; LANES]; len_blocks];
        for head in 0..heads {
            let q_off = head * d;
            let k_off = hidden + head * d;
            let v_off = 2 * hidden + head * d;
            for (j, row) in qkv.chunks_exact(width).take(len).enumerate() {
                let key = &row[k_off..k_off + d];
                let key_bias = &bias[k_off..k_off + d];
                for (c, (k, b)) in key.iter().zip(key_bias).enumerate() {
                    keys_t[c * len_blocks + j / LANES][j % LANES] = k + b;
                }
                let value = &row[v_off..v_off + d];
                let value_bias = &bias[v_off..v_off + d];
                for (c, (v, b)) in value.iter().zip(value_bias).enumerate() {
                    values[j * dim_blocks + c / LANES][c % LANES] = v + b;
                }
            }
            let head_bias = position_bias.map(|b| {
                let span = 2 * seq_len - 1;
                &b[head * span..(head + 1) * span]
            });
            for (i, (row, out_row)) in qkv
                .chunks_exact(width)
                .zip(out.chunks_exact_mut(hidden))
                .take(len)
                .enumerate()
            {
                for ((q, x), b) in query
                    .iter_mut()
                    .zip(&row[q_off..q_off + d])
                    .zip(&bias[q_off..q_off + d])
                {
                    *q = (x + b) * scale;
                }
                for (block, score) in scores.iter_mut().enumerate() {
                    let mut acc = [0.0f32; LANES];
                    for (c, q) in query.iter().enumerate() {
                        let keys = &keys_t[c * len_blocks + block];
                        for (a, k) in acc.iter_mut().zip(keys) {
                            *a += q * k;
                        }
                    }
                    *score = acc;
                }
                let scores = &mut scores.as_flattened_mut()[..len];
                if let Some(head_bias) = head_bias {
                    // Key j sits at j - i + seq_len - 1: keys 0..len start at seq_len - 1 - i.
                    let from = seq_len - 1 - i;
                    for (s, b) in scores.iter_mut().zip(&head_bias[from..from + len]) {
                        *s += b;
                    }
                }
                let max = scores.iter().fold(f32::NEG_INFINITY, |m, s| m.max(*s));
                for s in scores.iter_mut() {
                    *s = exp(*s - max);
                }
                let inv_total = 1.0 / lane_sum(scores, |x| x);
                let head_out = &mut out_row[q_off..q_off + d];
                for (block, out_chunk) in head_out.chunks_mut(LANES).enumerate() {
                    let mut acc = [0.0f32; LANES];
                    for (j, p) in scores.iter().enumerate() {
                        let p = p * inv_total;
                        for (a, v) in acc.iter_mut().zip(&values[j * dim_blocks + block]) {
                            *a += p * v;
                        }
                    }
                    out_chunk.copy_from_slice(&acc[..out_chunk.len()]);
                }
            }
        }
    }
}

/// The contiguous f32 data of a CPU tensor.
fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<&'a [f32]> {
    let (start, end) = match layout.contiguous_offsets() {
        Some(offsets) => offsets,
        None => bail!("{op}: input must be contiguous"),
    };
    match storage {
        CpuStorage::F32(data) => Ok(&data[start..end]),
        _ => bail!("{op}: input must be f32"),
    }
}

fn f32_slice_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<&'a mut [f32]> {
    let (start, end) = match layout.contiguous_offsets() {
        Some(offsets) => offsets,
        None => bail!("{op}: input must be contiguous"),
    };
    match storage {
        CpuStorage::F32(data) => Ok(&mut data[start..end]),
        _ => bail!("{op}: input must be f32"),
    }
}

/// Candle op: `x = activation(x + bias)` in place.
pub struct BiasActivation<'a> {
    /// One value per column.
    pub bias: &'a [f32],
    /// The activation.
    pub activation: Activation,
}

impl InplaceOp1 for BiasActivation<'_> {
    fn name(&self) -> &'static str {
        "bias-activation"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let data = f32_slice_mut(storage, layout, self.name())?;
        if data.len() % self.bias.len().max(1) != 0 {
            bail!("bias-activation: rows are not {} wide", self.bias.len());
        }
        bias_activation_rows(data, self.bias, self.activation);
        Ok(())
    }
}

/// Candle op: `x = layer_norm(x + bias + residual)` in place (the residual is the second tensor).
pub struct BiasResidualNorm<'a> {
    /// One value per column, added before the residual.
    pub bias: &'a [f32],
    /// The layer norm.
    pub norm: Norm<'a>,
}

impl InplaceOp2 for BiasResidualNorm<'_> {
    fn name(&self) -> &'static str {
        "bias-residual-norm"
    }

    fn cpu_fwd(
        &self,
        storage: &mut CpuStorage,
        layout: &Layout,
        residual: &CpuStorage,
        residual_layout: &Layout,
    ) -> candle_core::Result<()> {
        let residual = f32_slice(residual, residual_layout, self.name())?;
        let data = f32_slice_mut(storage, layout, self.name())?;
        if data.len() != residual.len() || data.len() % self.bias.len().max(1) != 0 {
            bail!("bias-residual-norm: shapes do not match");
        }
        bias_residual_norm_rows(data, residual, self.bias, &self.norm);
        Ok(())
    }
}

/// Candle op: multi-head attention from the fused QKV projection to the context vectors.
pub struct Attention<'a> {
    /// The `3 * hidden` QKV bias.
    pub bias: &'a [f32],
    /// Batch shape and mask.
    pub shape: AttentionShape<'a>,
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let qkv = f32_slice(storage, layout, self.name())?;
        let hidden = self.shape.heads * self.shape.head_dim;
        let rows = self.shape.seq_len * self.shape.lengths.len();
        if qkv.len() != rows * 3 * hidden || self.bias.len() != 3 * hidden {
            bail!("attention: the QKV projection does not match the batch shape");
        }
        if self
            .shape
            .lengths
            .iter()
            .any(|len| *len > self.shape.seq_len)
        {
            bail!("attention: a sequence is longer than the padded length");
        }
        if let Some(bias) = self.shape.position_bias
            && bias.len() != self.shape.heads * (2 * self.shape.seq_len).saturating_sub(1)
        {
            bail!("attention: the position bias does not match the batch shape");
        }
        let mut out = vec![0.0f32; rows * hidden];
        attention(qkv, self.bias, &self.shape, &mut out);
        Ok((CpuStorage::F32(out), Shape::from((rows, hidden))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// erf from its Taylor series (converges fine for |x| <= 3) in f64.
    fn erf_reference(x: f64) -> f64 {
        if x.abs() > 5.0 {
            return x.signum();
        }
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    proptest! {
        #[test]
        fn exp_is_accurate(x in -87.0f32..88.0) {
            let expected = f64::from(x).exp();
            let got = f64::from(exp(x));
            prop_assert!(((got - expected) / expected).abs() < 4e-7, "exp({x}) = {got}, expected {expected}");
        }

        #[test]
        fn erf_is_accurate(x in -4.0f32..4.0) {
            let expected = erf_reference(f64::from(x));
            let error = (f64::from(erf(x)) - expected).abs();
            prop_assert!(error < 3e-7, "erf({x}) = {} vs {expected}", erf(x));
            if x.abs() < 0.5 {
                prop_assert!(error <= 1e-6 * expected.abs(), "erf({x}) = {} vs {expected}", erf(x));
            }
        }
    }

    #[test]
    fn exp_saturates_instead_of_overflowing() {
        assert!(exp(-1000.0) >= 0.0 && exp(-1000.0) < 1e-37);
        assert!(exp(1000.0).is_finite() && exp(1000.0) > 1e38);
        assert_eq!(erf(10.0), 1.0);
        assert_eq!(erf(-10.0), -1.0);
    }

    #[test]
    fn activations_match_their_definitions() {
        for x in [-6.0f32, -1.5, -0.1, 0.0, 0.3, 1.0, 2.5, 8.0] {
            let xd = f64::from(x);
            let gelu = 0.5 * xd * (1.0 + erf_reference(xd / 2f64.sqrt()));
            assert!((f64::from(activate(Activation::GeluErf, x)) - gelu).abs() < 1e-6);
            let tanh = 0.5
                * xd
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!((f64::from(activate(Activation::GeluTanh, x)) - tanh).abs() < 1e-6);
            assert_eq!(activate(Activation::Relu, x), x.max(0.0));
        }
    }

    #[test]
    fn fused_rows_match_the_plain_formulas() {
        let width = 5;
        let mut data: Vec<f32> = (0..width * 40)
            .map(|i| ((i * 7919) % 23) as f32 / 7.0 - 1.5)
            .collect();
        let residual: Vec<f32> = (0..width * 40)
            .map(|i| ((i * 104_729) % 17) as f32 / 5.0 - 1.0)
            .collect();
        let bias = [0.1, -0.2, 0.3, 0.0, 0.5];
        let weight = [1.0, 2.0, 0.5, 1.5, -1.0];
        let beta = [0.0, 0.1, 0.2, 0.3, 0.4];
        let original = data.clone();
        bias_residual_norm_rows(
            &mut data,
            &residual,
            &bias,
            &Norm {
                weight: &weight,
                bias: &beta,
                eps: 1e-12,
            },
        );
        for row in 0..40 {
            let x: Vec<f64> = (0..width)
                .map(|c| f64::from(original[row * width + c] + residual[row * width + c] + bias[c]))
                .collect();
            let mean = x.iter().sum::<f64>() / width as f64;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / width as f64;
            for c in 0..width {
                let expected = (x[c] - mean) / (var + 1e-12).sqrt() * f64::from(weight[c])
                    + f64::from(beta[c]);
                assert!((f64::from(data[row * width + c]) - expected).abs() < 1e-5);
            }
        }

        let mut data = original.clone();
        bias_activation_rows(&mut data, &bias, Activation::Relu);
        for (i, x) in data.iter().enumerate() {
            assert_eq!(*x, (original[i] + bias[i % width]).max(0.0));
        }
    }

    /// Attention computed the textbook way in f64.
    fn attention_reference(qkv: &[f32], bias: &[f32], shape: &AttentionShape<'_>) -> Vec<f64> {
        let d = shape.head_dim;
        let hidden = shape.heads * d;
        let mut out = vec![0.0f64; shape.lengths.len() * shape.seq_len * hidden];
        let at = |b: usize, t: usize, col: usize| {
            f64::from(qkv[(b * shape.seq_len + t) * 3 * hidden + col] + bias[col])
        };
        for (b, &len) in shape.lengths.iter().enumerate() {
            for h in 0..shape.heads {
                for i in 0..len {
                    let scores: Vec<f64> = (0..len)
                        .map(|j| {
                            (0..d)
                                .map(|c| at(b, i, h * d + c) * at(b, j, hidden + h * d + c))
                                .sum::<f64>()
                                / (d as f64).sqrt()
                                + shape.position_bias.map_or(0.0, |pb| {
                                    f64::from(
                                        pb[h * (2 * shape.seq_len - 1) + j + shape.seq_len - 1 - i],
                                    )
                                })
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for c in 0..d {
                        out[(b * shape.seq_len + i) * hidden + h * d + c] = (0..len)
                            .map(|j| weights[j] / total * at(b, j, 2 * hidden + h * d + c))
                            .sum();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_matches_the_textbook_and_ignores_padding() {
        // Short sequences and heads, and ones spanning several register blocks with remainders.
        let cases: [(usize, usize, usize, &[usize], bool); 4] = [
            (3, 4, 6, &[6, 2, 4], false),
            (2, 20, 37, &[37, 17, 1], false),
            (3, 4, 6, &[6, 2, 4], true),
            (2, 20, 37, &[37, 17, 1], true),
        ];
        for (heads, head_dim, seq_len, lengths, with_bias) in cases {
            let hidden = heads * head_dim;
            let mut qkv: Vec<f32> = (0..lengths.len() * seq_len * 3 * hidden)
                .map(|i| ((i * 2_654_435_761usize) % 1000) as f32 / 250.0 - 2.0)
                .collect();
            let bias: Vec<f32> = (0..3 * hidden)
                .map(|i| (i % 30) as f32 / 50.0 - 0.3)
                .collect();
            let position_bias: Vec<f32> = (0..heads * (2 * seq_len - 1))
                .map(|i| ((i * 40_503) % 97) as f32 / 30.0 - 1.5)
                .collect();
            let shape = AttentionShape {
                seq_len,
                lengths,
                heads,
                head_dim,
                position_bias: with_bias.then_some(position_bias.as_slice()),
            };
            let mut out = vec![0.0f32; lengths.len() * seq_len * hidden];
            attention(&qkv, &bias, &shape, &mut out);
            let expected = attention_reference(&qkv, &bias, &shape);
            for (got, want) in out.iter().zip(&expected) {
                assert!((f64::from(*got) - want).abs() < 1e-5, "{got} vs {want}");
            }
            // Garbage in the padding rows changes nothing in the real rows.
            for (b, len) in lengths.iter().enumerate() {
                for t in *len..seq_len {
                    for c in 0..3 * hidden {
                        qkv[(b * seq_len + t) * 3 * hidden + c] = 1e6;
                    }
                }
            }
            let mut again = vec![0.0f32; out.len()];
            attention(&qkv, &bias, &shape, &mut again);
            assert_eq!(out, again);
        }
    }
}
