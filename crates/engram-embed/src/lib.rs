//! engram's embedders: what turns texts into vectors for dense retrieval.
//!
//! - [`LocalEmbedder`]: a sentence-transformers BERT-family model folder run in-process on the
//!   CPU, in pure Rust (candle for the matrix products, Hugging Face `tokenizers` for the text).
//! - [`OpenAiEmbedder`]: any OpenAI-compatible `/v1/embeddings` endpoint.
//! - [`CrossEncoder`]: not an embedder but a reranker on the same BERT encoder: a
//!   sequence-classification model folder that scores (query, text) pairs.
//! - no embedder (lexical search only) is `None`: [`config::from_config`] returns
//!   `Option<Arc<dyn Embedder>>`.
//!
//! [`hub`] installs models from the Hugging Face hub and lists installed ones; [`bench`] measures
//! embedding speed. The trait and its error type live in `engram_core::embed`.

pub mod bench;
pub mod config;
pub mod hub;
pub mod local;
pub mod openai;
mod text;

pub use config::{EmbedChoice, EmbedConfig, OpenAiConfig, Provider, choose, from_config};
pub use engram_core::{EmbedError, Embedder, Embedding};
pub use local::{CrossEncoder, LocalEmbedder};
pub use openai::{OpenAiEmbedder, OpenAiOptions};
