# shellcheck shell=bash
# The real-SPIRE rig of scripts/interop-spire.sh: spire-server and spire-agent
# built from Go modules (tests/interop/spire), swtpm states with EK
# certificates from a local manufacturer CA (the test kit's
# `sceau-rig provision`), and sceau's SPIRE node attestor plugins. Sourced
# after lib.sh, not run.
#
# Everything is on loopback and unix sockets under $tmp; every wait is
# bounded; the trap set by start_spire_rig stops every process started here
# and removes $tmp.

# Packages: lib.sh's list has all it needs (swtpm-tools and gnutls-bin for
# the EK-certificate TPMs, tpm2-tools and openssl for the checks).

spire_pids=() # spire-server and spire-agent processes, stopped on exit
rig_pids=()   # sceau-rig swtpm processes, stopped (after SPIRE) on exit

spire_cleanup() {
    local status=$? pid
    set +e
    for pid in "${spire_pids[@]}" "${rig_pids[@]}"; do
        stop "$pid"
    done
    if [ -n "${SCEAU_SPIRE_KEEP:-}" ]; then
        echo "== kept $tmp"
    else
        rm -rf "$tmp"
    fi
    exit "$status"
}

# start_spire_rig PREFIX: installs what is missing, makes $tmp
# (/tmp/PREFIX.XXXXXX) and the trap that cleans it up, builds SPIRE.
start_spire_rig() {
    install_packages
    require_cargo
    require_go
    t0=$SECONDS
    tmp=$(mktemp -d "/tmp/$1.XXXXXX")
    trap spire_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    build_spire
}

# ---------------------------------------------------------------- build
# build_spire: spire-server and spire-agent at the version pinned in
# tests/interop/spire/go.mod, built into a cache directory keyed by that
# version and a hash of the Go version and the module files (a second run
# finds them there); sets spire_bin and spire_version. Go's module and build
# caches are GOMODCACHE and GOCACHE if set, else Go's defaults, as for the
# kube-apiserver build (scripts/lib-apiserver.sh).
build_spire() {
    local mod=tests/interop/spire key cache t1
    spire_version=$(cd "$mod" && go list -m -f '{{.Version}}' github.com/spiffe/spire)
    # -s -w as SPIRE's release builds: no symbol table or DWARF, shorter links.
    local ldflags="-s -w"
    key=$( (go version; echo "$ldflags"; cd "$mod" && cat go.mod go.sum) | sha256sum | cut -c1-12)
    cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop}
    spire_bin="$cache/bin/spire-$spire_version-$key"
    if [ -x "$spire_bin/spire-server" ] && [ -x "$spire_bin/spire-agent" ]; then
        echo "== SPIRE $spire_version: cached in $spire_bin"
    else
        echo "== building SPIRE $spire_version (spire-server, spire-agent) into $spire_bin"
        echo "   (GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE); cold: 6-10 minutes on 2 idle cores; with a warm Go build cache about 1 minute)"
        t1=$SECONDS
        rm -rf "$spire_bin.tmp"
        mkdir -p "$spire_bin.tmp"
        (cd "$mod" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$spire_bin.tmp/" \
            github.com/spiffe/spire/cmd/spire-server github.com/spiffe/spire/cmd/spire-agent)
        rm -rf "$spire_bin"
        mv "$spire_bin.tmp" "$spire_bin"
        echo "   SPIRE built in $((SECONDS - t1)) s"
    fi
    echo "   spire-server $("$spire_bin/spire-server" --version 2>&1), spire-agent $("$spire_bin/spire-agent" --version 2>&1)"
}

# build_plugins: sceau's SPIRE plugins, the test-only rogue agent plugin
# (crates/spire/examples/rogue_agent.rs), the synthetic event log writer
# (crates/spire/examples/synthetic_event_log.rs) and the test kit (cargo
# build --locked); sets server_plugin, agent_plugin, rogue_plugin and their
# sha256 checksums, and event_log_tool.
build_plugins() {
    echo "== building sceau-spire (with its rogue_agent and synthetic_event_log examples) and sceau-testkit (cargo build --locked)"
    cargo build --locked --quiet -p sceau-spire -p sceau-testkit
    cargo build --locked --quiet -p sceau-spire --example rogue_agent --example synthetic_event_log
    server_plugin=$PWD/target/debug/sceau-spire-server
    agent_plugin=$PWD/target/debug/sceau-spire-agent
    rogue_plugin=$PWD/target/debug/examples/rogue_agent
    event_log_tool=$PWD/target/debug/examples/synthetic_event_log
    server_checksum=$(sha256sum "$server_plugin" | cut -d' ' -f1)
    agent_checksum=$(sha256sum "$agent_plugin" | cut -d' ' -f1)
    rogue_checksum=$(sha256sum "$rogue_plugin" | cut -d' ' -f1)
    echo "   $server_plugin sha256 $server_checksum"
    echo "   $agent_plugin sha256 $agent_checksum"
    echo "   $rogue_plugin sha256 $rogue_checksum (test only)"
}

# ---------------------------------------------------------------- TPMs
# A TPM is a name N: its state is $tmp/tpm-N, its port tpm_port[N], the rig
# that holds its swtpm tpm_rig[N].
declare -A tpm_port tpm_rig

# provision_tpm N CA: a new TPM in $tmp/tpm-N with EK certificates from the
# manufacturer CA in $tmp/CA (made on first use).
provision_tpm() {
    local t1=$SECONDS
    "${sceau_rig:-target/debug/sceau-rig}" provision --ca "$tmp/$2" --state "$tmp/tpm-$1" >/dev/null
    echo "   TPM $1 provisioned by CA $2 in $((SECONDS - t1)) s"
}
# start_tpm N: its swtpm, through lib.sh's start_swtpm.
start_tpm() {
    start_swtpm "$tmp/tpm-$1"
    # shellcheck disable=SC2154 # start_swtpm (lib.sh) sets swtpm_pid and swtpm_port
    { tpm_rig[$1]=$swtpm_pid tpm_port[$1]=$swtpm_port; }
    rig_pids+=("$swtpm_pid")
}
tpm_tcti() { echo "swtpm:host=127.0.0.1,port=${tpm_port[$1]}"; }

# ek_hash N INDEX: the lowercase hex SHA-256 of the DER SubjectPublicKeyInfo
# in the EK certificate at NV INDEX of TPM N, read with tpm2-tools and openssl
# (independently of sceau). Only while no plugin talks to that swtpm.
ek_hash() {
    TPM2TOOLS_TCTI=$(tpm_tcti "$1") tpm2_nvread "$2" 2>/dev/null |
        openssl x509 -inform DER -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1
}
# ek_cert_field N INDEX FIELD: one openssl view (subject, issuer, ...) of that certificate.
ek_cert_text() {
    TPM2TOOLS_TCTI=$(tpm_tcti "$1") tpm2_nvread "$2" 2>/dev/null | openssl x509 -inform DER -noout -text
}

# ---------------------------------------------------------------- SPIRE
# The server: one per rig, in $tmp/server, at 127.0.0.1:$server_port.
server_dir() { echo "$tmp/server"; }
server_socket() { echo "$tmp/server/api.sock"; }
server_cli() { "$spire_bin/spire-server" "$1" "${@:2}" -socketPath "$(server_socket)"; }

# write_server_config ATTESTOR_HCL: server.conf with the given NodeAttestor
# block(s) besides the sqlite datastore and the memory key manager. A short
# agent_ttl makes agents renew (or re-attest) within a minute.
write_server_config() {
    local dir
    dir=$(server_dir)
    mkdir -p "$dir"
    server_port=$(free_port_pair $((26000 + RANDOM % 2000)))
    cat >"$dir/server.conf" <<EOF
server {
    bind_address = "127.0.0.1"
    bind_port = "$server_port"
    socket_path = "$(server_socket)"
    trust_domain = "example.org"
    data_dir = "$dir"
    log_level = "DEBUG"
    agent_ttl = "${spire_agent_ttl:-1m}"
}
plugins {
    DataStore "sql" {
        plugin_data {
            database_type = "sqlite3"
            connection_string = "$dir/datastore.sqlite3"
        }
    }
    KeyManager "memory" {
        plugin_data {}
    }
$1
}
EOF
}

# start_server: spire-server run; waits (<= 30 s) for its healthcheck, then
# writes the trust bundle agents bootstrap from to $tmp/bundle.pem.
start_server() {
    local dir log t1
    dir=$(server_dir)
    log="$dir/server.log"
    t1=$SECONDS
    (cd "$dir" && exec env TMPDIR="$tmp/plugin-tmp" "$spire_bin/spire-server" run -config "$dir/server.conf") >>"$log" 2>&1 &
    server_pid=$!
    spire_pids+=("$server_pid")
    for _ in $(seq 300); do
        if server_cli healthcheck >/dev/null 2>&1; then
            server_cli bundle show >"$tmp/bundle.pem"
            echo "== spire-server on 127.0.0.1:$server_port healthy in $((SECONDS - t1)) s (log $log)"
            return 0
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 40 "$log" >&2
    echo "spire-server did not become healthy within 30 s" >&2
    return 1
}

# An agent is a name A, in $tmp/agent-A.
agent_dir() { echo "$tmp/agent-$1"; }
agent_socket() { echo "$tmp/agent-$1/api.sock"; }
agent_log() { echo "$tmp/agent-$1/agent.log"; }

# write_agent_config A ATTESTOR_HCL [AGENT_EXTRA]: agent.conf for agent A
# with the NodeAttestor block, the memory key manager and the unix workload
# attestor; AGENT_EXTRA goes into the agent block (e.g. join_token = "...").
write_agent_config() {
    local dir
    dir=$(agent_dir "$1")
    mkdir -p "$dir"
    cat >"$dir/agent.conf" <<EOF
agent {
    data_dir = "$dir"
    log_level = "DEBUG"
    server_address = "127.0.0.1"
    server_port = "$server_port"
    socket_path = "$(agent_socket "$1")"
    trust_bundle_path = "$tmp/bundle.pem"
    trust_domain = "example.org"
    ${3:-}
}
plugins {
$2
    KeyManager "memory" {
        plugin_data {}
    }
    WorkloadAttestor "unix" {
        plugin_data {}
    }
}
EOF
}

# start_agent A: spire-agent run for agent A; sets agent_pid[A].
declare -A agent_pid
start_agent() {
    local dir
    dir=$(agent_dir "$1")
    (cd "$dir" && exec env TMPDIR="$tmp/plugin-tmp" "$spire_bin/spire-agent" run -config "$dir/agent.conf") >>"$(agent_log "$1")" 2>&1 &
    agent_pid[$1]=$!
    spire_pids+=("${agent_pid[$1]}")
}
# wait_agent_healthy A [SECONDS]: 0 once its healthcheck passes (default <= 30 s);
# 1 if it exits or the time is up.
wait_agent_healthy() {
    for _ in $(seq $((${2:-30} * 10))); do
        "$spire_bin/spire-agent" healthcheck -socketPath "$(agent_socket "$1")" >/dev/null 2>&1 && return 0
        kill -0 "${agent_pid[$1]}" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
stop_agent() { # stop_agent A: SIGTERM, then KILL after 20 s
    stop "${agent_pid[$1]}"
}

# agent_show ID: `spire-server agent show` for that SPIFFE ID (empty if none).
agent_show() { server_cli agent show -spiffeID "$1" 2>/dev/null || true; }

# ---------------------------------------------------------------- checks
passed=0
failed=0
pass() {
    echo "PASS $*"
    passed=$((passed + 1))
}
fail() { # fail NAME WHY...; shows the last error lines of the server's and agents' logs
    local name=$1 log
    shift
    echo "FAIL $name: $*"
    failed=$((failed + 1))
    for log in "$tmp"/server/server.log "$tmp"/agent-*/agent.log; do
        [ -f "$log" ] || continue
        grep -aE 'level=(error|warning)' "$log" | tail -n 4 |
            sed "s|^|   ${log#"$tmp"/} |" | cut -c1-400 || true
    done
}
# finish NAME: the summary line; the script's status is 1 if a check failed.
finish() {
    echo "== $1 took $((SECONDS - t0)) s"
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
