//! Shared helpers for the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod http;

use std::path::PathBuf;

/// The all-MiniLM-L6-v2 folder the tests run. Fails (never skips) when it is not there.
pub fn test_model_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("ENGRAM_TEST_MODEL_DIR") else {
        panic!(
            "ENGRAM_TEST_MODEL_DIR is not set: run `export ENGRAM_TEST_MODEL_DIR=\"$(scripts/fetch-test-model.sh)\"` \
             from the repository root first (it downloads all-MiniLM-L6-v2 once)"
        );
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("model.safetensors").is_file(),
        "ENGRAM_TEST_MODEL_DIR={} holds no model.safetensors: run scripts/fetch-test-model.sh",
        dir.display()
    );
    dir
}
