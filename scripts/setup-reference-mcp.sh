#!/usr/bin/env bash
# Installs the reference MCP memory server (npm package @modelcontextprotocol/server-memory)
# under .cache/, for `engram bench mcp` only (no test needs it), and prints its entry point.
# Idempotent: a complete install of the pinned version is left alone.
#
# Needs node and npm with access to the npm registry (nothing else is downloaded).
#
# Usage:  scripts/setup-reference-mcp.sh          # prints .../dist/index.js
#         engram bench mcp --data ... --reference "$(scripts/setup-reference-mcp.sh)"
set -euo pipefail

version="${ENGRAM_REFERENCE_MCP_VERSION:-2026.8.31}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/.cache/reference-mcp-memory"
entry="$dest/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
stamp="$dest/.engram-$version"

if [[ -f "$entry" && -f "$stamp" ]]; then
    echo "$entry"
    exit 0
fi

command -v npm >/dev/null || { echo "setup-reference-mcp: npm not found; install Node.js (18 or newer)" >&2; exit 1; }

# Install beside the destination and move into place only when complete.
mkdir -p "$repo_root/.cache"
work="$(mktemp -d "$repo_root/.cache/.reference-mcp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
npm install --prefix "$work" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-memory@$version" >&2
[[ -f "$work/node_modules/@modelcontextprotocol/server-memory/dist/index.js" ]] || {
    echo "setup-reference-mcp: the package has no dist/index.js" >&2
    exit 1
}
touch "$work/.engram-$version"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$entry"
