#!/usr/bin/env bash
# sceau against the kube-apiserver's own KMS v2 client code (k8s.io/apiserver,
# pinned in tests/interop/go.mod): builds sceau, starts a throwaway swtpm and
# sceau on a temporary socket, and runs tests/interop/kmsv2client twice, once
# with one goroutine and once with 16. Exits with the Go program's status.
#
# Go's caches are GOCACHE and GOMODCACHE if set, else Go's default locations.
# Extra arguments are passed to both runs of the Go program.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

require_interop_tools

tmp=$(mktemp -d /tmp/sceau-interop.XXXXXX)
swtpm_pid=""
sceau_pid=""
client_pid=""
cleanup() {
    local status=$?
    set +e
    for pid in $client_pid $sceau_pid $swtpm_pid; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
    exit "$status"
}
cleanup_on_exit cleanup

t0=$SECONDS
build_sceau
echo "== building tests/interop/kmsv2client (GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE))"
(cd tests/interop && go build -mod=readonly -o "$tmp/kmsv2client" ./kmsv2client)
echo "   built in $((SECONDS - t0)) s"

start_swtpm "$tmp/tpm"
port=$swtpm_port

socket="$tmp/kms.sock"
target/debug/sceau serve --socket "$socket" --tcti "swtpm:host=127.0.0.1,port=$port" --state-dir "$tmp/state" >"$tmp/sceau.log" 2>&1 &
sceau_pid=$!
for _ in $(seq 200); do
    [ -S "$socket" ] && break
    kill -0 "$sceau_pid" 2>/dev/null || { cat "$tmp/sceau.log" >&2; echo "sceau exited before listening" >&2; exit 1; }
    sleep 0.1
done
[ -S "$socket" ] || { cat "$tmp/sceau.log" >&2; echo "sceau did not create $socket in 20 s" >&2; exit 1; }
echo "== swtpm on 127.0.0.1:$port/$((port + 1)), sceau on $socket"

# Runs the Go program in the background and waits for it, so that a signal to
# this script is handled (and everything cleaned up) at once.
status=0
run_client() {
    local t1=$SECONDS rc=0
    "$tmp/kmsv2client" --socket "$socket" "$@" &
    client_pid=$!
    wait "$client_pid" || rc=$?
    client_pid=""
    echo "   took $((SECONDS - t1)) s"
    [ "$rc" -eq 0 ] || status=$rc
}
echo "== kmsv2client (1 goroutine)"
run_client "$@"
echo "== kmsv2client --concurrency 16"
run_client --concurrency 16 "$@"

kill -0 "$sceau_pid" 2>/dev/null || { echo "sceau is no longer running" >&2; status=1; }
if [ "$status" -ne 0 ]; then
    echo "== sceau log (last 50 lines)" >&2
    tail -n 50 "$tmp/sceau.log" >&2
fi
echo "== interop-kmsv2: $([ "$status" -eq 0 ] && echo PASS || echo FAIL) in $((SECONDS - t0)) s"
exit "$status"
