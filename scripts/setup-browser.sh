#!/usr/bin/env bash
# Installs what the inspector's browser tests need and prints the directory of Playwright's
# node_modules:
# - Debian's Chromium (`chromium`, `chromium-driver`) and Node.js (`nodejs`, `npm`) through
#   apt-get when they are missing (root, or sudo, is needed for that);
# - npm `playwright-core` (pinned) under .cache/playwright, which drives /usr/bin/chromium (no
#   browser is downloaded by npm).
# Idempotent: what is already installed is left alone.
#
# Usage:  scripts/setup-browser.sh          # prints .../.cache/playwright/node_modules
#         export ENGRAM_TEST_PLAYWRIGHT="$(scripts/setup-browser.sh)"
set -euo pipefail

version="1.65.1"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/.cache/playwright"
modules="$dest/node_modules"
stamp="$dest/.engram-playwright-core-$version"

missing=()
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
[[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || {
            echo "setup-browser: ${missing[*]} missing, and installing them needs root (or sudo)" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "setup-browser: installing ${missing[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Wait for another apt-get to finish rather than fail; a fresh machine may have no package
    # lists yet.
    apt=("${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 -y --no-install-recommends)
    if ! "${apt[@]}" install "${missing[@]}" >&2; then
        "${apt[@]}" update >&2
        "${apt[@]}" install "${missing[@]}" >&2
    fi
fi
/usr/bin/chromium --version >&2 || { echo "setup-browser: /usr/bin/chromium does not run" >&2; exit 1; }

if [[ -f "$modules/playwright-core/package.json" && -f "$stamp" ]]; then
    echo "$modules"
    exit 0
fi

# Install beside the destination and move into place only when complete.
mkdir -p "$repo_root/.cache"
work="$(mktemp -d "$repo_root/.cache/.playwright.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# playwright-core never downloads a browser on install; the tests use Debian's.
npm install --prefix "$work" --no-audit --no-fund --loglevel=error "playwright-core@$version" >&2
[[ -f "$work/node_modules/playwright-core/package.json" ]] || {
    echo "setup-browser: npm did not install playwright-core" >&2
    exit 1
}
touch "$work/.engram-playwright-core-$version"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$modules"
