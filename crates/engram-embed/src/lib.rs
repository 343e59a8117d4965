//! engram's embedders.
//!
//! - [`LocalEmbedder`]: a sentence-transformers BERT-family model folder run in-process on the
//!   CPU (candle for the matrix products, Hugging Face `tokenizers` for the text).
//!
//! No embedder at all (lexical search only) is represented as `None`.

pub mod bench;
pub mod local;

pub use local::LocalEmbedder;
