#!/usr/bin/env bash
# The side-by-side with the TPM peer plugin: builds
# jc-lab/k8s-tpm-kms-plugin (a KMS v2 plugin in Go) and runs benches/peer.rs,
# which starts it and the release sceau, each on a fresh swtpm of its own,
# drives both with the same KMS v2 client in one run and prints one table
# (exec → first Status, Status/Encrypt/Decrypt p50, RSS, stripped size) with
# the ratio sceau/peer, the versions, the date and the machine. Not part of
# CI: it builds a third-party plugin, and its figures are for
# docs/performance.md.
#
# The peer is built with `go install $PEER_MAIN@$SCEAU_PEER_VERSION` from the
# Go module proxy into ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin,
# keyed by its version and a hash of the Go version (a second run finds it
# there), as the interop scripts cache their Go binaries. Where the proxy
# does not serve the module, give SCEAU_PEER_SRC: a git clone of
# github.com/jc-lab/k8s-tpm-kms-plugin (bare or not) that has the tag
# $SCEAU_PEER_VERSION; the script builds that tag's tree (its go.sum pins
# every dependency, fetched from the proxy) and prints the commit.
#
# Usage: bash scripts/bench-peer.sh
#   SCEAU_PEER_VERSION  the peer's version tag (default v0.0.5)
#   SCEAU_PEER_SRC      a git clone of the peer, if the module proxy refuses it
#   SCEAU_PEER_PLUGIN   a peer binary to use as it is (skips the build)
# Go and cargo build at nice 19 (CARGO_BUILD_JOBS=1 on a shared machine);
# the bench itself runs at normal priority, in about 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

readonly PEER_MODULE=github.com/jc-lab/k8s-tpm-kms-plugin
readonly PEER_MAIN=$PEER_MODULE/cmd/k8s-tpm-kms-plugin
peer_version=${SCEAU_PEER_VERSION:-v0.0.5}

# build_peer: sets peer_bin and peer_provenance (where the build came from).
build_peer() {
    local key cache out
    key=$(go version | sha256sum | cut -c1-12)
    cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop}
    out="$cache/bin/k8s-tpm-kms-plugin-$peer_version-$key"
    peer_bin="$out/k8s-tpm-kms-plugin"
    if [ -x "$peer_bin" ] && [ -f "$out/provenance" ]; then
        peer_provenance=$(cat "$out/provenance")
        echo "== peer $peer_version: cached in $out ($peer_provenance)"
        return
    fi
    echo "== building the peer $PEER_MAIN@$peer_version into $out (nice 19)"
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp"
    # GOTOOLCHAIN=local: build with the Go at hand, never download another.
    if GOBIN="$out.tmp" GOTOOLCHAIN=local nice -n 19 go install -trimpath "$PEER_MAIN@$peer_version"; then
        peer_provenance="module $PEER_MODULE@$peer_version from the Go module proxy, $(go env GOVERSION)"
    elif [ -n "${SCEAU_PEER_SRC:-}" ]; then
        echo "   the module proxy did not serve it: building from SCEAU_PEER_SRC"
        build_peer_from_source "$out.tmp"
    else
        echo "the Go module proxy did not serve $PEER_MODULE@$peer_version: set SCEAU_PEER_SRC to a git clone of https://$PEER_MODULE that has the tag $peer_version" >&2
        exit 1
    fi
    echo "$peer_provenance" >"$out.tmp/provenance"
    rm -rf "$out"
    mv "$out.tmp" "$out"
}

# build_peer_from_source DIR: the tag's tree from $SCEAU_PEER_SRC, built into
# DIR with the dependencies its go.sum pins.
build_peer_from_source() {
    local commit src
    commit=$(git -C "$SCEAU_PEER_SRC" rev-parse --verify "$peer_version^{commit}") || {
        echo "SCEAU_PEER_SRC=$SCEAU_PEER_SRC has no tag $peer_version: fetch the peer's tags into it" >&2
        exit 1
    }
    src=$(mktemp -d /tmp/sceau-peer-src.XXXXXX)
    # shellcheck disable=SC2064 # $src is fixed now; the trap must remove this one
    trap "rm -rf '$src'" EXIT
    git -C "$SCEAU_PEER_SRC" archive "$commit" | tar -x -C "$src"
    if ! grep -qx "module $PEER_MODULE" "$src/go.mod"; then
        echo "SCEAU_PEER_SRC=$SCEAU_PEER_SRC at $peer_version is not module $PEER_MODULE (see its go.mod)" >&2
        exit 1
    fi
    echo "   from $SCEAU_PEER_SRC, tag $peer_version = commit $commit"
    (cd "$src" && GOTOOLCHAIN=local nice -n 19 go build -mod=readonly -trimpath -o "$1/" ./cmd/k8s-tpm-kms-plugin)
    rm -rf "$src"
    trap - EXIT
    peer_provenance="$peer_version, git commit $commit, built from source with $(go env GOVERSION)"
}

install_packages
require_cargo
if [ -n "${SCEAU_PEER_PLUGIN:-}" ]; then
    peer_bin=$SCEAU_PEER_PLUGIN
    peer_provenance="$peer_version (given as SCEAU_PEER_PLUGIN=$peer_bin)"
else
    require_go
    build_peer
fi

# The bench first: its build of the workspace (dev-dependency features)
# also links a target/release/sceau; the plain release build after it is the
# binary that ships (scripts/size.sh measures the same), copied aside for the
# bench. Both builds stay in Cargo's cache, so a second run rebuilds neither.
echo "== building the bench and sceau (cargo bench --no-run; cargo build --locked --release; nice 19)"
nice -n 19 cargo bench --locked --bench peer --no-run
nice -n 19 cargo build --locked --release -p sceau
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
sceau_copy=$(mktemp -d /tmp/sceau-bench-peer.XXXXXX)
trap 'rm -rf "$sceau_copy"' EXIT
cp "$target_dir/release/sceau" "$sceau_copy/sceau"
echo "== running benches/peer.rs (sceau $("$sceau_copy/sceau" --version | head -1) against the peer $peer_provenance)"
SCEAU_BIN=$sceau_copy/sceau SCEAU_PEER_PLUGIN=$peer_bin SCEAU_PEER_VERSION=$peer_provenance \
    cargo bench --locked --bench peer
