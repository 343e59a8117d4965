//! engram-agent (to be built).
