#!/usr/bin/env bash
# Measured boot through real UEFI firmware: the event log Debian's OVMF
# wrote as it booted this guest (the kernel's copy in securityfs), sent by
# the SPIRE agent plugin's code with a quote from the swtpm through
# /dev/tpmrm0 and checked by the server plugin's code with measured boot
# required (attest_once --event-log). The Secure Boot selector the log gives
# must be the firmware's real state, read from its own SecureBoot variable.
#
# Two ways in, both inside the guest as root:
# - sourced by guest-binding.sh in bind1 (OVMF_CODE_4M.fd and a copy of
#   OVMF_VARS_4M.fd: no keys enrolled, Secure Boot off), which calls
#   measured_boot_checks disabled;
# - run by guest-checks.sh for sceau_vm.phase=secboot (OVMF_CODE_4M.secboot.fd
#   with SMM, a copy of OVMF_VARS_4M.snakeoil.fd: Debian's snakeoil
#   certificate in PK, KEK and db, Secure Boot enforced, the kernel
#   re-signed with the snakeoil key on the host), which checks only this.
#
# Same output as guest-checks.sh: PASS/FAIL/INFO lines, tagged with the phase.

# The firmware's SecureBoot variable (EFI global variable GUID): 4 bytes of
# attributes, then one byte, 1 when the firmware enforces Secure Boot.
secure_boot_var=/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
setup_mode_var=/sys/firmware/efi/efivars/SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c
event_log=/sys/kernel/security/tpm0/binary_bios_measurements

# The log as one hex string, and little-endian integers out of it into
# REPLY (no subshell per field: forks are slow under TCG).
log_hex=""
u32_at() {
    local h=${log_hex:$((2 * $1)):8}
    REPLY=$((16#${h:6:2}${h:4:2}${h:2:2}${h:0:2}))
}
u16_at() {
    local h=${log_hex:$((2 * $1)):4}
    REPLY=$((16#${h:2:2}${h:0:2}))
}
# Walks a crypto-agile event log (TCG PC Client PFP): the SHA-1-format
# Spec ID event, then TCG_PCR_EVENT2 records. Sets log_events (one
# "PCR TYPE SHA256-OFFSET" line per event after the Spec ID event, the
# type in hex) and log_banks (the algorithms the Spec ID event declares);
# false if the log does not parse.
log_events=""
log_banks=""
walk_log() { # FILE
    log_hex=$(od -An -v -tx1 "$1" | tr -d ' \n')
    local size=$((${#log_hex} / 2)) off count algs i alg pcr type sha256 p
    local -A digest_size=()
    log_banks=""
    [ "$size" -ge 64 ] || return 1
    u32_at 28
    off=$((32 + REPLY))
    u32_at 56
    algs=$REPLY
    for ((i = 0; i < algs; i++)); do
        u16_at $((60 + 4 * i))
        alg=$REPLY
        u16_at $((62 + 4 * i))
        digest_size[$alg]=$REPLY
        case $alg in 4) log_banks+="sha1 " ;; 11) log_banks+="sha256 " ;; 12) log_banks+="sha384 " ;; 13) log_banks+="sha512 " ;; *) log_banks+="0x$(printf %x "$alg") " ;; esac
    done
    log_events=""
    while [ "$off" -lt "$size" ]; do
        u32_at "$off"
        pcr=$REPLY
        u32_at $((off + 4))
        type=$(printf %08x "$REPLY")
        u32_at $((off + 8))
        count=$REPLY
        p=$((off + 12))
        sha256=-
        for ((i = 0; i < count; i++)); do
            u16_at "$p"
            alg=$REPLY
            [ -n "${digest_size[$alg]:-}" ] || return 1
            [ "$alg" = 11 ] && sha256=$((p + 2))
            p=$((p + 2 + digest_size[$alg]))
        done
        u32_at "$p"
        p=$((p + 4 + REPLY))
        [ "$p" -le "$size" ] || return 1
        log_events+="$pcr $type $sha256"$'\n'
        off=$p
    done
}

measured_boot_checks() { # EXPECTED: enabled|disabled
    local expected=$1 want var setup out rc altered pcr type offset byte
    # systemd mounts both at boot; mounted here too if it did not, so that a
    # missing file below means the kernel has no such thing.
    mountpoint -q /sys/firmware/efi/efivars || mount -t efivarfs efivarfs /sys/firmware/efi/efivars 2>/dev/null
    mountpoint -q /sys/kernel/security || mount -t securityfs securityfs /sys/kernel/security 2>/dev/null

    want=$([ "$expected" = enabled ] && echo 1 || echo 0)
    var=$(od -An -tu1 -j4 -N1 "$secure_boot_var" 2>/dev/null | tr -d ' ')
    setup=$(od -An -tu1 -j4 -N1 "$setup_mode_var" 2>/dev/null | tr -d ' ')
    if [ "$var" = "$want" ]; then
        pass "the firmware's SecureBoot variable is $var (Secure Boot $expected; SetupMode $setup)"
    else
        fail "firmware SecureBoot variable" "'$var', expected $want (SetupMode '$setup'; $(ls /sys/firmware/efi/efivars 2>&1 | head -3 | tr '\n' ' '))"
    fi
    info "kernel: $(journalctl -k -b -o cat --no-pager 2>/dev/null | grep -i -m1 'secure boot' || echo 'no Secure Boot line'); lockdown: $(cat /sys/kernel/security/lockdown 2>/dev/null)"

    # securityfs gives the file no size: read it to know.
    if [ "$(wc -c <"$event_log" 2>/dev/null || echo 0)" = 0 ]; then
        fail "firmware event log" "$event_log is missing or empty ($(ls /sys/kernel/security 2>&1 | tr '\n' ' '))"
        return
    fi
    cp "$event_log" /run/firmware.log
    if walk_log /run/firmware.log; then
        info "the firmware's event log: $(wc -c </run/firmware.log) bytes, $(echo -n "$log_events" | grep -c .) events after the Spec ID event; banks: ${log_banks% }; per PCR: $(echo -n "$log_events" | cut -d' ' -f1 | sort -n | uniq -c | awk '{printf "%s:%s ", $2, $1}')"
    else
        fail "firmware event log" "does not parse as a crypto-agile log ($(wc -c </run/firmware.log) bytes)"
        return
    fi

    out=$(timeout 120 "$P/attest_once" device:/dev/tpmrm0 ecc --event-log "$event_log" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q " secureboot:$expected\b" && echo "$out" | grep -q ' eventlog:[a-z]*'; then
        pass "SPIRE attestation with the firmware's event log, measured boot required: ${out#*; }"
    else
        fail "SPIRE attestation with the firmware's event log (expected secureboot:$expected)" "$(echo "$out" | tail -3 | tr '\n' ' ' | cut -c1-400)"
    fi
    # The kernel image OVMF loaded is measured into PCR 4 by its
    # Authenticode hash; the host computed that hash of the image as QEMU
    # hands it to the firmware (scripts/vm-e2e.sh, qemu_setup_header).
    if [ -s "$P/kernel-authenticode" ]; then
        local kernel_hash
        kernel_hash=$(cat "$P/kernel-authenticode")
        if echo "$out" | grep -q " boot_app:sha256:$kernel_hash\b"; then
            pass "boot_app:sha256: is the kernel image's Authenticode SHA-256 as computed on the host (${kernel_hash:0:16}…)"
        else
            fail "boot_app is the kernel" "no boot_app:sha256:$kernel_hash in: ${out#*; }"
        fi
    fi
    if [ "$expected" = enabled ]; then
        # With Secure Boot enforced, the db certificate that verified the
        # kernel's signature is measured into PCR 7 (EV_EFI_VARIABLE_AUTHORITY,
        # 0x800000e0) as the kernel is loaded: proof that the firmware checked
        # the signature instead of falling back to its unverified loader.
        if echo -n "$log_events" | grep -q '^7 800000e0 '; then
            pass "PCR 7 records the db authority that verified the kernel's signature (EV_EFI_VARIABLE_AUTHORITY)"
        else
            fail "db authority in PCR 7" "no EV_EFI_VARIABLE_AUTHORITY in PCR 7: the kernel's signature was not verified"
        fi
    fi

    # The same log with one SHA-256 digest bit flipped, in the first event
    # that extends a PCR (EV_NO_ACTION, type 3, extends nothing): it no
    # longer replays to the quote, and the refusal names the PCR.
    read -r pcr type offset < <(echo -n "$log_events" | awk '$2 != "00000003" && $3 != "-"' | head -1)
    altered=/run/firmware-altered.log
    cp /run/firmware.log "$altered"
    if [ -n "$offset" ]; then
        byte=$(od -An -tu1 -j"$offset" -N1 "$altered" | tr -d ' ')
        printf '%b' "\\x$(printf %02x $((byte ^ 1)))" | dd of="$altered" bs=1 seek="$offset" conv=notrunc status=none
    fi
    out=$(timeout 120 "$P/attest_once" device:/dev/tpmrm0 ecc --event-log "$altered" 2>&1)
    rc=$?
    if [ -z "$offset" ]; then
        fail "altered event log" "no event extends a PCR with a SHA-256 digest"
    elif cmp -s /run/firmware.log "$altered"; then
        fail "altered event log" "the copy was not changed at byte $offset"
    elif [ $rc -ne 0 ] && echo "$out" | grep -q "^refused: the event log does not match the quote: PCR $pcr (sha256)"; then
        pass "the log with one digest bit flipped (PCR $pcr, event type 0x$type) is refused: $(echo "${out#refused: }" | cut -c1-90)…"
    else
        fail "altered event log (PCR $pcr, byte $offset)" "$(echo "$out" | tail -2 | tr '\n' ' ' | cut -c1-300)"
    fi
}

# Run as the secboot phase's checks (not sourced).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u
    P=/payload
    tag=$(sed -n 's/.*sceau_vm\.phase=\([a-z0-9]*\).*/\1/p' /proc/cmdline)
    # shellcheck source=tests/vm/guest-lib.sh
    source "$P/guest-lib.sh"
    info "kernel $(uname -r), checks start at uptime $checks_start s"
    if [ -d /sys/firmware/efi ] && [ -c /dev/tpmrm0 ]; then
        pass "booted through UEFI firmware with Secure Boot enforced, kernel TPM /dev/tpmrm0 present"
    else
        fail "UEFI and TPM" "$(ls -d /sys/firmware/efi /dev/tpmrm0 2>&1 | tr '\n' ' ')"
    fi
    measured_boot_checks enabled
    summary
fi
