#!/usr/bin/env bash
# Builds the OCI image of sceau for static pods, from this tree and the
# build host's own libraries, with no base image (nothing can be pulled):
#   target/oci/sceau-oci/       an OCI image layout (oci-layout, index.json,
#                               blobs/sha256/…), `podman run oci:DIR`
#   target/oci/sceau-oci.tar    the same as one archive, `podman load -i`
#                               or `podman run oci-archive:FILE`
#
# The one layer holds /usr/sbin/sceau (stripped), the shared libraries it
# links and the TCTI library tpm2-tss opens at run time for device:
# (libtss2-tcti-device.so.0), each at its path on Debian 12, with the
# libraries they link in turn; /etc/passwd and /etc/group naming root and
# the image's user sceau (65532); /run/sceau and /var/lib/sceau, owned by
# it, as the mount points of the socket and state directories. No shell,
# no package manager, nothing else. The image config runs `sceau serve` as
# 65532:65532 on /run/sceau/kms.sock and device:/dev/tpmrm0; a read-only
# root and no capabilities are the pod's settings
# (packaging/kubernetes/sceau-static-pod.yaml), as an image config has no
# field for them.
#
# Then checks what it built: the layer's exact file list with owners and
# modes, the config (user, entrypoint, no shell), digests of every blob
# against the index and manifest, and the daemon started inside the
# unpacked layer with chroot (`sceau --version`: every library resolves
# from the image alone).
#
# Usage: scripts/package-oci.sh [OUTDIR]      (default target/oci)
#   SCEAU_OCI_NO_BUILD=1 packages target/release as it is (no cargo build).
# Prints "PASS name" / "FAIL name: why" and "N passed, M failed" last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

outdir=${1:-target/oci}
SCEAU_PACKAGES+=(binutils gzip tar coreutils python3)
install_packages
require_cargo

count_checks

version=$(package_version)
if [ -z "${SCEAU_OCI_NO_BUILD:-}" ]; then
    echo "== cargo build --release --locked -p sceau -p sceau-recover"
    cargo build --release --locked --quiet -p sceau -p sceau-recover
fi
# The image's user: the uid distroless images use for "nonroot", far from
# any distribution's system or login range.
uid=65532
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d "$PWD/target/oci-tree.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root/usr/sbin" "$root/etc" "$root/run/sceau" "$root/var/lib/sceau"
install -m 0755 target/release/sceau "$root/usr/sbin/sceau"
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$root/usr/sbin/sceau"

# The libraries: what the daemon links, and what the device TCTI links,
# found by the build host's loader, copied to the same paths (the loader
# itself included), resolved through symbolic links to the files.
tcti=$(ldconfig -p | awk '/libtss2-tcti-device\.so\.0 .*x86-64/ { print $NF; exit }')
[ -n "$tcti" ] || {
    echo "package-oci: libtss2-tcti-device.so.0 is not installed (apt-get install libtss2-tcti-device0)" >&2
    exit 1
}
libraries() { # FILE...: every library path ldd resolves for FILE
    ldd "$@" | awk '/=> \// { print $3 } /^\t\/[^ ]*ld-linux/ { print $1 }' | sort -u
}
mapfile -t libs < <(libraries target/release/sceau "$tcti"; echo "$tcti")
for lib in $(printf '%s\n' "${libs[@]}" | sort -u); do
    real=$(readlink -f "$lib")
    install -D -m 0644 "$real" "$root$real"
    [ "$real" = "$lib" ] || { mkdir -p "$root$(dirname "$lib")"; ln -sfn "$real" "$root$lib"; }
done
# The loader is executable, at the path the binary names (PT_INTERP).
interp=$(readelf -l target/release/sceau | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
chmod 0755 "$root$(readlink -f "$interp")"
[ -e "$root$interp" ] || [ -L "$root$interp" ] || { mkdir -p "$root$(dirname "$interp")"; ln -s "$(readlink -f "$interp")" "$root$interp"; }

cat >"$root/etc/passwd" <<EOF
root:x:0:0:root:/nonexistent:/nonexistent
sceau:x:$uid:$uid:sceau Kubernetes KMS plugin:/var/lib/sceau:/nonexistent
EOF
cat >"$root/etc/group" <<EOF
root:x:0:
sceau:x:$uid:
EOF
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chown "$uid:$uid" "$root/run/sceau" "$root/var/lib/sceau"
chmod 0755 "$root/run/sceau"
chmod 0700 "$root/var/lib/sceau"
find "$root" -exec touch --no-dereference -d "@$SOURCE_DATE_EPOCH" {} +

# --- the image: layer, config, manifest, index --------------------------------
layout=$outdir/sceau-oci
rm -rf "$layout" "$outdir/sceau-oci.tar"
mkdir -p "$layout/blobs/sha256"
blob() { # FILE: moves FILE into the blobs as its digest; prints "DIGEST SIZE"
    local digest size
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    size=$(stat -c %s "$1")
    mv "$1" "$layout/blobs/sha256/$digest"
    echo "$digest $size"
}
tar --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$root" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -9n "$work/layer.tar"
read -r layer_digest layer_size < <(blob "$work/layer.tar.gz")

cat >"$work/config.json" <<EOF
{"created":"$created","architecture":"amd64","os":"linux","config":{"User":"$uid:$uid","Entrypoint":["/usr/sbin/sceau","serve"],"Cmd":["--socket","/run/sceau/kms.sock","--tcti","device:/dev/tpmrm0","--state-dir","/var/lib/sceau"],"WorkingDir":"/","StopSignal":"SIGTERM","Labels":{"org.opencontainers.image.title":"sceau","org.opencontainers.image.version":"$version","org.opencontainers.image.description":"Kubernetes KMS v2 plugin that seals DEKs with the TPM 2.0"}},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created":"$created","created_by":"scripts/package-oci.sh"}]}
EOF
read -r config_digest config_size < <(blob "$work/config.json")
cat >"$work/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config_digest","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer_digest","size":$layer_size}]}
EOF
read -r manifest_digest manifest_size < <(blob "$work/manifest.json")
cat >"$layout/index.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest_digest","size":$manifest_size,"annotations":{"org.opencontainers.image.ref.name":"localhost/sceau:$version"}}]}
EOF
echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
find "$layout" -exec touch --no-dereference -d "@$SOURCE_DATE_EPOCH" {} +
tar --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$layout" -cf "$outdir/sceau-oci.tar" .
echo "== image sha256:$manifest_digest, layer $((layer_size / 1024)) KiB compressed, $(($(du -sk "$root" | cut -f1))) KiB unpacked"

# --- checks ---------------------------------------------------------------------
# Every blob is what the index and manifest say.
python3 - "$layout" <<'EOF' && pass "index, manifest, config and layer: every digest and size matches its blob" || fail "OCI layout" "a digest or size does not match (above)"
import hashlib, json, os, sys
layout = sys.argv[1]
def blob(desc):
    path = os.path.join(layout, "blobs", *desc["digest"].split(":"))
    data = open(path, "rb").read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"], desc
    assert len(data) == desc["size"], desc
    return data
index = json.load(open(os.path.join(layout, "index.json")))
for m in index["manifests"]:
    manifest = json.loads(blob(m))
    config = json.loads(blob(manifest["config"]))
    for layer in manifest["layers"]:
        blob(layer)
    assert config["config"]["User"] != "" and not config["config"]["User"].startswith("0"), config
EOF
expected=$(cd "$root" && find . -mindepth 1 \( -type f -o -type l -o -type d \) -printf '%M %u:%g %p\n' | sort)
listed=$(tar -tvzf "$layout/blobs/sha256/$layer_digest" --numeric-owner | awk '{ split($2, o, "/"); p = $6; sub(/\/$/, "", p); print $1, o[1] ":" o[2], p }' | grep -v ' \.$' | sort)
got_files=$(awk '{ print $3 }' <<<"$listed" | grep -E '^\./(usr/sbin/sceau|etc/(passwd|group)|run/sceau|var/lib/sceau)$' | sort | tr '\n' ' ')
others=$(awk '{ print $3 }' <<<"$listed" | grep -vE '^\./(usr/sbin/sceau|etc/(passwd|group)|run/sceau|var/lib/sceau|(usr/)?lib(64|/x86_64-linux-gnu)?(/.*)?|usr|usr/sbin|etc|run|var|var/lib)$' || true)
if [ -z "$others" ] && [ "$got_files" = "./etc/group ./etc/passwd ./run/sceau ./usr/sbin/sceau ./var/lib/sceau " ]; then
    pass "the layer holds sceau, $(grep -cE '\.so' <<<"$listed") library entries, passwd, group and the two mount points, nothing else (no shell)"
else
    fail "layer contents" "unexpected: ${others//$'\n'/ }; found: $got_files"
fi
owners=$(for d in run/sceau var/lib/sceau; do grep -E " \./$d\$" <<<"$listed" | awk '{ print $1, $2 }'; done | tr '\n' ';')
if [ "$owners" = "drwxr-xr-x $uid:$uid;drwx------ $uid:$uid;" ]; then
    pass "/run/sceau 0755 and /var/lib/sceau 0700, owned by the image's user $uid"
else
    fail "mount points" "$owners"
fi
if [ "$(grep -c ' 0:0 \|root:root' <<<"$listed" || true)" -gt 0 ] && ! grep -qE '^-..[sS]|^-.....[sS]' <<<"$listed"; then
    pass "no setuid or setgid file"
else
    fail "setuid" "$(grep -E '^-..[sS]|^-.....[sS]' <<<"$listed" | head -n 3 | tr '\n' ';')"
fi
check_root=$work/unpacked
mkdir -p "$check_root"
tar -C "$check_root" -xzf "$layout/blobs/sha256/$layer_digest"
if out=$(chroot --userspec="$uid:$uid" "$check_root" /usr/sbin/sceau --version 2>&1); then
    pass "the daemon starts inside the layer alone, as $uid ($(head -n 1 <<<"$out"))"
else
    fail "sceau --version in the layer" "$out"
fi
if out=$(chroot "$check_root" /bin/sh -c true 2>&1); then
    fail "no shell" "/bin/sh ran in the layer"
else
    pass "no shell in the image (chroot /bin/sh: ${out##*: })"
fi
echo "built: $layout"
echo "built: $outdir/sceau-oci.tar"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
