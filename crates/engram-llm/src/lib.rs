//! engram-llm (to be built).
