#!/usr/bin/env bash
# Fuzz smoke test: builds the cargo-fuzz targets in fuzz/ once, then runs each
# for SECONDS (default 60) on a copy of its committed seed corpus, so the
# committed files never change. Fails if any target crashes, leaks, hangs or
# breaks one of its assertions; prints executions and CPU time per target.
# audit/fuzzing.md describes the targets and records longer runs.
#
# Usage: bash scripts/fuzz-smoke.sh [SECONDS]   (FUZZ_WORK=DIR, FUZZ_TARGETS,
# FUZZ_JOBS: see below)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

seconds=${1:-60}
targets=(envelope kms_request cli cluster_envelope key_files boot_policy recovery_input spire_attestation recovery_share protected_file event_log kek_ledger)
# FUZZ_TARGETS="a b" runs only those targets (for the longer runs).
if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
fi

# libFuzzer is C++, built by libfuzzer-sys with the system compiler.
SCEAU_PACKAGES+=(g++)
install_packages
require_cargo
require_cargo_tool cargo-fuzz 0.13.2 cargo-fuzz

# cargo-fuzz asks rustc for -Zsanitizer=address. Stable rustc ships the
# AddressSanitizer runtime in rust-std but gates the flag as unstable;
# RUSTC_BOOTSTRAP=1 lifts the gate without needing a nightly toolchain.
export RUSTC_BOOTSTRAP=1

# cargo-fuzz has no --locked: check the committed fuzz/Cargo.lock is complete.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null

build_start=$SECONDS
cargo fuzz build
echo "built every fuzz target in $((SECONDS - build_start)) s"

# FUZZ_WORK=DIR keeps each target's grown corpus and libFuzzer log in DIR
# (for audit/fuzzing.md); by default they go to a temporary directory.
if [ -n "${FUZZ_WORK:-}" ]; then
    work=$FUZZ_WORK
    mkdir -p "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi

# libFuzzer's default -max_len is the largest seed (4 KiB to 8 KiB here), too
# small to build the inputs that hurt the recovery readers: overlapping bbolt
# elements need a database of many pages to cost gigabytes, and a JSON object
# must have tens of thousands of members before a quadratic check shows.
# audit/fuzzing.md ("Input size") says why these lengths.
max_len_for() {
    case $1 in
    recovery_input) echo 2097152 ;;
    key_files) echo 65536 ;;
    *) echo "" ;;
    esac
}

# Runs one target; prints its summary line and returns libFuzzer's status.
run_target() {
    local target=$1 log="$work/$1.log" rc=0 cpu
    rm -rf "${work:?}/$target"
    cp -r "fuzz/corpus/$target" "$work/$target"
    local seeds
    seeds=$(find "$work/$target" -type f | wc -l)
    local TIMEFORMAT='%U %S'
    local size=() max_len
    max_len=$(max_len_for "$target")
    if [ -n "$max_len" ]; then
        size=(-max_len="$max_len")
    fi
    # -timeout: an input taking over 10 s is a hang; -rss_limit_mb is
    # libFuzzer's default, stated so the limit is visible here.
    cpu=$({ time cargo fuzz run "$target" "$work/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        "${size[@]}" -print_final_stats=1 >"$log" 2>&1; } 2>&1) || rc=$?
    cpu=$(echo "$cpu" | tail -n 1 | awk '{ printf "%.1f", $1 + $2 }')
    local execs cov
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)
    local corpus
    corpus=$(find "$work/$target" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        echo "PASS fuzz $target: ${execs:-?} execs, ${cpu} s CPU, corpus $seeds -> $corpus, ${cov:-cov: ?}"
    else
        echo "FAIL fuzz $target (exit $rc): ${execs:-?} execs, ${cpu} s CPU"
        # The failure itself, then where cargo-fuzz saved the input.
        grep -E -A6 'panicked at|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)' "$log" |
            head -n 40 || true
        grep -E -A2 '^Failing input' "$log" || tail -n 20 "$log"
    fi
    return "$rc"
}

# One libFuzzer process per core (FUZZ_JOBS overrides): each target still
# runs for the full SECONDS of wall time, on a core of its own when nothing
# else runs. Each target's lines are printed when it ends, in target order.
jobs=${FUZZ_JOBS:-$(nproc)}
failed=0
running=()
finish_oldest() {
    wait "${running[0]%%:*}" || failed=1
    cat "$work/${running[0]#*:}.result"
    running=("${running[@]:1}")
}
for target in "${targets[@]}"; do
    run_target "$target" >"$work/$target.result" 2>&1 &
    running+=("$!:$target")
    if [ "${#running[@]}" -ge "$jobs" ]; then
        finish_oldest
    fi
done
while [ "${#running[@]}" -gt 0 ]; do
    finish_oldest
done
exit "$failed"
