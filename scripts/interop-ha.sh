#!/usr/bin/env bash
# sceau's cluster mode behind three real kube-apiservers sharing one
# real etcd: the HA end-to-end test.
#
# On the rig of scripts/interop-apiserver.sh (scripts/lib-apiserver.sh: the
# same binaries, built from tests/interop/apiserver), starts on loopback one
# etcd and three nodes a, b, c, each a throwaway swtpm, a sceau in cluster mode
# and a kube-apiserver whose EncryptionConfiguration names its own sceau. The
# members directory holds the `sceau srk-public` output of every node, and
# every sceau also wraps for an offline recovery key from
# `sceau-recover recovery-keygen`. Then:
#
#   1. the three sceau report one key_id, the one each logged for its
#      membership; the Secret written through a is stored in etcd under
#      k8s:enc:kms:v2:sceau:, names that key_id and holds no plaintext;
#   2. it reads back through b and c (each needs a Decrypt from its own sceau
#      of what a's sceau sealed); each kube-apiserver is restarted in turn
#      (cold DEK cache), and after each restart the Secret reads back through
#      all three; each sceau is restarted in turn (same key_id), then its
#      kube-apiserver, and the Secret reads back through all three; a Secret
#      written through c reads back through a and b;
#   3. `etcdctl snapshot save` (etcdctl v3.7.0, built from the module), every
#      process stopped and every swtpm's state deleted, then
#      `sceau-recover recover --identity ID --etcd-snapshot SNAP > FILE` prints both
#      Secrets with their values; the same for `etcdctl get --prefix
#      /registry/secrets -w json` and `sceau-recover recover --etcd-json`.
#
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (sceau serves uid 0 only by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

node_names=(a b c)
nodes=("${!node_names[@]}")
start_rig sceau-ha
start_etcd
start_swtpms

# ---------------------------------------------------------------- cluster mode
members="$tmp/members"
mkdir "$members"
for i in "${nodes[@]}"; do
    target/debug/sceau srk-public --tcti "$(tcti "$i")" >"$members/${node_names[i]}.pub"
done
target/debug/sceau-recover recovery-keygen --identity "$tmp/recovery.identity" --public "$tmp/recovery.pub" 2>"$tmp/recovery-keygen.log"
echo "== members: $(cd "$members" && echo *.pub); $(cat "$tmp/recovery-keygen.log")"
sceau_serve_args=(--members "$members" --recovery-key "$tmp/recovery.pub")
start_sceaus

# check_key_ids NAME: every sceau answers `sceau check` with one key_id, the
# one it logged as "cluster mode: key_id ..." (the latest start's line);
# sets cluster_key_id.
check_key_ids() {
    local i id logged report=""
    cluster_key_id=$(key_id 0)
    cluster_key_id=${cluster_key_id#key_id=}
    for i in "${nodes[@]}"; do
        id=$(key_id "$i")
        logged=$(grep -aoE 'cluster mode: key_id [^ ]+' "$(node_file "$i" sceau log)" | tail -n 1 || true)
        report+=" ${node_names[i]}: ${id:-none} (logged ${logged##* });"
        if [ "${id#key_id=}" != "$cluster_key_id" ] || [ "${logged##* }" != "$cluster_key_id" ]; then
            cluster_key_id=""
        fi
    done
    if [ -n "$cluster_key_id" ]; then
        pass "$1 (key_id=$cluster_key_id from \`sceau check\` and the log of a, b and c)"
    else
        fail "$1" "${report%;}"
    fi
}
check_key_ids key-id-same-on-all-members
first_key_id=$(key_id 0)
first_key_id=${first_key_id#key_id=} # a's, should the others disagree

start_apiservers
for i in "${nodes[@]}"; do
    check_readyz "$i" "readyz-kms-providers-${node_names[i]}"
done

# ---------------------------------------------------------------- Secrets
secret_a=sceau-ha-through-a
plaintext_a="sceau-plaintext-a-$(openssl rand -hex 12)"
value_a=$(printf %s "$plaintext_a" | base64 -w0)
create_namespace 0
create_secret 0 create-secret-through-a "$secret_a" "$value_a"
check_etcd_raw etcd-raw-a "$secret_a" "$plaintext_a"
if [ -n "$first_key_id" ] && grep -qaF "$first_key_id" "$tmp/raw-$secret_a"; then
    pass "etcd-raw-a-key-id (the stored envelope names $first_key_id)"
else
    fail etcd-raw-a-key-id "a's key_id ${first_key_id:-(none)} is not in the stored value"
fi

check_read 0 read-a-through-a "$secret_a" "$value_a"
# b and c never saw a's DEK: reading needs a Decrypt of what a's sceau sealed.
check_read 1 read-a-through-b "$secret_a" "$value_a" 1
check_read 2 read-a-through-c "$secret_a" "$value_a" 1

# read_everywhere WHEN: the Secret written through a reads back through every
# node, each of which has made at least 1 successful Decrypt since it started.
read_everywhere() {
    local i
    for i in "${nodes[@]}"; do
        check_read "$i" "read-a-through-${node_names[i]}-$1" "$secret_a" "$value_a" 1
    done
}

for n in "${nodes[@]}"; do
    if restart_apiserver "$n"; then
        read_everywhere "after-apiserver-${node_names[n]}-restart"
    else
        fail "apiserver-${node_names[n]}-restart" "kube-apiserver ${node_names[n]} did not become ready again"
    fi
done

for n in "${nodes[@]}"; do
    name=${node_names[n]}
    if ! restart_sceau "$n"; then
        fail "sceau-$name-restart" "sceau $name did not restart"
        continue
    fi
    check_key_ids "key-id-same-after-sceau-$name-restart"
    [ "$cluster_key_id" = "$first_key_id" ] ||
        fail "key-id-stable-across-sceau-$name-restart" "was $first_key_id, now ${cluster_key_id:-not one}"
    # The restarted kube-apiserver's read needs a Decrypt from the new sceau.
    if restart_apiserver "$n"; then
        read_everywhere "after-sceau-$name-restart"
    else
        fail "apiserver-$name-restart" "kube-apiserver $name did not become ready again"
    fi
done

secret_c=sceau-ha-through-c
plaintext_c="sceau-plaintext-c-$(openssl rand -hex 12)"
value_c=$(printf %s "$plaintext_c" | base64 -w0)
# a has not seen c's DEK since its last restart: its Decrypt count must grow.
decrypts_a=$(kms_calls 0 Decrypt)
create_secret 2 create-secret-through-c "$secret_c" "$value_c"
check_etcd_raw etcd-raw-c "$secret_c" "$plaintext_c"
check_read 0 read-c-through-a "$secret_c" "$value_c" $((decrypts_a + 1))
check_read 1 read-c-through-b "$secret_c" "$value_c" 1

for i in "${nodes[@]}"; do
    check_readyz "$i" "readyz-kms-providers-final-${node_names[i]}"
    kill -0 "${sceau_pids[i]}" 2>/dev/null || fail "sceau-${node_names[i]}-running" "sceau ${node_names[i]} is no longer running"
done

# ---------------------------------------------------------------- recovery
echo "== etcdctl snapshot save; etcdctl get --prefix /registry/secrets -w json"
snapshot="$tmp/etcd.snapshot"
if "$bin/etcdctl" --endpoints "$etcd_url" snapshot save "$snapshot" >"$tmp/etcdctl.log" 2>&1; then
    pass "etcdctl-snapshot-save ($(wc -c <"$snapshot") bytes; $(grep -aoE 'Snapshot saved at .*' "$tmp/etcdctl.log" | head -n 1 || true))"
else
    fail etcdctl-snapshot-save "$(tail -n 3 "$tmp/etcdctl.log" | tr '\n' ' ')"
fi
json="$tmp/secrets.json"
"$bin/etcdctl" --endpoints "$etcd_url" get --prefix /registry/secrets -w json >"$json" 2>"$tmp/etcdctl-get.err" ||
    fail etcdctl-get-json "$(cat "$tmp/etcdctl-get.err")"

echo "== stopping every kube-apiserver, sceau, swtpm and etcd; deleting the TPM states"
for pid in "${apiserver_pids[@]}" "${sceau_pids[@]}" "$etcd_pid" "${swtpm_pids[@]}"; do
    stop "$pid"
done
apiserver_pids=() sceau_pids=() swtpm_pids=() etcd_pid=""
for i in "${nodes[@]}"; do
    rm -rf "$(node_file "$i" tpm)"
done

# check_recover NAME FLAG FILE: `sceau-recover recover --identity ... --members
# DIR FLAG FILE > OUT` succeeds, verifies every envelope's signature against the
# member files (none is reported UNVERIFIED), and OUT names both Secrets and
# holds both values (as written or in base64).
check_recover() {
    local out="$tmp/recovered-$1" err="$tmp/recovered-$1.err" missing=() secret value plaintext found=""
    if ! target/debug/sceau-recover recover --identity "$tmp/recovery.identity" --members "$members" "$2" "$3" >"$out" 2>"$err"; then
        fail "$1" "sceau-recover recover $2 exited non-zero: $(head -c 300 "$err" | tr '\n' ' ')"
        return
    fi
    for secret in "$secret_a:$plaintext_a" "$secret_c:$plaintext_c"; do
        plaintext=${secret#*:}
        secret=${secret%%:*}
        value=$(printf %s "$plaintext" | base64 -w0)
        grep -qaF "$secret" "$out" || missing+=("name $secret")
        if grep -qaF "$plaintext" "$out"; then
            found+=" $secret: value as written;"
        elif grep -qaF "$value" "$out"; then
            found+=" $secret: value in base64;"
        else
            missing+=("value of $secret")
        fi
    done
    if grep -q UNVERIFIED "$err"; then
        missing+=("signature checks: $(grep -c UNVERIFIED "$err") UNVERIFIED")
    fi
    if [ ${#missing[@]} -eq 0 ]; then
        pass "$1 (no TPM running;${found%;}; stderr: $(tail -n 1 "$err"))"
    else
        fail "$1" "missing from the output: ${missing[*]} ($(wc -c <"$out") bytes out; stderr: $(head -c 200 "$err" | tr '\n' ' '))"
    fi
}
check_recover recover-etcd-snapshot --etcd-snapshot "$snapshot"
check_recover recover-etcd-json --etcd-json "$json"

finish interop-ha
