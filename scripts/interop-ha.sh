#!/usr/bin/env bash
# sceau's cluster mode behind three real kube-apiservers sharing one
# real etcd: the HA end-to-end test.
#
# On the rig of scripts/interop-apiserver.sh (scripts/lib-apiserver.sh: the
# same binaries, built from tests/interop/apiserver), starts on loopback one
# etcd and three nodes a, b, c, each a throwaway swtpm, a sceau in cluster mode
# and a kube-apiserver whose EncryptionConfiguration names its own sceau. The
# members directory holds the `sceau srk-public` output of every node, and
# every sceau also wraps for an offline recovery key, which
# `sceau-recover recovery-keygen` splits 2 of 3 among three custodians: alice
# and bob with age keys from `age-keygen`, carol with a passphrase read from a
# file descriptor. Each share passes `sceau-recover share verify --public`, and
# `age -d -i KEY` opens bob's share file as a custodian would. Every recovery
# below combines two shares. Then:
#
#   0. the upgrade of docs/ha.md ("Upgrading a cluster to signed envelopes"),
#      as an operator runs it: the cluster starts on the previous release
#      (the last sceau before signed envelopes, built once from this clone's
#      history into the interop cache), which writes two Secrets as version 2
#      envelopes; this sceau refuses the old member files with a line naming
#      `sceau srk-public`; with the new member files and
#      --accept-unsigned-envelopes, each node in turn is upgraded and its
#      kube-apiserver restarted, and the old Secrets read back through it; the
#      three agree on the new key_id; `sceau-recover recover --members` (alice's
#      and carol's shares) names both unsigned envelopes; one Secret is
#      rewritten (GET, PUT) and the recovery then names only the other; the
#      flag is dropped, node by node: the rewritten Secret still reads
#      everywhere, the one left unsigned is refused (HTTP 500, and sceau's
#      log line of the refusal names the flag) and is then deleted in etcd,
#      as an operator who kept it would restore it instead;
#   1. the three sceau report one key_id, the one each logged for its
#      membership; the Secret written through a is stored in etcd under
#      k8s:enc:kms:v2:sceau:, names that key_id and holds no plaintext;
#   2. it reads back through b and c (each needs a Decrypt from its own sceau
#      of what a's sceau sealed); each kube-apiserver is restarted in turn
#      (cold DEK cache), and after each restart the Secret reads back through
#      all three; each sceau is restarted in turn (same key_id), then its
#      kube-apiserver, and the Secret reads back through all three; a Secret
#      written through c reads back through a and b;
#   3. node b rotates its KEK (docs/ha.md, "Rotating a member's KEK"):
#      `sceau kek rotate`, its new member file known everywhere through
#      --former-members (the key_id unchanged), then the member files
#      rolled node by node, each kube-apiserver restarted after its sceau:
#      a Secret written through the node just rolled reads back through the
#      other two (old or new membership), the three agree on a new key_id,
#      `inventory --current-members` counts the values still naming b's
#      old key, the rewrite (kubectl replace) leaves none, and
#      `sceau-recover inventory --require-current` passes;
#   4. `etcdctl snapshot save` (etcdctl v3.7.0, built from the module), every
#      process stopped and every swtpm's state deleted; `sceau-recover recover`
#      with alice's share alone exits 1 before opening anything, saying it has
#      1 of the 2 shares needed; then `sceau-recover recover --share ALICE
#      --share BOB --etcd-snapshot SNAP > FILE` prints both Secrets with their
#      values; the same for `etcdctl get --prefix /registry/secrets -w json`
#      and `sceau-recover recover --etcd-json` with bob's and carol's shares.
#
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root (sceau serves uid 0 only by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh

node_names=(a b c)
nodes=("${!node_names[@]}")

# The release a cluster upgrades to signed envelopes from: the last sceau that
# wrote version 2 envelopes and member files with the SRK alone.
previous_release=b78d3efb4e8600fcf023ff441e48b84d204332c1
# build_previous_sceau: that release's sceau, built once into the interop
# cache (keyed by its commit) from this clone's history; sets previous_sceau,
# or leaves it empty if the clone lacks that commit (a shallow clone).
build_previous_sceau() {
    local cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop} src t1=$SECONDS
    previous_sceau="$cache/sceau-${previous_release:0:12}/sceau"
    [ -x "$previous_sceau" ] && return 0
    if ! git cat-file -e "$previous_release^{commit}" 2>/dev/null; then
        echo "SKIP upgrade-from-unsigned-envelopes: commit $previous_release is not in this clone (shallow?); clone with history to run it"
        previous_sceau=""
        return 0
    fi
    echo "== building the previous release's sceau ($previous_release) into $cache"
    src=$(mktemp -d "$tmp/previous-release.XXXXXX")
    git archive "$previous_release" | tar -x -C "$src"
    # A target directory of its own: the two releases' workspace crates have
    # the same names and paths, and cargo tells them apart by file times, which
    # an archive's extraction sets to the commit's.
    cargo build --locked --quiet --manifest-path "$src/Cargo.toml" --target-dir "$src/target" --bin sceau
    mkdir -p "${previous_sceau%/*}"
    cp "$src/target/debug/sceau" "$previous_sceau.partial"
    mv "$previous_sceau.partial" "$previous_sceau"
    rm -rf "$src"
    echo "   built in $((SECONDS - t1)) s"
}

start_rig sceau-ha
build_previous_sceau
start_etcd
start_swtpms

members="$tmp/members"
mkdir "$members"
# The recovery key, split among three custodians, any two of whom open it:
# alice and bob hold age keys, carol a passphrase. sceau-recover takes no
# passphrase as an argument: a script gives it on a file descriptor.
custodians="$tmp/custodians"
shares="$tmp/shares"
mkdir -m 700 "$custodians"
for who in alice bob; do
    age-keygen -o "$custodians/$who.key" 2>/dev/null
    chmod 600 "$custodians/$who.key" # sceau-recover refuses a key file others can read
done
carol_passphrase="carol-$(openssl rand -hex 16)"
target/debug/sceau-recover recovery-keygen --public "$tmp/recovery.pub" \
    --custodians 3 --threshold 2 --shares-out "$shares" \
    --custodian "alice=age:$(age-keygen -y "$custodians/alice.key")" \
    --custodian "bob=age:$(age-keygen -y "$custodians/bob.key")" \
    --custodian carol=passphrase --passphrase-fd 3 \
    3< <(printf '%s\n' "$carol_passphrase") 2>"$tmp/recovery-keygen.log"
recovery_name=$(sed -n 's/^name: //p' "$tmp/recovery.pub")
# The rig's swtpm serves one client at a time, so every member file is
# written before a sceau holds its TPM; on a node, `sceau srk-public` runs
# beside the serving daemon.
for i in "${nodes[@]}"; do
    target/debug/sceau srk-public --tcti "$(tcti "$i")" >"$members/${node_names[i]}.pub"
done
sceau_serve_args=(--members "$members" --recovery-key "$tmp/recovery.pub")

# custody WHO[,WHO...] ARGS...: `sceau-recover ARGS...` with the share files of
# those custodians, each as its holder opens it: alice's and bob's with their
# age key file, carol's with her passphrase on descriptor 3.
custody() {
    local who list args=()
    IFS=, read -r -a list <<<"$1"
    for who in "${list[@]}"; do
        args+=(--share "$shares/$who.share.age")
        if [ "$who" = carol ]; then
            args+=(--passphrase-fd 3)
        else
            args+=(--age-identity "$custodians/$who.key")
        fi
    done
    shift
    target/debug/sceau-recover "$@" "${args[@]}" 3< <(printf '%s\n' "$carol_passphrase")
}

# Each custodian checks their share against the public file the nodes get.
for who in alice bob carol; do
    if verified=$(custody "$who" share verify --public "$tmp/recovery.pub" 2>&1) &&
        grep -qF "(custodian $who), verified against the commitments of recovery key $recovery_name" <<<"$verified" &&
        grep -qF "which is the key of the public file" <<<"$verified"; then
        pass "share-verify-$who ($(head -n 1 <<<"$verified" | sed "s|$shares/||" | head -c 200))"
    else
        fail "share-verify-$who" "$(head -c 300 <<<"$verified" | tr '\n' ' ')"
    fi
done
# A share file is a plain age file: bob opens his with age itself.
opened=$(age -d -i "$custodians/bob.key" "$shares/bob.share.age" 2>&1) || true
if grep -qxF -- "-----BEGIN SCEAU RECOVERY SHARE-----" <<<"$opened" && grep -qxF "custodian: bob" <<<"$opened" &&
    grep -qxF "name: $recovery_name" <<<"$opened"; then
    pass "share-opens-with-age (\`age -d -i bob.key bob.share.age\`: $(grep -m1 '^share:' <<<"$opened"), BEGIN SCEAU RECOVERY SHARE)"
else
    fail share-opens-with-age "$(head -c 300 <<<"$opened" | tr '\n' ' ')"
fi

# read_through_all NAME SECRET VALUE_B64: SECRET reads back through every node,
# each of which has made at least 1 successful Decrypt since it started.
read_through_all() {
    local i
    for i in "${nodes[@]}"; do
        check_read "$i" "$1-through-${node_names[i]}" "$2" "$3" 1
    done
}
# recover_json NAME: `sceau-recover recover --members` with alice's and
# carol's shares over an etcdctl JSON export of the Secrets as they are now;
# leaves its stdout, stderr and exit status in $tmp/NAME.out, $tmp/NAME.err
# and recover_status.
recover_json() {
    "$bin/etcdctl" --endpoints "$etcd_url" get --prefix /registry/secrets -w json >"$tmp/$1.json"
    recover_status=0
    custody alice,carol recover --members "$members" \
        --etcd-json "$tmp/$1.json" >"$tmp/$1.out" 2>"$tmp/$1.err" || recover_status=$?
}

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
# ---------------------------------------------------------------- upgrade
if [ -n "$previous_sceau" ]; then
    echo "== the previous release: $("$previous_sceau" --version 2>&1 | head -n 1)"
    members_v2="$tmp/members-v2"
    mkdir "$members_v2"
    for i in "${nodes[@]}"; do
        "$previous_sceau" srk-public --tcti "$(tcti "$i")" >"$members_v2/${node_names[i]}.pub"
    done
    # This sceau refuses a member file without a signing key, naming it and
    # the command that writes a new one.
    refusal=$(timeout 30 target/debug/sceau serve --socket "$tmp/refused.sock" --tcti "$(tcti 0)" --state-dir "$tmp/refused.state" \
        --members "$members_v2" --recovery-key "$tmp/recovery.pub" 2>&1) && refused_status=0 || refused_status=$?
    if [ "$refused_status" -ne 0 ] && [ "$refused_status" -ne 124 ] &&
        grep -qF "$members_v2/a.pub" <<<"$refusal" && grep -qF "sceau srk-public" <<<"$refusal"; then
        pass "old-member-file-refused (exit $refused_status: $(grep -aF srk-public <<<"$refusal" | head -n 1 | head -c 240))"
    else
        fail old-member-file-refused "exit $refused_status: $(head -c 300 <<<"$refusal")"
    fi

    sceau_bin=$previous_sceau
    sceau_serve_args=(--members "$members_v2" --recovery-key "$tmp/recovery.pub")
    start_sceaus
    old_key_id=$(key_id 0)
    start_apiservers
    create_namespace 0
    secret_old=sceau-ha-unsigned-rewritten
    plaintext_old="sceau-plaintext-old-$(openssl rand -hex 12)"
    value_old=$(printf %s "$plaintext_old" | base64 -w0)
    secret_stale=sceau-ha-unsigned-left
    value_stale=$(printf %s "sceau-plaintext-stale-$(openssl rand -hex 12)" | base64 -w0)
    create_secret 0 create-secret-on-previous-release "$secret_old" "$value_old"
    create_secret 0 create-second-secret-on-previous-release "$secret_stale" "$value_stale"
    check_etcd_raw etcd-raw-previous-release "$secret_stale" "$(base64 -d <<<"$value_stale")"
    check_read 1 read-previous-release-secret-through-b "$secret_old" "$value_old" 1

    echo "== upgrading node by node, with --accept-unsigned-envelopes"
    sceau_bin=target/debug/sceau
    sceau_serve_args=(--members "$members" --recovery-key "$tmp/recovery.pub" --accept-unsigned-envelopes)
    for n in "${nodes[@]}"; do
        name=${node_names[n]}
        stop "${sceau_pids[n]}" 10
        if ! start_sceau "$n" || ! restart_apiserver "$n"; then
            fail "upgrade-$name" "sceau or kube-apiserver $name did not come back"
            continue
        fi
        # Its kube-apiserver restarted with an empty DEK cache: the read is a
        # Decrypt of a version 2 envelope by the new sceau.
        check_read "$n" "read-unsigned-after-upgrading-$name" "$secret_old" "$value_old" 1
    done
    check_key_ids key-id-same-after-upgrade
    if [ -n "$cluster_key_id" ] && [ "key_id=$cluster_key_id" != "$old_key_id" ]; then
        pass "key-id-changed-by-upgrade (${old_key_id#key_id=} -> $cluster_key_id: the signing keys are named)"
    else
        fail key-id-changed-by-upgrade "before ${old_key_id:-none}, after ${cluster_key_id:-no agreement}"
    fi

    recover_json recover-before-rewrite
    if [ "$recover_status" -ne 0 ] && grep -q "FAILED /registry/secrets/$ns/$secret_old: .*unsigned" "$tmp/recover-before-rewrite.err" &&
        grep -q "FAILED /registry/secrets/$ns/$secret_stale: .*unsigned" "$tmp/recover-before-rewrite.err"; then
        pass "recover-names-unsigned (exit $recover_status; $(grep -c FAILED "$tmp/recover-before-rewrite.err") FAILED, e.g. $(grep -m1 FAILED "$tmp/recover-before-rewrite.err" | head -c 200))"
    else
        fail recover-names-unsigned "exit $recover_status: $(head -c 400 "$tmp/recover-before-rewrite.err" | tr '\n' ' ')"
    fi

    # rewrite_secret NAME SECRET: GET, then PUT the same object through a. The
    # stored value names the old key_id, so it reads as stale and the
    # unchanged object is written again, through the new key_id's DEK seed.
    rewrite_secret() {
        local got put
        got=$(apicurl 0 GET "/api/v1/namespaces/$ns/secrets/$2")
        put=$(apicurl 0 PUT "/api/v1/namespaces/$ns/secrets/$2" "$(sed '$d' <<<"$got")")
        if [ "$(tail -n 1 <<<"$put")" = 200 ]; then
            pass "$1 (GET $(tail -n 1 <<<"$got"), PUT 200 through a)"
        else
            fail "$1" "GET $(tail -n 1 <<<"$got"), PUT $(tail -n 1 <<<"$put"): $(sed '$d' <<<"$put" | head -c 300)"
        fi
    }
    # A forgotten Secret is what the check after the rewrite is for.
    rewrite_secret rewrite-first-secret "$secret_old"
    recover_json recover-after-partial-rewrite
    if [ "$recover_status" -ne 0 ] && grep -q "FAILED /registry/secrets/$ns/$secret_stale" "$tmp/recover-after-partial-rewrite.err" &&
        ! grep -q "/registry/secrets/$ns/$secret_old" "$tmp/recover-after-partial-rewrite.err"; then
        pass "recover-names-the-forgotten-secret (exit $recover_status; $(grep -m1 FAILED "$tmp/recover-after-partial-rewrite.err" | head -c 160))"
    else
        fail recover-names-the-forgotten-secret "exit $recover_status: $(head -c 400 "$tmp/recover-after-partial-rewrite.err" | tr '\n' ' ')"
    fi
    rewrite_secret rewrite-second-secret "$secret_stale"
    recover_json recover-after-rewrite
    if [ "$recover_status" -eq 0 ] && ! grep -qE "FAILED|UNVERIFIED" "$tmp/recover-after-rewrite.err" &&
        grep -qaF -e "$plaintext_old" -e "$value_old" "$tmp/recover-after-rewrite.out" &&
        grep -qaF -e "$value_stale" "$tmp/recover-after-rewrite.out"; then
        pass "recover-after-rewrite (exit 0, both Secrets open verified: $(tail -n 1 "$tmp/recover-after-rewrite.err"))"
    else
        fail recover-after-rewrite "exit $recover_status: $(head -c 400 "$tmp/recover-after-rewrite.err" | tr '\n' ' ')"
    fi

    echo "== dropping --accept-unsigned-envelopes, node by node"
    sceau_serve_args=(--members "$members" --recovery-key "$tmp/recovery.pub")
    for n in "${nodes[@]}"; do
        if ! restart_sceau "$n" || ! restart_apiserver "$n"; then
            fail "drop-accept-unsigned-${node_names[n]}" "sceau or kube-apiserver ${node_names[n]} did not come back"
        fi
    done
    read_through_all read-rewritten-without-accept-unsigned "$secret_old" "$value_old"
    read_through_all read-second-rewritten-without-accept-unsigned "$secret_stale" "$value_stale"

    # The version 2 value saved before the rewrite, put back in etcd (a
    # restored backup, or a forger's write: through etcd's own JSON gateway,
    # which carries bytes in base64) is refused now.
    key="/registry/secrets/$ns/$secret_stale"
    curl -s --max-time 10 -o /dev/null "$etcd_url/v3/kv/put" \
        -d "{\"key\":\"$(printf %s "$key" | base64 -w0)\",\"value\":\"$(base64 -w0 <"$tmp/raw-$secret_stale")\"}"
    got=$(apicurl 1 GET "/api/v1/namespaces/$ns/secrets/$secret_stale")
    refused_log=$(grep -a "refused a cluster envelope: the envelope is unsigned" "$(node_file 1 sceau log)" | tail -n 1 || true)
    if [ "$(tail -n 1 <<<"$got")" = 500 ] && grep -qF -- --accept-unsigned-envelopes <<<"$refused_log"; then
        pass "unsigned-refused-without-accept-unsigned (HTTP 500 through b; sceau b: ${refused_log:0:200})"
    else
        fail unsigned-refused-without-accept-unsigned "HTTP $(tail -n 1 <<<"$got"), sceau b logged: ${refused_log:-nothing}"
    fi
    # A kube-apiserver that restarts while one Secret cannot be decrypted
    # never becomes ready (its watch cache cannot list Secrets): gone before
    # the checks below restart them.
    "$bin/etcdctl" --endpoints "$etcd_url" del "$key" >/dev/null
else
    start_sceaus
    start_apiservers
    create_namespace 0
fi

# ---------------------------------------------------------------- cluster mode
echo "== members: $(cd "$members" && echo *.pub); $(cat "$tmp/recovery-keygen.log")"

check_key_ids key-id-same-on-all-members
first_key_id=$(key_id 0)
first_key_id=${first_key_id#key_id=} # a's, should the others disagree

for i in "${nodes[@]}"; do
    check_readyz "$i" "readyz-kms-providers-${node_names[i]}"
done

# ---------------------------------------------------------------- Secrets
secret_a=sceau-ha-through-a
plaintext_a="sceau-plaintext-a-$(openssl rand -hex 12)"
value_a=$(printf %s "$plaintext_a" | base64 -w0)
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

# ---------------------------------------------------------------- KEK rotation of a member
# docs/ha.md, "Rotating a member's KEK", on node b: b's new generation, its
# new member file made known everywhere, then the member files rolled node
# by node with each kube-apiserver restarted (so that it writes under its
# sceau's new membership at once); after each step a Secret written through
# the node just rolled reads back through the two others, which have not
# seen its DEK seed, then the rewrite and inventory --require-current.
echo "== b rotates its KEK"
build_k8s_tools
write_kubeconfig
stop "${sceau_pids[1]}" 10
sceau_pids[1]=""
if rotated=$(target/debug/sceau kek rotate --tcti "$(tcti 1)" --state-dir "$(node_file 1 state d)" 2>"$tmp/rotate.err"); then
    pass "kek-rotate-b ($rotated)"
else
    fail kek-rotate-b "$(cat "$tmp/rotate.err")"
fi
known="$tmp/former-known" members_new="$tmp/members-new" former_old="$tmp/former-old"
mkdir "$known" "$members_new" "$former_old"
target/debug/sceau srk-public --tcti "$(tcti 1)" >"$known/b.pub"
cp "$members/a.pub" "$members/c.pub" "$known/b.pub" "$members_new/"
cp "$members/b.pub" "$former_old/b.pub"
if [ "$(sed -n 's/^name: //p' "$known/b.pub")" != "$(sed -n 's/^name: //p' "$members/b.pub")" ]; then
    pass "b-new-member-file (name $(sed -n 's/^name: //p' "$known/b.pub" | head -c 20)…, generation 1's key)"
else
    fail b-new-member-file "srk-public printed the old key"
fi
# Step 2: the new file known everywhere, not yet a recipient.
sceau_serve_args=(--members "$members" --recovery-key "$tmp/recovery.pub" --former-members "$known")
start_sceau 1
restart_sceau 0
restart_sceau 2
check_key_ids key-id-unchanged-with-the-new-file-known
[ "$cluster_key_id" = "$first_key_id" ] ||
    fail key-id-unchanged-with-the-new-file-known "was $first_key_id, now ${cluster_key_id:-not one}"
# Step 3, node by node: the new file a member, the old one former.
sceau_serve_args=(--members "$members_new" --recovery-key "$tmp/recovery.pub" --former-members "$former_old")
rolled=()
for n in "${nodes[@]}"; do
    name=${node_names[n]}
    restart_sceau "$n"
    rolled+=("$n")
    if ! restart_apiserver "$n"; then
        fail "rotation-apiserver-$name-restart" "kube-apiserver $name did not become ready again"
        continue
    fi
    secret="sceau-ha-rolled-$name"
    plaintext="sceau-plaintext-rolled-$name-$(openssl rand -hex 8)"
    value=$(printf %s "$plaintext" | base64 -w0)
    create_secret "$n" "create-after-rolling-$name" "$secret" "$value"
    for i in "${nodes[@]}"; do
        [ "$i" = "$n" ] && continue
        # Not restarted since before this write: its Decrypt count grows.
        check_read "$i" "rolled-$name-read-through-${node_names[i]}" "$secret" "$value" 1
    done
    check_read "$n" "secret-a-through-rolled-$name" "$secret_a" "$value_a"
done
check_key_ids key-id-same-after-the-roll
new_key_id=$cluster_key_id
if [ -n "$new_key_id" ] && [ "$new_key_id" != "$first_key_id" ]; then
    pass "key-id-new-after-the-roll ($first_key_id -> $new_key_id)"
else
    fail key-id-new-after-the-roll "before $first_key_id, after ${new_key_id:-not one}"
fi
# Before the rewrite, the values written before the roll name b's
# generation-0 key, which no current member file lists.
"$bin/etcdctl" --endpoints "$etcd_url" get --prefix /registry/secrets -w json >"$tmp/before-rewrite.json"
old_b_name=$(sed -n 's/^name: //p' "$former_old/b.pub")
out=$(target/debug/sceau-recover inventory --etcd-json "$tmp/before-rewrite.json" \
    --current-members "$members_new" --current-recovery-key "$tmp/recovery.pub" 2>&1) || true
if grep -qE "^ +[1-9][0-9]*  values name member key $old_b_name, in no current member file$" <<<"$out" &&
    ! grep -qF 'earlier recovery key' <<<"$out"; then
    pass "inventory-names-b-old-key-before-rewrite ($(grep -F 'member key' <<<"$out" | tr -s ' ' | head -c 120)…)"
else
    fail inventory-names-b-old-key-before-rewrite "$(tr '\n' ' ' <<<"$out" | head -c 600)"
fi
rewrite rewrite-after-rotation
"$bin/etcdctl" --endpoints "$etcd_url" get --prefix /registry/secrets -w json >"$tmp/after-rotation.json"
out=$(target/debug/sceau-recover inventory --etcd-json "$tmp/after-rotation.json" \
    --current-members "$members_new" --current-recovery-key "$tmp/recovery.pub" 2>&1) || true
if grep -qF 'values name' <<<"$out"; then
    fail inventory-no-stale-after-rewrite "$(grep -F 'values name' <<<"$out" | tr '\n' ' ' | head -c 400)"
else
    pass "inventory-no-stale-after-rewrite ($(tail -n 1 <<<"$out" | tr -s ' '))"
fi
if out=$(target/debug/sceau-recover inventory --etcd-json "$tmp/after-rotation.json" --require-current "$new_key_id" 2>&1); then
    pass "inventory-require-current-after-rotation ($(tail -n 1 <<<"$out"))"
else
    fail inventory-require-current-after-rotation "$(tr '\n' ' ' <<<"$out" | head -c 400)"
fi
read_through_all read-a-after-rotation "$secret_a" "$value_a"
# What the recovery below verifies signatures against: today's members.
members=$members_new

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

# check_recover NAME WHO,WHO FLAG FILE: `sceau-recover recover --share ...
# --share ... --members DIR FLAG FILE > OUT`, with the two custodians' shares,
# succeeds, verifies every envelope's signature against the member files (none
# is reported UNVERIFIED), and OUT names both Secrets and holds both values (as
# written or in base64).
check_recover() {
    local out="$tmp/recovered-$1" err="$tmp/recovered-$1.err" missing=() secret value plaintext found=""
    if ! custody "$2" recover --members "$members" "$3" "$4" >"$out" 2>"$err"; then
        fail "$1" "sceau-recover recover $3 with the shares of $2 exited non-zero: $(head -c 300 "$err" | tr '\n' ' ')"
        return
    fi
    for secret in "$secret_a:$plaintext_a" "$secret_c:$plaintext_c" ${secret_old:+"$secret_old:$plaintext_old"}; do
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
        pass "$1 (no TPM running; shares of ${2/,/ and };${found%;}; stderr: $(tail -n 1 "$err"))"
    else
        fail "$1" "missing from the output: ${missing[*]} ($(wc -c <"$out") bytes out; stderr: $(head -c 200 "$err" | tr '\n' ' '))"
    fi
}
# One share is not enough: refused before the snapshot is read, nothing printed.
one_status=0
custody alice recover --members "$members" --etcd-snapshot "$snapshot" \
    >"$tmp/recovered-one-share" 2>"$tmp/recovered-one-share.err" || one_status=$?
if [ "$one_status" -ne 0 ] && [ ! -s "$tmp/recovered-one-share" ] &&
    grep -qF "shares given: 1 of the 2 that open recovery key $recovery_name; nothing was opened" "$tmp/recovered-one-share.err"; then
    pass "recover-one-share-refused (exit $one_status, nothing on stdout: $(head -n 1 "$tmp/recovered-one-share.err" | head -c 240))"
else
    fail recover-one-share-refused "exit $one_status, $(wc -c <"$tmp/recovered-one-share") bytes out: $(head -c 300 "$tmp/recovered-one-share.err" | tr '\n' ' ')"
fi
check_recover recover-etcd-snapshot alice,bob --etcd-snapshot "$snapshot"
check_recover recover-etcd-json bob,carol --etcd-json "$json"

finish interop-ha
