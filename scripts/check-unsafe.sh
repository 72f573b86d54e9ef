#!/usr/bin/env bash
# Keeps audit/unsafe.md true. Fails (exit 1) when:
#
#   (a) a .rs file under src/, crates/, tests/, benches/ or fuzz/ holds
#       `unsafe` and is not in the summary table of audit/unsafe.md, or the
#       table names a file that does not exist;
#   (b) a file's count of unsafe items differs from the count in that table
#       (an item is an `unsafe` block, `unsafe fn`, `unsafe impl`,
#       `unsafe trait`, `unsafe extern` block or `unsafe(...)` attribute,
#       counted after `//` comments are stripped; rustfmt, which CI enforces,
#       keeps `unsafe` and its `{` on one line);
#   (c) unsafe leaves its one crate: a file outside crates/sys/ holds an
#       unsafe item or allows (or expects) unsafe_code; the root Cargo.toml
#       no longer forbids unsafe_code for the workspace or the daemon stops
#       inheriting that; a crate other than crates/sys stops inheriting
#       `[workspace.lints]`; crates/sys stops denying undocumented unsafe
#       blocks or several operations per block; or a file of fuzz/ (its own
#       workspace, without those lints) lacks `#![forbid(unsafe_code)]`;
#   (d) clippy finds an undocumented unsafe block, an unsafe operation inside
#       an unsafe fn without its own block, or any other warning, in any
#       target (the lib and bin also deny these in their crate roots; the
#       flags extend them to the test and bench crates).
#
# Usage: scripts/check-unsafe.sh [--no-clippy]
#   --no-clippy skips (d), for a quick check of the inventory alone.
#
# Shown to fail when the inventory is not updated. Each case was tried on
# this tree and then reverted, after which the script passed again:
#   - a new block in `UmaskGuard::set` (crates/sys/src/lib.rs),
#         // SAFETY: getpid has no preconditions.
#         let _ = unsafe { libc::getpid() };
#     gave
#           FAIL: crates/sys/src/lib.rs: 44 unsafe items, audit/unsafe.md says 43
#   - a new file src/zz_unsafe_demo.rs holding one such block gave
#           FAIL: src/zz_unsafe_demo.rs: 1 unsafe items, not listed in audit/unsafe.md
#           FAIL: src/zz_unsafe_demo.rs: holds unsafe; only crates/sys/ may (audit/unsafe.md)
#   - a new file src/zz_allow_demo.rs with `#![allow(unsafe_code)]` gave
#           FAIL: src/zz_allow_demo.rs: allows unsafe_code; only crates/sys/ may (audit/unsafe.md)
#   - deleting the SAFETY comment in `UmaskGuard::set` gave
#           error: unsafe block missing a safety comment --> crates/sys/src/lib.rs
#           FAIL: cargo clippy (undocumented unsafe blocks, or other warnings)
# Each case exited with status 1.
set -euo pipefail
cd "$(dirname "$0")/.."

inventory=audit/unsafe.md
run_clippy=1
case "${1:-}" in
    "") ;;
    --no-clippy) run_clippy=0 ;;
    *)
        echo "usage: $0 [--no-clippy]" >&2
        exit 2
        ;;
esac

failed=0
fail() {
    echo "FAIL: $*" >&2
    failed=1
}

# Number of unsafe items in one file.
count_unsafe() {
    sed -E 's://.*$::' "$1" |
        { grep -oE '(^|[^[:alnum:]_])unsafe[[:space:]]*(\{|fn[[:space:]]|impl[[:space:]<]|trait[[:space:]]|extern[[:space:]]|\()' || true; } |
        wc -l
}

# The summary table: rows "| `path` | count | ...".
declare -A listed=()
# shellcheck disable=SC2016 # the backquotes are Markdown, not shell
while IFS=' ' read -r path count; do
    [[ -n "${listed[$path]:-}" ]] && fail "$inventory lists $path twice"
    listed[$path]=$count
done < <(sed -nE 's/^\| `([^`]+\.rs)` \| ([0-9]+) \|.*/\1 \2/p' "$inventory")
if [[ ${#listed[@]} -eq 0 ]]; then
    fail "no summary rows found in $inventory"
fi

# Every Rust file the project owns (build output excluded).
mapfile -t files < <(
    find src crates tests benches fuzz -name target -prune -o -name '*.rs' -print 2>/dev/null | sort
)
total=0
declare -A seen=()
for file in "${files[@]}"; do
    seen[$file]=1
    count=$(count_unsafe "$file")
    total=$((total + count))
    expected=${listed[$file]:-}
    if [[ -z "$expected" ]]; then
        if [[ $count -gt 0 ]]; then
            fail "$file: $count unsafe items, not listed in $inventory"
        fi
    elif [[ $count -ne $expected ]]; then
        fail "$file: $count unsafe items, $inventory says $expected"
    fi
    case "$file" in
        crates/sys/*) ;;
        *)
            if [[ $count -gt 0 ]]; then
                fail "$file: holds unsafe; only crates/sys/ may ($inventory)"
            fi
            if sed -E 's://.*$::' "$file" | grep -qE '(allow|expect)\(unsafe_code\)'; then
                fail "$file: allows unsafe_code; only crates/sys/ may ($inventory)"
            fi
            ;;
    esac
    case "$file" in
        fuzz/*)
            if [[ $count -eq 0 ]] && ! grep -q '^#!\[forbid(unsafe_code)\]' "$file"; then
                fail "$file: no unsafe items listed, so it must carry #![forbid(unsafe_code)]"
            fi
            ;;
    esac
done
for path in "${!listed[@]}"; do
    [[ -n "${seen[$path]:-}" ]] || fail "$inventory lists $path, which does not exist"
done

# The lints that keep unsafe in crates/sys/: forbidden for the workspace,
# whose lints every crate but sys inherits, the daemon included; sys denies
# an undocumented block and a block of several operations.
workspace_lints=$(sed -n '/^\[workspace\.lints\]/,/^\[/p' Cargo.toml)
grep -qE '^rust\.unsafe_code = "forbid"' <<<"$workspace_lints" ||
    fail "Cargo.toml: [workspace.lints] must keep rust.unsafe_code = \"forbid\""
for manifest in Cargo.toml crates/*/Cargo.toml; do
    lints=$(sed -n '/^\[lints\]/,/^\[/p' "$manifest")
    if [[ $manifest == crates/sys/Cargo.toml ]]; then
        for lint in undocumented_unsafe_blocks multiple_unsafe_ops_per_block missing_safety_doc; do
            grep -qE "^clippy\.$lint = \"deny\"" <<<"$lints" ||
                fail "$manifest: [lints] must keep clippy.$lint = \"deny\""
        done
        grep -qE '^rust\.unsafe_op_in_unsafe_fn = "deny"' <<<"$lints" ||
            fail "$manifest: [lints] must keep rust.unsafe_op_in_unsafe_fn = \"deny\""
    else
        grep -qE '^workspace = true' <<<"$lints" ||
            fail "$manifest: needs [lints] workspace = true"
    fi
done

if [[ $failed -eq 0 ]]; then
    echo "check-unsafe: inventory matches ($total unsafe items in ${#listed[@]} listed files)"
fi

if [[ $run_clippy -eq 1 ]]; then
    if ! cargo clippy --locked --all-targets --all-features -- -D warnings \
        -D clippy::undocumented_unsafe_blocks -D unsafe_op_in_unsafe_fn; then
        fail "cargo clippy (undocumented unsafe blocks, or other warnings)"
    fi
fi

if [[ $failed -ne 0 ]]; then
    echo "check-unsafe: FAILED (see $inventory)" >&2
    exit 1
fi
echo "check-unsafe: ok"
