#!/usr/bin/env bash
# Supply-chain checks, as CI runs them (see audit/README.md):
#
#   1. cargo deny --workspace --config audit/deny.toml check bans licenses sources
#      covers licenses, sources (crates.io only) and duplicate or banned crates,
#      for every package of the workspace (the daemon, sceau-recover, the
#      SPIRE plugins, the test kit), not only the root package's graph.
#   2. cargo deny ... check advisories, but only when a RustSec advisory
#      database is already on disk. The database is a git clone from GitHub,
#      which this project's CI cannot reach, so it is never fetched here. When
#      no database is found, the script says the check was skipped and why.
#   3. cargo vet --locked, which checks Cargo.lock against the committed store in
#      audit/supply-chain/ and never fetches imports.
#
# Nothing here needs the network once the crates in Cargo.lock are in cargo's
# cache. `cargo fetch --locked` fills the cache from crates.io when it is cold,
# and does nothing when it is warm.
#
# Where the advisory database comes from, checked in this order:
#   SCEAU_ADVISORY_DB=DIR     a git clone of github.com/rustsec/advisory-db
#                             (for example a mirror, or cargo-audit's
#                             ~/.cargo/advisory-db)
#   $CARGO_HOME/advisory-dbs/advisory-db-*   left there by `cargo deny fetch db`
#   $CARGO_HOME/advisory-db   cargo-audit's clone
# cargo-deny refuses a database older than 30 days (maximum-db-staleness in
# audit/deny.toml), so a stale clone fails the run instead of passing it.
#
# SCEAU_REQUIRE_ADVISORIES=1 makes a missing database an error, for a job
# that does have GitHub access.
#
# Usage: bash scripts/supply-chain.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

require_cargo
require_cargo_tool cargo-deny 0.20.2 cargo-deny
require_cargo_tool cargo-vet 0.10.3 cargo-vet

config=audit/deny.toml
cargo_home=${CARGO_HOME:-$HOME/.cargo}

# Crate sources for every target in Cargo.lock. Does nothing when they are
# already cached. Both tools run offline after this.
cargo fetch --locked --quiet

mkdir -p target/supply-chain

# The fuzz crate has its own workspace and lock file, and it is built and run
# on developer and CI machines, so it is checked too. It gets a copy of the
# policy with the two differences that audit/deny.toml explains at its top:
# an NCSA exception for libfuzzer-sys, and no license check for the
# unpublished harness crate itself.
manifests=(Cargo.toml)
configs=("$config")
if [ -f fuzz/Cargo.toml ] && [ -f fuzz/Cargo.lock ]; then
    (cd fuzz && cargo fetch --locked --quiet)
    fuzz_config=target/supply-chain/deny-fuzz.toml
    sed -e 's|^exceptions = \[\]$|exceptions = [{ crate = "libfuzzer-sys", allow = ["NCSA"] }]|' \
        -e '/^\[licenses.private\]$/,/^ignore = / s|^ignore = false$|ignore = true|' \
        "$config" >"$fuzz_config"
    if [ "$(diff "$config" "$fuzz_config" | grep -c '^>')" -ne 2 ]; then
        echo "could not derive $fuzz_config from $config (its layout changed?)" >&2
        exit 1
    fi
    manifests+=(fuzz/Cargo.toml)
    configs+=("$fuzz_config")
elif [ -f fuzz/Cargo.toml ]; then
    echo "note: fuzz/Cargo.lock is missing, so the fuzz crate is not checked"
fi

for i in "${!manifests[@]}"; do
    echo "== cargo deny check bans licenses sources (${manifests[$i]})"
    cargo deny --offline --locked --workspace --manifest-path "${manifests[$i]}" --config "${configs[$i]}" \
        check bans licenses sources
done

# --- advisories, only with a database on disk -------------------------------
# cargo-deny 0.20.2 keeps each database under db-path as
# <last url segment>-<XxHash64 of the url>. For the default RustSec url that
# is the name below. A plain clone is linked in under that name.
rustsec_dir_name=advisory-db-3157b0e258782691
advisory_config=""
advisory_source=""
plain_clone=""
if [ -n "${SCEAU_ADVISORY_DB:-}" ]; then
    plain_clone=$SCEAU_ADVISORY_DB
    if [ ! -d "$plain_clone/.git" ]; then
        echo "SCEAU_ADVISORY_DB=$plain_clone is not a git clone of the RustSec advisory-db" >&2
        exit 1
    fi
elif compgen -G "$cargo_home/advisory-dbs/advisory-db-*/.git" >/dev/null; then
    advisory_config=$config
    advisory_source="$cargo_home/advisory-dbs (cargo deny fetch db)"
elif [ -d "$cargo_home/advisory-db/.git" ]; then
    plain_clone=$cargo_home/advisory-db
fi
if [ -n "$plain_clone" ]; then
    plain_clone=$(cd "$plain_clone" && pwd)
    db_root=target/supply-chain/advisory-dbs
    mkdir -p "$db_root"
    ln -sfn "$plain_clone" "$db_root/$rustsec_dir_name"
    advisory_config=target/supply-chain/deny-advisories.toml
    sed "s|^\[advisories\]\$|[advisories]\ndb-path = \"$PWD/$db_root\"|" "$config" >"$advisory_config"
    advisory_source=$plain_clone
fi

if [ -n "$advisory_config" ]; then
    # The advisories section is the same in every config, so one config
    # serves both manifests.
    for manifest in "${manifests[@]}"; do
        echo "== cargo deny check advisories ($manifest; database: $advisory_source)"
        cargo deny --offline --locked --manifest-path "$manifest" --config "$advisory_config" \
            check advisories
    done
else
    echo "== cargo deny check advisories: SKIPPED"
    echo "   No RustSec advisory database on this machine (looked for SCEAU_ADVISORY_DB,"
    echo "   $cargo_home/advisory-dbs/advisory-db-*, $cargo_home/advisory-db). The database is"
    echo "   a git clone from GitHub, which this project's CI cannot reach, so this script never"
    echo "   fetches it. Fetch it where GitHub is reachable: see audit/README.md."
    if [ "${SCEAU_REQUIRE_ADVISORIES:-0}" = 1 ]; then
        echo "SCEAU_REQUIRE_ADVISORIES=1: a missing advisory database is an error" >&2
        exit 1
    fi
fi

# --- cargo-vet ---------------------------------------------------------------
# --locked: use the committed imports.lock and fetch nothing.
echo "== cargo vet --locked"
cargo vet --locked

echo "supply-chain checks passed"
