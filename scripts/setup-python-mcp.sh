#!/usr/bin/env bash
# Installs the official MCP Python SDK (PyPI package `mcp`) into a virtual environment under
# .cache/, for the tests that drive engram's MCP server with it, and prints the environment's
# python. Idempotent: a complete environment with the pinned version is left alone.
#
# Needs python3 with the venv module and access to PyPI (nothing else is downloaded).
#
# Usage:  scripts/setup-python-mcp.sh          # prints the venv's python
#         export ENGRAM_TEST_MCP_PYTHON="$(scripts/setup-python-mcp.sh)"
set -euo pipefail

version="2.3.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo_root/.cache/python-mcp"
python_bin="$venv/bin/python"
stamp="$venv/.engram-mcp-$version"

if [[ -x "$python_bin" && -f "$stamp" ]]; then
    echo "$python_bin"
    exit 0
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "setup-python-mcp: $python not found; install Python 3 (3.10 or newer) with venv" >&2; exit 1; }

# Build beside the destination and move into place only when complete.
mkdir -p "$repo_root/.cache"
work="$(mktemp -d "$repo_root/.cache/.python-mcp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv" >&2
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$version" >&2
"$work/venv/bin/python" -c "import mcp.client.stdio, mcp.client.streamable_http" >&2
touch "$work/venv/.engram-mcp-$version"
rm -rf "$venv"
# A venv records its own path in its scripts; moving it keeps python itself working, and the
# tests only run `python -m ...` / `python script.py`.
mv "$work/venv" "$venv"
echo "$python_bin"
