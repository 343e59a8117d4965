#!/usr/bin/env bash
# Installs what the benchmarks need and the tests do not, and prints where each tool is:
#
# - wrk, the HTTP load generator `engram bench server` drives the server with (Debian package
#   `wrk`, installed with apt-get when missing).
#
# Idempotent: a tool already on the PATH is left alone. Needs root (or sudo) to install; anything
# that fails is one line on stderr naming the cause, and a non-zero exit.
#
# Usage:  scripts/setup-bench-tools.sh      # prints e.g. "wrk /usr/bin/wrk"
set -euo pipefail

die() {
    echo "setup-bench-tools: $*" >&2
    exit 1
}

# Installs the Debian package $1 with apt-get, as root or through sudo.
apt_install() {
    local package="$1" run=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null ||
            die "$package is missing and installing it needs root: run this script as root, or install $package yourself"
        run=(sudo)
    fi
    command -v apt-get >/dev/null ||
        die "$package is missing and apt-get is not available: install $package with this system's package manager"
    local log
    log="$(mktemp)"
    if ! "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "$package" >"$log" 2>&1; then
        # The package lists may be missing or stale (a fresh container): refresh once and retry.
        if ! { "${run[@]}" apt-get update >"$log" 2>&1 &&
            "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y \
                --no-install-recommends "$package" >"$log" 2>&1; }; then
            local reason
            reason="$(grep -E '^(E|W):' "$log" | head -n 1)"
            rm -f "$log"
            die "could not install the Debian package $package with apt-get: ${reason:-see the output of apt-get}"
        fi
    fi
    rm -f "$log"
}

if ! command -v wrk >/dev/null; then
    apt_install wrk
    command -v wrk >/dev/null || die "the package wrk was installed but wrk is not on the PATH"
fi
echo "wrk $(command -v wrk)"
