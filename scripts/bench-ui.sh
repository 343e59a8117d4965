#!/usr/bin/env bash
# How fast the memory inspector is for a user with many memories: generates N memories (default
# 100,000) of one user, imports them into a fresh home with `engram import`, starts `engram
# serve`, and times the API routes behind each view and each page in Debian's Chromium, from the
# start of navigation to the view drawn with its data (medians and maxima over RUNS loads).
#
# Usage: scripts/bench-ui.sh [MEMORIES] [RUNS]
#   ENGRAM=path/to/engram   the binary to measure (default target/release/engram; build it
#                           with cargo build --release --bin engram)
# Needs what scripts/setup-browser.sh installs (it is run here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

memories="${1:-100000}"
runs="${2:-9}"
engram="${ENGRAM:-target/release/engram}"
[[ -x "$engram" ]] || { echo "bench-ui: $engram not found; build it with: cargo build --release --bin engram" >&2; exit 1; }
ENGRAM_TEST_PLAYWRIGHT="$(scripts/setup-browser.sh)"
export ENGRAM_TEST_PLAYWRIGHT

home="$(mktemp -d "${TMPDIR:-/tmp}/engram-bench-ui.XXXXXX")"
server=""
cleanup() {
    [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT

echo "generating $memories memories of user bench" >&2
node scripts/bench-ui.mjs generate "$memories" "$home/bench.jsonl"
"$engram" --home "$home" import "$home/bench.jsonl" >&2
"$engram" --home "$home" add --user other "someone else's memory" >/dev/null

log="$home/serve.log"
ENGRAM_LOG=warn "$engram" --home "$home" serve --listen 127.0.0.1:0 2>"$log" &
server=$!
for _ in $(seq 1 300); do
    url="$(sed -n 's/^engram is listening on \([^ ]*\).*/\1/p' "$log")"
    [[ -n "$url" ]] && break
    sleep 0.1
done
[[ -n "${url:-}" ]] || { echo "bench-ui: engram serve did not start:" >&2; cat "$log" >&2; exit 1; }
echo "engram serve at $url; $runs runs per figure" >&2
node scripts/bench-ui.mjs run "$url" "$runs"
