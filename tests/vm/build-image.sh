#!/usr/bin/env bash
# Builds the cached guest for the VM test: a Debian 12 (bookworm) userland with
# real systemd, the TPM libraries sceau links against, and two Debian cloud
# kernels: bookworm-backports' 6.12 (Landlock ABI 6) and bookworm's own 6.1
# (Landlock ABI 2). The cloud kernels have NVMe, ext4, TPM CRB/TIS and Landlock
# built in, so the guest boots without an initramfs.
#
# With SCEAU_VM_SUITE=trixie, a Debian 13 userland instead (systemd 257,
# tpm2-tss 4.1.3) with trixie's one cloud kernel (6.12, Landlock ABI 6), for
# the same checks on the suite the same .deb also installs on.
#
# Usage (root): tests/vm/build-image.sh OUTDIR
# Writes OUTDIR/base.img (ext4, sparse), OUTDIR/vmlinuz-new, OUTDIR/vmlinuz-old
# (on trixie the same kernel) and OUTDIR/kernels (the kernel versions). No
# loop mount: mkfs.ext4 -d.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-image.sh OUTDIR}
mirror=${SCEAU_VM_MIRROR:-http://deb.debian.org/debian}
secmirror=${SCEAU_VM_SECMIRROR:-http://deb.debian.org/debian-security}

# The package list is also the cache key (scripts/vm-e2e.sh hashes this file).
# - libtss2-*, libssl3, tpm-udev: what sceau_*.deb and sceau-spire_*.deb
#   depend on (tpm2-tss 3.2.1; tpm-udev brings the group tss and the udev rule
#   giving /dev/tpmrm0 0660 root:tss). The guest has no network, so apt
#   installs the .debs with what is already here; a missing dependency makes
#   the install check fail with apt's "unmet dependencies".
# - procps: pidof. linux-image-cloud-amd64: 6.1 here, 6.12 added below.
# - podman (with crun): runs the static pod's OCI image (guest-checks.sh);
#   curl: the kube-apiserver that writes through the pod's socket is called
#   over HTTPS.
# - systemd-journal-remote: systemd-journal-upload ships the journal to a
#   systemd-journal-remote collector over HTTPS, as docs/audit-trail.md
#   configures it (guest-checks.sh, on loopback).
# - on trixie, the same libraries under their 64-bit-time names.
suite=${SCEAU_VM_SUITE:-bookworm}
case $suite in
bookworm)
    packages=systemd,systemd-sysv,udev,kmod,dbus,procps,tpm-udev,libtss2-esys-3.0.2-0,libtss2-tctildr0,libtss2-tcti-device0,libtss2-mu0,libtss2-rc0,libtss2-sys1,libssl3,podman,crun,curl,systemd-journal-remote,linux-image-cloud-amd64
    backports_kernel=linux-image-cloud-amd64
    sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main"
        "deb $secmirror bookworm-security main" "deb $mirror bookworm-backports main")
    kernel_hook=(--chrooted-customize-hook="DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -t bookworm-backports $backports_kernel >/dev/null")
    ;;
trixie)
    packages=systemd,systemd-sysv,udev,kmod,dbus,procps,tpm-udev,libtss2-esys-3.0.2-0t64,libtss2-tctildr0t64,libtss2-tcti-device0t64,libtss2-mu-4.0.1-0t64,libtss2-rc0t64,libtss2-sys1t64,libssl3t64,podman,crun,curl,systemd-journal-remote,linux-image-cloud-amd64
    sources=("deb $mirror trixie main" "deb $mirror trixie-updates main"
        "deb $secmirror trixie-security main")
    kernel_hook=()
    ;;
*)
    echo "SCEAU_VM_SUITE=$suite: bookworm or trixie" >&2
    exit 2
    ;;
esac

rootfs=$(mktemp -d /var/tmp/sceau-vm-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$out"

mmdebstrap --variant=minbase --mode=root --format=directory --skip=check/empty --quiet \
    --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" && echo MODULES=list > "$1/etc/initramfs-tools/conf.d/sceau-vm"' \
    "${kernel_hook[@]}" \
    --customize-hook="bash '$here/guest-setup.sh' \"\$1\"" \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/boot/initrd.img-*' \
    "$suite" "$rootfs" "${sources[@]}"

# bookworm: exactly two kernels, 6.1 and the newer one from backports;
# trixie: its one kernel, as both.
mapfile -t kernels < <(cd "$rootfs/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V)
[ "$suite" = trixie ] && [ "${#kernels[@]}" -eq 1 ] && kernels+=("${kernels[0]}")
[ "${#kernels[@]}" -eq 2 ] || { echo "expected two kernels in the guest, got: ${kernels[*]}" >&2; exit 1; }
cp "$rootfs/boot/vmlinuz-${kernels[0]}" "$out/vmlinuz-old"
cp "$rootfs/boot/vmlinuz-${kernels[1]}" "$out/vmlinuz-new"
printf 'old %s\nnew %s\n' "${kernels[0]}" "${kernels[1]}" >"$out/kernels"
dpkg-query --admindir="$rootfs/var/lib/dpkg" -W -f='${Package} ${Version}\n' systemd 'libtss2-esys-3.0.2-0*' >"$out/versions"
mkfs.ext4 -q -F -L root -E root_owner=0:0 -d "$rootfs" "$out/base.img" 1G
