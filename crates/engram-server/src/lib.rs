//! engram-server (to be built).
