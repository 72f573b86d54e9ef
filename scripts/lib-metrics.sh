# Shared by scripts/interop-metrics.sh and scripts/prebuild-go.sh. Sourced,
# not run.

# Builds tests/interop/metrics (Prometheus's expfmt text parser, pinned in
# its go.mod) into ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin, keyed
# by a hash of its sources, go.mod and go.sum, unless it is there already.
# Go's caches are GOCACHE and GOMODCACHE if set, else Go's defaults.
# Sets metricscheck to the binary's path.
build_metricscheck() {
    local mod=tests/interop/metrics key cache
    key=$(cat "$mod/go.mod" "$mod/go.sum" "$mod"/*.go | sha256sum | cut -c1-16)
    cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop}
    metricscheck="$cache/bin/metricscheck-$key"
    if [ -x "$metricscheck" ]; then
        echo "== metricscheck: cached in $metricscheck"
        return 0
    fi
    echo "== building $mod (GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE))"
    mkdir -p "$cache/bin"
    (cd "$mod" && go build -mod=readonly -trimpath -o "$metricscheck.tmp" .)
    mv "$metricscheck.tmp" "$metricscheck"
}
