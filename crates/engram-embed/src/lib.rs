//! engram-embed (to be built).
