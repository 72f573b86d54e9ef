#!/usr/bin/env bash
# The daemon's size budget: builds the release binaries and prints
#
#   - the stripped size of `sceau`, against a limit of 4.0 MB (4,000,000
#     bytes);
#   - the crates `sceau` depends on at run time (`cargo tree -e normal -p
#     sceau`, each crate@version once): the third-party ones against a limit
#     of 120, and the workspace's own (the daemon, its TPM layer, sys, rpc,
#     KMS API, format and CLI crates) counted apart, since splitting the
#     daemon's own code into crates adds no dependency. The limit was 117
#     until signed cluster envelopes: verifying them takes p256's `ecdsa`
#     feature, which brings ecdsa, signature and rfc6979 (audit/dependencies.md);
#   - whether `sceau-recover` links any tpm2-tss library (it must not);
#   - the stripped sizes of the two SPIRE plugins and their runtime crates,
#     and whether the SPIRE package depends on the daemon or its sandbox
#     (landlock, seccompiler, caps): it must not, since the agent needs only
#     the TPM layer.
#
# Exits non-zero if any check fails. The figures are recorded in
# docs/performance.md, "Binary size and dependencies".
#
# Usage: bash scripts/size.sh   (CARGO_BUILD_JOBS=1 on a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."

readonly MAX_BYTES=4000000
readonly MAX_CRATES=120

cargo build --release --locked -p sceau -p sceau-recover -p sceau-spire >&2

target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
stripped=$(mktemp)
trap 'rm -f "$stripped"' EXIT
strip -o "$stripped" "$target_dir/release/sceau"
bytes=$(stat -c %s "$stripped")

tree=$(cargo tree --locked -e normal -p sceau --prefix none | sed 's/ (\*)//' | sort -u)
own=$(grep -c '^sceau' <<<"$tree")
crates=$(($(wc -l <<<"$tree") - own))

verdict() { if [ "$1" -le "$2" ]; then echo PASS; else echo FAIL; fi; }

size_verdict=$(verdict "$bytes" "$MAX_BYTES")
printf 'sceau stripped: %d bytes (%s MB), limit %d bytes (4.0 MB): %s\n' \
    "$bytes" "$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1e6 }')" \
    "$MAX_BYTES" "$size_verdict"

crate_verdict=$(verdict "$crates" "$MAX_CRATES")
printf 'sceau runtime crates: %d third-party, limit %d: %s (and %d of the workspace'"'"'s own)\n' \
    "$crates" "$MAX_CRATES" "$crate_verdict" "$own"

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
for plugin in sceau-spire-server sceau-spire-agent; do
    strip -o "$stripped" "$target_dir/release/$plugin"
    printf '%s stripped: %d bytes\n' "$plugin" "$(stat -c %s "$stripped")"
done
spire_tree=$(cargo tree --locked -e normal -p sceau-spire --prefix none | sed 's/ (\*)//' | sort -u)
printf 'sceau-spire runtime crates: %d (itself included)\n' "$(wc -l <<<"$spire_tree")"
daemon_parts=$(grep -E '^(sceau|landlock|seccompiler|caps) v' <<<"$spire_tree" || true)
if [ -z "$daemon_parts" ]; then
    echo "sceau-spire links no part of the daemon or its sandbox: PASS"
else
    echo "sceau-spire depends on: $daemon_parts: FAIL"
    failed=1
fi
exit "$failed"
