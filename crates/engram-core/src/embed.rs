//! The embedder abstraction: turning texts into vectors for dense retrieval.
//!
//! An [`Embedder`] maps texts to fixed-length vectors. Every stored vector records the
//! [`Embedder::model_id`] that produced it, so that vectors from different models (different
//! vector spaces) are never compared: when the id changes, the store's vectors must be rebuilt.
//!
//! Empty input: an empty batch embeds to an empty result. A text that is empty or only whitespace
//! carries no meaning to embed, so every embedder rejects the whole batch with
//! [`EmbedError::EmptyText`] (naming its position) before doing any work; callers filter such
//! texts out first (the store never holds an empty memory).
//!
//! Long input: texts longer than the model's window are cut to fit, never rejected; the
//! [`Embedding::truncated`] flag says so, so that `--explain` can tell the user.

use std::fmt::Debug;
use std::path::PathBuf;

use async_trait::async_trait;

/// The vector for one text.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    /// The vector, [`Embedder::dimension`] long. L2-normalised when the model asks for it (a
    /// sentence-transformers `Normalize` module); compare with [`cosine`] to be safe either way.
    pub vector: Vec<f32>,
    /// True when the text was longer than the model's window and only its beginning was embedded.
    pub truncated: bool,
}

impl Embedding {
    /// The vector's Euclidean length.
    pub fn norm(&self) -> f32 {
        dot(&self.vector, &self.vector).sqrt()
    }
}

/// Dot product of two vectors (of equal length; extra elements of the longer one are ignored).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent lanes let the compiler vectorise the sum.
    let mut lanes = [0.0f32; 8];
    let chunks_a = a.chunks_exact(8);
    let chunks_b = b.chunks_exact(8);
    let tail: f32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for ((lane, x), y) in lanes.iter_mut().zip(ca).zip(cb) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Cosine similarity in [-1, 1]; 0 when either vector is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let denominator = (dot(a, a) * dot(b, b)).sqrt();
    if denominator > 0.0 {
        dot(a, b) / denominator
    } else {
        0.0
    }
}

/// Scales a vector to unit length in place (an all-zero vector is left alone).
pub fn l2_normalize(vector: &mut [f32]) {
    let norm = dot(vector, vector).sqrt();
    if norm > 0.0 {
        for x in vector.iter_mut() {
            *x /= norm;
        }
    }
}

/// Something that turns texts into vectors.
///
/// Implementations are cheap to share (`Arc<dyn Embedder>`) and safe to call from several tasks
/// at once. No embedder configured means lexical search only; that is represented by having no
/// embedder at all (`Option<Arc<dyn Embedder>>` = `None`), not by a dummy implementation.
#[async_trait]
pub trait Embedder: Send + Sync + Debug {
    /// A stable name for the vector space, recorded with every stored vector, e.g.
    /// `local:all-MiniLM-L6-v2@1a2b3c4d5e6f` or `openai:text-embedding-3-small@api.openai.com`.
    /// It changes whenever the vectors would change (other weights, pooling, window or endpoint).
    fn model_id(&self) -> &str;

    /// Length of every vector this embedder returns.
    fn dimension(&self) -> usize;

    /// The most tokens of a text the model reads (longer texts are truncated), when known.
    fn max_input_tokens(&self) -> Option<usize>;

    /// Embeds the texts, one [`Embedding`] per text, in order.
    ///
    /// An empty slice gives an empty result. Fails as a whole (nothing partial) on any error,
    /// including [`EmbedError::EmptyText`] for a blank text.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>, EmbedError>;

    /// Embeds one text (a search query, say).
    async fn embed_one(&self, text: &str) -> Result<Embedding, EmbedError> {
        let mut embeddings = self.embed(&[text.to_string()]).await?;
        match embeddings.pop() {
            Some(embedding) if embeddings.is_empty() => Ok(embedding),
            _ => Err(EmbedError::BadResponse(format!(
                "{} returned {} vectors for one text",
                self.model_id(),
                embeddings.len() + 1
            ))),
        }
    }
}

/// Returns [`EmbedError::EmptyText`] for the first text that is empty or whitespace only.
pub fn reject_blank_texts(texts: &[String]) -> Result<(), EmbedError> {
    match texts.iter().position(|text| text.trim().is_empty()) {
        Some(index) => Err(EmbedError::EmptyText { index }),
        None => Ok(()),
    }
}

/// Why embedding (or loading an embedding model) failed. Every variant reads as a complete
/// one-line message naming the cause.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedError {
    /// A required file is missing from a model folder.
    #[error("the model folder {} has no {file}; it is not a complete sentence-transformers model (fetch it again with `engram model fetch`)", dir.display())]
    MissingFile {
        /// The model folder.
        dir: PathBuf,
        /// The missing file, relative to the folder.
        file: String,
    },
    /// The model folder does not exist or is not a folder.
    #[error("the model folder {} does not exist or is not a folder", dir.display())]
    NoModelFolder {
        /// The path given.
        dir: PathBuf,
    },
    /// A file in the model folder cannot be read or parsed.
    #[error("cannot read {}: {detail}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A weight tensor is missing or has a shape that does not fit the model's configuration.
    #[error("{}: {detail}", path.display())]
    BadShape {
        /// The weights file.
        path: PathBuf,
        /// Which tensor, and what was expected and found.
        detail: String,
    },
    /// The model is of a kind this build cannot run.
    #[error("{}: {detail}", path.display())]
    Unsupported {
        /// The file that names the unsupported feature.
        path: PathBuf,
        /// What is not supported.
        detail: String,
    },
    /// The tokenizer produces token ids that the model's embedding matrix does not have rows for.
    #[error(
        "tokenizer.json does not belong to this model: it knows {tokenizer_vocab} tokens but the model's embedding matrix has {embedding_rows} rows"
    )]
    TokenizerMismatch {
        /// Tokens the tokenizer can produce (including added tokens).
        tokenizer_vocab: usize,
        /// Rows of the word-embedding matrix.
        embedding_rows: usize,
    },
    /// The tokenizer failed on a text.
    #[error("tokenizing failed: {0}")]
    Tokenizer(String),
    /// The model computation failed.
    #[error("running the embedding model failed: {0}")]
    Inference(String),
    /// One of the texts is empty or whitespace only.
    #[error("text #{index} is empty or only whitespace; there is nothing to embed")]
    EmptyText {
        /// Its position in the batch (0-based).
        index: usize,
    },
    /// The embedding endpoint answered with an HTTP error.
    #[error("the embedding endpoint {url} answered HTTP {status}: {body}")]
    Http {
        /// The URL called.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The embedding endpoint could not be reached.
    #[error("cannot reach the embedding endpoint {url}: {detail}")]
    Network {
        /// The URL called.
        url: String,
        /// What the connection reported.
        detail: String,
    },
    /// The embedding endpoint did not answer in time.
    #[error("the embedding endpoint {url} did not answer within {seconds} s")]
    Timeout {
        /// The URL called.
        url: String,
        /// The time limit.
        seconds: u64,
    },
    /// The endpoint's answer is not a valid embeddings response.
    #[error("the embedding endpoint's answer is not usable: {0}")]
    BadResponse(String),
    /// The model returned vectors of another length than expected.
    #[error(
        "{model} returned {found}-dimensional vectors but {expected} dimensions were expected; check the configured model and dimension"
    )]
    WrongDimension {
        /// The model id.
        model: String,
        /// The expected length.
        expected: usize,
        /// The length returned.
        found: usize,
    },
    /// The embedding configuration is incomplete or contradictory.
    #[error("embedding configuration: {0}")]
    Config(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cosine_of_known_vectors() {
        assert!((cosine(&[1.0, 0.0], &[0.0, 2.0])).abs() < 1e-7);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 0.0], &[-3.0, 0.0]) + 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn normalising_gives_unit_length_and_leaves_zero_alone() {
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut zero = vec![0.0; 5];
        l2_normalize(&mut zero);
        assert_eq!(zero, vec![0.0; 5]);
        let embedding = Embedding {
            vector: v,
            truncated: false,
        };
        assert!((embedding.norm() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn blank_texts_are_named_by_position() {
        let texts = vec!["hello".to_string(), " \n\t".to_string(), String::new()];
        assert_eq!(
            reject_blank_texts(&texts),
            Err(EmbedError::EmptyText { index: 1 })
        );
        assert_eq!(reject_blank_texts(&texts[..1]), Ok(()));
        assert_eq!(reject_blank_texts(&[]), Ok(()));
        assert_eq!(
            EmbedError::EmptyText { index: 1 }.to_string(),
            "text #1 is empty or only whitespace; there is nothing to embed"
        );
    }

    proptest! {
        #[test]
        fn dot_matches_the_plain_sum(pairs in proptest::collection::vec((-10.0f32..10.0, -10.0f32..10.0), 0..70)) {
            let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            prop_assert!((f64::from(dot(&a, &b)) - plain).abs() < 1e-3 * (1.0 + plain.abs()));
        }
    }
}
