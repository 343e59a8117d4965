//! engram-store (to be built).
