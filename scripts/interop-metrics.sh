#!/usr/bin/env bash
# sceau's metrics, scraped and parsed by real Prometheus code: builds sceau
# and tests/interop/metrics (Prometheus's expfmt text parser, pinned in its
# go.mod), starts a throwaway swtpm and sceau under systemd-socket-activate
# with both sockets the units pass (kms, and metrics on 127.0.0.1), makes
# calls with `sceau check`, and scrapes twice: every metric family of
# docs/metrics.md must parse and be present, and the call and TPM counters
# must move between the scrapes. Also checks the per-call log line.
#
# The Go program is built once into
# ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin, keyed by a hash of its
# sources, go.mod and go.sum (build_metricscheck, scripts/lib-metrics.sh,
# which scripts/prebuild-go.sh can call too). Go's caches are GOCACHE and
# GOMODCACHE if set, else Go's defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-metrics.sh

require_interop_tools

tmp=$(mktemp -d /tmp/sceau-metrics.XXXXXX)
swtpm_pid=""
activator_pid=""
cleanup() {
    local status=$?
    set +e
    stop "$activator_pid" 15
    stop "$swtpm_pid" 5
    rm -rf "$tmp"
    exit "$status"
}
cleanup_on_exit cleanup

t0=$SECONDS
build_sceau

build_metricscheck
echo "   ready in $((SECONDS - t0)) s"

start_swtpm "$tmp/tpm"
tcti="swtpm:host=127.0.0.1,port=$swtpm_port"
# A metrics port below the kernel's ephemeral range (32768+), so that no
# outgoing connection holds it; 9464 is the default of the unit.
metrics_port=$(free_port_pair 29464)
kms="$tmp/kms.sock"
url="http://127.0.0.1:$metrics_port/metrics"

# systemd's own fd passing, as sceau.socket and sceau-metrics.socket do it.
systemd-socket-activate -l "$kms" -l "127.0.0.1:$metrics_port" --fdname=kms:metrics \
    target/debug/sceau serve --socket "$tmp/unused.sock" --tcti "$tcti" --state-dir "$tmp/state" >"$tmp/sceau.log" 2>&1 &
activator_pid=$!
for _ in $(seq 100); do
    [ -S "$kms" ] && break
    sleep 0.1
done
[ -S "$kms" ] || { cat "$tmp/sceau.log" >&2; echo "no socket $kms" >&2; exit 1; }
echo "== swtpm on 127.0.0.1:$swtpm_port, sceau on $kms, metrics on $url"

status=0
# The first connection starts sceau; `sceau check` is Status, Encrypt, Decrypt.
echo "== sceau check (starts sceau)"
target/debug/sceau check --socket "$kms" || status=1
echo "== scrape 1 (saved as the baseline)"
"$metricscheck" --url "$url" --save "$tmp/before.txt" || status=1
echo "== sceau check, twice"
for _ in 1 2; do target/debug/sceau check --socket "$kms" || status=1; done
# sceau reuses a rendering for 1 s (server::metrics::RENDER_CACHE_TIME), so
# that a scrape flood renders once a second; the second scrape must see the
# calls made after the first.
sleep 1.1
echo "== scrape 2 (against the baseline)"
"$metricscheck" --url "$url" --baseline "$tmp/before.txt" || status=1

echo "== the per-call log line"
# Status names no key; Encrypt and Decrypt name the caller's uid, the key_id
# and the envelope's fingerprint, the fields docs/audit-trail.md lists.
keyed='uid="sceau-check" key_id="sceau-[0-9]+\.[0-9]+-[0-9a-f]{16}" envelope=[0-9a-f]{16} '
for method in Status Encrypt Decrypt; do
    fields=$([ "$method" = Status ] || echo "$keyed")
    if grep -qE "INFO  call method=$method ${fields}code=OK duration_ms=[0-9.]+ tpm_ms=[0-9.]+$" "$tmp/sceau.log"; then
        echo "PASS log line for $method"
    else
        echo "FAIL no log line for $method"
        status=1
    fi
done

if [ "$status" -ne 0 ]; then
    echo "== sceau log (last 50 lines)" >&2
    tail -n 50 "$tmp/sceau.log" >&2
fi
echo "== interop-metrics: $([ "$status" -eq 0 ] && echo PASS || echo FAIL) in $((SECONDS - t0)) s"
exit "$status"
