//! A cross-encoder reranker: a BERT sequence-classification model (Hugging Face
//! `BertForSequenceClassification`, as sentence-transformers' `CrossEncoder` saves it) that
//! reads the query and a text together, `[CLS] query [SEP] text [SEP]` with token types 0 then
//! 1, and scores the pair with one number.
//!
//! It runs on the same BERT encoder as the embedder ([`super::bert`]); on top of it, the
//! `[CLS]` vector goes through the pooler (dense + tanh, when the checkpoint has one) and the
//! classifier's linear layer. The score is that raw logit (sentence-transformers applies a
//! sigmoid on top, which does not change the order).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::Tensor;
use engram_core::{EmbedError, RerankError, Reranker};
use tokenizers::{Encoding, Tokenizer};

use super::bert::{BertModel, Weights, encoder_prefix, read_tensors};
use super::folder::ModelFolder;
use super::{batches, load_tokenizer, read_bytes};
use crate::text::cut_long_text;

/// Texts longer than this many bytes per window token are cut before tokenizing (as the
/// embedder does): a huge memory costs no more than a window's worth of work.
const BYTES_PER_TOKEN_BOUND: usize = 64;

/// A BERT cross-encoder folder (`config.json`, `tokenizer.json`, `model.safetensors`) run
/// in-process on the CPU. Cheap to clone (the weights are shared).
#[derive(Clone)]
pub struct CrossEncoder {
    model: Arc<CrossModel>,
}

struct CrossModel {
    folder: ModelFolder,
    tokenizer: Tokenizer,
    bert: BertModel,
    /// The pooler's `[h, h]` matrix, transposed, and its bias (`None`: the checkpoint has no
    /// pooler and the classifier reads `[CLS]` directly).
    pooler: Option<(Tensor, Vec<f32>)>,
    /// The classifier's one row of weights and its bias.
    classifier: (Vec<f32>, f32),
    name: String,
}

impl fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("name", &self.model.name)
            .field("dir", &self.model.folder.dir)
            .field("max_seq_length", &self.model.folder.max_seq_length)
            .finish()
    }
}

impl CrossEncoder {
    /// Loads and checks a cross-encoder folder: a missing file, a configuration that is not
    /// BERT, a tensor of the wrong shape or a classifier with other than one output is an error
    /// naming the file.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let folder = ModelFolder::read(dir)?;
        let config_path = folder.transformer_file("config.json");
        if folder.bert.is_mpnet() {
            return Err(EmbedError::Unsupported {
                path: config_path,
                detail: "only BERT cross-encoders run locally, not MPNet ones".into(),
            });
        }
        let weights_path = folder.transformer_file("model.safetensors");
        let tensors = read_tensors(&read_bytes(&weights_path)?, &weights_path)?;
        let bert = BertModel::from_tensors(&tensors, &weights_path, &folder.bert)?;
        let h = folder.bert.hidden_size;

        let encoder = Weights::new(
            &tensors,
            encoder_prefix(&tensors, &weights_path)?,
            &weights_path,
        );
        let pooler = if encoder.has("pooler.dense.weight") {
            Some((
                encoder.matrix_t("pooler.dense.weight", h, h)?,
                encoder.vec("pooler.dense.bias", &[h])?,
            ))
        } else {
            None
        };
        let head = Weights::new(&tensors, "", &weights_path);
        if !head.has("classifier.weight") {
            return Err(EmbedError::BadShape {
                path: weights_path,
                detail: "there is no classifier.weight tensor; this is not a BERT \
                         sequence-classification (cross-encoder) model"
                    .into(),
            });
        }
        let labels = tensors
            .get("classifier.weight")
            .map(|t| t.dims().first().copied().unwrap_or(0))
            .unwrap_or(0);
        if labels != 1 {
            return Err(EmbedError::Unsupported {
                path: weights_path,
                detail: format!(
                    "the classifier has {labels} outputs; a reranking cross-encoder has one score"
                ),
            });
        }
        let classifier = (
            head.vec("classifier.weight", &[1, h])?,
            head.vec("classifier.bias", &[1])?
                .first()
                .copied()
                .unwrap_or(0.0),
        );

        let (tokenizer, _) = load_tokenizer(&folder, bert.vocab_rows())?;

        let name = folder
            .dir
            .canonicalize()
            .unwrap_or_else(|_| folder.dir.clone())
            .file_name()
            .map(|n| format!("cross-encoder:{}", n.to_string_lossy()))
            .unwrap_or_else(|| "cross-encoder".into());
        Ok(Self {
            model: Arc::new(CrossModel {
                folder,
                tokenizer,
                bert,
                pooler,
                classifier,
                name,
            }),
        })
    }

    /// The model folder.
    pub fn dir(&self) -> &Path {
        &self.model.folder.dir
    }

    /// Scores every text against `query` on the calling thread (the work itself is spread
    /// over all cores): one logit per text, in order, higher meaning more relevant.
    pub fn score_blocking(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, EmbedError> {
        self.model.score(query, texts)
    }
}

#[async_trait]
impl Reranker for CrossEncoder {
    fn name(&self) -> &str {
        &self.model.name
    }

    async fn score(&self, query: &str, texts: &[String]) -> Result<Vec<Option<f64>>, RerankError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = Arc::clone(&self.model);
        let query = query.to_string();
        let texts = texts.to_vec();
        // CPU-bound for milliseconds to seconds: keep it off the async workers.
        let scores = tokio::task::spawn_blocking(move || model.score(&query, &texts))
            .await
            .map_err(|e| EmbedError::Inference(format!("the reranking task stopped: {e}")))??;
        Ok(scores.into_iter().map(|s| Some(f64::from(s))).collect())
    }
}

impl CrossModel {
    fn score(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self.tokenize(query, texts)?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].len()));
        let h = self.bert.hidden();
        let mut scores = vec![0.0f32; texts.len()];
        for batch in batches(&order, |i| encodings[i].len()) {
            let ids: Vec<&[u32]> = batch.iter().map(|&i| encodings[i].get_ids()).collect();
            let types: Vec<&[u32]> = batch.iter().map(|&i| encodings[i].get_type_ids()).collect();
            let (hidden, seq_len) = self.bert.forward_typed(&ids, Some(&types))?;
            // The [CLS] row of each sequence.
            let mut cls = Vec::with_capacity(batch.len() * h);
            for position in 0..batch.len() {
                let row = position * seq_len * h;
                cls.extend_from_slice(&hidden[row..row + h]);
            }
            let pooled = self.pool(cls, batch.len())?;
            let (weights, bias) = &self.classifier;
            for (position, &index) in batch.iter().enumerate() {
                let row = &pooled[position * h..(position + 1) * h];
                scores[index] = row.iter().zip(weights).map(|(x, w)| x * w).sum::<f32>() + bias;
            }
        }
        Ok(scores)
    }

    /// The pooler over `[CLS]` vectors (`rows x h`): tanh(x W + b); unchanged without one.
    fn pool(&self, cls: Vec<f32>, rows: usize) -> Result<Vec<f32>, EmbedError> {
        let Some((matrix_t, bias)) = &self.pooler else {
            return Ok(cls);
        };
        let inference = |e: candle_core::Error| EmbedError::Inference(e.to_string());
        let h = self.bert.hidden();
        let x = Tensor::from_vec(cls, (rows, h), &candle_core::Device::Cpu).map_err(inference)?;
        let mut out = x
            .matmul(matrix_t)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(inference)?;
        for row in out.chunks_exact_mut(h) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v = (*v + b).tanh();
            }
        }
        Ok(out)
    }

    /// Each `(query, text)` pair tokenized together, cut to the window.
    fn tokenize(&self, query: &str, texts: &[String]) -> Result<Vec<Encoding>, EmbedError> {
        let limit = self
            .folder
            .max_seq_length
            .saturating_mul(BYTES_PER_TOKEN_BOUND);
        let query = cut_long_text(query, limit).to_string();
        let pairs: Vec<(String, String)> = texts
            .iter()
            .map(|text| (query.clone(), cut_long_text(text, limit).to_string()))
            .collect();
        self.tokenizer
            .encode_batch(pairs, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))
    }
}
