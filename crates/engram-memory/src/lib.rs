//! engram-memory (to be built).
