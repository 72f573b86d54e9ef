#!/usr/bin/env bash
# The apiserver's real workload on a modelled TPM how
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
#   2. Cold starts: the apiserver restarted (its DEK cache empty), timed from
#      its exec: /readyz answering 200, and a LIST of the namespace's Secrets
#      returning all of them (every Secret read once). In each of ROUNDS
#      rounds (default 3), one cold start with the proxy's delays off (the
#      TPM at swtpm speed: what the apiserver costs by itself) and one with
#      them on; the proxy counts the unseals of each (SIGUSR1 and SIGUSR2 to
#      `sceau-rig tpm-proxy`), the apiserver's metrics its Decrypt calls.
#   3. The floor: one modelled unseal (Load + Unseal + FlushContext in the
#      profile) per distinct seed, the least any plugin that unseals per seed
#      could cost. The ratio of what the TPM's speed added to "every Secret
#      read" to that floor is what sceau adds over the physical minimum.
#
# NODES=3 runs the same with three kube-apiservers on one etcd, each with
# its own sceau in cluster mode, its own swtpm and its own proxy (the rig of
# scripts/interop-ha.sh), and the cold start restarts the three together.
# The floor is then one modelled cluster unseal per seed (Import + Load +
# Unseal + FlushContext) on each node's own TPM.
#
# A benchmark, not a test: prints a table (for docs/performance.md); not in
# CI. Usage: bash scripts/bench-apiserver.sh [PROFILE]
# (SECRETS=200 SEEDS=5 ROUNDS=3 NODES=1 by default). Needs root, like the
# interop scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

profile=${1:-crates/testkit/profiles/discrete-tpm.profile}
secrets=${SECRETS:-200}
seeds=${SEEDS:-5}
rounds=${ROUNDS:-3}
case ${NODES:-1} in
1) node_names=("") ;;
3) node_names=(a b c) ;;
*)
    echo "NODES=${NODES}: 1 (one apiserver) or 3 (three, cluster mode)" >&2
    exit 2
    ;;
esac
nodes=("${!node_names[@]}")
[ -f "$profile" ] || {
    echo "no TPM profile at $profile: give the path of one (crates/testkit/profiles/)" >&2
    exit 2
}

# start_tpm_proxy I: the latency proxy in front of node I's swtpm; node I's
# sceau, started after this, talks to the proxy. The proxy prints port=Q
# once it listens, and a report of its counts on stderr on SIGUSR1 (then
# counts afresh) and when stopped; SIGUSR2 turns its delays off and on.
proxy_pids=()
start_tpm_proxy() {
    local i=$1 ready="$tmp/proxy-$1.ready" line=""
    mkfifo "$ready"
    target/debug/sceau-rig tpm-proxy --tpm-port "${tpm_ports[i]}" --profile "$profile" \
        >"$ready" 2>"$tmp/proxy-$i.log" &
    proxy_pids[i]=$!
    swtpm_pids+=("$!") # stopped with the swtpms by lib-apiserver.sh's cleanup
    read -r line <"$ready" || true
    rm -f "$ready"
    [[ ${line#port=} =~ ^[0-9]+$ ]] || {
        cat "$tmp/proxy-$i.log" >&2
        echo "the TPM proxy did not start" >&2
        exit 1
    }
    echo "== TPM proxy$(node_label "$i") on 127.0.0.1:${line#port=} in front of swtpm ${tpm_ports[i]}"
    tpm_ports[i]=${line#port=}
}

# profile_ms COMMAND: the profile's latency for COMMAND (its default if the
# profile does not name it), in ms.
profile_ms() {
    awk -v c="$1" '$1 == c { print $2; found = 1; exit } $1 == "default" { d = $2 }
        END { if (!found) print d + 0 }' "$profile"
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
    echo "the Secrets were not all readable through node $1 within 120 s" >&2
    return 1
}

# proxy_phase I: asks node I's proxy for its counts since the last call and
# sets phase_unseals and phase_modelled_ms from its report.
proxy_phase() {
    local i=$1 log="$tmp/proxy-$1.log" before after report
    before=$(grep -c 'TPM commands, modelled delay' "$log" || true)
    kill -USR1 "${proxy_pids[i]}"
    for _ in $(seq 100); do
        after=$(grep -c 'TPM commands, modelled delay' "$log" || true)
        [ "$after" -gt "$before" ] && break
        sleep 0.05
    done
    sleep 0.1 # the rest of the report
    report=$(awk -v n="$after" '/TPM commands, modelled delay/ { k++ } k == n' "$log")
    phase_unseals=$(awk '$1 == "Unseal" { print $2 }' <<<"$report")
    phase_unseals=${phase_unseals:-0}
    phase_modelled_ms=$(grep -oE 'modelled delay [0-9.]+' <<<"$report" | awk '{ printf "%d", $3 * 1000 }')
}

# cold_start LABEL: stops every apiserver, starts them all at once (empty
# DEK caches), and records per node, under LABEL-I: exec → /readyz, exec →
# every Secret read, the apiserver's Decrypt calls, and the TPM unseals and
# modelled TPM time its proxy saw meanwhile.
declare -A results
cold_start() {
    local label=$1 i
    for i in "${nodes[@]}"; do
        proxy_phase "$i"
        stop "${apiserver_pids[i]}" 30
    done
    for i in "${nodes[@]}"; do launch_apiserver "$i"; done
    for i in "${nodes[@]}"; do wait_apiserver_ready "$i" >/dev/null; done
    local listers=()
    for i in "${nodes[@]}"; do
        list_all_ms "$i" >"$tmp/all-$i" &
        listers+=("$!")
    done
    wait "${listers[@]}"
    for i in "${nodes[@]}"; do
        results[$label-$i-ready]=${apiserver_ready_ms[i]}
        results[$label-$i-all]=$(cat "$tmp/all-$i")
        results[$label-$i-decrypts]=$(kms_calls "$i" Decrypt)
        results[$label-$i-failed]=$(kms_calls "$i" Decrypt not-OK)
        proxy_phase "$i"
        results[$label-$i-unseals]=$phase_unseals
        results[$label-$i-modelled]=$phase_modelled_ms
        echo "   $label$(node_label "$i"): /readyz ${results[$label-$i-ready]} ms, all read ${results[$label-$i-all]} ms, \
apiserver Decrypts ${results[$label-$i-decrypts]} OK / ${results[$label-$i-failed]} not, TPM unseals $phase_unseals, \
modelled TPM time $phase_modelled_ms ms"
    done
}

# median of the arguments (an odd count)
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[(NR + 1) / 2] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

start_rig sceau-bench-apiserver
start_etcd
start_swtpms
for i in "${nodes[@]}"; do start_tpm_proxy "$i"; done
echo "   profile: $profile"
unseal_commands=(Load Unseal FlushContext)
if [ "${#nodes[@]}" -gt 1 ]; then
    members="$tmp/members"
    mkdir "$members"
    for i in "${nodes[@]}"; do
        target/debug/sceau srk-public --tcti "$(tcti "$i")" >"$members/${node_names[i]}.pub"
    done
    target/debug/sceau-recover recovery-keygen --identity "$tmp/recovery.identity" \
        --public "$tmp/recovery.pub" --unencrypted-private-key 2>/dev/null
    sceau_serve_args=(--members "$members" --recovery-key "$tmp/recovery.pub")
    unseal_commands=(Import Load Unseal FlushContext)
    echo "== cluster mode: members $(cd "$members" && echo *.pub) and a recovery key"
fi
start_sceaus
start_apiservers
create_namespace 0

echo "== writing $secrets Secrets across $seeds starts of kube-apiserver$(node_label 0) (one DEK seed each)"
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

echo "== $rounds rounds of two cold starts (every kube-apiserver restarted at once, DEK caches empty):"
echo "   the TPMs at swtpm speed (the proxies' delays off), then at the profile's"
for round in $(seq "$rounds"); do
    for i in "${nodes[@]}"; do kill -USR2 "${proxy_pids[i]}"; done # delays off
    cold_start "fast-$round"
    for i in "${nodes[@]}"; do kill -USR2 "${proxy_pids[i]}"; done # delays on
    cold_start "slow-$round"
done

unseal_ms=0
for command in "${unseal_commands[@]}"; do unseal_ms=$((unseal_ms + $(profile_ms "$command"))); done
floor_ms=$((seeds * unseal_ms))
mode="one kube-apiserver, sceau single-node"
[ "${#nodes[@]}" -gt 1 ] && mode="three kube-apiservers restarted together, sceau in cluster mode"
echo
echo "| cold start: $mode; $secrets Secrets, $seeds DEK seeds; median of $rounds rounds | TPM at swtpm speed | TPM at the profile's speed |"
echo "|---|---|---|"
for i in "${nodes[@]}"; do
    declare -A med=()
    for speed in fast slow; do
        for what in ready all; do
            values=()
            for round in $(seq "$rounds"); do values+=("${results[$speed-$round-$i-$what]}"); done
            med[$what-$speed]=$(median "${values[@]}")
        done
    done
    echo "| kube-apiserver$(node_label "$i"): exec → /readyz | ${med[ready-fast]} ms | ${med[ready-slow]} ms |"
    echo "| kube-apiserver$(node_label "$i"): exec → every Secret read | ${med[all-fast]} ms | ${med[all-slow]} ms |"
    echo "| kube-apiserver$(node_label "$i"): its Decrypt calls, OK / not OK (round 1) | ${results[fast-1-$i-decrypts]} / ${results[fast-1-$i-failed]} | ${results[slow-1-$i-decrypts]} / ${results[slow-1-$i-failed]} |"
    echo "| its sceau's TPM unseals (round 1) | ${results[fast-1-$i-unseals]} | ${results[slow-1-$i-unseals]} |"
    echo "| its TPM's modelled time (round 1) | — | ${results[slow-1-$i-modelled]} ms |"
done
echo
echo "- the physical floor, per TPM: $seeds seeds × one modelled unseal (${unseal_commands[*]}: $unseal_ms ms) = $floor_ms ms"
for i in "${nodes[@]}"; do
    added=()
    for round in $(seq "$rounds"); do
        added+=($((results[slow-$round-$i-all] - results[fast-$round-$i-all])))
    done
    echo "- node$(node_label "$i"): TPM unseals per seed $(ratio "${results[slow-1-$i-unseals]}" "$seeds"); modelled TPM time / floor $(ratio "${results[slow-1-$i-modelled]}" "$floor_ms"); the TPM's speed added $(median "${added[@]}") ms to exec → every Secret read (per round: ${added[*]})"
done
echo
echo "profile: $profile; kube-apiserver $k8s_version; sceau $(git rev-parse --short HEAD); $(date -u +%F)"
