#!/usr/bin/env bash
# docs/rotation-and-backup.md's KEK rotation, run on a real kube-apiserver and
# etcd (the rig of scripts/lib-apiserver.sh: etcd, swtpm, sceau,
# kube-apiserver built from tests/interop/apiserver, and kubectl).
#
#   Secrets written under generation 0 (the SRK); `sceau kek rotate`; sceau
#   started again (swtpm has no resource manager, so `kek` runs while sceau
#   is stopped; the VM test runs it beside sceau on /dev/tpmrm0 with
#   `systemctl reload`); the apiserver takes up the new key_id (Status), so
#   a new Secret is stored under it (read from etcd by
#   `sceau-recover inventory`); the rewrite (`kubectl get secrets -A -o json
#   | kubectl replace -f -`); `inventory --require-current` passes; a second
#   rotation and rewrite; `sceau kek retire --generation 1`; kube-apiserver
#   restarted (empty DEK cache) and every Secret read back through sceau; a
#   copy of a value stored under generation 1, put back into etcd, no longer
#   opens, and `inventory --kek-ledger` counts it as under a retired
#   generation.
#
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (sceau serves uid 0 only by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

node_names=("")
start_rig sceau-rotation
build_k8s_tools
start_etcd
start_swtpms
start_sceaus
start_apiservers
write_kubeconfig
create_namespace 0
check_readyz 0 readyz-kms-providers

state=$(node_file 0 state d)
sceau_kek() { target/debug/sceau kek "$@" --tcti "$(tcti 0)" --state-dir "$state"; }
inventory() { # inventory FILE [ARGS...]: sceau-recover inventory over an etcdctl JSON export
    local json=$1
    shift
    "$bin/etcdctl" --endpoints "$etcd_url" get --prefix /registry/secrets -w json >"$json"
    target/debug/sceau-recover inventory --etcd-json "$json" "$@"
}
# rotate NAME: stop sceau, kek rotate, start sceau; sets rotated_key_id.
rotate() {
    local out
    stop "${sceau_pids[0]}" 10
    if out=$(sceau_kek rotate 2>"$tmp/$1.err"); then
        rotated_key_id=$(awk '{print $4}' <<<"$out")
        pass "$1 ($out)"
    else
        fail "$1" "$(cat "$tmp/$1.err")"
        rotated_key_id=""
    fi
    start_sceau 0
    if [ "$(key_id 0)" = "key_id=$rotated_key_id" ]; then
        pass "$1-served (sceau serves $rotated_key_id from its start)"
    else
        fail "$1-served" "sceau reports $(key_id 0), kek rotate printed $rotated_key_id"
    fi
}
# taken_up NAME KEY_ID: the apiserver writes under KEY_ID once its Status
# poll has seen it (at most every 20 s while healthy): a probe Secret
# written until inventory finds a value under KEY_ID (<= 90 s).
taken_up() {
    local i
    for i in $(seq 30); do
        create_secret 0 "$1-probe-$i" "rotation-probe-$1-$i" "$(printf probe | base64 -w0)" >/dev/null
        if inventory "$tmp/$1.json" --json | grep -qF "\"$2\""; then
            pass "$1 (a new Secret is stored under $2 after $i probe writes)"
            return 0
        fi
        sleep 3
    done
    fail "$1" "no value under $2 after 90 s: $(inventory "$tmp/$1.json" | tr '\n' ' ' | head -c 400)"
}
require_current() { # require_current NAME KEY_ID
    local out
    if out=$(inventory "$tmp/$1.json" --require-current "$2" 2>&1); then
        pass "$1 ($(tail -n 1 <<<"$out"))"
    else
        fail "$1" "$(tr '\n' ' ' <<<"$out" | head -c 600)"
    fi
}

names=(rotate-a rotate-b rotate-c)
declare -A plain
for s in "${names[@]}"; do plain[$s]="sceau-rotation-$s-$(openssl rand -hex 8)"; done
value() { printf %s "${plain[$1]}" | base64 -w0; }
read_all() { # read_all NAME [MIN_DECRYPTS]
    local s
    for s in "${names[@]}"; do check_read 0 "$1-$s" "$s" "$(value "$s")" "${2:-0}"; done
}

key_id0=$(key_id 0)
key_id0=${key_id0#key_id=}
for s in "${names[@]}"; do create_secret 0 "create-$s" "$s" "$(value "$s")"; done
require_current under-generation-0 "$key_id0"
# The audit trail: the envelope a stored Secret holds has the fingerprint
# sceau logged for the Encrypt that made it (`inventory --list-values`,
# `envelope=` in the call line).
listed=$(inventory "$tmp/under-generation-0.json" --list-values | grep -F "/secrets/$ns/rotate-a " | head -n 1)
fingerprint=$(grep -oE 'envelope=[0-9a-f]{16}' <<<"$listed" | head -n 1)
if [ -n "$fingerprint" ] && grep -aF "method=Encrypt" "$(node_file 0 sceau log)" | grep -F "key_id=\"$key_id0\"" | grep -qF "$fingerprint "; then
    pass "call-log-names-the-stored-envelope ($fingerprint of rotate-a, under $key_id0)"
else
    fail call-log-names-the-stored-envelope "listed: ${listed:-nothing}; logged: $(grep -aF 'method=Encrypt' "$(node_file 0 sceau log)" | tail -n 2 | tr '\n' ' ' | head -c 400)"
fi

# One rotation: generation 1, the rewrite, the proof.
rotate rotate-to-generation-1
key_id1=$rotated_key_id
taken_up apiserver-takes-up-generation-1 "$key_id1"
if out=$(inventory "$tmp/before-rewrite.json" --require-current "$key_id1" 2>&1); then
    fail require-current-refuses-before-the-rewrite "it passed: $(tail -n 1 <<<"$out")"
else
    pass "require-current-refuses-before-the-rewrite ($(grep -aF "$key_id0" <<<"$out" | head -n 1 | tr -s ' ' | head -c 160))"
fi
rewrite rewrite-to-generation-1
require_current under-generation-1 "$key_id1"
"$bin/etcdget" --endpoint "$etcd_url" "/registry/secrets/$ns/rotate-a" >"$tmp/rotate-a-generation-1.raw"

# A second rotation, so that generation 1 can be retired (0, the SRK, cannot).
rotate rotate-to-generation-2
key_id2=$rotated_key_id
taken_up apiserver-takes-up-generation-2 "$key_id2"
rewrite rewrite-to-generation-2
require_current under-generation-2 "$key_id2"

stop "${sceau_pids[0]}" 10
if out=$(sceau_kek retire --generation 1 2>&1); then
    pass "retire-generation-1 ($out)"
else
    fail retire-generation-1 "$out"
fi
if out=$(sceau_kek retire --generation 0 2>&1); then
    fail retire-generation-0-refused "it was not refused: $out"
else
    pass "retire-generation-0-refused ($(head -c 120 <<<"$out")…)"
fi
list=$(sceau_kek list 2>&1)
echo "$list"
start_sceau 0
if restart_apiserver 0; then
    read_all read-after-retire 1
else
    fail read-after-retire "kube-apiserver did not become ready again"
fi
check_readyz 0 readyz-after-retire

# A value stored under generation 1, put back into etcd as a restored backup
# would: it no longer opens.
"$bin/etcdctl" --endpoints "$etcd_url" put "/registry/secrets/$ns/rotate-a" <"$tmp/rotate-a-generation-1.raw" >/dev/null
restart_apiserver 0 || true
out=$(apicurl 0 GET "/api/v1/namespaces/$ns/secrets/rotate-a")
if [ "$(tail -n 1 <<<"$out")" = 200 ]; then
    fail retired-value-does-not-open "the apiserver read it: $(sed '$d' <<<"$out" | head -c 200)"
else
    pass "retired-value-does-not-open (HTTP $(tail -n 1 <<<"$out"); sceau: $(grep -aF "KEK generation 1" "$(node_file 0 sceau log)" | tail -n 1 | head -c 200))"
fi
# The node's ledger lets the inventory name that value, with no key read.
out=$(inventory "$tmp/after-retire.json" --kek-ledger "$state/kek-ledger" 2>&1) || true
if grep -qE '^ +1  values name retired generation 1$' <<<"$out"; then
    pass "inventory-names-the-retired-generation ($(grep -F 'retired generation' <<<"$out" | tr -s ' '))"
else
    fail inventory-names-the-retired-generation "$(tr '\n' ' ' <<<"$out" | head -c 600)"
fi
finish interop-rotation
