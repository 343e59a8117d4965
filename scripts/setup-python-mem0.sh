#!/usr/bin/env bash
# Installs Mem0's Python client (PyPI package `mem0ai`, whose MemoryClient the compatibility
# tests point at `engram serve`) into a virtual environment under .cache/, and prints the
# environment's python. Idempotent: a complete environment with the pinned version is left alone.
#
# Needs python3 (3.10 or newer) with the venv module and access to PyPI (nothing else is
# downloaded).
#
# Usage:  scripts/setup-python-mem0.sh          # prints the venv's python
#         export ENGRAM_TEST_MEM0_PYTHON="$(scripts/setup-python-mem0.sh)"
set -euo pipefail

version="2.2.1"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo_root/.cache/python-mem0"
python_bin="$venv/bin/python"
stamp="$venv/.engram-mem0ai-$version"

if [[ -x "$python_bin" && -f "$stamp" ]]; then
    echo "$python_bin"
    exit 0
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "setup-python-mem0: $python not found; install Python 3 (3.10 or newer) with venv" >&2; exit 1; }

# Build beside the destination and move into place only when complete.
mkdir -p "$repo_root/.cache"
work="$(mktemp -d "$repo_root/.cache/.python-mem0.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv" >&2
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "mem0ai==$version" >&2
# The client reports usage to its vendor unless told not to; the tests never reach the internet.
MEM0_TELEMETRY=false MEM0_DIR="$work/mem0-home" "$work/venv/bin/python" -c "from mem0 import MemoryClient" >&2
rm -rf "$work/mem0-home"
touch "$work/venv/.engram-mem0ai-$version"
rm -rf "$venv"
# A venv records its own path in its scripts; moving it keeps python itself working, and the
# tests only run `python script.py`.
mv "$work/venv" "$venv"
echo "$python_bin"
