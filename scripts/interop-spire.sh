#!/usr/bin/env bash
# sceau's SPIRE TPM node attestor in a real SPIRE deployment.
#
# Builds spire-server and spire-agent from the Go module in tests/interop/spire
# (version pinned in its go.mod; binaries cached under
# ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin keyed by version and a hash
# of the module files), and sceau's plugins (cargo build --locked -p
# sceau-spire -p sceau-testkit). Makes two local TPM manufacturers (CAs, with
# the test kit's `sceau-rig provision`), "ca" (trusted) and "other-ca" (not),
# and nine swtpm TPMs holding RSA 2048 and ECC P-256 EK certificates from one
# or the other (the table in the sceau_tpm part below). Then, on loopback and
# unix sockets in a temporary directory:
#
#   spire-server (sqlite, memory key manager, trust domain example.org,
#   agent_ttl 1m) with NodeAttestor "sceau_tpm" = sceau-spire-server, whose
#   plugin_data_file trusts ca's roots and intermediates, lists some EK
#   hashes, ek_trust "either", quote_pcrs [0, 7];
#   agent rsa (ek_algorithm rsa) attests: healthy, listed as
#   spiffe://example.org/spire/agent/sceau_tpm/<sha256 of its EK SPKI> with
#   attestation type sceau_tpm and selectors pub_hash, manufacturer, model,
#   version, issuer:cn, pcr:sha256:0 and 7 equal to what tpm2-tools and
#   openssl read from the TPM; a registration entry gives a workload (uid 0)
#   an X.509 SVID through it;
#   "either": an EK only certified (catrust) or only listed (hashtrust)
#   attests, one neither (rogue) is refused;
#   the plugin data is rewritten to ek_trust "both" and applied by SIGUSR1:
#   agent ecc (ek_algorithm ecc, listed and certified) attests, an EK only
#   certified (stranger) or only listed (hashonly) is refused; each refusal
#   is the plugin's one line in the server log, printed;
#   agent rsa re-attests through the plugin half-way through its minute;
#   the plugin data is put back to ek_trust "either" (SIGUSR1), under which
#   the stranger TPM (certified by ca, not listed) attests, and the test-only
#   rogue agent plugin (crates/spire/examples/rogue_agent.rs) attacks on that
#   TPM, each refused with the server plugin's line for it: foreign_ek_key
#   (catrust's genuine EK certificate, read with tpm2_nvread, with stranger's
#   EK), unrestricted_ak, replay (a first run answers honestly and attests,
#   recording its answer; a second replays it) and garbage;
#   measured boot: the agents so far stop, the plugin data gets
#   measured_boot "required" (SIGUSR1); the mb TPM's PCRs 0-7 are extended
#   (tpm2_pcrextend) with the digests of a synthetic firmware event log
#   (crates/spire/examples/synthetic_event_log.rs: Secure Boot on, a
#   separator in each of PCRs 0-7, a shim), which its agent sends
#   (event_log_path); a node entry whose only selectors are
#   secureboot:enabled, boot_app:sha256:<the shim's digest> and
#   eventlog:complete, and a workload entry under it, give the workload an
#   X.509 SVID through agent mb; a fresh TPM (mbzero, PCRs 0-7 all zeros) is
#   refused with a log that extends nothing (the line names PCR 0) and with
#   no log (the line says so);
#   sceau-spire-server links no tpm2-tss library (ldd);
#   SPIRE stops: every plugin process gone, none "failed to exit gracefully",
#   no plugin socket left in the plugins' TMPDIR.
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

# check_workload_svid A PARENT_ID [ID CHECK]: an entry for uid 0 under
# PARENT_ID; the workload (this script, uid 0) gets ID (default
# spiffe://example.org/workload) through agent A. CHECK (default
# workload-svid) names the check.
check_workload_svid() {
    local name=$1 parent=$2 id=${3:-spiffe://example.org/workload} check=${4:-workload-svid} out
    server_cli entry create -parentID "$parent" -spiffeID "$id" \
        -selector unix:uid:0 >"$tmp/entry.out" 2>&1 || {
        fail "${check%-svid}-entry" "spire-server entry create: $(head -c 300 "$tmp/entry.out")"
        return
    }
    # The agent learns of the entry at its next sync (every 5 s); retry the fetch.
    for _ in $(seq 30); do
        out=$("$spire_bin/spire-agent" api fetch x509 -socketPath "$(agent_socket "$name")" -timeout 5s 2>&1 || true)
        grep -qF "SPIFFE ID:		$id" <<<"$out" && break
        sleep 1
    done
    if grep -qF "SPIFFE ID:		$id" <<<"$out"; then
        pass "$check (spire-agent api fetch x509 through agent $name: $(grep -aE 'SVID Valid After|SVID Valid Until' <<<"$out" | tr -s '\t ' ' ' | tr '\n' ';'))"
    else
        fail "$check" "no SVID for $id within 30 s: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
    fi
}

# check_clean_stop: stops every agent, then the server, with SIGTERM. Every
# plugin process (pids from SPIRE's "plugin started" lines) must be gone, none
# killed for not exiting ("failed to exit gracefully"), and the plugin sockets
# seen in $tmp/plugin-tmp (the plugins' TMPDIR) while they ran removed.
check_clean_stop() {
    local name pid logs seen left plugin_pids=() running=() ungraceful
    logs=("$tmp/server/server.log" "$tmp"/agent-*/agent.log)
    seen=$(find "$tmp/plugin-tmp" -type s 2>/dev/null | wc -l)
    mapfile -t plugin_pids < <(grep -ah 'msg="plugin started"' "${logs[@]}" | grep -oE ' pid=[0-9]+' | cut -d= -f2 || true)
    for name in "${!agent_pid[@]}"; do stop_agent "$name"; done
    stop "$server_pid" 30
    for pid in "${plugin_pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then running+=("$pid"); fi
    done
    ungraceful=$({ grep -ahc 'failed to exit gracefully' "${logs[@]}" || true; } | awk '{n += $1} END {print n + 0}')
    left=$(find "$tmp/plugin-tmp" -mindepth 1 2>/dev/null | head -n 5 | tr '\n' ' ')
    if [ "$ungraceful" -eq 0 ] && [ -z "$left" ] && [ ${#running[@]} -eq 0 ]; then
        pass "clean-stop (SIGTERM to every agent and the server: the ${#plugin_pids[@]} plugin processes gone, none 'failed to exit gracefully'; the $seen plugin sockets open before the stop removed)"
    else
        fail clean-stop "'failed to exit gracefully' $ungraceful times; plugin processes still running: ${running[*]:-none}; left in the plugin socket dir: ${left:-nothing}"
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
# The server side verifies TPM structures itself and needs no TPM software:
# no libtss2 in the server plugin, while the agent plugin has them (so that
# the grep would see them).
server_tss=$(ldd "$server_plugin" | grep -c libtss2 || true)
agent_tss=$(ldd "$agent_plugin" | awk '$1 ~ /^libtss2/ {print $1}' | paste -sd' ')
if [ "$server_tss" -eq 0 ] && [ -n "$agent_tss" ]; then
    pass "server-plugin-no-tss (ldd sceau-spire-server: no libtss2; sceau-spire-agent links $agent_tss)"
else
    fail server-plugin-no-tss "ldd sceau-spire-server: $server_tss libtss2 libraries; sceau-spire-agent: ${agent_tss:-none}"
fi
# TPM       | manufacturer CA | EK in ek_hashes_path (either) | (both)
# rsa       | ca (trusted)    | yes                           | yes
# catrust   | ca              | no                            |
# hashtrust | other-ca        | yes                           |
# rogue     | other-ca        | no                            |
# ecc       | ca              |                               | yes
# stranger  | ca              |                               | no
# hashonly  | other-ca        |                               | yes
# mb        | ca              | no (measured boot, either)    |
# mbzero    | ca              | no (measured boot, either)    |
echo "== TPMs (sceau-rig provision): CA ca is trusted, CA other-ca is not"
for tpm in rsa ecc catrust stranger mb mbzero; do provision_tpm "$tpm" ca; done
for tpm in hashtrust rogue hashonly; do provision_tpm "$tpm" other-ca; done
for tpm in rsa ecc catrust stranger hashtrust rogue hashonly mb mbzero; do start_tpm "$tpm"; done

# What tpm2-tools and openssl read from the TPMs, before any plugin uses them.
# PCR 7 of the rsa TPM is extended first, so that its quoted value is not zero.
declare -A hash
for tpm in rsa catrust stranger hashtrust rogue hashonly mb mbzero; do hash[$tpm]=$(ek_hash "$tpm" 0x01c00002); done
hash[ecc]=$(ek_hash ecc 0x01c0000a)
# catrust's genuine EK certificate, which the rogue agent's foreign_ek_key
# attack presents with another TPM's EK.
foreign_ek_certificate=$tmp/catrust-ek.der
TPM2TOOLS_TCTI=$(tpm_tcti catrust) tpm2_nvread 0x01c00002 -o "$foreign_ek_certificate" 2>/dev/null
agent_id() { echo "spiffe://example.org/spire/agent/sceau_tpm/${hash[$1]}"; }
TPM2TOOLS_TCTI=$(tpm_tcti rsa) tpm2_pcrextend "7:sha256=$(openssl rand -hex 32)" >/dev/null
ek_cert_text rsa 0x01c00002 >"$tmp/rsa-ek.txt"
rsa_san=$(grep -aA1 'Subject Alternative Name' "$tmp/rsa-ek.txt" | tail -n 1 | tr -d ' ')
rsa_issuer_cn=$(grep -a 'Issuer:' "$tmp/rsa-ek.txt" | sed -E 's/.*CN ?= ?//')
declare -A rsa_pcr
for pcr in 0 7; do
    rsa_pcr[$pcr]=$(TPM2TOOLS_TCTI=$(tpm_tcti rsa) tpm2_pcrread "sha256:$pcr" 2>/dev/null |
        sed -nE "s/^ *$pcr *: *0x([0-9A-Fa-f]+).*/\1/p" | tr 'A-F' 'a-f')
done
echo "   rsa TPM: RSA EK SHA-256 ${hash[rsa]}; SAN $rsa_san; issuer CN $rsa_issuer_cn; PCR 7 ${rsa_pcr[7]}"
echo "   ecc TPM: P-256 EK SHA-256 ${hash[ecc]}"

# The plugin data lives in a file, so that SIGUSR1 can apply a new one.
plugin_data=$tmp/server/sceau_tpm.hcl
hashes=$tmp/server/ek-hashes
mkdir -p "$tmp/server"
# write_plugin_data TRUST TPM...: those TPMs' EKs listed, and the lines of
# $plugin_data_extra (if set) added to the plugin data.
write_plugin_data() {
    local trust=$1 tpm
    shift
    {
        echo "# EK hashes this server accepts (one lowercase hex SHA-256 of an EK SPKI per line)"
        for tpm in "$@"; do echo "${hash[$tpm]}"; done
    } >"$hashes"
    cat >"$plugin_data" <<EOF
ek_roots_path = "$tmp/ca/roots.pem"
ek_intermediates_path = "$tmp/ca/intermediates.pem"
ek_hashes_path = "$hashes"
ek_trust = "$trust"
quote_pcrs = [0, 7]
${plugin_data_extra:-}
EOF
}
write_plugin_data either rsa hashtrust hashonly
write_server_config "    NodeAttestor \"sceau_tpm\" {
        plugin_cmd = \"$server_plugin\"
        plugin_checksum = \"$server_checksum\"
        plugin_data_file = \"$plugin_data\"
    }"
start_server

# write_tpm_agent TPM ALGORITHM [HCL [AGENT]]: agent AGENT's (default TPM's)
# config, on that TPM's swtpm, HCL added to its plugin_data.
write_tpm_agent() {
    write_agent_config "${4:-$1}" "    NodeAttestor \"sceau_tpm\" {
        plugin_cmd = \"$agent_plugin\"
        plugin_checksum = \"$agent_checksum\"
        plugin_data {
            tcti = \"$(tpm_tcti "$1")\"
            ek_algorithm = \"$2\"
            ${3:-}
        }
    }"
}
# plugin_attestations ID: how many times the server plugin logged that it
# attested agent ID.
plugin_attestations() {
    grep -a 'attested agent' "$tmp/server/server.log" | grep -a 'plugin_name=sceau_tpm' | grep -acF "$1 " || true
}
selectors_of() { agent_show "$1" | sed -n 's/^Selectors *: //p'; }

# check_selectors NAME ID HASH: the agent's selectors include pub_hash:HASH
# and manufacturer, model, version, issuer and PCR ones that agree with what
# openssl and tpm2-tools read from the rsa TPM.
check_selectors() {
    local name=$1 selectors missing=() want kind oid value
    selectors=$(selectors_of "$2")
    grep -qxF "sceau_tpm:pub_hash:$3" <<<"$selectors" || missing+=("sceau_tpm:pub_hash:$3")
    # The SAN's TCG attributes: 2.23.133.2.1 manufacturer, .2 model, .3 version.
    for want in "manufacturer:2.23.133.2.1" "model:2.23.133.2.2" "version:2.23.133.2.3"; do
        kind=${want%%:*} oid=${want#*:}
        value=$(grep -oE "$oid=[^/]+" <<<"$rsa_san" | cut -d= -f2 || true)
        grep -qxF "sceau_tpm:$kind:$value" <<<"$selectors" || missing+=("sceau_tpm:$kind:$value")
    done
    grep -qxF "sceau_tpm:issuer:cn:$rsa_issuer_cn" <<<"$selectors" || missing+=("sceau_tpm:issuer:cn:$rsa_issuer_cn")
    for pcr in 0 7; do
        grep -qxiF "sceau_tpm:pcr:sha256:$pcr:${rsa_pcr[$pcr]}" <<<"$selectors" ||
            missing+=("sceau_tpm:pcr:sha256:$pcr:${rsa_pcr[$pcr]}")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        pass "$name (pub_hash, manufacturer, model, version, issuer:cn, pcr:sha256:0 and 7 as openssl and tpm2_pcrread read them)"
    else
        fail "$name" "missing ${missing[*]}; the server shows: $(tr '\n' ' ' <<<"$selectors")"
    fi
}

# check_attests TPM ALGORITHM WHY: agent TPM (ek_algorithm ALGORITHM) attests
# as its EK's hash, with that pub_hash selector.
check_attests() {
    local tpm=$1 id
    id=$(agent_id "$tpm")
    echo "== agent $tpm: ek_algorithm $2; $3"
    write_tpm_agent "$tpm" "$2"
    start_agent "$tpm"
    check_agent_attested "$tpm" "$id" sceau_tpm || return 0
    if grep -qxF "sceau_tpm:pub_hash:${hash[$tpm]}" <<<"$(selectors_of "$id")"; then
        pass "agent-$tpm-pub-hash (selector sceau_tpm:pub_hash:${hash[$tpm]})"
    else
        fail "agent-$tpm-pub-hash" "no selector sceau_tpm:pub_hash:${hash[$tpm]}: $(selectors_of "$id" | tr '\n' ' ')"
    fi
}

# expect_refusal CHECK AGENT ID [EXPECTED]: starts agent AGENT (configured)
# and expects it not to attest: within 30 s the server logs the plugin's
# refusal (containing EXPECTED if given), which is printed; the agent is not
# healthy; the server plugin attests ID no further time, and if ID was never
# attested the server does not list it. Stops the agent.
expect_refusal() {
    local check=$1 agent=$2 id=$3 expected=${4:-} before attested line
    before=$(grep -aic 'nodeattestor(sceau_tpm)' "$tmp/server/server.log" || true)
    attested=$(plugin_attestations "$id")
    start_agent "$agent"
    for _ in $(seq 300); do
        [ "$(grep -aic 'nodeattestor(sceau_tpm)' "$tmp/server/server.log" || true)" -gt "$before" ] && break
        kill -0 "${agent_pid[$agent]}" 2>/dev/null || break
        sleep 0.1
    done
    sleep 1
    line=$(grep -ai 'nodeattestor(sceau_tpm)' "$tmp/server/server.log" | tail -n +$((before + 1)) |
        grep -a 'level=error' | head -n 1 | sed -E 's/^.*msg="([^"]*)".*$/\1/' | cut -c1-300 || true)
    if "$spire_bin/spire-agent" healthcheck -socketPath "$(agent_socket "$agent")" >/dev/null 2>&1; then
        fail "$check" "the agent is healthy"
    elif [ "$(plugin_attestations "$id")" -gt "$attested" ]; then
        fail "$check" "the server plugin attested $id"
    elif [ "$attested" -eq 0 ] && [ -n "$(agent_show "$id")" ]; then
        fail "$check" "the server lists $id"
    elif [ -z "$line" ]; then
        fail "$check" "no refusal from the plugin in the server log"
    elif [ -n "$expected" ] && ! grep -qF "$expected" <<<"$line"; then
        fail "$check" "the refusal is not '$expected': $line"
    else
        pass "$check (not attested; server log: $line)"
        echo "   agent log: $(grep -aE 'level=(error|warning)' "$(agent_log "$agent")" | tail -n 1 | cut -c1-300)"
    fi
    stop_agent "$agent"
}

# check_refused TPM WHY: agent TPM does not attest (within 30 s) and the
# server logs the plugin's refusal, which is printed.
check_refused() {
    echo "== agent $1: $2"
    write_tpm_agent "$1" rsa
    expect_refusal "agent-$1-refused" "$1" "$(agent_id "$1")"
}

rsa_id=$(agent_id rsa)
echo "== agent rsa: ek_algorithm rsa; EK listed and certified by the trusted CA (ek_trust either)"
write_tpm_agent rsa rsa
rsa_started=$SECONDS
start_agent rsa
if check_agent_attested rsa "$rsa_id" sceau_tpm; then
    check_selectors agent-rsa-selectors "$rsa_id" "${hash[rsa]}"
    check_workload_svid rsa "$rsa_id"
fi
check_attests catrust rsa "EK certified by the trusted CA, not listed (ek_trust either)"
check_attests hashtrust rsa "EK listed, certified by an untrusted CA (ek_trust either)"
check_refused rogue "EK neither listed nor certified by the trusted CA (ek_trust either)"

# reconfigure CHECK TRUST TPM...: new plugin data (write_plugin_data TRUST
# TPM...), applied by SIGUSR1; CHECK passes once the server logs a new
# "Plugin reconfigured" for sceau_tpm (within 10 s).
reconfigure() {
    local check=$1 before reconfigured=""
    shift
    before=$(grep -a 'Plugin reconfigured' "$tmp/server/server.log" | grep -ac sceau_tpm || true)
    write_plugin_data "$@"
    kill -USR1 "$server_pid"
    for _ in $(seq 100); do
        reconfigured=$(grep -a 'Plugin reconfigured' "$tmp/server/server.log" | grep -a sceau_tpm | tail -n +$((before + 1)) | tail -n 1 || true)
        [ -n "$reconfigured" ] && break
        sleep 0.1
    done
    if [ -n "$reconfigured" ]; then
        pass "$check (server log: $(sed -E 's/^.*msg="([^"]*)" (.*)$/\1: \2/' <<<"$reconfigured" | cut -c1-200))"
    else
        fail "$check" "no new 'Plugin reconfigured' for sceau_tpm within 10 s: $(grep -a 'reconfigure' "$tmp/server/server.log" | tail -n 2)"
    fi
}

echo "== reconfiguring the server plugin: ek_trust both; rsa, ecc and hashonly listed (SIGUSR1)"
reconfigure reconfigure-sigusr1 both rsa ecc hashonly

check_attests ecc ecc "EK listed and certified by the trusted CA (ek_trust both)"
check_refused stranger "EK certified by the trusted CA, not listed (ek_trust both)"
check_refused hashonly "EK listed, certified by an untrusted CA (ek_trust both)"

echo "== agent rsa: re-attestation (agent_ttl 1m: the agent renews half-way, at about 30 s)"
reattested=""
for _ in $(seq $(((100 - (SECONDS - rsa_started)) * 2))); do
    if grep -aq 'Reattesting node' "$(agent_log rsa)" && [ "$(plugin_attestations "$rsa_id")" -ge 2 ]; then
        reattested=yes
        break
    fi
    sleep 0.5
done
if [ -n "$reattested" ] && wait_agent_healthy rsa 5; then
    pass "agent-rsa-reattests ('Reattesting node' in the agent log after $((SECONDS - rsa_started)) s; the server plugin attested $rsa_id $(plugin_attestations "$rsa_id") times, the last under ek_trust both)"
else
    fail agent-rsa-reattests "after $((SECONDS - rsa_started)) s: 'Reattesting node' $(grep -ac 'Reattesting node' "$(agent_log rsa)") times, the plugin attested $(plugin_attestations "$rsa_id") times: $(grep -aE 'Renew|reattest' "$(agent_log rsa)" | tail -n 2 | cut -c1-300)"
fi

# ---------------------------------------------------------------- the rogue agent
# Every attack runs on the stranger TPM (certified by the trusted ca, not
# listed), which attests under ek_trust "either" (the replay's honest first
# run shows it), so that each refusal is due to the attack alone.
echo "== reconfiguring the server plugin: ek_trust either; rsa, hashtrust and hashonly listed (SIGUSR1)"
reconfigure reconfigure-either-again either rsa hashtrust hashonly
stranger_id=$(agent_id stranger)

# write_rogue_agent AGENT ATTACK [HCL]: agent AGENT with the rogue plugin on
# the stranger TPM, attack ATTACK, HCL added to its plugin_data.
write_rogue_agent() {
    write_agent_config "$1" "    NodeAttestor \"sceau_tpm\" {
        plugin_cmd = \"$rogue_plugin\"
        plugin_checksum = \"$rogue_checksum\"
        plugin_data {
            tcti = \"$(tpm_tcti stranger)\"
            ek_algorithm = \"rsa\"
            attack = \"$2\"
            ${3:-}
        }
    }"
}

echo "== rogue agent, attack replay, first run: answers honestly (and records its answer)"
replay_file=$tmp/replay-response.bin
write_rogue_agent rogue-record replay "replay_file = \"$replay_file\""
start_agent rogue-record
if check_agent_attested rogue-record "$stranger_id" sceau_tpm && [ -s "$replay_file" ]; then
    pass "rogue-replay-recorded (the stranger TPM attests under ek_trust either; the rogue plugin recorded its $(stat -c %s "$replay_file")-byte answer)"
else
    fail rogue-replay-recorded "no recording in $replay_file"
fi
stop_agent rogue-record

echo "== rogue agent, attack replay, second run: sends the recorded answer to a new challenge"
write_rogue_agent rogue-replay replay "replay_file = \"$replay_file\""
expect_refusal rogue-replay-refused rogue-replay "$stranger_id" "the credential was not activated"

echo "== rogue agent, attack foreign_ek_key: catrust's genuine EK certificate (its key's SHA-256 $(openssl x509 -inform DER -in "$foreign_ek_certificate" -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum | cut -c1-16)..., catrust's ${hash[catrust]:0:16}...) with stranger's EK (${hash[stranger]:0:16}...)"
write_rogue_agent rogue-foreign foreign_ek_key "foreign_ek_certificate = \"$foreign_ek_certificate\""
expect_refusal rogue-foreign-ek-key-refused rogue-foreign "$stranger_id" "certifies another key than the EK"

echo "== rogue agent, attack unrestricted_ak: an AK without 'restricted'"
write_rogue_agent rogue-unrestricted unrestricted_ak
expect_refusal rogue-unrestricted-ak-refused rogue-unrestricted "$stranger_id" "not restricted"

echo "== rogue agent, attack garbage: 512 random bytes as the payload"
write_rogue_agent rogue-garbage garbage
expect_refusal rogue-garbage-refused rogue-garbage "$stranger_id" "malformed payload"

# ---------------------------------------------------------------- measured boot
# The agents attested so far send no event log: under measured_boot
# "required" their next re-attestation would be refused, and that refusal
# could be the line expect_refusal reads below. They stop first.
echo "== measured boot: the agents attested so far stop; the plugin data gets measured_boot \"required\" (SIGUSR1)"
for name in "${!agent_pid[@]}"; do stop_agent "$name"; done
plugin_data_extra='measured_boot = "required"
measured_boot_bank = "sha256"'
reconfigure reconfigure-measured-boot-required either rsa hashtrust hashonly

# The mb TPM's PCRs are extended with the synthetic log's digests, as the
# firmware would have; mbzero's are left as swtpm starts them (all zeros).
mb_log=$tmp/mb-binary_bios_measurements
mbzero_log=$tmp/mbzero-binary_bios_measurements
"$event_log_tool" secure-boot "$mb_log" >"$tmp/mb-extends"
"$event_log_tool" empty "$mbzero_log" >"$tmp/mbzero-extends"
shim=$(sed -n 's/^shim //p' "$tmp/mb-extends")
mapfile -t mb_extends < <(grep -v '^shim ' "$tmp/mb-extends")
for extend in "${mb_extends[@]}"; do
    TPM2TOOLS_TCTI=$(tpm_tcti mb) tpm2_pcrextend "$extend" >/dev/null
done
echo "   mb: a $(stat -c %s "$mb_log")-byte log; ${#mb_extends[@]} events extended into PCRs $(printf '%s\n' "${mb_extends[@]}" | cut -d: -f1 | sort -un | paste -sd,); shim $shim"
echo "   mbzero: a $(stat -c %s "$mbzero_log")-byte log (the Spec ID event alone), $(grep -vc '^shim ' "$tmp/mbzero-extends" || true) events"

# A node entry (parent: the server) selected by the measured-boot selectors
# alone, and a workload entry under it: the workload gets that SVID through
# agent mb only if the server gave agent mb all three selectors.
mb_node=spiffe://example.org/measured-boot-node
mb_selectors=(sceau_tpm:secureboot:enabled "sceau_tpm:boot_app:sha256:$shim" sceau_tpm:eventlog:complete)
if server_cli entry create -node -spiffeID "$mb_node" "${mb_selectors[@]/#/-selector=}" >"$tmp/mb-node-entry.out" 2>&1; then
    pass "measured-boot-node-entry ($mb_node, selected by ${mb_selectors[*]} only)"
else
    fail measured-boot-node-entry "spire-server entry create -node: $(head -c 300 "$tmp/mb-node-entry.out")"
fi

mb_id=$(agent_id mb)
echo "== agent mb: PCRs 0-7 extended with the log's digests, event_log_path the log (measured_boot required)"
write_tpm_agent mb rsa "event_log_path = \"$mb_log\""
start_agent mb
if check_agent_attested mb "$mb_id" sceau_tpm; then
    mb_shown=$(selectors_of "$mb_id")
    missing=()
    for selector in "${mb_selectors[@]}"; do
        grep -qxF "$selector" <<<"$mb_shown" || missing+=("$selector")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        pass "agent-mb-measured-boot-selectors (${mb_selectors[*]})"
    else
        fail agent-mb-measured-boot-selectors "missing ${missing[*]}; the server shows: $(tr '\n' ' ' <<<"$mb_shown")"
    fi
    check_workload_svid mb "$mb_node" spiffe://example.org/measured-boot-workload measured-boot-workload-svid
fi

mbzero_id=$(agent_id mbzero)
echo "== agent mbzero: a fresh TPM (PCRs 0-7 all zeros), a log that extends nothing"
write_tpm_agent mbzero rsa "event_log_path = \"$mbzero_log\"" mbzero-unextended
expect_refusal agent-mbzero-unextended-refused mbzero-unextended "$mbzero_id" \
    "PCR 0 (sha256) is all zeros or all ones"
echo "== agent mbzero: no event log (event_log_path \"\")"
write_tpm_agent mbzero rsa 'event_log_path = ""' mbzero-no-log
expect_refusal agent-mbzero-no-log-refused mbzero-no-log "$mbzero_id" \
    "measured boot is required and the agent sent no event log"

check_clean_stop
finish interop-spire
