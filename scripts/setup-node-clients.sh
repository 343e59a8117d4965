#!/usr/bin/env bash
# Installs the JavaScript clients the compatibility tests drive engram with, under .cache/, and
# prints the node_modules directory that holds them:
#   - mem0ai (npm): Mem0's MemoryClient, pointed at `engram serve`;
#   - @modelcontextprotocol/sdk: the official MCP TypeScript SDK, starting `engram mcp`;
#   - @modelcontextprotocol/server-memory: the reference MCP memory server, which the same test
#     starts beside `engram mcp` to compare tools, schemas, annotations and answers.
# Idempotent: a complete install of the pinned versions is left alone.
#
# Needs node (18 or newer) and npm with access to the npm registry (nothing else is downloaded).
#
# Usage:  scripts/setup-node-clients.sh          # prints .../node_modules
#         export ENGRAM_TEST_NODE_MODULES="$(scripts/setup-node-clients.sh)"
set -euo pipefail

mem0_version="3.3.1"
mcp_sdk_version="1.32.2"
reference_version="2026.8.31"
stamp_name=".engram-mem0ai-$mem0_version-mcp-sdk-$mcp_sdk_version-server-memory-$reference_version"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/.cache/node-clients"
modules="$dest/node_modules"

if [[ -f "$dest/$stamp_name" && -d "$modules/mem0ai" && -d "$modules/@modelcontextprotocol/sdk" \
    && -f "$modules/@modelcontextprotocol/server-memory/dist/index.js" ]]; then
    echo "$modules"
    exit 0
fi

command -v node >/dev/null || { echo "setup-node-clients: node not found; install Node.js (18 or newer)" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup-node-clients: npm not found; install Node.js (18 or newer) with npm" >&2; exit 1; }

# Install beside the destination and move into place only when complete.
mkdir -p "$repo_root/.cache"
work="$(mktemp -d "$repo_root/.cache/.node-clients.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# Peer dependencies (vector stores, model SDKs) are for mem0ai's own server-side memory, not
# its client: left out, and no install scripts run (nothing is compiled or downloaded).
npm install --prefix "$work" --no-audit --no-fund --loglevel=error --legacy-peer-deps --ignore-scripts \
    "mem0ai@$mem0_version" "@modelcontextprotocol/sdk@$mcp_sdk_version" \
    "@modelcontextprotocol/server-memory@$reference_version" >&2
node -e 'require(process.argv[1]); require(process.argv[2])' \
    "$work/node_modules/mem0ai" "$work/node_modules/@modelcontextprotocol/sdk/dist/cjs/client/index.js" >&2 || {
    echo "setup-node-clients: the installed packages do not load" >&2
    exit 1
}
touch "$work/$stamp_name"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$modules"
