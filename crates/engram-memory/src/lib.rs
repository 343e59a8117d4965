//! What makes engram a memory and not a table.
//!
//! [`search`] finds memories again and explains why each one ranked where it did.

pub mod search;

pub use search::{ScoreParts, SearchHit, SearchRequest, Searcher};
