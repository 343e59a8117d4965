//! The embedder abstraction (owned by the retrieval work; see issue "Hybrid retrieval").
