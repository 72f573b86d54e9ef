#!/usr/bin/env bash
# sceau behind a real kube-apiserver with a real etcd.
#
# Builds kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver), etcd
# (go.etcd.io/etcd/server/v3/etcdmain), etcdctl and a small etcd reader from
# the Go module in tests/interop/apiserver (versions pinned in its go.mod),
# caches the binaries under ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin
# keyed by versions and a hash of the module's sources, and starts on loopback:
# etcd, a throwaway swtpm, sceau (cargo build --locked) on a temporary socket,
# and kube-apiserver with an EncryptionConfiguration whose secrets go through
# KMS v2 provider "sceau" (then identity). Then, through the REST API, with a
# bearer token from --token-auth-file:
#
#   create a Secret; read its raw value from etcd (prefix
#   k8s:enc:kms:v2:sceau:, no plaintext); restart kube-apiserver (cold DEK
#   cache: Decrypt) and read it back; restart sceau (same swtpm) and read it
#   back, then restart kube-apiserver again so the read needs a Decrypt from
#   the new sceau; /readyz?verbose shows [+]kms-providers ok.
#
# The rig (build, etcd, swtpm, sceau, kube-apiserver, checks) is in
# scripts/lib-apiserver.sh, shared with scripts/interop-ha.sh.
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (sceau serves uid 0 only by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

node_names=("") # one node: $tmp/kms.sock, $tmp/sceau.log, $tmp/apiserver.log
start_rig sceau-apiserver
start_etcd
start_swtpms
start_sceaus
start_apiservers
check_readyz 0 readyz-kms-providers

secret=sceau-interop-secret
plaintext="sceau-plaintext-$(openssl rand -hex 12)"
value=$(printf %s "$plaintext" | base64 -w0)
create_namespace 0
create_secret 0 create-secret "$secret" "$value"
check_etcd_raw etcd-raw "$secret" "$plaintext"
check_read 0 read-secret "$secret" "$value"
key_id_before=$(key_id 0)

if restart_apiserver 0; then
    check_read 0 read-after-apiserver-restart "$secret" "$value" 1
else
    fail read-after-apiserver-restart "kube-apiserver did not become ready again"
fi

if restart_sceau 0; then
    key_id_after=$(key_id 0)
    if [ -n "$key_id_before" ] && [ "$key_id_before" = "$key_id_after" ]; then
        pass "key-id-stable-across-sceau-restart ($key_id_after)"
    else
        fail key-id-stable-across-sceau-restart "before: ${key_id_before:-none}, after: ${key_id_after:-none}"
    fi
    check_read 0 read-after-sceau-restart "$secret" "$value"
    # The running apiserver's health probe re-asks Status once its last healthy
    # result is 20 s old; wait (at most 45 s) until a Status call has reached
    # the new sceau, then readyz must still say ok.
    status_before=$(kms_calls 0 Status)
    for _ in $(seq 45); do
        apicurl 0 GET '/readyz?verbose' >/dev/null
        [ "$(kms_calls 0 Status)" -gt "$status_before" ] && break
        sleep 1
    done
    if [ "$(kms_calls 0 Status)" -gt "$status_before" ]; then
        check_readyz 0 readyz-after-sceau-restart
    else
        fail readyz-after-sceau-restart "no successful Status call to the new sceau within 45 s"
    fi
    # The read needs a Decrypt from the new sceau.
    if restart_apiserver 0; then
        check_read 0 read-after-sceau-and-apiserver-restart "$secret" "$value" 1
    else
        fail read-after-sceau-and-apiserver-restart "kube-apiserver did not become ready again"
    fi
else
    fail read-after-sceau-restart "sceau did not restart"
fi
check_readyz 0 readyz-kms-providers-final

kill -0 "${sceau_pids[0]}" 2>/dev/null || fail sceau-running "sceau is no longer running"
finish interop-apiserver
