#!/usr/bin/env bash
# sceau behind a real kube-apiserver with a real etcd (issue 4, item 2).
#
# Builds kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver), etcd
# (go.etcd.io/etcd/server/v3/etcdmain) and a small etcd reader from the Go
# module in tests/interop/apiserver (versions pinned in its go.mod), caches
# the three binaries under ${SCEAU_INTEROP_CACHE:-~/.cache/sceau-interop}/bin
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
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (sceau serves uid 0 only by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_packages
require_cargo
require_go
for tool in openssl curl; do
    command -v "$tool" >/dev/null || {
        echo "installing: $tool"
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$tool"
    }
done

t0=$SECONDS
tmp=$(mktemp -d /tmp/sceau-apiserver.XXXXXX)
etcd_pid=""
swtpm_pid=""
sceau_pid=""
apiserver_pid=""
stop() { # stop PID [SECONDS]: TERM, then KILL after SECONDS (default 20)
    local pid=$1 limit=${2:-20}
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq $((limit * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local status=$?
    set +e
    stop "$apiserver_pid"
    stop "$sceau_pid"
    stop "$etcd_pid"
    stop "$swtpm_pid"
    rm -rf "$tmp"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- build
mod=tests/interop/apiserver
echo "== building sceau (cargo build --locked)"
cargo build --locked --quiet
k8s_version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd "$mod" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
minor=${k8s_version#v1.}
minor=${minor%%.*}
ldflags="-X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
key=$( (go version; echo "$ldflags"; cd "$mod" && cat go.mod go.sum ./*/*.go) | sha256sum | cut -c1-12)
cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop}
bin="$cache/bin/kube-apiserver-$k8s_version-etcd-$etcd_version-$key"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ] && [ -x "$bin/etcdget" ]; then
    echo "== kube-apiserver $k8s_version, etcd $etcd_version: cached in $bin"
else
    echo "== building kube-apiserver $k8s_version, etcd $etcd_version into $bin"
    echo "   (GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE); cold: several minutes)"
    t1=$SECONDS
    rm -rf "$bin.tmp"
    mkdir -p "$bin.tmp"
    (cd "$mod" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$bin.tmp/" \
        k8s.io/kubernetes/cmd/kube-apiserver ./etcd ./etcdget)
    rm -rf "$bin"
    mv "$bin.tmp" "$bin"
    echo "   built in $((SECONDS - t1)) s"
fi
echo "   $("$bin/kube-apiserver" --version 2>&1)"
echo "   $("$bin/etcd" --version 2>&1 | head -1)"

# ---------------------------------------------------------------- checks
passed=0
failed=0
pass() {
    echo "PASS $*"
    passed=$((passed + 1))
}
fail() { # fail NAME WHY...; shows the relevant log lines under the check
    local name=$1
    shift
    echo "FAIL $name: $*"
    failed=$((failed + 1))
    grep -aiE 'kms|envelope|sceau|decrypt|encrypt' "$tmp/apiserver.log" 2>/dev/null |
        grep -aE '^[EW][0-9]' | tail -n 15 | sed 's/^/   apiserver log: /' || true
    grep -aE 'WARN|ERROR' "$tmp/sceau.log" 2>/dev/null | grep -av 'no resource manager' |
        tail -n 10 | sed 's/^/   sceau log: /' || true
}

# ---------------------------------------------------------------- etcd
# Ports are picked below Linux's default ephemeral range (32768-60999), so that
# a port found free is not taken meanwhile by some outgoing connection.
start_etcd() {
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
start_etcd || start_etcd || start_etcd || {
    tail -n 30 "$tmp/etcd.log" >&2
    exit 1
}
echo "== etcd $etcd_version on 127.0.0.1:$etcd_port"

# ---------------------------------------------------------------- swtpm, sceau
start_swtpm "$tmp/tpm"
tpm_port=$swtpm_port

socket="$tmp/kms.sock"
start_sceau() {
    target/debug/sceau serve --socket "$socket" --tcti "swtpm:host=127.0.0.1,port=$tpm_port" >>"$tmp/sceau.log" 2>&1 &
    sceau_pid=$!
    for _ in $(seq 200); do
        [ -S "$socket" ] && kill -0 "$sceau_pid" 2>/dev/null && target/debug/sceau check --socket "$socket" >/dev/null 2>&1 && return 0
        kill -0 "$sceau_pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 30 "$tmp/sceau.log" >&2
    echo "sceau did not answer on $socket within 20 s" >&2
    return 1
}
start_sceau
echo "== swtpm on 127.0.0.1:$tpm_port/$((tpm_port + 1)), sceau on $socket"

# ---------------------------------------------------------------- kube-apiserver
# Throwaway CA, serving certificate for 127.0.0.1, service-account key, token.
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

cat >"$tmp/encryption.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - secrets
    providers:
      - kms:
          apiVersion: v2
          name: sceau
          endpoint: unix://$socket
          timeout: 3s
      - identity: {}
EOF

api_port=$(free_port_pair $((28000 + RANDOM % 4000)))
api="https://127.0.0.1:$api_port"
apiserver_starts=0
start_apiserver() {
    apiserver_starts=$((apiserver_starts + 1))
    echo "---- kube-apiserver start $apiserver_starts" >>"$tmp/apiserver.log"
    "$bin/kube-apiserver" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
        --etcd-servers="http://127.0.0.1:$etcd_port" \
        --encryption-provider-config="$tmp/encryption.yaml" \
        --service-cluster-ip-range=10.96.0.0/24 \
        --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
        --token-auth-file="$pki/tokens.csv" --authorization-mode=AlwaysAllow \
        --endpoint-reconciler-type=none \
        --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$pki/sa.key" --service-account-signing-key-file="$pki/sa.key" \
        --cert-dir="$tmp/cert-dir" --profiling=false -v=2 \
        >>"$tmp/apiserver.log" 2>&1 &
    apiserver_pid=$!
    local t1=$SECONDS
    for _ in $(seq 240); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$pki/ca.crt" \
            -H "Authorization: Bearer $token" "$api/readyz")" = 200 ]; then
            echo "   kube-apiserver ready in $((SECONDS - t1)) s"
            return 0
        fi
        kill -0 "$apiserver_pid" 2>/dev/null || {
            echo "kube-apiserver exited after $((SECONDS - t1)) s" >&2
            return 1
        }
        sleep 0.5
    done
    echo "kube-apiserver not ready within 120 s" >&2
    return 1
}
apicurl() { # apicurl METHOD PATH [BODY]: prints the body, then the HTTP status on its own line
    local args=(-s --max-time 10 --cacert "$pki/ca.crt" -H "Authorization: Bearer $token"
        -H "Content-Type: application/json" -X "$1" -w '\n%{http_code}')
    [ $# -ge 3 ] && args+=(--data-binary "$3")
    curl "${args[@]}" "$api$2" || true
}
# kms_calls METHOD [CODE]: the running apiserver's own count (since it started)
# of METHOD (Status, Encrypt, Decrypt) calls to provider sceau that ended with
# gRPC code CODE (default OK; "not-OK" counts every other code).
kms_calls() {
    local code=${2:-OK} filter
    filter="grpc_status_code=\"$code\""
    [ "$code" = not-OK ] && filter='grpc_status_code="(OK)"' # inverted below
    apicurl GET /metrics | grep -a '^apiserver_envelope_encryption_kms_operations_latency_seconds_count' |
        grep -a "method_name=\"/v2.KeyManagementService/$1\"" | grep -a 'provider_name="sceau"' |
        if [ "$code" = not-OK ]; then grep -avE "$filter"; else grep -aF "$filter"; fi |
        awk '{n += $2} END {print n + 0}' || true
}
check_readyz() { # check_readyz NAME
    local out
    out=$(apicurl GET '/readyz?verbose')
    if grep -qaF '[+]kms-providers ok' <<<"$out"; then
        pass "$1 ($(grep -aF kms-providers <<<"$out"); this apiserver's Status calls to sceau: $(kms_calls Status) OK, $(kms_calls Status not-OK) not OK)"
    else
        fail "$1" "no '[+]kms-providers ok' in /readyz?verbose: $(grep -aE 'kms|^[0-9]{3}$|failed' <<<"$out" | tr '\n' ' ')"
    fi
}
# check_read NAME [MIN]: GET the Secret and compare its data with what was
# written. The apiserver must have made at least MIN (default 0) successful
# Decrypt calls to sceau since it started (1 after a restart: its DEK cache
# starts empty, so the read cannot succeed without sceau).
check_read() {
    local out code got decrypts
    out=$(apicurl GET "/api/v1/namespaces/$ns/secrets/$secret")
    code=$(tail -n 1 <<<"$out")
    got=$(sed '$d' <<<"$out" | grep -aoE '"plaintext": *"[^"]*"' | sed -E 's/.*"([^"]*)"$/\1/' || true)
    decrypts=$(kms_calls Decrypt)
    if [ "$code" != 200 ] || [ "$got" != "$plaintext_b64" ]; then
        fail "$1" "HTTP $code, data ${got:-missing}: $(sed '$d' <<<"$out" | head -c 300)"
    elif [ "$decrypts" -lt "${2:-0}" ]; then
        fail "$1" "data matches but the apiserver counts $decrypts successful Decrypt calls, expected >= $2"
    else
        pass "$1 (HTTP 200, data matches; this apiserver's Decrypt calls to sceau: $decrypts OK, $(kms_calls Decrypt not-OK) not OK)"
    fi
}
key_id() { target/debug/sceau check --socket "$socket" 2>/dev/null | grep -aoE 'key_id=[^ ]+' | head -n 1 || true; }

echo "== kube-apiserver $k8s_version on $api"
start_apiserver || {
    tail -n 40 "$tmp/apiserver.log" >&2
    exit 1
}
check_readyz readyz-kms-providers

ns=sceau-interop
secret=sceau-interop-secret
plaintext="sceau-plaintext-$(openssl rand -hex 12)"
plaintext_b64=$(printf %s "$plaintext" | base64 -w0)
out=$(apicurl POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}")
[ "$(tail -n 1 <<<"$out")" = 201 ] || echo "   namespace $ns: $(tr '\n' ' ' <<<"$out" | head -c 300)"
out=$(apicurl POST "/api/v1/namespaces/$ns/secrets" \
    "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"$secret\"},\"data\":{\"plaintext\":\"$plaintext_b64\"}}")
if [ "$(tail -n 1 <<<"$out")" = 201 ]; then
    pass "create-secret (HTTP 201, $ns/$secret)"
else
    fail create-secret "HTTP $(tail -n 1 <<<"$out"): $(sed '$d' <<<"$out" | head -c 300)"
fi

key_path="/registry/secrets/$ns/$secret"
if "$bin/etcdget" --endpoint "http://127.0.0.1:$etcd_port" "$key_path" >"$tmp/raw" 2>"$tmp/etcdget.err"; then
    prefix="k8s:enc:kms:v2:sceau:"
    if [ "$(head -c ${#prefix} "$tmp/raw")" = "$prefix" ]; then
        pass "etcd-raw-prefix ($key_path: $(wc -c <"$tmp/raw") bytes starting $prefix)"
    else
        fail etcd-raw-prefix "$key_path starts $(head -c 40 "$tmp/raw" | od -An -c | tr -s ' ' | head -c 160)"
    fi
    if grep -qaF -e "$plaintext" -e "$plaintext_b64" "$tmp/raw"; then
        fail etcd-raw-no-plaintext "$key_path contains the plaintext"
    else
        pass "etcd-raw-no-plaintext (neither the value nor its base64 appears)"
    fi
else
    fail etcd-raw-prefix "etcdget $key_path: $(cat "$tmp/etcdget.err")"
    fail etcd-raw-no-plaintext "no raw value"
fi

check_read read-secret
key_id_before=$(key_id)

echo "== restarting kube-apiserver (empty DEK cache)"
stop "$apiserver_pid" 30
apiserver_pid=""
if start_apiserver; then
    check_read read-after-apiserver-restart 1
else
    fail read-after-apiserver-restart "kube-apiserver did not become ready again"
fi

echo "== restarting sceau (same swtpm)"
stop "$sceau_pid" 10
sceau_pid=""
if start_sceau; then
    key_id_after=$(key_id)
    if [ -n "$key_id_before" ] && [ "$key_id_before" = "$key_id_after" ]; then
        pass "key-id-stable-across-sceau-restart ($key_id_after)"
    else
        fail key-id-stable-across-sceau-restart "before: ${key_id_before:-none}, after: ${key_id_after:-none}"
    fi
    check_read read-after-sceau-restart
    # The running apiserver's health probe re-asks Status once its last healthy
    # result is 20 s old; wait (at most 45 s) until a Status call has reached
    # the new sceau, then readyz must still say ok.
    status_before=$(kms_calls Status)
    for _ in $(seq 45); do
        apicurl GET '/readyz?verbose' >/dev/null
        [ "$(kms_calls Status)" -gt "$status_before" ] && break
        sleep 1
    done
    if [ "$(kms_calls Status)" -gt "$status_before" ]; then
        check_readyz readyz-after-sceau-restart
    else
        fail readyz-after-sceau-restart "no successful Status call to the new sceau within 45 s"
    fi
    echo "== restarting kube-apiserver (the read needs a Decrypt from the new sceau)"
    stop "$apiserver_pid" 30
    apiserver_pid=""
    if start_apiserver; then
        check_read read-after-sceau-and-apiserver-restart 1
    else
        fail read-after-sceau-and-apiserver-restart "kube-apiserver did not become ready again"
    fi
else
    fail read-after-sceau-restart "sceau did not restart"
fi
check_readyz readyz-kms-providers-final

kill -0 "$sceau_pid" 2>/dev/null || fail sceau-running "sceau is no longer running"
echo "== interop-apiserver took $((SECONDS - t0)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
