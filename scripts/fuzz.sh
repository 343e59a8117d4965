#!/usr/bin/env bash
# Fuzzes every parser of outside input (the cargo-fuzz targets in fuzz/), one target after
# another, each for SECONDS (default 60), and prints what each did: runs, new corpus entries,
# crashes. Needs the nightly toolchain and cargo-fuzz (libFuzzer instrumentation is nightly
# only); CI does not run this, RELIABILITY.md records the runs.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Seeds are fuzz/corpus/<target>/ (committed, small); what the fuzzer learns goes to
# fuzz/target/corpus/<target>/ (not committed, reused by the next run). A crash leaves its input
# in fuzz/artifacts/<target>/ and the run ends with status 1; reproduce it with
#   fuzz/target/x86_64-unknown-linux-gnu/release/<target> fuzz/artifacts/<target>/crash-...
# then make it a unit test next to the parser.
#
# Builds without a sanitizer (the code under test is safe Rust; SQLite's C is tested by its
# authors) but with debug assertions and overflow checks, so arithmetic overflow is a crash.
set -euo pipefail

fail() {
    echo "fuzz.sh: $*" >&2
    exit 2
}

seconds="${1:-60}"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || fail "SECONDS must be a whole number above 0, not '$seconds'"
shift || true

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"

command -v cargo >/dev/null || fail "cargo is not installed (https://rustup.rs)"
rustup run nightly rustc --version >/dev/null 2>&1 ||
    fail "the nightly toolchain is missing; install it with: rustup toolchain install nightly"
cargo +nightly fuzz --version >/dev/null 2>&1 ||
    fail "cargo-fuzz is missing; install it with: cargo install cargo-fuzz"

cd "$fuzz_dir"
mapfile -t known < <(cargo +nightly fuzz list)
if (($# > 0)); then
    targets=("$@")
    for target in "${targets[@]}"; do
        printf '%s\n' "${known[@]}" | grep -qx -- "$target" ||
            fail "no fuzz target '$target' (there are: ${known[*]})"
    done
else
    targets=("${known[@]}")
fi

echo "fuzz.sh: building ${#targets[@]} targets (nightly, no sanitizer, debug assertions)" >&2
cargo +nightly fuzz build --sanitizer none --debug-assertions >&2

bin_dir="$fuzz_dir/target/x86_64-unknown-linux-gnu/release"
# The stores of the targets that need one live in memory when the machine has /dev/shm.
scratch_parent="${TMPDIR:-/tmp}"
[[ -d /dev/shm && -w /dev/shm ]] && scratch_parent=/dev/shm
status=0
summary=()
for target in "${targets[@]}"; do
    work="$(mktemp -d "$scratch_parent/engram-fuzz-$target.XXXXXX")"
    corpus="$fuzz_dir/target/corpus/$target"
    artifacts="$fuzz_dir/artifacts/$target"
    mkdir -p "$corpus" "$artifacts"
    echo "fuzz.sh: $target for ${seconds}s" >&2
    started=$(date +%s)
    # -jobs=1 -workers=1: one worker process, logging to fuzz-0.log in its folder.
    (cd "$work" && TMPDIR="$work" "$bin_dir/$target" "$corpus" "$fuzz_dir/corpus/$target" \
        -jobs=1 -workers=1 -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" >/dev/null 2>&1) || true
    elapsed=$(($(date +%s) - started))
    log="$work/fuzz-0.log"
    [[ -f "$log" ]] || fail "$target left no log; is $bin_dir/$target a libFuzzer binary?"
    runs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)"
    if [[ -z "$runs" ]]; then
        # A crash ends the run before the final stats; take the last progress line.
        runs="$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)"
    fi
    # crash-, timeout-, oom- and leak- files stop the run; slow-unit- files (over 10 s) do not.
    found="$(grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //' || true)"
    crashes="$(grep -c '/\(crash\|timeout\|oom\|leak\)-' <<<"$found" || true)"
    slow="$(grep -c '/slow-unit-' <<<"$found" || true)"
    line="$(printf '%-14s %6ss %12s runs %6s corpus %2s crashes %2s slow' "$target" "$elapsed" \
        "${runs:-?}" "$(find "$corpus" -type f | wc -l)" "$crashes" "$slow")"
    if ((crashes + slow > 0)); then
        ((crashes > 0)) && status=1
        line+="  $(tr '\n' ' ' <<<"$found")"
        cp "$log" "$artifacts/$(date +%Y%m%d-%H%M%S)-fuzz.log"
        grep -m1 -A12 "panicked at\|ERROR: libFuzzer" "$log" >&2 || true
    fi
    summary+=("$line")
    rm -rf "$work"
done

echo
echo 'fuzz.sh: summary'
printf '%s\n' "${summary[@]}"
exit "$status"
