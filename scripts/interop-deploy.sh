#!/usr/bin/env bash
# The deployment guides (docs/deploy/*.md, docs/ha.md's drop-in), checked by
# the real tools where they run here:
#
#   docs-match-files      every block a page marks `<!-- file: PATH -->` is
#                         byte-identical to PATH, and every file under
#                         docs/deploy/*/ is shown on some page;
#   kubeadm-*             `kubeadm config validate` on the ClusterConfiguration,
#                         and the kube-apiserver static pod kubeadm writes from
#                         it (`kubeadm init phase control-plane apiserver
#                         --dry-run`): flag, hostPath types, read-only mounts;
#                         kubeadm v1.37.2 built from the k8s.io/kubernetes
#                         module the other interop tests use;
#   systemd-dropins-*     `systemd-analyze verify` of the shipped units with
#                         each drop-in, and a negative control (a drop-in
#                         without the `ExecStart=` reset is refused);
#   k0s/rke2/k3s-config-shape  the YAML parses and names the right paths (their
#                         own code does not build here; see the pages);
#   encryption-config-*   the guides' EncryptionConfiguration loaded by a real
#                         kube-apiserver and etcd (the rig of
#                         scripts/interop-apiserver.sh): readyz, a Secret stored
#                         under k8s:enc:kms:v2:sceau: and read back;
#   socket-through-read-only-bind-mount  `sceau check` through a read-only
#                         bind mount of the socket's directory (unshare -m);
#   static-pod-manifest-* packaging/kubernetes/sceau-static-pod.yaml created
#                         with dryRun=All and strict field validation by the
#                         same kube-apiserver; talos-patch-* the Talos patch
#                         carries the same pod.
#
# Prints PASS name / FAIL name: why per check and "N passed, M failed" last;
# exits 1 if a check failed. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh
# python3-yaml parses the guides' YAML; util-linux brings unshare.
SCEAU_PACKAGES+=(python3-yaml util-linux)

deploy=docs/deploy
node_names=("")
start_rig sceau-deploy
build_k8s_tools

# ---------------------------------------------------------------- the pages show the files
check_docs_match_files() {
    local out
    if out=$(python3 - "$deploy" docs/*.md "$deploy"/*.md <<'PY'
import pathlib, re, sys
deploy, pages = pathlib.Path(sys.argv[1]), sys.argv[2:]
marker = re.compile(r"^( *)<!-- file: (\S+) -->$")
problems, shown = [], {}
for page in pages:
    lines = pathlib.Path(page).read_text().split("\n")
    for n, line in enumerate(lines):
        m = marker.match(line)
        if not m:
            continue
        indent, path = m.group(1), m.group(2)
        fence = lines[n + 1] if n + 1 < len(lines) else ""
        if not fence.startswith(indent + "```"):
            problems.append(f"{page}:{n + 1}: the marker for {path} is not followed by a code block")
            continue
        body = []
        for inner in lines[n + 2:]:
            if inner == indent + "```":
                break
            body.append(inner[len(indent):] if inner.startswith(indent) else inner)
        want = pathlib.Path(path).read_text() if pathlib.Path(path).is_file() else None
        if want is None:
            problems.append(f"{page}:{n + 1}: {path} does not exist")
        elif "\n".join(body) + "\n" != want:
            got = body + [None] * len(want.split("\n"))
            first = next(i for i, w in enumerate(want.split("\n")) if got[i] != w)
            problems.append(f"{page}:{n + 1}: the block differs from {path} at its line {first + 1}")
        shown.setdefault(path, []).append(page)
for f in sorted(deploy.glob("*/*")):
    if str(f) not in shown:
        problems.append(f"{f} is not shown on any page")
for p in problems:
    print(p)
print(f"{sum(len(v) for v in shown.values())} blocks on {len({p for v in shown.values() for p in v})} pages show {len(shown)} files")
sys.exit(1 if problems else 0)
PY
    ); then
        pass "docs-match-files ($(tail -n 1 <<<"$out"))"
    else
        fail docs-match-files "$(tr '\n' ';' <<<"$out")"
    fi
}
check_docs_match_files

# ---------------------------------------------------------------- kubeadm
kubeadm_config=$deploy/kubeadm/cluster-configuration.yaml
if out=$("$bin/kubeadm" config validate --config "$kubeadm_config" 2>&1); then
    pass "kubeadm-config-validate (kubeadm $("$bin/kubeadm" version -o short): $(tr '\n' ' ' <<<"$out"))"
else
    fail kubeadm-config-validate "$out"
fi
# The dry run writes the manifest into KUBEADM_INIT_DRYRUN_DIR instead of
# /etc/kubernetes/manifests.
mkdir "$tmp/kubeadm"
if KUBEADM_INIT_DRYRUN_DIR="$tmp/kubeadm" "$bin/kubeadm" init phase control-plane apiserver \
    --config "$kubeadm_config" --dry-run >"$tmp/kubeadm.log" 2>&1 &&
    out=$(python3 - "$tmp/kubeadm/kube-apiserver.yaml" <<'PY'
import sys, yaml
pod = yaml.safe_load(open(sys.argv[1]))
spec, problems = pod["spec"], []
container = spec["containers"][0]
flag = "--encryption-provider-config=/etc/kubernetes/sceau/encryption-config.yaml"
if flag not in container["command"]:
    problems.append(f"no {flag}")
volumes = {v["name"]: v.get("hostPath", {}) for v in spec["volumes"]}
mounts = {m["name"]: m for m in container["volumeMounts"]}
for name, path in (("sceau-socket", "/run/sceau"), ("sceau-encryption-config", "/etc/kubernetes/sceau")):
    hp, m = volumes.get(name, {}), mounts.get(name, {})
    if hp.get("path") != path or hp.get("type") != "Directory":
        problems.append(f"volume {name}: {hp}")
    if m.get("mountPath") != path or m.get("readOnly") is not True:
        problems.append(f"mount {name}: {m}")
print("; ".join(problems) or "flag set; /run/sceau and /etc/kubernetes/sceau: hostPath type Directory, mounted read-only")
sys.exit(1 if problems else 0)
PY
    ); then
    pass "kubeadm-static-pod-mounts ($out)"
else
    fail kubeadm-static-pod-mounts "${out:-$(tail -n 5 "$tmp/kubeadm.log" | tr '\n' ' ')}"
fi

# ---------------------------------------------------------------- systemd drop-ins
# A throwaway root holding the distribution's units, the shipped sceau units
# and the built binary as /usr/sbin/sceau, as scripts/check-units.sh does.
units_root="$tmp/units-root"
mkdir -p "$units_root/etc/systemd/system" "$units_root/usr/lib/systemd/system" "$units_root/usr/sbin"
for dir in /lib/systemd/system /usr/lib/systemd/system; do
    [ -d "$dir" ] && cp -a "$dir/." "$units_root/usr/lib/systemd/system/"
done
cp systemd/sceau.socket systemd/sceau.service "$units_root/etc/systemd/system/"
cp target/debug/sceau "$units_root/usr/sbin/sceau"
# ExecReload= runs /bin/kill, which verify wants executable in the root too.
mkdir -p "$units_root/bin"
cp "$(type -P kill)" "$units_root/bin/kill"
# A stand-in for the distribution's service (kubelet, k0scontroller, rke2-server, k3s).
printf '[Service]\nExecStart=/usr/sbin/sceau --version\n' >"$units_root/etc/systemd/system/kubernetes.service"
# verify_dropins NAME UNIT:FILE...: each FILE installed as a drop-in of UNIT
# (APISERVER_UID replaced by a number); systemd-analyze verify must pass and
# print nothing. Returns 1 if it did not.
verify_dropins() {
    local name=$1 item unit file out rc=0
    shift
    rm -rf "$units_root"/etc/systemd/system/*.d
    for item in "$@"; do
        unit=${item%%:*} file=${item#*:}
        mkdir -p "$units_root/etc/systemd/system/$unit.d"
        sed 's/APISERVER_UID/990/' "$file" >"$units_root/etc/systemd/system/$unit.d/$(basename "$file")"
    done
    out=$(systemd-analyze verify --root="$units_root" sceau.socket sceau.service kubernetes.service 2>&1) || rc=$?
    verify_output=$out
    [ "$rc" -eq 0 ] && [ -z "$out" ]
}
sd=$deploy/systemd
for case in "cluster-mode:sceau.service:$sd/cluster-mode.conf" \
    "non-root-apiserver:sceau.socket:$sd/socket-for-non-root-apiserver.conf sceau.service:$sd/service-for-non-root-apiserver.conf" \
    "after-sceau:kubernetes.service:$sd/after-sceau.conf"; do
    name=${case%%:*}
    # shellcheck disable=SC2086 # the case lists its UNIT:FILE pairs separated by spaces
    if verify_dropins "$name" ${case#*:}; then
        pass "systemd-dropins-verify-$name ($(systemd-analyze --version | head -n 1 | cut -d' ' -f1-2): clean)"
    else
        fail "systemd-dropins-verify-$name" "$verify_output"
    fi
done
# Negative control: the cluster drop-in without its `ExecStart=` reset line.
grep -v '^ExecStart=$' "$sd/cluster-mode.conf" >"$tmp/no-reset.conf"
if verify_dropins no-reset "sceau.service:$tmp/no-reset.conf"; then
    fail systemd-dropins-refuse-missing-reset "systemd-analyze verify accepted a second ExecStart= without the reset"
else
    pass "systemd-dropins-refuse-missing-reset ($(grep -m1 -o 'more than one ExecStart=[^.]*' <<<"$verify_output" || echo refused))"
fi

# ---------------------------------------------------------------- k0s, RKE2, k3s: shape only
# check_shape NAME FILE PYTHON: PYTHON sees the parsed YAML as `c` and prints
# what is wrong, if anything.
check_shape() {
    local out
    if out=$(python3 -c "
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
problems = []
$3
print('; '.join(problems))
sys.exit(1 if problems else 0)
" "$2" 2>&1); then
        pass "$1 ($2 parses; the fields this guide uses are where it says)"
    else
        fail "$1" "$out"
    fi
}
check_shape k0s-config-shape "$deploy/k0s/k0s.yaml" '
if c.get("apiVersion") != "k0s.k0sproject.io/v1beta1" or c.get("kind") != "ClusterConfig":
    problems.append("apiVersion/kind")
args = c.get("spec", {}).get("api", {}).get("extraArgs", {})
if not isinstance(args, dict) or any(not isinstance(v, str) for v in args.values()):
    problems.append("spec.api.extraArgs is not a map of strings")
elif args.get("encryption-provider-config") != "/etc/k0s/sceau/encryption-config.yaml":
    problems.append("encryption-provider-config")'
for dist in rke2 k3s; do
    check_shape "$dist-config-shape" "$deploy/$dist/config.yaml" "
args = c.get('kube-apiserver-arg', [])
if not isinstance(args, list) or any(not isinstance(a, str) or '=' not in a for a in args):
    problems.append('kube-apiserver-arg is not a list of name=value')
elif 'encryption-provider-config=/etc/rancher/$dist/sceau/encryption-config.yaml' not in args:
    problems.append('encryption-provider-config')
for m in c.get('kube-apiserver-extra-mount', []):
    if len(m.split(':')) != 3 or m.split(':')[2] != 'ro':
        problems.append('extra mount ' + m)
if '$dist' == 'rke2' and '/run/sceau:/run/sceau:ro' not in c.get('kube-apiserver-extra-mount', []):
    problems.append('no /run/sceau mount')"
done

# ---------------------------------------------------------------- the EncryptionConfiguration, live
start_etcd
start_swtpms
start_sceaus
encryption_config_file=$deploy/kubeadm/encryption-config.yaml
start_apiservers
check_readyz 0 encryption-config-readyz
plaintext="sceau-deploy-$(openssl rand -hex 12)"
value=$(printf %s "$plaintext" | base64 -w0)
create_namespace 0
create_secret 0 encryption-config-create sceau-deploy-secret "$value"
check_etcd_raw encryption-config-etcd sceau-deploy-secret "$plaintext"
check_read 0 encryption-config-read sceau-deploy-secret "$value"

# ---------------------------------------------------------------- readOnly: true on the socket's directory
socket=$(node_file 0 kms sock)
mkdir "$tmp/pod-view"
if out=$(unshare -m sh -c 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" &&
    if touch "$2/probe" 2>/dev/null; then echo "the mount is writable"; exit 1; fi &&
    "$3" check --socket "$2/$4"' sh "$(dirname "$socket")" "$tmp/pod-view" "$PWD/target/debug/sceau" "$(basename "$socket")" 2>&1); then
    pass "socket-through-read-only-bind-mount ($(head -n 1 <<<"$out"))"
else
    fail socket-through-read-only-bind-mount "$(tr '\n' ' ' <<<"$out")"
fi

# ---------------------------------------------------------------- the static pod manifest, server-side dry run
# packaging/kubernetes/sceau-static-pod.yaml as kube-apiserver validates and
# admits it (the kubelet makes its mirror pod the same way): created with
# dryRun=All, so nothing is stored. The namespace's default ServiceAccount,
# which the controller manager would make, is made first for admission.
pod_json=$(python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' packaging/kubernetes/sceau-static-pod.yaml)
apicurl 0 POST /api/v1/namespaces/kube-system/serviceaccounts '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' >/dev/null
out=$(apicurl 0 POST '/api/v1/namespaces/kube-system/pods?dryRun=All&fieldValidation=Strict' "$pod_json")
if [ "$(tail -n 1 <<<"$out")" = 201 ]; then
    pass "static-pod-manifest-dry-run (HTTP 201, strict field validation; $(sed '$d' <<<"$out" | python3 -c 'import json, sys; p = json.load(sys.stdin); c = p["spec"]["containers"][0]; print("priority", p["spec"].get("priority"), "runAsUser", p["spec"]["securityContext"]["runAsUser"], "readOnlyRootFilesystem", c["securityContext"]["readOnlyRootFilesystem"])'))"
else
    fail static-pod-manifest-dry-run "HTTP $(tail -n 1 <<<"$out"): $(sed '$d' <<<"$out" | head -c 400)"
fi
# The negative control: one field name misspelt, as a hand edit would.
typo_json=${pod_json/readOnlyRootFilesystem/readOnlyRootFilesytem}
out=$(apicurl 0 POST '/api/v1/namespaces/kube-system/pods?dryRun=All&fieldValidation=Strict' "$typo_json")
if [ "$(tail -n 1 <<<"$out")" = 400 ] && grep -q readOnlyRootFilesytem <<<"$out"; then
    pass "static-pod-manifest-dry-run-refuses-a-misspelt-field (HTTP 400 naming readOnlyRootFilesytem)"
else
    fail static-pod-manifest-dry-run-refuses-a-misspelt-field "HTTP $(tail -n 1 <<<"$out"): $(sed '$d' <<<"$out" | head -c 300)"
fi
out=$(apicurl 0 GET /api/v1/namespaces/kube-system/pods/sceau)
if [ "$(tail -n 1 <<<"$out")" = 404 ]; then
    pass "static-pod-manifest-dry-run-stores-nothing (GET after it: HTTP 404)"
else
    fail static-pod-manifest-dry-run-stores-nothing "HTTP $(tail -n 1 <<<"$out")"
fi
# The Talos patch carries the same pod.
if out=$(python3 - <<'EOF' 2>&1
import yaml
pod = yaml.safe_load(open("packaging/kubernetes/sceau-static-pod.yaml"))
patch = yaml.safe_load(open("packaging/kubernetes/talos-patch.yaml"))
pods = patch["machine"]["pods"]
assert pods == [pod], "machine.pods is not the static pod manifest"
print("machine.pods holds the manifest's pod")
EOF
); then
    pass "talos-patch-carries-the-pod ($out)"
else
    fail talos-patch-carries-the-pod "$out"
fi

finish interop-deploy
