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
#   (c) the lints stop keeping unsafe in one place: the root Cargo.toml no
#       longer denies unsafe_code for the daemon or forbids it for the other
#       workspace crates, a file under src/ or crates/ outside src/sys/
#       allows (or expects) unsafe_code, a file of fuzz/ (its own workspace,
#       without those lints) lacks `#![forbid(unsafe_code)]`, or a file the
#       table lists with a count of 0 (the library's crate root) lacks
#       `#![deny(unsafe_code)]`;
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
#   - a new block in `UmaskGuard::set` (src/sys/mod.rs),
#         // SAFETY: getpid has no preconditions.
#         let _ = unsafe { libc::getpid() };
#     gave
#           FAIL: src/sys/mod.rs: 37 unsafe items, audit/unsafe.md says 36
#   - a new file src/zz_unsafe_demo.rs holding one such block gave
#           FAIL: src/zz_unsafe_demo.rs: 1 unsafe items, not listed in audit/unsafe.md
#   - a new file src/zz_allow_demo.rs with `#![allow(unsafe_code)]` gave
#           FAIL: src/zz_allow_demo.rs: allows unsafe_code; only src/sys/ may (audit/unsafe.md)
#   - deleting the SAFETY comment in `UmaskGuard::set` gave
#           error: unsafe block missing a safety comment --> src/sys/mod.rs
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
        src/sys/*) ;;
        src/* | crates/*)
            if sed -E 's://.*$::' "$file" | grep -qE '(allow|expect)\(unsafe_code\)'; then
                fail "$file: allows unsafe_code; only src/sys/ may ($inventory)"
            fi
            ;;
        fuzz/*)
            if [[ $count -eq 0 ]] && ! grep -q '^#!\[forbid(unsafe_code)\]' "$file"; then
                fail "$file: no unsafe items listed, so it must carry #![forbid(unsafe_code)]"
            fi
            ;;
    esac
    if [[ "$expected" == 0 ]] && ! grep -q '^#!\[deny(unsafe_code)\]' "$file"; then
        fail "$file: listed with 0 unsafe items instead of forbidding them, so it must carry #![deny(unsafe_code)]"
    fi
done
for path in "${!listed[@]}"; do
    [[ -n "${seen[$path]:-}" ]] || fail "$inventory lists $path, which does not exist"
done

# The lints that keep unsafe in src/sys/: denied for the daemon (sys alone
# allows it), forbidden for every other workspace crate.
lints=$(sed -n '/^\[lints\]/,/^\[/p' Cargo.toml)
grep -qE '^rust\.unsafe_code = "deny"' <<<"$lints" ||
    fail "Cargo.toml: [lints] must keep rust.unsafe_code = \"deny\""
workspace_lints=$(sed -n '/^\[workspace\.lints\]/,/^\[/p' Cargo.toml)
grep -qE '^rust\.unsafe_code = "forbid"' <<<"$workspace_lints" ||
    fail "Cargo.toml: [workspace.lints] must keep rust.unsafe_code = \"forbid\""
for manifest in crates/*/Cargo.toml; do
    grep -qE '^workspace = true' <(sed -n '/^\[lints\]/,/^\[/p' "$manifest") ||
        fail "$manifest: needs [lints] workspace = true"
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
