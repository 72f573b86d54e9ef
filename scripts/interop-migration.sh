#!/usr/bin/env bash
# docs/migration.md, run on a real kube-apiserver and etcd.
#
# The rig of scripts/interop-apiserver.sh (scripts/lib-apiserver.sh: etcd,
# swtpm, sceau, kube-apiserver built from tests/interop/apiserver), plus
# kubectl built from the same k8s.io/kubernetes module. Each
# EncryptionConfiguration is the file docs/migration.md shows
# (docs/deploy/migration/), with only its endpoint pointed at the test's socket
# and the aescbc placeholder replaced by a fresh key:
#
#   identity only: two Secrets, plaintext in etcd; aescbc first: one more,
#   under k8s:enc:aescbc:v1:key1:; 1-sceau-first.yaml, `kubectl get secrets
#   --all-namespaces -o json | kubectl replace -f -`, then the page's
#   check-etcd.sh: every Secret under k8s:enc:kms:v2:sceau:, each read back
#   intact; rollback-identity-first.yaml, the same rewrite, `check-etcd.sh
#   plaintext`, plaintext in etcd again; rollback-aescbc-first.yaml loads and
#   every Secret reads; sceau stopped, identity only: every Secret still reads
#   back.
#
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (sceau serves uid 0 only by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

docs=docs/deploy/migration
node_names=("")
start_rig sceau-migration
build_k8s_tools
start_etcd
start_swtpms
start_sceaus

# The two starting points the page covers: no encryption (identity only), and
# aescbc first, as a cluster that used aescbc has it.
aescbc_key=$(openssl rand -base64 32)
identity_only="$tmp/identity-only.yaml"
aescbc_first="$tmp/aescbc-first.yaml"
providers_header='apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - secrets
    providers:'
printf '%s\n      - identity: {}\n' "$providers_header" >"$identity_only"
printf '%s\n      - aescbc:\n          keys:\n            - name: key1\n              secret: %s\n      - identity: {}\n' \
    "$providers_header" "$aescbc_key" >"$aescbc_first"

# switch_config NAME FILE: every apiserver (here one) restarted with FILE.
switch_config() {
    echo "== EncryptionConfiguration: $2"
    write_encryption_config 0 "$2"
    if restart_apiserver 0; then
        pass "$1 (kube-apiserver ready with $(basename "$2"))"
    else
        fail "$1" "kube-apiserver did not become ready with $2"
        finish interop-migration || true
        exit 1
    fi
}

# check_etcd_script NAME [ARG]: the page's check-etcd.sh, as shown, with the rig's etcdctl.
check_etcd_script() {
    local out
    if out=$(ETCDCTL_ENDPOINTS=$etcd_url PATH="$bin:$PATH" sh "$docs/check-etcd.sh" ${2:+"$2"} 2>&1); then
        pass "$1 ($(tail -n 1 <<<"$out"))"
    else
        fail "$1" "$(tr '\n' ' ' <<<"$out" | head -c 600)"
    fi
}
# check_etcd_value NAME SECRET PREFIX PLAINTEXT: the raw value of Secret
# $ns/SECRET in etcd starts with PREFIX and does not hold PLAINTEXT; with
# PREFIX "plaintext", it holds PLAINTEXT and starts with no k8s:enc: prefix
# (stored by identity).
check_etcd_value() {
    local key="/registry/secrets/$ns/$2" raw="$tmp/raw-$2" ok=false
    "$bin/etcdget" --endpoint "$etcd_url" "$key" >"$raw" 2>&1 || true
    if [ "$3" = plaintext ]; then
        [ "$(head -c 8 "$raw")" != "k8s:enc:" ] && grep -qaF "$4" "$raw" && ok=true
    else
        [ "$(head -c ${#3} "$raw")" = "$3" ] && ! grep -qaF "$4" "$raw" && ok=true
    fi
    if $ok; then
        pass "$1 ($key: $(wc -c <"$raw") bytes, $([ "$3" = plaintext ] && echo "the plaintext readable in etcd" || echo "starting $3, no plaintext"))"
    else
        fail "$1" "$key starts $(head -c 30 "$raw" | od -An -c | tr -s ' ' | head -c 120)"
    fi
}

names=(migrate-identity-a migrate-identity-b migrate-aescbc)
declare -A plain
for s in "${names[@]}"; do plain[$s]="sceau-migration-$s-$(openssl rand -hex 8)"; done
value() { printf %s "${plain[$1]}" | base64 -w0; }
# read_all NAME [MIN_DECRYPTS]: every Secret reads back intact through the API.
read_all() {
    local s
    for s in "${names[@]}"; do check_read 0 "$1-$s" "$s" "$(value "$s")" "${2:-0}"; done
}

# 1. identity: Secrets stored in plain text.
encryption_config_file=$identity_only
start_apiservers
write_kubeconfig
create_namespace 0
for s in migrate-identity-a migrate-identity-b; do
    create_secret 0 "create-under-identity-$s" "$s" "$(value "$s")"
    check_etcd_value "etcd-identity-$s" "$s" plaintext "${plain[$s]}"
done

# 2. aescbc first: one more Secret, under aescbc.
switch_config restart-aescbc-first "$aescbc_first"
create_secret 0 create-under-aescbc migrate-aescbc "$(value migrate-aescbc)"
check_etcd_value etcd-aescbc migrate-aescbc k8s:enc:aescbc:v1:key1: "${plain[migrate-aescbc]}"

# 3. sceau first, the old providers still listed; rewrite; check etcd.
switch_config restart-sceau-first "$docs/1-sceau-first.yaml"
check_readyz 0 readyz-kms-providers
rewrite rewrite-to-sceau
check_etcd_script check-etcd-sceau
for s in "${names[@]}"; do check_etcd_value "etcd-sceau-$s" "$s" k8s:enc:kms:v2:sceau: "${plain[$s]}"; done
# A fresh apiserver (empty DEK cache) must Decrypt through sceau to read them.
switch_config restart-sceau-first-again "$docs/1-sceau-first.yaml"
read_all read-after-migration 1

# 4. Rollback: identity first, sceau still listed; rewrite; plaintext again.
switch_config restart-rollback-identity-first "$docs/rollback-identity-first.yaml"
rewrite rewrite-to-identity
check_etcd_script check-etcd-plaintext plaintext
for s in "${names[@]}"; do check_etcd_value "etcd-rolled-back-$s" "$s" plaintext "${plain[$s]}"; done

# The page's other rollback file loads too (the Secrets, now plaintext, are
# read through its identity entry).
switch_config restart-rollback-aescbc-first "$docs/rollback-aescbc-first.yaml"
read_all read-with-rollback-aescbc-first

# 5. sceau gone, identity only: everything still reads.
stop "${sceau_pids[0]}" 10
sceau_pids[0]=""
switch_config restart-identity-only-without-sceau "$identity_only"
read_all read-without-sceau
finish interop-migration
