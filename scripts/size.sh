#!/usr/bin/env bash
# The daemon's size budget: builds the release binaries and prints
#
#   - the stripped size of `sceau`, against a limit of 5 MB (5,000,000 bytes);
#   - the crates `sceau` depends on at run time, itself included, against a
#     limit of 120 (`cargo tree -e normal -p sceau`, each crate@version once);
#   - whether `sceau-recover` links any tpm2-tss library (it must not).
#
# Exits non-zero if any of the three fails. The figures are recorded in
# docs/performance.md, "Binary size and dependencies".
#
# Usage: bash scripts/size.sh   (CARGO_BUILD_JOBS=1 on a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."

readonly MAX_BYTES=5000000
readonly MAX_CRATES=120

cargo build --release --locked -p sceau -p sceau-recover >&2

target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
stripped=$(mktemp)
trap 'rm -f "$stripped"' EXIT
strip -o "$stripped" "$target_dir/release/sceau"
bytes=$(stat -c %s "$stripped")

crates=$(cargo tree --locked -e normal -p sceau --prefix none |
    sed 's/ (\*)//' | sort -u | wc -l)

verdict() { if [ "$1" -le "$2" ]; then echo PASS; else echo FAIL; fi; }

size_verdict=$(verdict "$bytes" "$MAX_BYTES")
printf 'sceau stripped: %d bytes (%s MB), limit %d bytes (5 MB): %s\n' \
    "$bytes" "$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1e6 }')" \
    "$MAX_BYTES" "$size_verdict"

crate_verdict=$(verdict "$crates" "$MAX_CRATES")
printf 'sceau runtime crates: %d (itself included), limit %d: %s\n' \
    "$crates" "$MAX_CRATES" "$crate_verdict"

failed=0
[ "$size_verdict" = PASS ] && [ "$crate_verdict" = PASS ] || failed=1

tss=$(ldd "$target_dir/release/sceau-recover" | grep -i libtss2 || true)
if [ -z "$tss" ]; then
    echo "sceau-recover links no libtss2: PASS"
else
    echo "sceau-recover links libtss2: FAIL"
    echo "$tss"
    failed=1
fi
exit "$failed"
