# shellcheck shell=bash
# The real-apiserver rig, shared by scripts/interop-apiserver.sh (one node)
# and scripts/interop-ha.sh (three nodes on one etcd). Sourced after lib.sh,
# not run.
#
# A node is a swtpm, the sceau serving from it and the kube-apiserver whose
# EncryptionConfiguration names that sceau; node I's state is at index I of
# the arrays below. The caller sets node_names before anything else: ("") for
# a single node, whose files are $tmp/kms.sock, $tmp/sceau.log,
# $tmp/apiserver.log, ...; or one name per node (a b c), whose files are
# $tmp/kms-a.sock, $tmp/sceau-a.log, $tmp/apiserver-a.log, ...
#
# Needs root (sceau serves uid 0 only by default). Every wait is bounded; the
# trap set by start_rig stops every process started here and removes $tmp.

# Beyond lib.sh's packages: the throwaway PKI and the REST calls.
SCEAU_PACKAGES+=(openssl curl)

node_names=("")
swtpm_pids=()
tpm_ports=()
sceau_pids=()
sceau_serve_args=() # extra `sceau serve` arguments for every node (cluster mode)
sceau_bin=target/debug/sceau # the sceau start_sceau serves with (an upgrade test runs an older one first)
api_ports=()
apiserver_pids=()
apiserver_starts=()
apiserver_exec_ms=()  # when start_apiserver started node I's kube-apiserver (epoch ms)
apiserver_ready_ms=() # how long after that /readyz first answered 200 (ms; polled every 0.1 s)
etcd_pid=""
ns=sceau-interop
encryption_config_file="" # if set, the EncryptionConfiguration start_apiservers gives every node

# node_file I NAME [EXT]: node I's file, e.g. node_file 0 kms sock: $tmp/kms.sock or $tmp/kms-a.sock
node_file() { echo "$tmp/$2${node_names[$1]:+-${node_names[$1]}}${3:+.$3}"; }
# node_label I: " a" for a named node, nothing for the single one (for messages)
node_label() { echo "${node_names[$1]:+ ${node_names[$1]}}"; }
api_url() { echo "https://127.0.0.1:${api_ports[$1]}"; }
tcti() { echo "swtpm:host=127.0.0.1,port=${tpm_ports[$1]}"; }

cleanup() {
    local status=$? pid
    set +e
    for pid in "${apiserver_pids[@]}" "${sceau_pids[@]}" "$etcd_pid" "${swtpm_pids[@]}"; do
        stop "$pid"
    done
    rm -rf "$tmp"
    exit "$status"
}

# start_rig PREFIX: installs what is missing, builds sceau and the Go
# binaries, makes $tmp (/tmp/PREFIX.XXXXXX) and the trap that cleans it up.
start_rig() {
    install_packages
    require_cargo
    require_go
    t0=$SECONDS
    tmp=$(mktemp -d "/tmp/$1.XXXXXX")
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    build_binaries
}

# ---------------------------------------------------------------- build
# Builds sceau, then kube-apiserver, etcd, etcdctl and etcdget from the Go
# module in tests/interop/apiserver into a cache directory keyed by versions
# and a hash of the module's sources; sets bin, k8s_version, etcd_version.
build_binaries() {
    build_sceau
    build_go_binaries
}
# build_go_binaries: build_binaries' Go half, which scripts/prebuild-go.sh
# also runs in the background while CI's Rust steps keep a core busy.
build_go_binaries() {
    local mod=tests/interop/apiserver ldflags key cache t1
    k8s_version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
    etcd_version=$(cd "$mod" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
    ldflags=$(k8s_ldflags)
    key=$( (go version; echo "$ldflags"; cd "$mod" && cat go.mod go.sum ./*.go ./*/*.go) | sha256sum | cut -c1-12)
    cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop}
    bin="$cache/bin/kube-apiserver-$k8s_version-etcd-$etcd_version-$key"
    if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ] && [ -x "$bin/etcdctl" ] && [ -x "$bin/etcdget" ]; then
        echo "== kube-apiserver $k8s_version, etcd $etcd_version: cached in $bin"
    else
        echo "== building kube-apiserver $k8s_version, etcd $etcd_version into $bin"
        echo "   (GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE); cold: several minutes)"
        t1=$SECONDS
        rm -rf "$bin.tmp"
        mkdir -p "$bin.tmp"
        (cd "$mod" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$bin.tmp/" \
            k8s.io/kubernetes/cmd/kube-apiserver ./etcd go.etcd.io/etcd/etcdctl/v3 ./etcdget)
        rm -rf "$bin"
        mv "$bin.tmp" "$bin"
        echo "   built in $((SECONDS - t1)) s"
    fi
    echo "   $("$bin/kube-apiserver" --version 2>&1)"
    echo "   $("$bin/etcd" --version 2>&1 | head -1)"
}
# build_k8s_tools: kubeadm and kubectl from the same k8s.io/kubernetes module
# (and the same cache directory, $bin, as build_binaries), built only by the
# tests that use them, so the apiserver tests do not pay for them.
build_k8s_tools() {
    local mod=tests/interop/apiserver tool t1 ldflags
    for tool in kubeadm kubectl; do
        [ -x "$bin/$tool" ] && continue
        echo "== building $tool $k8s_version into $bin"
        t1=$SECONDS
        ldflags="$(k8s_ldflags) -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
        (cd "$mod" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$bin/$tool.tmp" "k8s.io/kubernetes/cmd/$tool")
        mv "$bin/$tool.tmp" "$bin/$tool"
        echo "   built in $((SECONDS - t1)) s"
    done
    echo "   kubeadm $("$bin/kubeadm" version -o short), kubectl $("$bin/kubectl" version --client -o json | grep -aoE '"gitVersion": *"[^"]*"' | head -n 1 | cut -d'"' -f4)"
}
# k8s_ldflags: the version stamps a release build of $k8s_version carries,
# and its -s -w (hack/lib/golang.sh strips release binaries): no symbol table
# or DWARF, which also shortens the links, a cold run's largest single steps.
k8s_ldflags() {
    local minor=${k8s_version#v1.}
    minor=${minor%%.*}
    echo "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version" \
        "-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
}

# ------------------------------------------------------------ kubectl
# (build_k8s_tools first)
# kubectl with a kubeconfig for the rig's apiserver and bearer token.
write_kubeconfig() {
    kubeconfig="$tmp/kubeconfig"
    cat >"$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: rig
    cluster: {server: "$(api_url 0)", certificate-authority: "$pki/ca.crt"}
users:
  - name: admin
    user: {token: "$token"}
contexts:
  - name: rig
    context: {cluster: rig, user: admin}
current-context: rig
EOF
}
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" --cache-dir "$tmp/kube-cache" "$@"; }
# rewrite NAME: docs/migration.md step 3 (and docs/rotation-and-backup.md's
# rewrite), verbatim.
rewrite() {
    local out
    if out=$(kubectl get secrets --all-namespaces -o json | kubectl replace -f - 2>&1); then
        pass "$1 ($(grep -c 'replaced' <<<"$out") Secrets replaced by kubectl)"
    else
        fail "$1" "$(tail -n 5 <<<"$out" | tr '\n' ' ')"
    fi
}

# ---------------------------------------------------------------- checks
passed=0
failed=0
pass() {
    echo "PASS $*"
    passed=$((passed + 1))
}
fail() { # fail NAME WHY...; shows every node's relevant log lines under the check
    local name=$1 i lines=$((15 / ${#node_names[@]}))
    shift
    echo "FAIL $name: $*"
    failed=$((failed + 1))
    for i in "${!node_names[@]}"; do
        grep -aiE 'kms|envelope|sceau|decrypt|encrypt' "$(node_file "$i" apiserver log)" 2>/dev/null |
            grep -aE '^[EW][0-9]' | tail -n "$lines" | sed "s/^/   apiserver$(node_label "$i") log: /" || true
        grep -aE 'WARN|ERROR' "$(node_file "$i" sceau log)" 2>/dev/null | grep -av 'no resource manager' |
            tail -n $((lines * 2 / 3)) | sed "s/^/   sceau$(node_label "$i") log: /" || true
    done
}
# finish NAME: the summary line; the script's status is 1 if a check failed.
finish() {
    echo "== $1 took $((SECONDS - t0)) s"
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

# ---------------------------------------------------------------- etcd
# Ports are picked below Linux's default ephemeral range (32768-60999), so that
# a port found free is not taken meanwhile by some outgoing connection.
try_start_etcd() {
    etcd_port=$(free_port_pair $((24000 + RANDOM % 4000)))
    "$bin/etcd" --name sceau-interop --data-dir "$tmp/etcd" --log-level warn \
        --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
        --initial-cluster "sceau-interop=http://127.0.0.1:$((etcd_port + 1))" \
        >>"$tmp/etcd.log" 2>&1 &
    etcd_pid=$!
    for _ in $(seq 100); do
        curl -sf --max-time 1 "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' && return 0
        kill -0 "$etcd_pid" 2>/dev/null || {
            echo "   etcd exited: $(grep -aoE '"error":"[^"]*"' "$tmp/etcd.log" | tail -n 1)"
            wait "$etcd_pid" 2>/dev/null || true
            etcd_pid=""
            rm -rf "$tmp/etcd"
            return 1
        }
        sleep 0.1
    done
    echo "   etcd not healthy within 10 s"
    stop "$etcd_pid"
    etcd_pid=""
    rm -rf "$tmp/etcd"
    return 1
}
# start_etcd: one member, three tries on fresh ports; sets etcd_port, etcd_url.
start_etcd() {
    try_start_etcd || try_start_etcd || try_start_etcd || {
        tail -n 30 "$tmp/etcd.log" >&2
        exit 1
    }
    etcd_url="http://127.0.0.1:$etcd_port"
    echo "== etcd $etcd_version on $etcd_url"
}

# ---------------------------------------------------------------- swtpm, sceau
# start_swtpms: one throwaway swtpm per node, through lib.sh's start_swtpm (the
# test kit's sceau-rig); swtpm_pids holds the rigs, which stop their swtpm on SIGTERM.
start_swtpms() {
    local i
    for i in "${!node_names[@]}"; do
        start_swtpm "$(node_file "$i" tpm)"
        # shellcheck disable=SC2154 # start_swtpm (lib.sh) sets swtpm_pid and swtpm_port
        { swtpm_pids[i]=$swtpm_pid tpm_ports[i]=$swtpm_port; }
    done
}
start_sceau() { # start_sceau I: serves node I's swtpm on its socket; waits until `sceau check` passes
    local i=$1 socket log
    socket=$(node_file "$i" kms sock)
    log=$(node_file "$i" sceau log)
    # Each node's own KEK ledger; a release from before KEK generations
    # (interop-ha's upgrade) has no --state-dir.
    local state=()
    "$sceau_bin" serve --help 2>/dev/null | grep -q -- --state-dir && state=(--state-dir "$(node_file "$i" state d)")
    "$sceau_bin" serve --socket "$socket" --tcti "$(tcti "$i")" "${state[@]}" \
        "${sceau_serve_args[@]}" >>"$log" 2>&1 &
    sceau_pids[i]=$!
    for _ in $(seq 200); do
        [ -S "$socket" ] && kill -0 "${sceau_pids[i]}" 2>/dev/null &&
            target/debug/sceau check --socket "$socket" >/dev/null 2>&1 && return 0
        kill -0 "${sceau_pids[i]}" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 30 "$log" >&2
    echo "sceau$(node_label "$i") did not answer on $socket within 20 s" >&2
    return 1
}
start_sceaus() {
    local i
    for i in "${!node_names[@]}"; do
        start_sceau "$i"
        echo "== swtpm$(node_label "$i") on 127.0.0.1:${tpm_ports[i]}/$((tpm_ports[i] + 1)), sceau on $(node_file "$i" kms sock)"
    done
}
key_id() { # key_id I: "key_id=..." as `sceau check` reports it for node I's sceau
    target/debug/sceau check --socket "$(node_file "$1" kms sock)" 2>/dev/null | grep -aoE 'key_id=[^ ]+' | head -n 1 || true
}
restart_sceau() { # restart_sceau I: SIGTERM, then the same command on the same swtpm
    echo "== restarting sceau$(node_label "$1") (same swtpm)"
    stop "${sceau_pids[$1]}" 10
    sceau_pids[$1]=""
    start_sceau "$1"
}

# ---------------------------------------------------------------- kube-apiserver
# make_pki: throwaway CA, serving certificate for 127.0.0.1, service-account
# key and bearer token, shared by every node; sets pki and token.
make_pki() {
    pki="$tmp/pki"
    mkdir "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
        -subj /CN=sceau-interop-ca -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj /CN=kube-apiserver -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$pki/ext"
    openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 1 -extfile "$pki/ext" -out "$pki/apiserver.crt" 2>/dev/null
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    token=$(openssl rand -hex 16)
    echo "$token,sceau-interop-admin,sceau-interop-admin,system:masters" >"$pki/tokens.csv"
}
# write_encryption_config I [FILE]: node I's EncryptionConfiguration. With
# FILE (a configuration shown in docs/), that file with only its endpoint
# unix:///run/sceau/kms.sock pointed at node I's socket and the aescbc key
# placeholder replaced by $aescbc_key; without, secrets through KMS v2
# provider "sceau" at node I's socket, then identity.
write_encryption_config() {
    if [ $# -ge 2 ]; then
        sed -e "s|unix:///run/sceau/kms.sock|unix://$(node_file "$1" kms sock)|" \
            -e "s|YOUR-EXISTING-AESCBC-KEY|${aescbc_key:-}|" "$2" >"$(node_file "$1" encryption yaml)"
        return
    fi
    cat >"$(node_file "$1" encryption yaml)" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - secrets
    providers:
      - kms:
          apiVersion: v2
          name: sceau
          endpoint: unix://$(node_file "$1" kms sock)
          timeout: 3s
      - identity: {}
EOF
}
start_apiserver() { # start_apiserver I: starts node I's kube-apiserver and waits (<= 120 s) for /readyz; sets apiserver_ready_ms[I]
    launch_apiserver "$1"
    wait_apiserver_ready "$1"
}
launch_apiserver() { # launch_apiserver I: starts node I's kube-apiserver; sets apiserver_pids[I], apiserver_exec_ms[I]
    local i=$1 log
    log=$(node_file "$i" apiserver log)
    apiserver_starts[i]=$((${apiserver_starts[i]:-0} + 1))
    echo "---- kube-apiserver start ${apiserver_starts[i]}" >>"$log"
    "$bin/kube-apiserver" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="${api_ports[i]}" \
        --etcd-servers="$etcd_url" \
        --encryption-provider-config="$(node_file "$i" encryption yaml)" \
        --service-cluster-ip-range=10.96.0.0/24 \
        --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
        --token-auth-file="$pki/tokens.csv" --authorization-mode=AlwaysAllow \
        --endpoint-reconciler-type=none \
        --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$pki/sa.key" --service-account-signing-key-file="$pki/sa.key" \
        --cert-dir="$(node_file "$i" cert-dir)" --profiling=false -v=2 \
        >>"$log" 2>&1 &
    apiserver_pids[i]=$!
    apiserver_exec_ms[i]=$(date +%s%3N)
}
wait_apiserver_ready() { # wait_apiserver_ready I: polls node I's /readyz every 0.1 s (<= 120 s); sets apiserver_ready_ms[I]
    local i=$1 t1=$SECONDS code
    while [ $((SECONDS - t1)) -lt 120 ]; do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$pki/ca.crt" \
            -H "Authorization: Bearer $token" "$(api_url "$i")/readyz" || true)
        if [ "$code" = 200 ]; then
            apiserver_ready_ms[i]=$(($(date +%s%3N) - apiserver_exec_ms[i]))
            echo "   kube-apiserver$(node_label "$i") ready in ${apiserver_ready_ms[i]} ms"
            return 0
        fi
        kill -0 "${apiserver_pids[i]}" 2>/dev/null || {
            echo "kube-apiserver$(node_label "$i") exited after $((SECONDS - t1)) s" >&2
            return 1
        }
        sleep 0.1
    done
    echo "kube-apiserver$(node_label "$i") not ready within 120 s" >&2
    return 1
}
# start_apiservers: the PKI, then one kube-apiserver per node on its own port,
# all on the same etcd; exits if one does not become ready.
start_apiservers() {
    local i port=$((28000 + RANDOM % 4000))
    make_pki
    for i in "${!node_names[@]}"; do
        api_ports[i]=$(free_port_pair "$port")
        port=$((api_ports[i] + 2))
        write_encryption_config "$i" ${encryption_config_file:+"$encryption_config_file"}
        echo "== kube-apiserver$(node_label "$i") $k8s_version on $(api_url "$i")"
        start_apiserver "$i" || {
            tail -n 40 "$(node_file "$i" apiserver log)" >&2
            exit 1
        }
    done
}
restart_apiserver() { # restart_apiserver I: SIGTERM, then start again (empty DEK cache)
    echo "== restarting kube-apiserver$(node_label "$1")"
    stop "${apiserver_pids[$1]}" 30
    apiserver_pids[$1]=""
    start_apiserver "$1"
}

apicurl() { # apicurl I METHOD PATH [BODY]: node I's answer body, then the HTTP status on its own line
    local args=(-s --max-time 10 --cacert "$pki/ca.crt" -H "Authorization: Bearer $token"
        -H "Content-Type: application/json" -X "$2" -w '\n%{http_code}')
    [ $# -ge 4 ] && args+=(--data-binary "$4")
    curl "${args[@]}" "$(api_url "$1")$3" || true
}
# kms_calls I METHOD [CODE]: node I's apiserver's own count (since it started)
# of METHOD (Status, Encrypt, Decrypt) calls to provider sceau that ended with
# gRPC code CODE (default OK; "not-OK" counts every other code).
kms_calls() {
    local code=${3:-OK} filter
    filter="grpc_status_code=\"$code\""
    [ "$code" = not-OK ] && filter='grpc_status_code="(OK)"' # inverted below
    apicurl "$1" GET /metrics | grep -a '^apiserver_envelope_encryption_kms_operations_latency_seconds_count' |
        grep -a "method_name=\"/v2.KeyManagementService/$2\"" | grep -a 'provider_name="sceau"' |
        if [ "$code" = not-OK ]; then grep -avE "$filter"; else grep -aF "$filter"; fi |
        awk '{n += $2} END {print n + 0}' || true
}
check_readyz() { # check_readyz I NAME
    local out
    out=$(apicurl "$1" GET '/readyz?verbose')
    if grep -qaF '[+]kms-providers ok' <<<"$out"; then
        pass "$2 ($(grep -aF kms-providers <<<"$out"); this apiserver's Status calls to sceau: $(kms_calls "$1" Status) OK, $(kms_calls "$1" Status not-OK) not OK)"
    else
        fail "$2" "no '[+]kms-providers ok' in /readyz?verbose: $(grep -aE 'kms|^[0-9]{3}$|failed' <<<"$out" | tr '\n' ' ')"
    fi
}
create_namespace() { # create_namespace I: namespace $ns through node I
    local out
    out=$(apicurl "$1" POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}")
    [ "$(tail -n 1 <<<"$out")" = 201 ] || echo "   namespace $ns: $(tr '\n' ' ' <<<"$out" | head -c 300)"
}
# create_secret I NAME SECRET VALUE_B64: POST Secret $ns/SECRET with data
# {plaintext: VALUE_B64} through node I.
create_secret() {
    local out
    out=$(apicurl "$1" POST "/api/v1/namespaces/$ns/secrets" \
        "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"$3\"},\"data\":{\"plaintext\":\"$4\"}}")
    if [ "$(tail -n 1 <<<"$out")" = 201 ]; then
        pass "$2 (HTTP 201, $ns/$3 through kube-apiserver$(node_label "$1"))"
    else
        fail "$2" "HTTP $(tail -n 1 <<<"$out"): $(sed '$d' <<<"$out" | head -c 300)"
    fi
}
# check_read I NAME SECRET VALUE_B64 [MIN]: GET Secret $ns/SECRET through node
# I and compare its data with what was written. Node I's apiserver must have
# made at least MIN (default 0) successful Decrypt calls to its sceau since it
# started (1 after a restart: its DEK cache starts empty, so the read cannot
# succeed without sceau).
check_read() {
    local out code got decrypts
    out=$(apicurl "$1" GET "/api/v1/namespaces/$ns/secrets/$3")
    code=$(tail -n 1 <<<"$out")
    got=$(sed '$d' <<<"$out" | grep -aoE '"plaintext": *"[^"]*"' | sed -E 's/.*"([^"]*)"$/\1/' || true)
    decrypts=$(kms_calls "$1" Decrypt)
    if [ "$code" != 200 ] || [ "$got" != "$4" ]; then
        fail "$2" "HTTP $code, data ${got:-missing}: $(sed '$d' <<<"$out" | head -c 300)"
    elif [ "$decrypts" -lt "${5:-0}" ]; then
        fail "$2" "data matches but the apiserver counts $decrypts successful Decrypt calls, expected >= $5"
    else
        pass "$2 (HTTP 200, data matches; this apiserver's Decrypt calls to sceau: $decrypts OK, $(kms_calls "$1" Decrypt not-OK) not OK)"
    fi
}
# check_etcd_raw NAME SECRET PLAINTEXT: what etcd holds for Secret $ns/SECRET
# starts k8s:enc:kms:v2:sceau: (check NAME-prefix) and contains neither
# PLAINTEXT nor its base64 (check NAME-no-plaintext). Leaves the bytes in
# $tmp/raw-SECRET.
check_etcd_raw() {
    local name=$1 key="/registry/secrets/$ns/$2" raw="$tmp/raw-$2" prefix="k8s:enc:kms:v2:sceau:"
    if ! "$bin/etcdget" --endpoint "$etcd_url" "$key" >"$raw" 2>"$tmp/etcdget.err"; then
        fail "$name-prefix" "etcdget $key: $(cat "$tmp/etcdget.err")"
        fail "$name-no-plaintext" "no raw value"
        return
    fi
    if [ "$(head -c ${#prefix} "$raw")" = "$prefix" ]; then
        pass "$name-prefix ($key: $(wc -c <"$raw") bytes starting $prefix)"
    else
        fail "$name-prefix" "$key starts $(head -c 40 "$raw" | od -An -c | tr -s ' ' | head -c 160)"
    fi
    if grep -qaF -e "$3" -e "$(printf %s "$3" | base64 -w0)" "$raw"; then
        fail "$name-no-plaintext" "$key contains the plaintext"
    else
        pass "$name-no-plaintext (neither the value nor its base64 appears)"
    fi
}
