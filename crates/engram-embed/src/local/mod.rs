//! The local embedder: a sentence-transformers BERT or MPNet model run in-process on the CPU;
//! and on the same encoder, a BERT cross-encoder that reranks search hits ([`CrossEncoder`]).

mod bert;
mod cross_encoder;
pub(crate) mod folder;
mod kernels;
mod mpnet;
mod pooling;

use std::borrow::Cow;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use engram_core::embed::{l2_normalize, reject_blank_texts};
use engram_core::{EmbedError, Embedder, Embedding};
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use crate::text::cut_long_text;
use bert::BertModel;
pub use cross_encoder::CrossEncoder;
use folder::ModelFolder;
pub use folder::PoolingMode;

/// Most texts run through the encoder together.
const MAX_BATCH_TEXTS: usize = 32;
/// Most padded tokens run through the encoder together (bounds memory for long texts).
const MAX_BATCH_TOKENS: usize = 4096;
/// Texts longer than this many bytes per window token are cut before tokenizing (a token is
/// almost never that long), so a huge text costs no more than a window's worth of work.
const BYTES_PER_TOKEN_BOUND: usize = 64;

/// A sentence-transformers model folder (BERT family) run in-process.
///
/// Cheap to clone (the weights are shared). [`Embedder::embed`] runs the model on a blocking
/// thread, using every core through rayon; [`LocalEmbedder::embed_blocking`] is the same work
/// for callers that are not async.
#[derive(Clone)]
pub struct LocalEmbedder {
    model: Arc<LocalModel>,
}

struct LocalModel {
    folder: ModelFolder,
    tokenizer: Tokenizer,
    bert: BertModel,
    model_id: String,
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model_id", &self.model.model_id)
            .field("dir", &self.model.folder.dir)
            .field("dimension", &self.dimension())
            .field("max_seq_length", &self.model.folder.max_seq_length)
            .finish()
    }
}

impl LocalEmbedder {
    /// Loads and checks a model folder: every missing file, malformed configuration, tensor of
    /// the wrong shape, or tokenizer that does not fit the model is an error naming the file.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let folder = ModelFolder::read(dir)?;
        let weights_path = folder.transformer_file("model.safetensors");
        let weights = read_bytes(&weights_path)?;
        let bert = BertModel::load(&weights, &weights_path, &folder.bert)?;

        let (tokenizer, tokenizer_bytes) = load_tokenizer(&folder, bert.vocab_rows())?;

        let config_bytes = read_bytes(&folder.transformer_file("config.json"))?;
        let model_id = model_id(&folder, &[&config_bytes, &tokenizer_bytes, &weights]);
        Ok(Self {
            model: Arc::new(LocalModel {
                folder,
                tokenizer,
                bert,
                model_id,
            }),
        })
    }

    /// The model folder.
    pub fn dir(&self) -> &Path {
        &self.model.folder.dir
    }

    /// Whether vectors are L2-normalised (the model has a Normalize module).
    pub fn normalizes(&self) -> bool {
        self.model.folder.normalize
    }

    /// How token vectors are pooled.
    pub fn pooling(&self) -> &[PoolingMode] {
        &self.model.folder.pooling
    }

    /// Embeds texts on the calling thread (the work itself is spread over all cores).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Embedding>, EmbedError> {
        self.model.embed(texts)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        &self.model.model_id
    }

    fn dimension(&self) -> usize {
        self.model.folder.dimension()
    }

    fn max_input_tokens(&self) -> Option<usize> {
        Some(self.model.folder.max_seq_length)
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>, EmbedError> {
        reject_blank_texts(texts)?;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = Arc::clone(&self.model);
        let texts = texts.to_vec();
        // The model is CPU-bound for milliseconds to seconds: keep it off the async workers.
        tokio::task::spawn_blocking(move || model.embed(&texts))
            .await
            .map_err(|e| EmbedError::Inference(format!("the embedding task stopped: {e}")))?
    }
}

/// The folder's tokenizer, without padding, truncating to the folder's window, checked against
/// a model with `vocab_rows` token embeddings. The window comes from the sentence-transformers
/// config, not tokenizer.json (which often carries a fixed padding and a different limit from
/// training); a pair longer than the window loses tokens from its longer side, as transformers'
/// default truncation does. Also returns the file's bytes (a model's id hashes them).
fn load_tokenizer(
    folder: &ModelFolder,
    vocab_rows: usize,
) -> Result<(Tokenizer, Vec<u8>), EmbedError> {
    let tokenizer_path = folder.transformer_file("tokenizer.json");
    let tokenizer_bytes = read_bytes(&tokenizer_path)?;
    let mut tokenizer =
        Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| EmbedError::BadFile {
            path: tokenizer_path.clone(),
            detail: format!("not a valid tokenizer: {e}"),
        })?;
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: folder.max_seq_length,
            ..TruncationParams::default()
        }))
        .map_err(|e| EmbedError::BadFile {
            path: tokenizer_path.clone(),
            detail: format!("cannot truncate to {} tokens: {e}", folder.max_seq_length),
        })?;
    tokenizer.with_padding(None);
    check_vocabulary(tokenizer.get_vocab_size(true), vocab_rows)?;
    Ok((tokenizer, tokenizer_bytes))
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|e| EmbedError::BadFile {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })
}

/// The tokenizer may know fewer tokens than the matrix has rows (matrices are often padded to a
/// multiple of 64 or 128), never more, and not far fewer (that is another model's tokenizer).
fn check_vocabulary(tokenizer_vocab: usize, embedding_rows: usize) -> Result<(), EmbedError> {
    const PADDING_SLACK: usize = 128;
    if tokenizer_vocab > embedding_rows || embedding_rows - tokenizer_vocab >= PADDING_SLACK {
        return Err(EmbedError::TokenizerMismatch {
            tokenizer_vocab,
            embedding_rows,
        });
    }
    Ok(())
}

/// `local:<folder name>@<12 hex digits>`, the digits hashing everything that shapes the vectors.
fn model_id(folder: &ModelFolder, files: &[&[u8]]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"engram local embedder v1\n");
    for file in files {
        hasher.update(&(file.len() as u64).to_le_bytes());
        hasher.update(file);
    }
    let settings = format!(
        "pooling={:?} normalize={} max_seq_length={} lowercase={}",
        folder.pooling, folder.normalize, folder.max_seq_length, folder.lowercase
    );
    hasher.update(settings.as_bytes());
    let hash = hasher.finalize().to_hex();
    let name = folder
        .dir
        .canonicalize()
        .unwrap_or_else(|_| folder.dir.clone())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    format!("local:{name}@{}", &hash.as_str()[..12])
}

/// A text ready for the encoder.
struct Tokenized {
    encoding: Encoding,
    truncated: bool,
}

impl LocalModel {
    fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>, EmbedError> {
        reject_blank_texts(texts)?;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let tokenized = self.tokenize(texts)?;

        // Similar lengths together, so padding wastes little.
        let mut order: Vec<usize> = (0..tokenized.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(tokenized[i].encoding.len()));

        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for batch in batches(&order, |i| tokenized[i].encoding.len()) {
            let sequences: Vec<&[u32]> = batch
                .iter()
                .map(|&i| tokenized[i].encoding.get_ids())
                .collect();
            let (hidden, seq_len) = self.bert.forward(&sequences)?;
            let h = self.bert.hidden();
            for (position, (&index, ids)) in batch.iter().zip(&sequences).enumerate() {
                let tokens = &hidden[position * seq_len * h..(position + 1) * seq_len * h];
                let mut vector = pooling::pool(tokens, h, ids.len(), &self.folder.pooling);
                if self.folder.normalize {
                    l2_normalize(&mut vector);
                }
                vectors[index] = Some(vector);
            }
        }
        vectors
            .into_iter()
            .zip(tokenized)
            .map(|(vector, tokenized)| {
                vector
                    .map(|vector| Embedding {
                        vector,
                        truncated: tokenized.truncated,
                    })
                    .ok_or_else(|| {
                        EmbedError::Inference("a text was left out of every batch".into())
                    })
            })
            .collect()
    }

    fn tokenize(&self, texts: &[String]) -> Result<Vec<Tokenized>, EmbedError> {
        let limit = self
            .folder
            .max_seq_length
            .saturating_mul(BYTES_PER_TOKEN_BOUND);
        let prepared: Vec<Cow<'_, str>> = texts
            .iter()
            .map(|text| {
                let text = cut_long_text(text, limit);
                if self.folder.lowercase {
                    Cow::Owned(text.to_lowercase())
                } else {
                    Cow::Borrowed(text)
                }
            })
            .collect();
        let inputs: Vec<&str> = prepared.iter().map(|t| t.as_ref()).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        encodings
            .into_iter()
            .zip(texts)
            .map(|(encoding, text)| {
                let was_cut = text.len() > limit;
                if was_cut && encoding.get_overflowing().is_empty() {
                    // The cut text fit in the window after all (mostly whitespace, say):
                    // tokenize the whole text so nothing that fits is lost.
                    let whole: Cow<'_, str> = if self.folder.lowercase {
                        Cow::Owned(text.to_lowercase())
                    } else {
                        Cow::Borrowed(text.as_str())
                    };
                    let encoding = self
                        .tokenizer
                        .encode(whole.as_ref(), true)
                        .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
                    let truncated = !encoding.get_overflowing().is_empty();
                    return Ok(Tokenized {
                        encoding,
                        truncated,
                    });
                }
                Ok(Tokenized {
                    truncated: was_cut || !encoding.get_overflowing().is_empty(),
                    encoding,
                })
            })
            .collect()
    }
}

/// Splits indices (already sorted by decreasing length) into batches bounded in texts and in
/// padded tokens (the first, longest text sets the padded length).
fn batches(order: &[usize], len_of: impl Fn(usize) -> usize) -> Vec<&[usize]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let padded = len_of(order[start]).max(1);
        let fit = (MAX_BATCH_TOKENS / padded).clamp(1, MAX_BATCH_TEXTS);
        let end = (start + fit).min(order.len());
        out.push(&order[start..end]);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_check_allows_padding_rows_only() {
        assert!(check_vocabulary(30522, 30522).is_ok());
        assert!(check_vocabulary(30522, 30528).is_ok());
        assert_eq!(
            check_vocabulary(30523, 30522),
            Err(EmbedError::TokenizerMismatch {
                tokenizer_vocab: 30523,
                embedding_rows: 30522
            })
        );
        assert!(check_vocabulary(28996, 30522).is_err());
    }

    #[test]
    fn batches_respect_both_limits_and_keep_every_index() {
        let lens = [300usize, 250, 10, 10, 10, 9, 8];
        let order: Vec<usize> = (0..lens.len()).collect();
        let got = batches(&order, |i| lens[i]);
        assert_eq!(got.iter().map(|b| b.len()).sum::<usize>(), lens.len());
        for batch in &got {
            assert!(batch.len() <= MAX_BATCH_TEXTS);
            assert!(batch.len() == 1 || batch.len() * lens[batch[0]] <= MAX_BATCH_TOKENS);
        }
        let many: Vec<usize> = (0..100).collect();
        let got = batches(&many, |_| 5);
        assert_eq!(got.len(), 100usize.div_ceil(MAX_BATCH_TEXTS));
    }
}
