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
    proxy_pid=$!
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

# proxy_phase: asks the proxy for its counts since the last call (SIGUSR1:
# it prints a report and starts counting again) and sets phase_unseals and
# phase_modelled_ms from that report.
proxy_phase() {
    local before after report
    before=$(grep -c 'TPM commands, modelled delay' "$tmp/proxy-0.log" || true)
    kill -USR1 "$proxy_pid"
    for _ in $(seq 100); do
        after=$(grep -c 'TPM commands, modelled delay' "$tmp/proxy-0.log" || true)
        [ "$after" -gt "$before" ] && break
        sleep 0.05
    done
    sleep 0.1 # the rest of the report
    report=$(awk -v n="$after" '/TPM commands, modelled delay/ { k++ } k == n' "$tmp/proxy-0.log")
    phase_unseals=$(awk '$1 == "Unseal" { print $2 }' <<<"$report")
    phase_unseals=${phase_unseals:-0}
    phase_modelled_ms=$(grep -oE 'modelled delay [0-9.]+' <<<"$report" | awk '{ printf "%d", $3 * 1000 }')
}

# cold_start LABEL: restarts the apiserver (empty DEK cache) and records,
# under LABEL, exec → /readyz, exec → every Secret read, its Decrypt calls,
# and the TPM unseals and modelled TPM time the proxy saw meanwhile.
cold_start() {
    proxy_phase
    restart_apiserver 0 >/dev/null
    results[$1-ready]=${apiserver_ready_ms[0]}
    results[$1-all]=$(list_all_ms 0)
    results[$1-decrypts]="$(kms_calls 0 Decrypt) / $(kms_calls 0 Decrypt not-OK)"
    proxy_phase
    results[$1-unseals]=$phase_unseals
    results[$1-modelled]=$phase_modelled_ms
    echo "   $1: /readyz ${results[$1-ready]} ms, all read ${results[$1-all]} ms, \
apiserver Decrypts ${results[$1-decrypts]}, TPM unseals $phase_unseals, modelled TPM time $phase_modelled_ms ms"
}

# median of the arguments (an odd count)
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[(NR + 1) / 2] }'; }

rounds=${ROUNDS:-3}
echo "== $rounds rounds of two cold starts each (kube-apiserver restarted, its DEK cache empty):"
echo "   the TPM at swtpm speed (the proxy's delays off), then at the profile's"
declare -A results
fast_all=() slow_all=() fast_ready=() slow_ready=()
for round in $(seq "$rounds"); do
    kill -USR2 "$proxy_pid" # delays off
    cold_start "fast-$round"
    kill -USR2 "$proxy_pid" # delays on
    cold_start "slow-$round"
    fast_all+=("${results[fast-$round-all]}") slow_all+=("${results[slow-$round-all]}")
    fast_ready+=("${results[fast-$round-ready]}") slow_ready+=("${results[slow-$round-ready]}")
done
unseal_ms=$(($(profile_ms Load) + $(profile_ms Unseal) + $(profile_ms FlushContext)))
floor_ms=$((seeds * unseal_ms))
added=()
for round in $(seq "$rounds"); do
    added+=($((results[slow-$round-all] - results[fast-$round-all])))
done

echo
echo "| cold start of kube-apiserver ($secrets Secrets, $seeds DEK seeds; median of $rounds) | TPM at swtpm speed | TPM at the profile's speed |"
echo "|---|---|---|"
echo "| exec → /readyz | $(median "${fast_ready[@]}") ms | $(median "${slow_ready[@]}") ms |"
echo "| exec → every Secret read (a LIST of all $secrets) | $(median "${fast_all[@]}") ms | $(median "${slow_all[@]}") ms |"
echo "| the apiserver's Decrypt calls, OK / not OK (round 1) | ${results[fast-1-decrypts]} | ${results[slow-1-decrypts]} |"
echo "| TPM unseals (Load, Unseal, FlushContext) the proxy saw (round 1) | ${results[fast-1-unseals]} | ${results[slow-1-unseals]} |"
echo "| modelled TPM time (round 1) | — | ${results[slow-1-modelled]} ms |"
echo
echo "- the physical floor: $seeds seeds × one modelled unseal (Load $(profile_ms Load) + Unseal $(profile_ms Unseal) + FlushContext $(profile_ms FlushContext) ms) = $floor_ms ms"
echo "- TPM unseals per distinct seed: $(awk -v a="${results[slow-1-unseals]}" -v b="$seeds" 'BEGIN { printf "%.2f", a / b }') (the apiserver's Decrypt calls for one seed are coalesced into one unseal)"
echo "- ratio, modelled TPM time of the cold start / floor: $(awk -v a="${results[slow-1-modelled]}" -v b="$floor_ms" 'BEGIN { printf "%.2f", a / b }') (beyond the unseals: the Encrypt of the new seed, Status probes, jitter)"
echo "- what the TPM's speed added to exec → every Secret read: $(median "${added[@]}") ms (median of the per-round differences: ${added[*]}; the apiserver's own start-up runs meanwhile, and its noise is of the same order)"
echo
echo "profile: $profile; kube-apiserver $k8s_version; sceau $(git rev-parse --short HEAD); $(date -u +%F)"
