#!/usr/bin/env bash
# sceau under real systemd with a kernel TPM, in a VM.
#
# Builds the Debian packages (scripts/package-deb.sh: cargo build --release
# --locked, dpkg-deb), boots a small Debian 12 guest under qemu with a
# swtpm-backed TPM 2.0 (tpm-crb, so the guest's kernel driver makes /dev/tpm0
# and /dev/tpmrm0), installs sceau_*.deb there with apt and nothing else, and
# checks what postinst did (units enabled and started), READY=1, a client
# round trip, the live sandbox, the unit's exposure score, an upgrade, socket
# activation, crash recovery, and that a purge leaves no file behind. The
# guest prints PASS/FAIL lines on its serial console and powers itself off;
# this script prints them and "N passed, M failed" last.
#
# Two boots of the same image: kernel "new" (bookworm-backports 6.12, Landlock
# ABI 6, the real ruleset enforced) and kernel "old" (bookworm 6.1, Landlock
# ABI 2, what sceau does on an older ABI). SCEAU_VM_KERNELS="new" boots one.
# Then two boots for boot-state binding (tests/vm/guest-binding.sh): UEFI
# firmware (OVMF) that measures the Secure Boot state into PCR 7, one disk
# and one swtpm state kept across them, so the second is a reboot of the
# first. A fifth boot, "secboot", through OVMF with Secure Boot enforced
# (Debian's snakeoil keys enrolled, the kernel re-signed with the snakeoil
# key): measured boot on the firmware's own event log
# (tests/vm/guest-firmware.sh, which bind1 runs too, with Secure Boot off).
# SCEAU_VM_BINDING=0 leaves out these three. A last boot, "trixie", runs the
# same checks as "new" in a Debian 13 guest (systemd 257, tpm2-tss 4.1.3,
# kernel 6.12), from the same .deb; SCEAU_VM_TRIXIE=0 leaves it out.
#
# The guest image is cached in $SCEAU_VM_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/sceau-vm), keyed by a hash of the scripts that
# build it (they hold the package list); a warm run only rebuilds the payload
# disk (the .debs, the units to compare with, the checks). Serial logs go to
# target/vm-e2e/.
#
# Exit status: 0 when every check passed, 1 otherwise (a FAIL or a timeout).
# Exits 0 with one "SKIP: ..." line only when qemu cannot start on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/lib.sh

t_start=$SECONDS
kernels=${SCEAU_VM_KERNELS-new old}
binding=${SCEAU_VM_BINDING:-1}
trixie=${SCEAU_VM_TRIXIE:-1}
# Debian's ovmf package: UEFI without Secure Boot, with the TPM 2.0 support
# that measures into PCRs 0-7 (SeaBIOS puts only a separator into PCR 7).
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd
# The same firmware built with Secure Boot (which needs SMM, so that only
# the firmware can write the variable store), and a variable store with
# Debian's "snakeoil" test certificate enrolled as PK, KEK and db. The
# package ships the certificate's private key, for testers to sign images
# with; its passphrase is in the package's README.Debian.
ovmf_secboot_code=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd
ovmf_snakeoil_vars=/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd
snakeoil_key=/usr/share/ovmf/PkKek-1-snakeoil.key
snakeoil_cert=/usr/share/ovmf/PkKek-1-snakeoil.pem
# The guest's bound on its checks (install, serve, upgrade, purge), passed
# through the kernel command line (systemd.setenv=) to its runner; the host's
# bound on the whole boot leaves two minutes around it for boot and poweroff.
# Under TCG on a loaded 2-core machine the boot alone took 60 s.
guest_timeout=${SCEAU_VM_GUEST_TIMEOUT:-420}
boot_timeout=${SCEAU_VM_BOOT_TIMEOUT:-$((guest_timeout + 120))}
logdir=$repo/target/vm-e2e
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# --- prerequisites: installed, never skipped --------------------------------
# sbsigntool (and openssl, for the key) signs the kernel for the Secure Boot
# boot; pesign computes its Authenticode hash, which the firmware measures.
SCEAU_PACKAGES+=(mmdebstrap debian-archive-keyring qemu-system-x86 swtpm e2fsprogs coreutils ovmf sbsigntool pesign openssl)
install_packages
require_cargo

echo "== building the packages (scripts/package-deb.sh; the daemon's cargo build is scripts/size.sh's)"
t0=$SECONDS
debdir=$repo/target/debian
mkdir -p "$logdir"
bash scripts/package-deb.sh "$debdir" >"$logdir/package.log" 2>&1 || {
    cat "$logdir/package.log" >&2
    echo "FAIL packages: scripts/package-deb.sh failed (log above)"
    echo "0 passed, 1 failed"
    exit 1
}
grep -E '^(SKIP|man pages:|==) ' "$logdir/package.log" || true
mapfile -t debs < <(sed -n 's/^built: //p' "$logdir/package.log")
# The static pod's image, from the same release build (package-deb.sh's).
SCEAU_OCI_NO_BUILD=1 bash scripts/package-oci.sh "$repo/target/oci" >"$logdir/oci.log" 2>&1 || {
    cat "$logdir/oci.log" >&2
    echo "FAIL image: scripts/package-oci.sh failed (log above)"
    echo "0 passed, 1 failed"
    exit 1
}
# The SPIRE agent's TPM work through the guest's /dev/tpmrm0: a
# test-only example, debug build (the test step has built it), stripped.
cargo build --locked --quiet -p sceau-spire --example attest_once
# The boot-binding boots keep an envelope across the reboot with it.
cargo build --locked --quiet -p sceau-testkit --example kms_envelope
t_cargo=$((SECONDS - t0))

# --- the cached guest images -------------------------------------------------
cache_root=${SCEAU_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sceau-vm}
# guest_image SUITE: the image's cache directory in $image_dir, built if
# missing; its key is a hash of the scripts that build it and the suite.
guest_image() {
    local suite=$1 key building
    key=$( (cat tests/vm/build-image.sh tests/vm/guest-setup.sh; echo "$suite") | sha256sum | cut -c1-16)
    image_dir=$cache_root/$key
    keys+=("$key")
    if [ -s "$image_dir/base.img" ] && [ -s "$image_dir/vmlinuz-new" ] && [ -s "$image_dir/vmlinuz-old" ]; then
        echo "== guest image $suite: cached ($image_dir)"
        return 0
    fi
    echo "== guest image $suite: building ($image_dir, a minute or two)"
    mkdir -p "$cache_root"
    building=$(mktemp -d "$cache_root/.build.XXXXXX")
    if ! $sudo env SCEAU_VM_SUITE="$suite" bash tests/vm/build-image.sh "$building" >"$building.log" 2>&1; then
        tail -n 30 "$building.log" >&2
        rm -rf "$building" "$building.log"
        echo "FAIL guest image $suite: tests/vm/build-image.sh failed (log above)"
        echo "0 passed, 1 failed"
        exit 1
    fi
    rm -f "$building.log"
    mv "$building" "$image_dir"
    image_state=cold
}
t0=$SECONDS
image_state=warm
keys=()
guest_image bookworm
cache=$image_dir
if [ "$trixie" != 0 ]; then
    guest_image trixie
    cache_trixie=$image_dir
fi
# Images under older keys are dead weight (about 400 MB each).
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype egrep -regex '.*/[0-9a-f]{16}' |
    while read -r dir; do
        case " ${keys[*]} " in *" ${dir##*/} "*) ;; *) rm -rf "$dir" ;; esac
    done
t_image=$((SECONDS - t0))
read -r _ kernel_old < <(grep '^old ' "$cache/kernels")
read -r _ kernel_new < <(grep '^new ' "$cache/kernels")

# --- accelerator: KVM only when the CPU really has VMX/SVM -------------------
if [ -w /dev/kvm ] && grep -qE '\b(vmx|svm)\b' /proc/cpuinfo; then
    accel=(-accel kvm -cpu host)
else
    # -cx16: under QEMU 7.2's TCG (Debian 12), the 6.12 kernel's SLUB fast path
    # (cmpxchg16b on a %gs address) double-faults at boot, every time, with
    # -cpu max or EPYC and with one or many TCG threads. Without CX16 the kernel
    # takes its generic fallback and boots.
    accel=(-accel "tcg,thread=multi,tb-size=256" -cpu "${SCEAU_VM_CPU:-max,-cx16}")
fi

# qemu must be able to start at all (the one reason to skip): paused (-S), it
# should still be running when timeout stops it.
qemu_rc=0
qemu_err=$(timeout 2 qemu-system-x86_64 -machine q35 "${accel[@]}" -nodefaults -display none \
    -monitor none -serial none -S 2>&1 </dev/null) || qemu_rc=$?
if [ "$qemu_rc" -ne 124 ]; then
    echo "SKIP: qemu-system-x86_64 cannot start on this machine (exit $qemu_rc): $(echo "$qemu_err" | head -1)"
    exit 0
fi

work=$(mktemp -d /tmp/sceau-vm.XXXXXX)
swtpm_pid=""
cleanup() {
    local status=$?
    set +e
    [ -n "$swtpm_pid" ] && kill "$swtpm_pid" 2>/dev/null && wait "$swtpm_pid" 2>/dev/null
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the payload disk: the packages, the repo's units, the checks ------------
mkdir -p "$work/payload/units"
install -m 0644 target/oci/sceau-oci.tar packaging/kubernetes/sceau-cdi.yaml "$work/payload/"
install -m 0644 "${debs[@]}" tests/vm/guest-lib.sh tests/vm/guest-checks.sh tests/vm/guest-binding.sh tests/vm/guest-firmware.sh "$work/payload/"
# The units as the repository has them, to compare with what the package
# installed.
install -m 0644 systemd/*.socket systemd/*.service "$work/payload/units/"
strip -o "$work/payload/attest_once" target/debug/examples/attest_once
strip -o "$work/payload/kms_envelope" target/debug/examples/kms_envelope
# TLS for shipping the journal (guest-checks.sh): a CA, the collector's
# certificate for localhost and 127.0.0.1 and the node's client certificate, as
# docs/audit-trail.md has an operator make them. The guest has no openssl.
journal_tls() { # DIR
    local dir=$1 name
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=sceau-vm-log-ca -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null || return 1
    for name in collector node; do
        openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
            -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null &&
            openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                -days 2 -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n') \
                -out "$dir/$name.pem" 2>/dev/null || return 1
    done
    # A CA that signed nothing here: what an upload to an impostor trusts.
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=another-ca -keyout /dev/null -out "$dir/other-ca.pem" 2>/dev/null || return 1
    rm -f "$dir/ca.key" "$dir"/*.csr
}
journal_tls "$work/payload/journal-tls" || echo "INFO could not make the journal-shipping certificates; the guest's check will say so"
# QEMU does not hand OVMF the -kernel file as it is, but a copy with four
# fields of the bzImage setup header filled in, as for any boot loader
# (x86_load_linux: type_of_loader, the CAN_USE_HEAP flag, heap_end_ptr,
# cmd_line_ptr). They lie inside the PE headers the Authenticode hash
# covers, so a signature over the file fails the firmware's check, and
# OVMF (2022.11) then boots the kernel with its legacy loader, which neither
# verifies nor measures it. The same four values are written here first
# (QEMU writing them again changes nothing): the signature then holds, and
# the hash is the one the firmware measures. The values are QEMU's for a
# boot protocol >= 2.02 kernel loaded high (real-mode code at 0x10000, the
# command line at 0x20000).
qemu_setup_header() { # FILE
    local protocol flags
    protocol=$(od -An -tu2 -j518 -N2 "$1" | tr -d ' ')
    flags=$(od -An -tu1 -j529 -N1 "$1" | tr -d ' ')
    [ "$protocol" -ge $((0x202)) ] && [ $((flags & 1)) = 1 ] || {
        echo "the kernel's boot protocol 0x$(printf %x "$protocol"), loadflags 0x$(printf %x "$flags"): not the layout QEMU's values are known for"
        return 1
    }
    printf '\xb0' | dd of="$1" bs=1 seek=$((0x210)) conv=notrunc status=none
    printf '%b' "\\x$(printf %02x $((flags | 0x80)))" | dd of="$1" bs=1 seek=$((0x211)) conv=notrunc status=none
    printf '\x00\xfe' | dd of="$1" bs=1 seek=$((0x224)) conv=notrunc status=none
    printf '\x00\x00\x02\x00' | dd of="$1" bs=1 seek=$((0x228)) conv=notrunc status=none
}
sign_kernel() {
    cp "$cache/vmlinuz-new" "$work/vmlinuz-unsigned"
    sbattach --remove "$work/vmlinuz-unsigned" 2>/dev/null || true
    qemu_setup_header "$work/vmlinuz-unsigned" &&
        openssl pkey -in "$snakeoil_key" -passin pass:snakeoil -out "$work/snakeoil.key" &&
        sbsign --key "$work/snakeoil.key" --cert "$snakeoil_cert" \
            --output "$work/vmlinuz-secboot" "$work/vmlinuz-unsigned" &&
        sbverify --cert "$snakeoil_cert" "$work/vmlinuz-secboot" || return 1
    local unsigned signed
    unsigned=$(pesign -h -i "$work/vmlinuz-unsigned" | sed -n 's/^hash: //p')
    signed=$(pesign -h -i "$work/vmlinuz-secboot" | sed -n 's/^hash: //p')
    echo "Authenticode SHA-256 as QEMU hands the kernel over: $unsigned; signed with the snakeoil key: $signed"
    [ -n "$unsigned" ] && [ "$signed" = "$unsigned" ] || return 1
    echo "$unsigned" >"$work/payload/kernel-authenticode"
}
if [ "$binding" != 0 ]; then
    # Secure Boot verifies the -kernel image against db: the cached kernel
    # with Debian's signature (whose CA is not in the snakeoil db) replaced
    # by one made with the snakeoil key. Its Authenticode hash, which
    # signing leaves alone and which the firmware measures into PCR 4 as it
    # loads the image (the same in the bind boots, whose unsigned copy QEMU
    # fills in the same way), goes to the guest to compare with the
    # boot_app selector.
    sign_kernel >"$logdir/sbsign.log" 2>&1 || {
        cat "$logdir/sbsign.log" >&2
        echo "FAIL secboot kernel: signing with the snakeoil key failed (log above)"
        echo "0 passed, 1 failed"
        exit 1
    }
fi
# kube-apiserver and etcd for the "new" guest, which makes them write a
# Secret through the static pod's socket: the interop scripts' build,
# cached by version (built here if missing), and a throwaway PKI.
if [ "${SCEAU_VM_APISERVER:-1}" != 0 ]; then
    (
        source scripts/lib-apiserver.sh
        require_go
        build_go_binaries >"$logdir/k8s-build.log" 2>&1 || { cat "$logdir/k8s-build.log" >&2; exit 1; }
        mkdir -p "$work/payload/k8s"
        cp "$bin/kube-apiserver" "$bin/etcd" "$bin/etcdget" "$work/payload/k8s/"
        tmp=$work/k8s-pki
        mkdir -p "$tmp"
        make_pki
        cp "$pki/ca.crt" "$pki/apiserver.crt" "$pki/apiserver.key" "$pki/sa.key" "$pki/tokens.csv" "$work/payload/k8s/"
    ) || {
        echo "FAIL kube-apiserver for the guest: the build or the PKI failed (log above)"
        echo "0 passed, 1 failed"
        exit 1
    }
fi
size_mb=$(($(du -sm "$work/payload" | cut -f1) + 32))
mkfs.ext4 -q -F -L payload -E root_owner=0:0 -d "$work/payload" "$work/payload.img" "${size_mb}M"

mkdir -p "$logdir"
passed=0
failed=0
report=()
record() { # LINE
    report+=("$1")
    case $1 in
    PASS*) passed=$((passed + 1)) ;;
    FAIL*) failed=$((failed + 1)) ;;
    esac
}

boot() { # NAME (new|old|bind1|bind2|secboot|trixie)
    local kind=$1 kernel version serial qerr rc t0 tpmstate kernel_file machine=q35
    local root="file=$cache/base.img,if=none,id=root,format=raw,snapshot=on" firmware=() phase=""
    kernel=$kind
    kernel_file=$cache/vmlinuz-$kind
    tpmstate=$work/tpm-$kind
    case $kind in
    trixie)
        kernel=trixie
        kernel_file=$cache_trixie/vmlinuz-new
        root="file=$cache_trixie/base.img,if=none,id=root,format=raw,snapshot=on"
        ;;
    bind*)
        # One machine booted twice: its own copy of the disk (sparse, about
        # a second), one NVRAM for OVMF's variables, one TPM state.
        kernel=new
        kernel_file=$cache/vmlinuz-new
        phase=" sceau_vm.phase=$kind"
        tpmstate=$work/tpm-bind
        [ -e "$work/bind-root.img" ] || cp --sparse=always "$cache/base.img" "$work/bind-root.img"
        [ -e "$work/bind-vars.fd" ] || cp "$ovmf_vars" "$work/bind-vars.fd"
        root="file=$work/bind-root.img,if=none,id=root,format=raw"
        firmware=(-drive "if=pflash,format=raw,unit=0,readonly=on,file=$ovmf_code"
            -drive "if=pflash,format=raw,unit=1,file=$work/bind-vars.fd")
        ;;
    secboot)
        # Its own throwaway disk (snapshot), variable store and TPM. SMM on,
        # and the flash only writable from SMM, as the Secure Boot build
        # requires.
        kernel=new
        kernel_file=$work/vmlinuz-secboot
        phase=" sceau_vm.phase=$kind"
        machine=q35,smm=on
        cp "$ovmf_snakeoil_vars" "$work/secboot-vars.fd"
        firmware=(-global 'driver=cfi.pflash01,property=secure,value=on'
            -drive "if=pflash,format=raw,unit=0,readonly=on,file=$ovmf_secboot_code"
            -drive "if=pflash,format=raw,unit=1,file=$work/secboot-vars.fd")
        ;;
    esac
    case $kernel in
    new) version=$kernel_new ;;
    old) version=$kernel_old ;;
    trixie) read -r _ version < <(grep '^new ' "$cache_trixie/kernels") ;;
    esac
    serial=$logdir/serial-$kind.log
    qerr=$logdir/qemu-$kind.err
    if [ "$kind" = secboot ]; then
        echo "== booting $kind: kernel $kernel ($version, signed with the snakeoil key) through OVMF with Secure Boot, a fresh swtpm"
    elif [ -n "$phase" ]; then
        echo "== booting $kind: kernel $kernel ($version) through OVMF, $([ "$kind" = bind1 ] && echo "a fresh swtpm" || echo "the same disk and swtpm state again")"
    else
        echo "== booting kernel $kind ($version) with a fresh swtpm"
    fi
    t0=$SECONDS
    local attempt
    for attempt in 1 2; do
        # A second boot of a guest that had a TPM of its own gets a fresh one.
        case $kind in bind*) ;; *) [ "$attempt" = 1 ] || rm -rf "$tpmstate" ;; esac
        mkdir -p "$tpmstate"
        swtpm socket --tpm2 --tpmstate dir="$tpmstate" \
            --ctrl type=unixio,path="$work/swtpm-$kind.sock" \
            --log file="$logdir/swtpm-$kind.log",level=1 --terminate &
        swtpm_pid=$!
        for _ in $(seq 100); do
            [ -S "$work/swtpm-$kind.sock" ] && break
            sleep 0.1
        done
        rc=0
        timeout -k 5 "$boot_timeout" qemu-system-x86_64 \
            -machine "$machine" "${accel[@]}" -smp 2 -m 1024 \
            -nodefaults -display none -no-reboot -monitor none \
            -chardev stdio,id=ser0,signal=off -serial chardev:ser0 \
            "${firmware[@]}" -kernel "$kernel_file" \
            -append "root=/dev/nvme0n1 rw console=ttyS0,115200 panic=-1 quiet loglevel=4 systemd.show_status=0 sceau_vm.kernel=$kernel$phase systemd.setenv=SCEAU_VM_GUEST_TIMEOUT=$guest_timeout" \
            -drive "$root" \
            -device nvme,drive=root,serial=root \
            -drive file="$work/payload.img",if=none,id=payload,format=raw,readonly=on \
            -device virtio-blk-pci,drive=payload \
            -chardev socket,id=chrtpm,path="$work/swtpm-$kind.sock" \
            -tpmdev emulator,id=tpm0,chardev=chrtpm -device tpm-crb,tpmdev=tpm0 \
            </dev/null >"$serial" 2>"$qerr" || rc=$?
        kill "$swtpm_pid" 2>/dev/null || true
        wait "$swtpm_pid" 2>/dev/null || true
        swtpm_pid=""

        # Kernel messages and the checks share the console; lines end in \r\n.
        tr -d '\r' <"$serial" >"$serial.txt"
        # A guest kernel that dies before any check of ours ran is an
        # emulator fault, not sceau's: under TCG, a 6.12 kernel once took an
        # int3 oops in sched_clock_cpu while patching its own code at boot.
        # It is booted once more; a second such death is a failure.
        if [ "$attempt" = 1 ] && grep -aq 'Kernel panic - not syncing' "$serial.txt" &&
            ! grep -aqE '^(PASS|FAIL|INFO) ' "$serial.txt"; then
            cp "$serial.txt" "$logdir/serial-$kind.first-boot.log"
            report+=("INFO [$kind] the guest kernel died before any check ran ($(grep -ao -m1 -E '(Oops|BUG|Kernel panic).*' "$serial.txt" | head -1 | cut -c1-100)); booted once more (first console: $logdir/serial-$kind.first-boot.log)")
            continue
        fi
        break
    done
    eval "t_boot_$kind=$((SECONDS - t0))"

    while IFS= read -r line; do
        case $line in
        PASS\ * | FAIL\ *) record "$line" ;;
        INFO\ \[*\]\ \ *) if [ -n "${SCEAU_VM_VERBOSE:-}" ]; then report+=("$line"); fi ;;
        INFO\ *) report+=("$line") ;;
        esac
    done < <(grep -aE '^(PASS|FAIL|INFO) ' "$serial.txt" || true)
    local end
    end=$(grep -ao 'SCEAU-VM-END rc=[0-9]*' "$serial.txt" | tail -1 || true)
    if [ -z "$end" ]; then
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            record "FAIL [$kind] guest finished: timed out after ${boot_timeout}s (serial log $serial)"
        else
            record "FAIL [$kind] guest finished: qemu exited $rc without the end marker: $(head -1 "$qerr") (serial log $serial)"
        fi
        report+=("INFO [$kind] last console lines:")
        while IFS= read -r line; do report+=("INFO [$kind]   $line"); done < <(tail -n 15 "$serial.txt")
    elif [ "${end#SCEAU-VM-END rc=}" != 0 ] && ! grep -q "^FAIL \[$kind\]" "$serial.txt"; then
        record "FAIL [$kind] guest checks: exited ${end#SCEAU-VM-END rc=} without a FAIL line (serial log $serial)"
        # 124 is the guest's own timeout: the lines before it say which
        # check was still running.
        report+=("INFO [$kind] last console lines before the end marker:")
        while IFS= read -r line; do report+=("INFO [$kind]   $line"); done < <(grep -a -B 8 'SCEAU-VM-END' "$serial.txt" | head -n 8)
    else
        record "PASS [$kind] guest powered itself off after the checks (qemu exit $rc, $((SECONDS - t0)) s)"
    fi
}

boots=$kernels
[ "$binding" = 0 ] || boots="$boots bind1 bind2 secboot"
[ "$trixie" = 0 ] || boots="$boots trixie"
for kind in $boots; do
    boot "$kind"
done

for line in "${report[@]}"; do echo "$line"; done
timing="timing: image $image_state ${t_image}s, packages and cargo ${t_cargo}s"
for kind in $boots; do
    var=t_boot_$kind
    timing+=", boot+checks $kind ${!var}s"
done
echo "$timing, total $((SECONDS - t_start))s (accel ${accel[1]%%,*})"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
