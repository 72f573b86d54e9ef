#!/usr/bin/env bash
# Boot-state binding under systemd, across a reboot (docs/boot-binding.md).
# Runs inside the guest, as root, started by guest-checks.sh when the kernel
# command line says sceau_vm.phase=bind1 or bind2. Both boots use one disk
# (not a throwaway snapshot) and one swtpm state, and boot through UEFI
# firmware (OVMF), which measures the Secure Boot state into PCR 7:
#
# bind1: measured boot with the firmware's event log, Secure Boot off
#   (guest-firmware.sh); install sceau; make a policy key and sign PCR 7 as
#   this boot left it; the drop-in adds --policy-key/--policy to the shipped
#   command line; an envelope is made and kept on the disk. The guest powers
#   off.
# bind2 (the next boot, TPM reset, firmware measured again): sceau started at
#   boot with the policy, and the envelope made before the reboot opens; then
#   PCR 7 is extended from userspace (a changed boot state): Decrypt fails
#   with policy-mismatch, on the running service and after a restart, while
#   Encrypt works; a policy signed for the new value, loaded by a restart,
#   opens both envelopes.
#
# Same output as guest-checks.sh: PASS/FAIL/INFO lines, tagged with the phase.
set -u
P=/payload
phase=$(sed -n 's/.*sceau_vm\.phase=\([a-z0-9]*\).*/\1/p' /proc/cmdline)
tag=$phase
# shellcheck source=tests/vm/guest-lib.sh
source "$P/guest-lib.sh"

pcr=7
state=/var/lib/sceau-vm
tcti=device:/dev/tpmrm0
sock=/run/sceau/kms.sock
info "kernel $(uname -r), firmware $([ -d /sys/firmware/efi ] && echo UEFI || echo BIOS), checks start at uptime $checks_start s"

# The sha256 value of PCR $1 as `sceau pcrs` prints it (lowercase hex).
pcr_value() {
    timeout 60 sceau pcrs --tcti "$tcti" --pcrs "$1" 2>/dev/null |
        sed -n "s/^ *$1 *: *0x\([0-9A-Fa-f]*\)$/\1/p" | tr 'A-F' 'a-f'
}
# The last journal line of sceau.service in this boot matching $1.
journal_has() {
    journalctl -b -u sceau.service -o cat --no-pager 2>/dev/null | grep -F "$1" | tail -1
}
# True once the running sceau (this invocation of sceau.service, not an
# earlier one) has logged a line with $1; journald may lag the start a little.
logged() {
    local id
    id=$(systemctl show -p InvocationID --value sceau.service)
    for _ in $(seq 20); do
        journalctl -b _SYSTEMD_INVOCATION_ID="$id" -o cat --no-pager 2>/dev/null | grep -qF "$1" && return 0
        sleep 0.5
    done
    return 1
}
# sceau_boot_policy_matched on the metrics socket (sceau-metrics.socket,
# 127.0.0.1:9847, enabled in bind1), through bash's /dev/tcp: no curl here.
matched() {
    timeout 10 bash -c 'exec 4<>/dev/tcp/127.0.0.1/9847 &&
        printf "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" >&4 && cat <&4' 2>/dev/null |
        tr -d '\r' | awk '$1 == "sceau_boot_policy_matched" { print $2 }'
}
# Restarts sceau.service; true when it is active/running again.
restart_sceau() {
    systemctl restart sceau.service &&
        [ "$(systemctl show -p ActiveState,SubState --value sceau.service | tr '\n' /)" = active/running/ ]
}
# The bytes a hex string spells, in one write (bash's printf flushes once).
unhex() {
    # shellcheck disable=SC2001 # each pair of hex digits becomes \xHH
    printf '%b' "$(echo "$1" | sed 's/../\\x&/g')"
}
# "status: healthz=… key_id=… " dropped from envelope's line.
after_status() { echo "${1#* * * }"; }
# Decrypt of the envelope written before the reboot must be refused with
# policy-mismatch: PASS or FAIL under $1; true when refused so.
refused_with_policy_mismatch() {
    local out
    if out=$(envelope decrypt "$state/before-reboot.env"); then
        fail "Decrypt, $1" "opened: $out"
        return 1
    elif echo "$out" | grep -q 'decrypt: failed: FailedPrecondition: .*policy-mismatch'; then
        pass "$1: Decrypt refused: ${out##*decrypt: failed: }"
    else
        fail "Decrypt, $1" "$out"
        return 1
    fi
}
envelope() { # encrypt|decrypt FILE: one line, exit status of kms_envelope
    timeout 60 "$P/kms_envelope" "$1" "$sock" "$2" 2>&1 | grep -E '^(encrypt|decrypt|status):' | paste -sd ' ' -
    return "${PIPESTATUS[0]}"
}

state_now=$(timeout 60 systemctl is-system-running --wait 2>&1)
if [ "$state_now" = running ]; then
    pass "systemd is PID 1 and the system is running"
else
    fail "system running" "is-system-running says '$state_now'"
    systemctl --failed --no-legend 2>&1 | show
fi
if [ -d /sys/firmware/efi ]; then
    pass "booted through UEFI firmware (SecureBoot variable: $(od -An -tu1 -j4 -N1 /sys/firmware/efi/efivars/SecureBoot-* 2>/dev/null | tr -d ' ' | sed 's/^0$/off/; s/^1$/on/'))"
else
    fail "UEFI" "no /sys/firmware/efi: the firmware is not UEFI, PCR 7 holds no Secure Boot state"
fi

case $phase in
bind1)
    # Measured boot on the firmware's own event log, Secure Boot off
    # (guest-firmware.sh; the secboot boot has it on), before anything of
    # sceau's runs in this boot.
    # shellcheck source=tests/vm/guest-firmware.sh
    source "$P/guest-firmware.sh"
    measured_boot_checks disabled

    # dpkg -i, not apt-get: the same postinst (units enabled and started),
    # without apt's 20 s of dependency resolution under TCG; apt's install is
    # checked in the kernel boots.
    install_out=$(DEBIAN_FRONTEND=noninteractive timeout 150 dpkg -i "$P"/sceau_*.deb 2>&1)
    install_rc=$?
    if [ $install_rc -eq 0 ] && [ "$(systemctl show -p SubState --value sceau.service)" = running ]; then
        pass "dpkg -i sceau_*.deb; sceau.service running"
    else
        fail "dpkg -i sceau_*.deb" "exit $install_rc: $(echo "$install_out" | tail -2 | tr '\n' ' ')"
    fi
    # What the firmware measured before the kernel ran (the kernel itself
    # extends 9 and 10), for the record.
    timeout 60 sceau pcrs --tcti "$tcti" --pcrs 0,1,2,3,4,5,6,7,8,9,10,11 2>&1 | show
    unbound=$(timeout 60 sceau check --socket "$sock" 2>&1 | sed -n 's/^status: .*key_id=//p')

    mkdir -p "$state" /etc/sceau/policies /etc/systemd/system/sceau.service.d
    keygen_out=$(timeout 60 sceau-recover policy keygen --policy-private /root/policy.key \
        --policy-key /etc/sceau/policy.pub --unencrypted-private-key 2>&1) ||
        fail "policy keygen" "$(echo "$keygen_out" | tail -1)"
    # PCR 11 is never extended in this boot (no UKI): signing it is refused.
    timeout 60 sceau pcrs --tcti "$tcti" --pcrs "$pcr,11" >"$state/pcr11" 2>/dev/null
    if ! zero_out=$(timeout 60 sceau-recover policy sign --policy-private /root/policy.key --pcrs "$pcr,11" \
        --values "$state/pcr11" --serial 90 --policy-out "$state/pcr11.json" 2>&1) &&
        [ ! -e "$state/pcr11.json" ] && echo "$zero_out" | grep -q 'PCR 11 reads all zeros'; then
        pass "policy sign refuses PCR 11, never extended in this boot: $(echo "$zero_out" | tail -1 | cut -c1-160)"
    else
        fail "policy sign over a PCR at zero" "signed: $(echo "$zero_out" | tail -1)"
    fi
    timeout 60 sceau pcrs --tcti "$tcti" --pcrs "$pcr" >"$state/boot1.pcrs" 2>"$state/pcrs.err"
    if sign_out=$(timeout 60 sceau-recover policy sign --policy-private /root/policy.key --pcrs "$pcr" \
        --values "$state/boot1.pcrs" --serial 1 --policy-out /etc/sceau/policies/boot1.json 2>&1) &&
        [ -s /etc/sceau/policies/boot1.json ] && [ -n "$(pcr_value "$pcr")" ]; then
        pass "policy over PCR $pcr signed for this boot (0x$(pcr_value "$pcr" | cut -c1-16)…)"
    else
        fail "policy sign" "$(echo "$sign_out" | tail -1); values: $(tail -1 "$state/boot1.pcrs")"
    fi

    # The drop-in docs/boot-binding.md gives, on the shipped command line.
    shipped=$(grep '^ExecStart=' /usr/lib/systemd/system/sceau.service | cut -d= -f2-)
    printf '[Service]\nExecStart=\nExecStart=%s --policy-key /etc/sceau/policy.pub --policy /etc/sceau/policies\n' \
        "$shipped" >/etc/systemd/system/sceau.service.d/boot-binding.conf
    systemctl daemon-reload
    # The metrics socket too, started while sceau.service is stopped:
    # systemd 252 refuses to start a socket whose service already runs
    # ("Socket service sceau.service already active, refusing"), so
    # `enable --now` then a restart, as docs/metrics.md has it, leaves it
    # dead. The restart below hands it over.
    systemctl enable --quiet sceau-metrics.socket
    systemctl stop sceau.service
    systemctl start sceau-metrics.socket
    if restart_sceau && logged "boot policy: the PCRs match /etc/sceau/policies/boot1.json" && [ "$(matched)" = 1 ]; then
        pass "sceau serve --policy-key --policy under systemd: $(journal_has 'boot policy:'); sceau_boot_policy_matched 1"
    else
        fail "serve with a policy" "$(systemctl show -p ActiveState,SubState --value sceau.service | tr '\n' ' '); sceau_boot_policy_matched '$(matched)'"
        systemctl show -p TriggeredBy sceau.service | show
        systemctl status --no-pager sceau-metrics.socket 2>&1 | show
        journalctl -b -u sceau.service -u sceau-metrics.socket -o cat --no-pager | tail -n 14 | show
    fi
    check_out=$(timeout 60 sceau check --socket "$sock" 2>&1)
    bound=$(echo "$check_out" | sed -n 's/^status: .*key_id=//p')
    if echo "$check_out" | grep -q '^round trip: ok' && echo "$check_out" | grep -q 'healthz=ok' &&
        [ -n "$bound" ] && [ "$bound" != "$unbound" ]; then
        pass "bound round trip (sceau check): healthz ok, key_id $unbound -> $bound"
    else
        fail "bound round trip" "$(echo "$check_out" | tr '\n' ' ' | cut -c1-300); unbound key_id $unbound"
    fi
    if out=$(envelope encrypt "$state/before-reboot.env") && out2=$(envelope decrypt "$state/before-reboot.env"); then
        pass "an envelope kept for after the reboot: $(after_status "$out"), and it opens now"
    else
        fail "envelope before the reboot" "$out ${out2:-}"
    fi
    ;;

bind2)
    show_out=$(systemctl show -p ActiveState,SubState,NRestarts,ExecStart sceau.service)
    if echo "$show_out" | grep -q '^SubState=running' && echo "$show_out" | grep -q -- '--policy-key /etc/sceau/policy.pub' &&
        logged "boot policy: the PCRs match /etc/sceau/policies/boot1.json" && [ "$(matched)" = 1 ]; then
        pass "after the reboot, sceau started at boot with the policy: $(journal_has 'boot policy:'); sceau_boot_policy_matched 1"
    else
        fail "sceau at boot" "$(echo "$show_out" | grep -v ExecStart | tr '\n' ' '); $(journal_has 'boot policy:'); sceau_boot_policy_matched '$(matched)'"
        journalctl -b -u sceau.service -o cat --no-pager | tail -n 8 | show
    fi
    before=$(pcr_value "$pcr")
    signed=$(sed -n "s/^ *$pcr *: *0x\([0-9A-Fa-f]*\)$/\1/p" "$state/boot1.pcrs" | tr 'A-F' 'a-f')
    if [ -n "$before" ] && [ "$before" = "$signed" ]; then
        pass "PCR $pcr after the reboot is the value signed before it (the firmware measured the same state)"
    else
        fail "PCR $pcr after the reboot" "0x$before, signed 0x$signed"
    fi
    if out=$(envelope decrypt "$state/before-reboot.env"); then
        pass "Decrypt after the reboot of the envelope made before it: $(after_status "$out")"
    else
        fail "Decrypt after the reboot" "$out"
    fi

    # A changed boot state: TPM2_PCR_Extend of PCR $pcr (sha256 bank) from
    # userspace, as another boot chain would measure something else (no
    # tpm2-tools in the image: the raw command through the kernel's
    # resource manager, password session with the empty auth).
    digest=$(printf 'sceau-vm: a changed boot state' | sha256sum | cut -c1-64)
    # TPM2_PCR_Extend: header (ST_SESSIONS, 65 bytes, the command code), the
    # PCR handle, one password session (TPM_RS_PW, empty nonce, attributes 0,
    # empty auth), one sha256 digest.
    command=8002$(printf %08x 65)00000182$(printf %08x "$pcr")$(printf %08x 9)40000009$(printf %04x 0)00$(printf %04x 0)$(printf %08x 1)000b$digest
    response=$(
        exec 3<>/dev/tpmrm0 || exit 1
        unhex "$command" >&3
        timeout 10 head -c 10 <&3 | od -An -tx1 | tr -d ' \n'
    )
    after=$(pcr_value "$pcr")
    expected=$(unhex "$before$digest" | sha256sum | cut -c1-64)
    if [ "${response:12:8}" = 00000000 ] && [ "$after" = "$expected" ]; then
        pass "PCR $pcr extended from userspace (TPM2_PCR_Extend through /dev/tpmrm0): now SHA-256(old ‖ digest)"
    else
        fail "PCR extend" "response $response; PCR $pcr 0x$after, expected 0x$expected"
    fi
    if out=$(envelope decrypt "$state/before-reboot.env"); then
        fail "Decrypt in the changed state (running service)" "opened: $out"
    elif echo "$out" | grep -q 'decrypt: failed: FailedPrecondition: .*policy-mismatch' && [ "$(matched)" = 0 ]; then
        pass "changed state, running service: Decrypt refused: ${out##*decrypt: failed: }; sceau_boot_policy_matched 0"
    else
        fail "Decrypt in the changed state (running service)" "$out; sceau_boot_policy_matched '$(matched)'"
    fi
    if restart_sceau && logged "boot policy: no signed policy matches the PCRs" && [ "$(matched)" = 0 ]; then
        pass "changed state, restarted sceau serves (sceau_boot_policy_matched 0) and logs: $(journal_has 'boot policy: no signed' | cut -c1-100)…"
    else
        fail "restart in the changed state" "$(systemctl show -p ActiveState,SubState --value sceau.service | tr '\n' ' ') $(journal_has 'boot policy:'); sceau_boot_policy_matched '$(matched)'"
    fi
    if out=$(envelope encrypt "$state/during-mismatch.env") && echo "$out" | grep -q 'healthz=policy-mismatch'; then
        pass "changed state: Status says healthz=policy-mismatch, Encrypt works"
    else
        fail "Encrypt in the changed state" "$out"
    fi
    refused_with_policy_mismatch "changed state, after a restart"

    # Signing after the fact: the new value, a restart to load it.
    timeout 60 sceau pcrs --tcti "$tcti" --pcrs "$pcr" >"$state/boot2.pcrs" 2>"$state/pcrs.err"
    sign_out=$(timeout 60 sceau-recover policy sign --policy-private /root/policy.key --pcrs "$pcr" \
        --values "$state/boot2.pcrs" --serial 2 --policy-out /etc/sceau/policies/boot2.json 2>&1) ||
        fail "policy sign for the new value" "$(echo "$sign_out" | tail -1)"
    if restart_sceau && logged "boot policy: the PCRs match /etc/sceau/policies/boot2.json" && [ "$(matched)" = 1 ]; then
        pass "a policy signed for the new value, loaded by a restart: $(journal_has 'boot policy:'); sceau_boot_policy_matched 1"
    else
        fail "restart with the new policy" "$(journal_has 'boot policy:'); sceau_boot_policy_matched '$(matched)'"
    fi
    if out=$(envelope decrypt "$state/before-reboot.env") && echo "$out" | grep -q 'healthz=ok' &&
        out2=$(envelope decrypt "$state/during-mismatch.env"); then
        pass "the new policy opens the envelope made before the reboot and the one written during the mismatch; healthz ok"
    else
        fail "Decrypt with the new policy" "$out ${out2:-}"
    fi

    # Revocation: the running service, through the kernel's resource
    # manager, drops the state at its next Decrypt; a restart with every
    # file unchanged skips the revoked policy (its serial lives in the TPM).
    if out=$(timeout 60 sceau revoke-policy --tcti "$tcti" --serial 2 2>&1) &&
        echo "$out" | grep -q 'serial 2 revoked'; then
        pass "sceau revoke-policy --serial 2 while sceau serves: $out"
    else
        fail "revoke-policy" "$out"
    fi
    refused_with_policy_mismatch "revoked state, running service" &&
        logged "revoked while sceau served" &&
        pass "the running service logged the revocation: $(journal_has 'revoked while sceau served')"
    if restart_sceau && logged "boot2.json: its serial 2 is revoked" && [ "$(matched)" = 0 ] &&
        out=$(envelope decrypt "$state/before-reboot.env" 2>&1; true) &&
        echo "$out" | grep -q 'policy-mismatch'; then
        pass "revoked state, after a restart with the same files: policy skipped, Decrypt refused, sceau_boot_policy_matched 0"
    else
        fail "restart in a revoked state" "$(journal_has 'boot policy:'); matched '$(matched)'; $out"
    fi
    ;;
*)
    fail "phase" "unknown sceau_vm.phase '$phase'"
    ;;
esac

errors=$(journalctl -b -p err -o cat --no-pager -u sceau.service -u sceau.socket 2>&1 | grep -v '^-- ')
if [ -z "$errors" ]; then
    pass "no error-level journal entries from sceau.socket/sceau.service"
else
    fail "journal errors" "$(echo "$errors" | head -1)"
fi
summary
