#!/usr/bin/env bash
# sceau's SPIRE TPM node attestor in a real SPIRE deployment (issue 12).
#
# Builds spire-server and spire-agent from the Go module in tests/interop/spire
# (version pinned in its go.mod; binaries cached under
# ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin keyed by version and a hash
# of the module files), and sceau's plugins (cargo build --locked -p
# sceau-spire -p sceau-testkit). Makes two local TPM manufacturers (CAs, with
# the test kit's `sceau-rig provision`) and four swtpm TPMs holding RSA 2048
# and ECC P-256 EK certificates: rsa and ecc and stranger from the trusted CA,
# rogue from the other. Then, on loopback and unix sockets in a temporary
# directory:
#
#   spire-server (sqlite, memory key manager, trust domain example.org,
#   agent_ttl 1m) with NodeAttestor "sceau_tpm" = sceau-spire-server, whose
#   plugin_data_file trusts the CA's roots and intermediates, lists the rsa
#   TPM's EK hash, ek_trust "either", quote_pcrs [0, 7];
#   agent rsa (ek_algorithm rsa) attests: healthy, listed as
#   spiffe://example.org/spire/agent/sceau_tpm/<sha256 of its EK SPKI> with
#   attestation type sceau_tpm and selectors pub_hash, manufacturer, model,
#   version, issuer, pcr that match what tpm2-tools and openssl read from the
#   TPM; a registration entry gives a workload (uid 0) an X.509 SVID;
#   agent rogue (EK certificate from the other CA) is refused;
#   the plugin data is rewritten to ek_trust "both" (rsa and ecc listed) and
#   applied by SIGUSR1; agent ecc (ek_algorithm ecc) attests; agent stranger
#   (trusted CA, not listed) is refused;
#   agent rsa re-attests through the plugin when its SVID is half-way through
#   its minute;
#   SPIRE stops: no plugin "failed to exit gracefully", no plugin socket left.
#
# `--join-token` runs the same server, agent and workload steps with SPIRE's
# built-in join_token attestor instead, without sceau's plugins (the rig's own
# check). SCEAU_SPIRE_KEEP=1 keeps the temporary directory and its logs.
#
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (the workload entry is for uid 0).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-spire.sh

mode=sceau_tpm
case "${1:-}" in
--join-token) mode=join_token ;;
"") ;;
*)
    echo "usage: $0 [--join-token]" >&2
    exit 2
    ;;
esac

start_spire_rig sceau-spire
mkdir -p "$tmp/plugin-tmp"

# ---------------------------------------------------------------- checks shared by both modes
# check_agent_attested A ID TYPE: agent A is healthy and the server lists ID
# with attestation type TYPE; prints what the server shows.
check_agent_attested() {
    local name=$1 id=$2 type=$3 shown
    if ! wait_agent_healthy "$name" 30; then
        fail "agent-$name-healthy" "spire-agent $name not healthy within 30 s: $(grep -aE 'level=(error|warning)' "$(agent_log "$name")" | tail -n 2 | cut -c1-300)"
        return 1
    fi
    pass "agent-$name-healthy (spire-agent healthcheck passes)"
    shown=$(agent_show "$id")
    sed 's/^/   /' <<<"$shown"
    if grep -qF "SPIFFE ID         : $id" <<<"$shown" && grep -qF "Attestation type  : $type" <<<"$shown"; then
        pass "agent-$name-listed ($id, attestation type $type)"
    else
        fail "agent-$name-listed" "spire-server agent show -spiffeID $id: $(head -c 300 <<<"$shown")"
        echo "   spire-server agent list:"
        server_cli agent list 2>&1 | sed 's/^/   /' || true
        return 1
    fi
}

# check_workload_svid A PARENT_ID: an entry for uid 0 under PARENT_ID; the
# workload (this script, uid 0) gets spiffe://example.org/workload through agent A.
check_workload_svid() {
    local name=$1 parent=$2 out
    server_cli entry create -parentID "$parent" -spiffeID spiffe://example.org/workload \
        -selector unix:uid:0 >"$tmp/entry.out" 2>&1 || {
        fail workload-entry "spire-server entry create: $(head -c 300 "$tmp/entry.out")"
        return
    }
    # The agent learns of the entry at its next sync (every 5 s); retry the fetch.
    for _ in $(seq 30); do
        out=$("$spire_bin/spire-agent" api fetch x509 -socketPath "$(agent_socket "$name")" -timeout 5s 2>&1 || true)
        grep -qF "SPIFFE ID:		spiffe://example.org/workload" <<<"$out" && break
        sleep 1
    done
    if grep -qF "SPIFFE ID:		spiffe://example.org/workload" <<<"$out"; then
        pass "workload-svid (spire-agent api fetch x509 through agent $name: $(grep -aE 'SVID Valid After|SVID Valid Until' <<<"$out" | tr -s '\t ' ' ' | tr '\n' ';'))"
    else
        fail workload-svid "no SVID for spiffe://example.org/workload within 30 s: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
    fi
}

# check_clean_stop: stops every agent, then the server, with SIGTERM; no
# plugin may be killed for not exiting and no plugin socket may remain.
check_clean_stop() {
    local name pid logs sockets=() left=() socket ungraceful
    logs=("$tmp/server/server.log" "$tmp"/agent-*/agent.log)
    mapfile -t sockets < <(grep -ahoE 'plugin address.*address=[^ ]+|address=[^ ]+.*plugin address' "${logs[@]}" |
        grep -oE 'address=[^ ]+' | sed 's/^address=//; s/"//g' | sort -u)
    for name in "${!agent_pid[@]}"; do stop_agent "$name"; done
    stop "$server_pid" 30
    for pid in "${spire_pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then echo "   still running: $pid"; fi
    done
    ungraceful=$({ grep -ahc 'failed to exit gracefully' "${logs[@]}" || true; } | awk '{n += $1} END {print n + 0}')
    for socket in "${sockets[@]}" "$tmp"/plugin-tmp/*; do
        if [ -e "$socket" ]; then left+=("$socket"); fi
    done
    if [ "$ungraceful" -eq 0 ] && [ ${#left[@]} -eq 0 ]; then
        pass "clean-stop (SIGTERM to every agent and the server: no 'failed to exit gracefully', none of the ${#sockets[@]} plugin sockets left)"
    else
        fail clean-stop "'failed to exit gracefully' $ungraceful times; left behind: ${left[*]:-nothing}"
    fi
}

# ---------------------------------------------------------------- join_token (the rig's own check)
if [ "$mode" = join_token ]; then
    write_server_config '    NodeAttestor "join_token" {
        plugin_data {}
    }'
    start_server
    token=$(server_cli token generate -spiffeID spiffe://example.org/node-a | sed -n 's/^Token: //p')
    write_agent_config a '    NodeAttestor "join_token" {
        plugin_data {}
    }' "join_token = \"$token\""
    start_agent a
    check_agent_attested a "spiffe://example.org/spire/agent/join_token/$token" join_token &&
        check_workload_svid a "spiffe://example.org/spire/agent/join_token/$token"
    check_clean_stop
    finish interop-spire
    exit
fi

# ---------------------------------------------------------------- sceau_tpm
build_plugins
echo "== TPMs (sceau-rig provision)"
provision_tpm rsa ca
provision_tpm ecc ca
provision_tpm stranger ca
provision_tpm rogue other-ca
for name in rsa ecc stranger rogue; do start_tpm "$name"; done

# What tpm2-tools and openssl read from the TPMs, before any plugin uses them.
rsa_hash=$(ek_hash rsa 0x01c00002)
ecc_hash=$(ek_hash ecc 0x01c0000a)
stranger_hash=$(ek_hash stranger 0x01c00002)
rogue_hash=$(ek_hash rogue 0x01c00002)
rsa_id=spiffe://example.org/spire/agent/sceau_tpm/$rsa_hash
ecc_id=spiffe://example.org/spire/agent/sceau_tpm/$ecc_hash
ek_cert_text rsa 0x01c00002 >"$tmp/rsa-ek.txt"
rsa_san=$(grep -aA1 'Subject Alternative Name' "$tmp/rsa-ek.txt" | tail -n 1 | tr -d ' ')
rsa_issuer_cn=$(grep -a 'Issuer:' "$tmp/rsa-ek.txt" | sed -E 's/.*CN ?= ?//')
declare -A rsa_pcr
for pcr in 0 7; do
    rsa_pcr[$pcr]=$(TPM2TOOLS_TCTI=$(tpm_tcti rsa) tpm2_pcrread "sha256:$pcr" 2>/dev/null |
        sed -nE "s/^ *$pcr *: *0x([0-9A-Fa-f]+).*/\1/p" | tr 'A-F' 'a-f')
done
echo "   rsa TPM: EK (RSA) SHA-256 $rsa_hash; SAN $rsa_san; issuer CN $rsa_issuer_cn"
echo "   ecc TPM: EK (P-256) SHA-256 $ecc_hash"
echo "   stranger TPM (trusted CA): $stranger_hash; rogue TPM (other CA): $rogue_hash"

# The plugin data lives in a file, so that SIGUSR1 can apply a new one.
plugin_data=$tmp/server/sceau_tpm.hcl
hashes=$tmp/server/ek-hashes
mkdir -p "$tmp/server"
write_plugin_data() { # write_plugin_data TRUST HASH...
    local trust=$1
    shift
    {
        echo "# EK hashes this server accepts (one lowercase hex SHA-256 of an EK SPKI per line)"
        printf '%s\n' "$@"
    } >"$hashes"
    cat >"$plugin_data" <<EOF
ek_roots_path = "$tmp/ca/roots.pem"
ek_intermediates_path = "$tmp/ca/intermediates.pem"
ek_hashes_path = "$hashes"
ek_trust = "$trust"
quote_pcrs = [0, 7]
EOF
}
write_plugin_data either "$rsa_hash"
write_server_config "    NodeAttestor \"sceau_tpm\" {
        plugin_cmd = \"$server_plugin\"
        plugin_checksum = \"$server_checksum\"
        plugin_data_file = \"$plugin_data\"
    }"
start_server

agent_attestor() { # agent_attestor TPM ALGORITHM: the agent's NodeAttestor block
    cat <<EOF
    NodeAttestor "sceau_tpm" {
        plugin_cmd = "$agent_plugin"
        plugin_checksum = "$agent_checksum"
        plugin_data {
            tcti = "$(tpm_tcti "$1")"
            ek_algorithm = "$2"
        }
    }
EOF
}
# attestations ID: how many attestations of agent ID the server completed
# (each one a call of the server plugin).
attestations() {
    grep -a 'Agent attestation request completed' "$tmp/server/server.log" | grep -acF "$1" || true
}

# check_selectors NAME ID HASH: the agent's selectors include pub_hash:HASH
# and manufacturer, model, version, issuer and PCR ones that agree with what
# openssl and tpm2-tools read from the rsa TPM.
check_selectors() {
    local name=$1 shown selectors missing=() want
    shown=$(agent_show "$2")
    selectors=$(sed -n 's/^Selectors *: //p' <<<"$shown")
    grep -qxF "sceau_tpm:pub_hash:$3" <<<"$selectors" || missing+=("sceau_tpm:pub_hash:$3")
    # The SAN's TCG attributes: 2.23.133.2.1 manufacturer, .2 model, .3 version.
    for want in "manufacturer:2.23.133.2.1" "model:2.23.133.2.2" "version:2.23.133.2.3"; do
        local kind=${want%%:*} oid=${want#*:} value
        value=$(grep -oE "$oid=[^/]+" <<<"$rsa_san" | cut -d= -f2 | sed 's/^id://' || true)
        grep -qiE "^sceau_tpm:$kind:.*${value}" <<<"$selectors" || missing+=("sceau_tpm:$kind:…$value")
    done
    grep -qF "sceau_tpm:issuer:cn:$rsa_issuer_cn" <<<"$selectors" || missing+=("sceau_tpm:issuer:cn:$rsa_issuer_cn")
    for pcr in 0 7; do
        grep -qiF "sceau_tpm:pcr:sha256:$pcr:${rsa_pcr[$pcr]}" <<<"$selectors" ||
            missing+=("sceau_tpm:pcr:sha256:$pcr:${rsa_pcr[$pcr]}")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        pass "$name ($(wc -l <<<"$selectors") selectors, each derived independently: $(tr '\n' ' ' <<<"$selectors" | cut -c1-400))"
    else
        fail "$name" "missing ${missing[*]}; the server shows: $(tr '\n' ' ' <<<"$selectors")"
    fi
}

# check_refused A ID: agent A does not attest (within 30 s) and the server
# logs the plugin's refusal, which is printed.
check_refused() {
    local name=$1 id=$2 before line
    before=$(grep -aic 'nodeattestor(sceau_tpm)' "$tmp/server/server.log" || true)
    start_agent "$name"
    for _ in $(seq 300); do
        [ "$(grep -aic 'nodeattestor(sceau_tpm)' "$tmp/server/server.log" || true)" -gt "$before" ] && break
        kill -0 "${agent_pid[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    sleep 1
    line=$(grep -ai 'nodeattestor(sceau_tpm)' "$tmp/server/server.log" | tail -n +$((before + 1)) | grep -a 'level=error' | head -n 1 | cut -c1-400 || true)
    if "$spire_bin/spire-agent" healthcheck -socketPath "$(agent_socket "$name")" >/dev/null 2>&1; then
        fail "agent-$name-refused" "the agent is healthy"
    elif [ -n "$(agent_show "$id")" ]; then
        fail "agent-$name-refused" "the server lists $id"
    elif [ -z "$line" ]; then
        fail "agent-$name-refused" "no refusal from the plugin in the server log"
    else
        pass "agent-$name-refused (not attested; server log: $line)"
        echo "   agent log: $(grep -aE 'level=(error|warning)' "$(agent_log "$name")" | tail -n 1 | cut -c1-300)"
    fi
    stop_agent "$name"
}

echo "== agent rsa: ek_algorithm rsa, EK listed and certified (ek_trust either)"
write_agent_config rsa "$(agent_attestor rsa rsa)"
rsa_started=$SECONDS
start_agent rsa
if check_agent_attested rsa "$rsa_id" sceau_tpm; then
    check_selectors agent-rsa-selectors "$rsa_id" "$rsa_hash"
    check_workload_svid rsa "$rsa_id"
fi

echo "== agent rogue: EK certificate from an untrusted CA, EK not listed (ek_trust either)"
write_agent_config rogue "$(agent_attestor rogue rsa)"
check_refused rogue "spiffe://example.org/spire/agent/sceau_tpm/$rogue_hash"

echo "== reconfiguring the server plugin: ek_trust both, rsa and ecc listed (SIGUSR1)"
write_plugin_data both "$rsa_hash" "$ecc_hash"
kill -USR1 "$server_pid"
reconfigured=""
for _ in $(seq 100); do
    reconfigured=$(grep -a 'Plugin reconfigured' "$tmp/server/server.log" | grep -a sceau_tpm | tail -n 1 || true)
    [ -n "$reconfigured" ] && break
    sleep 0.1
done
if [ -n "$reconfigured" ]; then
    pass "reconfigure-sigusr1 (server log: $(cut -c1-300 <<<"$reconfigured"))"
else
    fail reconfigure-sigusr1 "no 'Plugin reconfigured' for sceau_tpm within 10 s: $(grep -a 'reconfigure' "$tmp/server/server.log" | tail -n 2)"
fi

echo "== agent ecc: ek_algorithm ecc, EK listed and certified (ek_trust both)"
write_agent_config ecc "$(agent_attestor ecc ecc)"
start_agent ecc
check_agent_attested ecc "$ecc_id" sceau_tpm &&
    grep -qxF "sceau_tpm:pub_hash:$ecc_hash" <<<"$(agent_show "$ecc_id" | sed -n 's/^Selectors *: //p')" &&
    pass "agent-ecc-pub-hash (selector sceau_tpm:pub_hash:$ecc_hash)"

echo "== agent stranger: certified by the trusted CA but not listed (ek_trust both)"
write_agent_config stranger "$(agent_attestor stranger rsa)"
check_refused stranger "spiffe://example.org/spire/agent/sceau_tpm/$stranger_hash"

echo "== agent rsa: re-attestation (agent_ttl 1m: the agent renews half-way, at about 30 s)"
reattested=""
for _ in $(seq $(((100 - (SECONDS - rsa_started)) * 2))); do
    grep -aq 'Reattesting node' "$(agent_log rsa)" && [ "$(attestations "$rsa_id")" -ge 2 ] && {
        reattested=yes
        break
    }
    sleep 0.5
done
if [ -n "$reattested" ] && wait_agent_healthy rsa 5; then
    pass "agent-rsa-reattests ('Reattesting node' in the agent log; the server completed $(attestations "$rsa_id") attestations of $rsa_id through the plugin; $(grep -ac 'plugin_name=sceau_tpm' "$tmp/server/server.log") server log lines from the plugin)"
else
    fail agent-rsa-reattests "after $((SECONDS - rsa_started)) s: 'Reattesting node' $(grep -ac 'Reattesting node' "$(agent_log rsa)") times, $(attestations "$rsa_id") attestations: $(grep -aE 'Renew|reattest' "$(agent_log rsa)" | tail -n 2 | cut -c1-300)"
fi

check_clean_stop
finish interop-spire
