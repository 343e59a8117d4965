//! A BERT encoder for inference on the CPU: weights from `model.safetensors`, matrix products on
//! candle (gemm), the rest in the fused kernels of [`super::kernels`].
//!
//! MPNet runs on the same encoder: its layers are BERT's under other names, plus a relative
//! position bias in attention (see [`super::mpnet`]).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use engram_core::EmbedError;
use rayon::prelude::*;

use super::folder::{Activation, BertConfig};
use super::kernels::{self, Attention, AttentionShape, BiasActivation, BiasResidualNorm, Norm};
use super::mpnet::{self, RelativeBias};

/// Layer-norm scale and shift.
struct NormWeights {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl NormWeights {
    fn as_norm(&self, eps: f32) -> Norm<'_> {
        Norm {
            weight: &self.weight,
            bias: &self.bias,
            eps,
        }
    }
}

/// One encoder layer; matrices are stored transposed (`in x out`, contiguous) for the products.
struct Layer {
    qkv_t: Tensor,
    qkv_bias: Vec<f32>,
    attention_out_t: Tensor,
    attention_out_bias: Vec<f32>,
    attention_norm: NormWeights,
    intermediate_t: Tensor,
    intermediate_bias: Vec<f32>,
    output_t: Tensor,
    output_bias: Vec<f32>,
    output_norm: NormWeights,
}

/// The encoder with its weights.
pub struct BertModel {
    hidden: usize,
    heads: usize,
    eps: f32,
    activation: Activation,
    max_positions: usize,
    /// Row of the position-embedding matrix for the first token (MPNet counts from the padding
    /// id plus one).
    position_offset: usize,
    word_embeddings: Vec<f32>,
    position_embeddings: Vec<f32>,
    /// BERT's token-type rows, one added to every token (type 0 unless told otherwise); one row
    /// of zeros for MPNet, which has no token types.
    token_types: Vec<f32>,
    embedding_norm: NormWeights,
    layers: Vec<Layer>,
    /// MPNet's attention bias by relative position, shared by every layer.
    relative_bias: Option<RelativeBias>,
}

/// Where one encoder layer's weights are found, under the layer's prefix.
pub(super) struct LayerNames {
    /// The attention's query, key and value projections.
    pub qkv: [&'static str; 3],
    /// The attention's output projection.
    pub attention_out: &'static str,
    /// The layer norm after attention.
    pub attention_norm: &'static str,
}

/// Hugging Face `BertModel` names.
const BERT_LAYER: LayerNames = LayerNames {
    qkv: [
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
    ],
    attention_out: "attention.output.dense",
    attention_norm: "attention.output.LayerNorm",
};

/// The weights file, with the naming convention it uses.
pub(super) struct Weights<'a> {
    tensors: &'a HashMap<String, Tensor>,
    prefix: &'static str,
    path: &'a Path,
}

impl<'a> Weights<'a> {
    /// The tensors of `path` read under `prefix`.
    pub(super) fn new(
        tensors: &'a HashMap<String, Tensor>,
        prefix: &'static str,
        path: &'a Path,
    ) -> Self {
        Self {
            tensors,
            prefix,
            path,
        }
    }

    /// Whether the file holds the tensor `name` (under the prefix).
    pub(super) fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(&format!("{}{name}", self.prefix))
    }

    fn bad_shape(&self, detail: String) -> EmbedError {
        EmbedError::BadShape {
            path: self.path.to_path_buf(),
            detail,
        }
    }

    /// The tensor `name` as f32, checked against the shape the configuration implies.
    pub(super) fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor, EmbedError> {
        let full = format!("{}{name}", self.prefix);
        let tensor = self.tensors.get(&full).ok_or_else(|| {
            self.bad_shape(format!(
                "tensor {full} is missing (config.json implies shape {shape:?})"
            ))
        })?;
        if tensor.dims() != shape {
            return Err(self.bad_shape(format!(
                "tensor {full} has shape {:?} but config.json implies {shape:?}",
                tensor.dims()
            )));
        }
        tensor
            .to_dtype(DType::F32)
            .map_err(|e| self.bad_shape(format!("tensor {full} cannot be read as f32: {e}")))
    }

    pub(super) fn vec(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EmbedError> {
        let full = format!("{}{name}", self.prefix);
        self.get(name, shape)?
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| self.bad_shape(format!("tensor {full} cannot be read: {e}")))
    }

    /// A `[out, in]` matrix, returned transposed and contiguous as `[in, out]`.
    pub(super) fn matrix_t(
        &self,
        name: &str,
        out: usize,
        input: usize,
    ) -> Result<Tensor, EmbedError> {
        self.get(name, &[out, input])?
            .t()
            .and_then(|t| t.contiguous())
            .map_err(|e| self.bad_shape(format!("tensor {name} cannot be transposed: {e}")))
    }

    /// Layer norm weights; older checkpoints call them gamma and beta.
    fn norm(&self, name: &str, width: usize) -> Result<NormWeights, EmbedError> {
        let modern = format!("{}{name}.weight", self.prefix);
        let (weight, bias) = if self.tensors.contains_key(&modern) {
            ("weight", "bias")
        } else {
            ("gamma", "beta")
        };
        Ok(NormWeights {
            weight: self.vec(&format!("{name}.{weight}"), &[width])?,
            bias: self.vec(&format!("{name}.{bias}"), &[width])?,
        })
    }
}

/// Names under which BERT weights are found: saved from `BertModel`, from a task model
/// (`BertForMaskedLM` etc.), or from a wrapper.
const PREFIXES: [&str; 3] = ["", "bert.", "model."];

/// Reads a safetensors file's contents (`bytes`, read from `path`).
pub(super) fn read_tensors(
    bytes: &[u8],
    path: &Path,
) -> Result<HashMap<String, Tensor>, EmbedError> {
    candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| EmbedError::BadFile {
        path: path.to_path_buf(),
        detail: format!("not a valid safetensors file: {e}"),
    })
}

/// The prefix the encoder's weights carry in `tensors` (`bert.` for a task model).
pub(super) fn encoder_prefix(
    tensors: &HashMap<String, Tensor>,
    path: &Path,
) -> Result<&'static str, EmbedError> {
    PREFIXES
        .into_iter()
        .find(|p| tensors.contains_key(&format!("{p}embeddings.word_embeddings.weight")))
        .ok_or_else(|| EmbedError::BadShape {
            path: path.to_path_buf(),
            detail:
                "there is no embeddings.word_embeddings.weight tensor; this is not a BERT model"
                    .into(),
        })
}

impl BertModel {
    /// Loads and checks the weights in `bytes` (the contents of `path`) against `config`: a
    /// BERT model, or an MPNet one when `config.model_type` says so.
    pub fn load(bytes: &[u8], path: &Path, config: &BertConfig) -> Result<Self, EmbedError> {
        Self::from_tensors(&read_tensors(bytes, path)?, path, config)
    }

    /// The encoder from tensors already read from `path` (a task model's head stays in them).
    pub fn from_tensors(
        tensors: &HashMap<String, Tensor>,
        path: &Path,
        config: &BertConfig,
    ) -> Result<Self, EmbedError> {
        let weights = Weights::new(tensors, encoder_prefix(tensors, path)?, path);
        let h = config.hidden_size;
        let inter = config.intermediate_size;
        let activation = config.activation().ok_or_else(|| EmbedError::Unsupported {
            path: path.to_path_buf(),
            detail: format!("hidden_act \"{}\" is not supported", config.hidden_act),
        })?;

        let is_mpnet = config.is_mpnet();
        let (names, token_types, position_offset, relative_bias) = if is_mpnet {
            (
                &mpnet::LAYER,
                vec![0.0; h],
                mpnet::position_offset(config),
                Some(mpnet::relative_bias(&weights, config)?),
            )
        } else {
            let token_types = weights.vec(
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?;
            (&BERT_LAYER, token_types, 0, None)
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            // Q, K and V share one product: stack their [h, h] matrices into one [3h, h].
            let qkv = names
                .qkv
                .iter()
                .map(|part| weights.get(&format!("{p}.{part}.weight"), &[h, h]))
                .collect::<Result<Vec<_>, _>>()?;
            let qkv_t = Tensor::cat(&qkv, 0)
                .and_then(|t| t.t())
                .and_then(|t| t.contiguous())
                .map_err(|e| weights.bad_shape(format!("layer {i}: cannot fuse Q, K, V: {e}")))?;
            let mut qkv_bias = Vec::with_capacity(3 * h);
            for part in names.qkv {
                qkv_bias.extend(weights.vec(&format!("{p}.{part}.bias"), &[h])?);
            }
            layers.push(Layer {
                qkv_t,
                qkv_bias,
                attention_out_t: weights.matrix_t(
                    &format!("{p}.{}.weight", names.attention_out),
                    h,
                    h,
                )?,
                attention_out_bias: weights
                    .vec(&format!("{p}.{}.bias", names.attention_out), &[h])?,
                attention_norm: weights.norm(&format!("{p}.{}", names.attention_norm), h)?,
                intermediate_t: weights.matrix_t(
                    &format!("{p}.intermediate.dense.weight"),
                    inter,
                    h,
                )?,
                intermediate_bias: weights
                    .vec(&format!("{p}.intermediate.dense.bias"), &[inter])?,
                output_t: weights.matrix_t(&format!("{p}.output.dense.weight"), h, inter)?,
                output_bias: weights.vec(&format!("{p}.output.dense.bias"), &[h])?,
                output_norm: weights.norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        Ok(Self {
            hidden: h,
            heads: config.num_attention_heads,
            eps: config.layer_norm_eps as f32,
            activation,
            max_positions: config.max_position_embeddings,
            position_offset,
            word_embeddings: weights
                .vec("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position_embeddings: weights.vec(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_types,
            embedding_norm: weights.norm("embeddings.LayerNorm", h)?,
            layers,
            relative_bias,
        })
    }

    /// Rows of the word-embedding matrix.
    pub fn vocab_rows(&self) -> usize {
        self.word_embeddings.len() / self.hidden
    }

    /// Width of a token vector.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Runs the encoder over sequences of token ids (each at most the position limit long, ids
    /// below [`Self::vocab_rows`]), every token of type 0. Returns the last layer's token
    /// vectors, padded to the longest sequence: row `b * seq_len + t` is token `t` of sequence
    /// `b`. Padding rows are garbage.
    pub fn forward(&self, sequences: &[&[u32]]) -> Result<(Vec<f32>, usize), EmbedError> {
        self.forward_typed(sequences, None)
    }

    /// [`Self::forward`] with each token's type (BERT's segment: 0 for the first text of a pair,
    /// 1 for the second), one list per sequence as long as it; `None` means all 0.
    pub fn forward_typed(
        &self,
        sequences: &[&[u32]],
        types: Option<&[&[u32]]>,
    ) -> Result<(Vec<f32>, usize), EmbedError> {
        let h = self.hidden;
        if let Some(types) = types {
            let type_rows = self.token_types.len() / h;
            if types.len() != sequences.len()
                || types.iter().zip(sequences).any(|(t, s)| t.len() != s.len())
            {
                return Err(EmbedError::Inference(
                    "token types do not line up with the tokens".into(),
                ));
            }
            if let Some(t) = types
                .iter()
                .flat_map(|t| t.iter())
                .find(|t| **t as usize >= type_rows)
            {
                return Err(EmbedError::Inference(format!(
                    "token type {t} is outside the model's {type_rows} token types"
                )));
            }
        }
        let seq_len = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
        if seq_len == 0 {
            return Ok((Vec::new(), 0));
        }
        if seq_len + self.position_offset > self.max_positions {
            return Err(EmbedError::Inference(format!(
                "a sequence of {seq_len} tokens is longer than the model's {} positions",
                self.max_positions - self.position_offset
            )));
        }
        let vocab = self.vocab_rows();
        if let Some(id) = sequences
            .iter()
            .flat_map(|s| s.iter())
            .find(|id| **id as usize >= vocab)
        {
            return Err(EmbedError::Inference(format!(
                "token id {id} is outside the model's {vocab}-row vocabulary"
            )));
        }
        let lengths: Vec<usize> = sequences.iter().map(|s| s.len()).collect();
        let rows = sequences.len() * seq_len;

        let mut x = vec![0.0f32; rows * h];
        let embedding_norm = self.embedding_norm.as_norm(self.eps);
        x.par_chunks_mut(seq_len * h)
            .zip(sequences.par_iter())
            .enumerate()
            .for_each(|(b, (out, ids))| {
                for (t, (row, id)) in out.chunks_exact_mut(h).zip(ids.iter()).enumerate() {
                    let word = &self.word_embeddings[*id as usize * h..(*id as usize + 1) * h];
                    let p = t + self.position_offset;
                    let position = &self.position_embeddings[p * h..(p + 1) * h];
                    let k = types.map_or(0, |types| types[b][t] as usize);
                    let token_type = &self.token_types[k * h..(k + 1) * h];
                    for (((v, w), p), k) in row.iter_mut().zip(word).zip(position).zip(token_type) {
                        *v = w + p + k;
                    }
                    kernels::layer_norm_row(row, &embedding_norm);
                }
            });

        let inference = |e: candle_core::Error| EmbedError::Inference(e.to_string());
        let position_bias = self
            .relative_bias
            .as_ref()
            .map(|bias| bias.by_distance(seq_len));
        let mut x = Tensor::from_vec(x, (rows, h), &Device::Cpu).map_err(inference)?;
        for layer in &self.layers {
            let qkv = x.matmul(&layer.qkv_t).map_err(inference)?;
            let context = qkv
                .apply_op1_no_bwd(&Attention {
                    bias: &layer.qkv_bias,
                    shape: AttentionShape {
                        seq_len,
                        lengths: &lengths,
                        heads: self.heads,
                        head_dim: h / self.heads,
                        position_bias: position_bias.as_deref(),
                    },
                })
                .map_err(inference)?;
            let attended = context.matmul(&layer.attention_out_t).map_err(inference)?;
            attended
                .inplace_op2(
                    &x,
                    &BiasResidualNorm {
                        bias: &layer.attention_out_bias,
                        norm: layer.attention_norm.as_norm(self.eps),
                    },
                )
                .map_err(inference)?;
            let intermediate = attended.matmul(&layer.intermediate_t).map_err(inference)?;
            intermediate
                .inplace_op1(&BiasActivation {
                    bias: &layer.intermediate_bias,
                    activation: self.activation,
                })
                .map_err(inference)?;
            let output = intermediate.matmul(&layer.output_t).map_err(inference)?;
            output
                .inplace_op2(
                    &attended,
                    &BiasResidualNorm {
                        bias: &layer.output_bias,
                        norm: layer.output_norm.as_norm(self.eps),
                    },
                )
                .map_err(inference)?;
            x = output;
        }
        let hidden = x
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(inference)?;
        Ok((hidden, seq_len))
    }
}
