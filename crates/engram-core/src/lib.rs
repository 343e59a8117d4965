//! engram's vocabulary.
//!
//! Everything the other crates agree on lives here: the memory record and its scope, the clock,
//! time parsing, and the traits that storage, embedding, reranking, language-model and tool
//! implementations fulfil. This crate does no I/O of its own.

pub mod clock;
pub mod embed;
pub mod filter;
pub mod import;
pub mod llm;
pub mod memory;
pub mod rerank;
pub mod store;
pub mod time;
pub mod tool;

pub use clock::{Clock, FixedClock, SystemClock};
pub use embed::{EmbedError, Embedder, Embedding};
pub use filter::{Filter, MetaCondition};
pub use llm::{
    AssistantMessage, ChatModel, ChatRequest, ChatResponse, EventSink, FinishReason, LlmError,
    Message, ModelInfo, ResponseAssembler, Role, StreamEvent, ToolCall, ToolResultMessage, Usage,
};
pub use memory::{
    Importance, InvalidMemory, Kind, Memory, MemoryId, NewMemory, Scope, content_hash,
    normalize_text,
};
pub use rerank::{RerankError, Reranker};
pub use store::{
    AddOutcome, Backend, DayCount, DayCounter, DenseIndexStats, DenseSearchCounts, DenseTuning,
    ExportCursor, HistoryEvent, HistoryKind, LexicalHit, MemoryPatch, MemoryStore, PendingText,
    SessionCount, StoreError, StoreStats, StoredVector, UserCount, VectorHit, VectorModelStats,
};
pub use tool::{Tool, ToolOutput, ToolSpec};
