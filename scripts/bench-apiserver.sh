#!/usr/bin/env bash
# The apiserver's real workload on a modelled TPM (issue 14, item 3): how
# long a kube-apiserver waits for sceau when it starts cold.
#
# On the real-apiserver rig (scripts/lib-apiserver.sh: kube-apiserver and
# etcd built from tests/interop/apiserver, cached), with the test kit's TPM
# latency proxy (`sceau-rig tpm-proxy`, crates/testkit/src/tpm_proxy.rs)
# between sceau and its swtpm, delaying every TPM command as the profile
# says (default: the discrete-TPM profile):
#
#   1. SEEDS apiserver starts, SECRETS Secrets written across them. KMS v2
#      makes a new DEK seed at each start, so the Secrets are sealed under
#      SEEDS distinct seeds, as in a cluster whose apiserver restarted that
#      many times.
#   2. A cold start: the apiserver restarted (its DEK cache empty). Timed from
#      its exec: /readyz answering 200, and a LIST of the namespace's Secrets
#      returning all of them (every Secret read once). The apiserver's own
#      metrics give how many Decrypts it made and how long it waited for them.
#   3. The floor: one modelled unseal (Load + Unseal + FlushContext in the
#      profile) per distinct seed. The ratio of the apiserver's total Decrypt
#      wait to that floor is what sceau adds over the physical minimum.
#
# A benchmark, not a test: prints a table (for docs/performance.md); not in
# CI. Usage: bash scripts/bench-apiserver.sh [PROFILE]
# (SECRETS=200 SEEDS=5 by default). Needs root, like the interop scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

profile=${1:-crates/testkit/profiles/discrete-tpm.profile}
secrets=${SECRETS:-200}
seeds=${SEEDS:-5}
[ -f "$profile" ] || {
    echo "no TPM profile at $profile: give the path of one (crates/testkit/profiles/)" >&2
    exit 2
}

# start_tpm_proxy I PROFILE: the latency proxy in front of node I's swtpm;
# node I's sceau, started after this, talks to the proxy. The proxy prints
# port=Q once it listens and its command counts on stderr when stopped.
start_tpm_proxy() {
    local i=$1 ready="$tmp/proxy-$1.ready" line=""
    mkfifo "$ready"
    target/debug/sceau-rig tpm-proxy --tpm-port "${tpm_ports[i]}" --profile "$2" \
        >"$ready" 2>"$tmp/proxy-$i.log" &
    swtpm_pids+=("$!") # stopped with the swtpms by lib-apiserver.sh's cleanup
    read -r line <"$ready" || true
    rm -f "$ready"
    [[ ${line#port=} =~ ^[0-9]+$ ]] || {
        cat "$tmp/proxy-$i.log" >&2
        echo "the TPM proxy did not start" >&2
        exit 1
    }
    echo "== TPM proxy on 127.0.0.1:${line#port=} in front of swtpm ${tpm_ports[i]}, profile $profile"
    tpm_ports[i]=${line#port=}
}

# profile_ms COMMAND: the profile's latency for COMMAND (its default if the
# profile does not name it), in ms.
profile_ms() {
    awk -v c="$1" '$1 == c { print $2; found = 1; exit } $1 == "default" { d = $2 }
        END { if (!found) print d + 0 }' "$profile"
}

# decrypt_wait_ms I: node I's apiserver's own total wait for successful
# Decrypt calls to sceau since it started (its KMS latency histogram's sum).
decrypt_wait_ms() {
    apicurl "$1" GET /metrics | grep -a '^apiserver_envelope_encryption_kms_operations_latency_seconds_sum' |
        grep -a 'method_name="/v2.KeyManagementService/Decrypt"' | grep -a 'provider_name="sceau"' |
        grep -aF 'grpc_status_code="OK"' | awk '{s += $2} END {printf "%d", s * 1000}' || true
}

# list_all_ms I: ms from node I's apiserver's exec until a LIST of the
# namespace's Secrets answers 200 with all $secrets of them (<= 120 s).
list_all_ms() {
    local out count deadline=$((SECONDS + 120))
    while [ "$SECONDS" -lt "$deadline" ]; do
        out=$(apicurl "$1" GET "/api/v1/namespaces/$ns/secrets")
        if [ "$(tail -n 1 <<<"$out")" = 200 ]; then
            count=$(sed '$d' <<<"$out" | grep -aoE '"plaintext": *"' | wc -l)
            [ "$count" -ge "$secrets" ] && {
                echo $(($(date +%s%3N) - apiserver_exec_ms[$1]))
                return 0
            }
        fi
        sleep 0.05
    done
    echo "the Secrets were not all readable within 120 s" >&2
    return 1
}

node_names=("")
start_rig sceau-bench-apiserver
start_etcd
start_swtpms
start_tpm_proxy 0 "$profile"
start_sceaus
start_apiservers
create_namespace 0

echo "== writing $secrets Secrets across $seeds apiserver starts (one DEK seed each)"
per_seed=$(((secrets + seeds - 1) / seeds))
written=0
for seed in $(seq "$seeds"); do
    [ "$seed" -gt 1 ] && restart_apiserver 0 >/dev/null
    for _ in $(seq "$per_seed"); do
        [ "$written" -ge "$secrets" ] && break
        written=$((written + 1))
        create_secret 0 "create-$written" "bench-$written" "$(printf 'value-%s' "$written" | base64 -w0)" >/dev/null
    done
done
[ "$failed" -eq 0 ] || {
    echo "writing the Secrets failed ($failed of $secrets)" >&2
    exit 1
}

echo "== cold start: kube-apiserver restarted with an empty DEK cache"
restart_apiserver 0
all_read_ms=$(list_all_ms 0)
decrypts=$(kms_calls 0 Decrypt)
failed_decrypts=$(kms_calls 0 Decrypt not-OK)
waited_ms=$(decrypt_wait_ms 0)
unseal_ms=$(($(profile_ms Load) + $(profile_ms Unseal) + $(profile_ms FlushContext)))
floor_ms=$((seeds * unseal_ms))

echo
echo "| measure | value |"
echo "|---|---|"
echo "| Secrets, distinct DEK seeds | $secrets, $seeds |"
echo "| exec → /readyz | ${apiserver_ready_ms[0]} ms |"
echo "| exec → every Secret read (LIST of all $secrets) | $all_read_ms ms |"
echo "| Decrypt calls the apiserver made (OK / not OK) | $decrypts / $failed_decrypts |"
echo "| the apiserver's total wait for those Decrypts | $waited_ms ms |"
echo "| floor: $seeds × one modelled unseal (Load + Unseal + FlushContext = $unseal_ms ms) | $floor_ms ms |"
echo "| ratio: Decrypt wait / floor | $(awk -v a="$waited_ms" -v b="$floor_ms" 'BEGIN { printf "%.2f", a / b }') |"
echo
echo "profile: $profile; kube-apiserver $k8s_version; sceau $(git rev-parse --short HEAD); $(date -u +%F)"
