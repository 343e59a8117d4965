#!/usr/bin/env bash
# Installs schemathesis (PyPI), the property-based API tester that the contract test
# (crates/engram-cli/tests/api_contract.rs) runs against a real `engram serve` over its
# /openapi.json, into a virtual environment under .cache/, and prints the environment's python.
# Idempotent: a complete environment with the pinned version is left alone.
#
# Needs python3 (3.10 or newer) with the venv module and access to PyPI (nothing else is
# downloaded).
#
# Usage:  scripts/setup-python-schemathesis.sh          # prints the venv's python
#         export ENGRAM_TEST_SCHEMATHESIS_PYTHON="$(scripts/setup-python-schemathesis.sh)"
set -euo pipefail

version="4.32.5"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo_root/.cache/python-schemathesis"
python_bin="$venv/bin/python"
stamp="$venv/.engram-schemathesis-$version"

if [[ -x "$python_bin" && -f "$stamp" ]]; then
    echo "$python_bin"
    exit 0
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "setup-python-schemathesis: $python not found; install Python 3 (3.10 or newer) with venv" >&2; exit 1; }

# Build beside the destination and move into place only when complete.
mkdir -p "$repo_root/.cache"
work="$(mktemp -d "$repo_root/.cache/.python-schemathesis.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv" >&2
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$version" >&2
"$work/venv/bin/python" -m schemathesis.cli --version >&2
touch "$work/venv/.engram-schemathesis-$version"
rm -rf "$venv"
# A venv records its own path in its scripts (the `st` launcher among them); moving it keeps
# python itself working, and the test only runs `python -m schemathesis.cli`.
mv "$work/venv" "$venv"
echo "$python_bin"
