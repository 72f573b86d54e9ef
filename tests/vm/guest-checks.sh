#!/usr/bin/env bash
# Runs inside the guest, as root, with systemd as PID 1 (started by
# sceau-vm.service from the payload disk). Prints one line per check on the
# serial console: "PASS name" or "FAIL name: why"; "INFO ..." lines are
# context. The host parses them.
#
# The payload holds the packages scripts/package-deb.sh built
# (sceau_*.deb, sceau-spire_*.deb), a copy of the repository's systemd/ units
# to compare with what the package installed, and the SPIRE test example.
# The guest has no network: apt installs the .debs from the payload, with the
# dependencies the image already has (tests/vm/build-image.sh). Then the
# daemon is checked as the package left it, upgraded in place, and purged.
#
# The kernel command line carries sceau_vm.kernel=new|old|trixie: on "new"
# (bookworm with the backports kernel) and "trixie" (the Debian 13 guest) the
# kernel must give Landlock ABI 4 or later; on "old" the checks are the same
# and the Landlock line only documents what sceau does on an older ABI.
set -u
P=/payload
# The boot-binding boots (scripts/vm-e2e.sh) run their own checks.
case $(sed -n 's/.*sceau_vm\.phase=\([a-z0-9]*\).*/\1/p' /proc/cmdline) in
bind*) exec bash "$P/guest-binding.sh" ;;
secboot) exec bash "$P/guest-firmware.sh" ;;
esac
kernel_kind=$(sed -n 's/.*sceau_vm\.kernel=\([a-z]*\).*/\1/p' /proc/cmdline)
tag=${kernel_kind:-new}
# shellcheck source=tests/vm/guest-lib.sh
source "$P/guest-lib.sh"

info "kernel $(uname -r), PID 1 $(cat /proc/1/comm), $(systemctl --version | head -1)"
info "LSMs: $(cat /sys/kernel/security/lsm 2>/dev/null); checks start at uptime $checks_start s"

# --- the system itself ----------------------------------------------------
state=$(timeout 60 systemctl is-system-running --wait 2>&1)
if [ "$state" = running ]; then
    pass "systemd is PID 1 and the system is running"
else
    fail "system running" "is-system-running says '$state'"
    systemctl --failed --no-legend 2>&1 | show
fi

if [ -c /dev/tpmrm0 ] && [ "$(stat -c '%G %a' /dev/tpmrm0)" = "tss 660" ]; then
    driver=$(basename "$(readlink -f /sys/class/tpm/tpm0/device/driver)" 2>/dev/null)
    pass "kernel TPM /dev/tpmrm0 is 0660 group tss (driver $driver)"
else
    fail "kernel TPM" "$(ls -l /dev/tpm* 2>&1 | tr '\n' ' ')"
fi

# --- install the package, as an operator would ------------------------------
cd "$P" || exit 1
install_out=$(DEBIAN_FRONTEND=noninteractive timeout 150 apt-get install -y -q --no-install-recommends \
    ./sceau_*.deb ./sceau-spire_*.deb 2>&1)
install_rc=$?
cd / || exit 1
echo "$install_out" | tail -n 15 | show
if [ $install_rc -eq 0 ] && [ "$(dpkg-query -W -f='${db:Status-Abbrev}' sceau sceau-spire 2>&1)" = "ii ii " ]; then
    pass "apt-get install ./sceau_*.deb ./sceau-spire_*.deb (offline, no other step): $(dpkg-query -W -f='${Package} ${Version}, ' sceau sceau-spire)"
else
    fail "apt-get install" "exit $install_rc: $(echo "$install_out" | grep -E '^(E|W): ' | head -2 | tr '\n' ' ')"
fi
# What the packages put on disk, kept for the purge check at the end.
dpkg -L sceau sceau-spire >/run/pkg-files 2>&1
missing=$(while IFS= read -r f; do [ -e "$f" ] || echo "$f"; done </run/pkg-files)
if [ -z "$missing" ] && [ -s /run/pkg-files ]; then
    pass "every path dpkg -L lists is on disk ($(wc -l </run/pkg-files) paths)"
else
    fail "package files on disk" "missing: $(echo "$missing" | head -3 | tr '\n' ' ')"
fi

# The units exactly as in the repository, where the package puts them.
differ=""
for unit in "$P"/units/*; do
    cmp -s "$unit" "/usr/lib/systemd/system/$(basename "$unit")" || differ="$differ $(basename "$unit")"
done
if [ -z "$differ" ]; then
    pass "units installed unchanged in /usr/lib/systemd/system ($(cd "$P/units" && echo *))"
else
    fail "units installed" "differ from the repository's:$differ"
fi
for bin in /usr/sbin/sceau /usr/bin/sceau-recover /usr/libexec/sceau/sceau-spire-agent /usr/libexec/sceau/sceau-spire-server; do
    missing=$(ldd "$bin" 2>&1 | grep 'not found')
    if [ -x "$bin" ] && [ -z "$missing" ]; then
        pass "$bin: its libraries resolve$(ldd "$bin" | grep -o 'libtss2-esys[^ ]*' | head -1 | sed 's/^/ (/; s/$/)/')"
    else
        fail "$bin" "${missing:-not installed}"
    fi
done

# postinst: both units enabled, as sceau.service's [Install] section advises,
# and started; every other unit (the metrics socket) shipped but disabled.
for unit in sceau.socket sceau.service; do
    state=$(systemctl is-enabled "$unit" 2>&1)
    if [ "$state" = enabled ]; then
        pass "postinst enabled $unit"
    else
        fail "postinst enable $unit" "is-enabled says '$state'"
    fi
done
for unit in "$P"/units/*; do
    unit=$(basename "$unit")
    case $unit in sceau.socket | sceau.service) continue ;; esac
    state="$(systemctl is-enabled "$unit" 2>&1)/$(systemctl show -p ActiveState --value "$unit")"
    if [ "$state" = disabled/inactive ]; then
        pass "$unit shipped, not enabled, not started"
    else
        fail "$unit shipped disabled" "is-enabled/ActiveState: $state"
    fi
done
sock_state=$(systemctl show -p ActiveState --value sceau.socket)
svc_state=$(systemctl show -p ActiveState,SubState --value sceau.service | tr '\n' / | sed 's:/$::')
if [ "$sock_state" = active ] && [ "$svc_state" = active/running ] && [ -S /run/sceau/kms.sock ]; then
    pass "postinst started both: socket listening, sceau.service running (READY=1) before any client"
else
    fail "postinst start" "sceau.socket=$sock_state sceau.service=$svc_state"
    journalctl -b -u sceau.service -o cat --no-pager | tail -n 10 | show
fi
perm=$(stat -c '%U:%G %a' /run/sceau/kms.sock /run/sceau 2>&1 | tr '\n' ' ')
if [ "$perm" = "root:root 600 root:root 700 " ]; then
    pass "socket node root 0600 in a 0700 directory"
else
    fail "socket permissions" "$perm"
fi

# --- the first client: Status and a round trip on the running service -------
t0=$(date +%s.%N)
check_out=$(timeout 150 sceau check --socket /run/sceau/kms.sock 2>&1)
check_rc=$?
t1=$(date +%s.%N)
echo "$check_out" | show
if [ $check_rc -eq 0 ] && echo "$check_out" | grep -q '^round trip: ok'; then
    pass "client round trip ($(echo "$t1 - $t0" | awk '{printf "%.1f", $1 - $3}') s)"
else
    fail "client round trip" "sceau check exited $check_rc"
fi
check2=$(timeout 60 sceau check --socket /run/sceau/kms.sock 2>&1)
if echo "$check2" | grep -q '^round trip: ok'; then
    pass "second round trip on the running service"
else
    fail "second round trip" "$(echo "$check2" | tail -1)"
fi

# Beside the serving sceau through the resource manager: the identity check
# prints is the one the service logged at its start.
identity=$(timeout 60 sceau check --status-only --tpm-identity 2>&1 | sed -n 's/^tpm: //p')
logged=$(journalctl -q -o cat -u sceau.service | sed -n 's/^TPM: manufacturer \([^,]*\), vendor "\([^"]*\)", firmware \(.*\)$/manufacturer=\1 vendor="\2" firmware=\3/p' | tail -n 1)
if [ -n "$identity" ] && [ "$identity" = "$logged" ]; then
    pass "sceau check --tpm-identity beside the service reads what it logged: $identity"
else
    fail "check --tpm-identity" "printed '${identity}', the service logged '${logged}'"
fi

show_out=$(systemctl show -p Type,ActiveState,SubState,StatusText,MainPID,NRestarts,TriggeredBy sceau.service)
echo "$show_out" | show
get() { echo "$show_out" | sed -n "s/^$1=//p"; }
if [ "$(get Type)" = notify ] && [ "$(get ActiveState)" = active ] && [ "$(get SubState)" = running ]; then
    pass "READY=1 received: Type=notify unit is active/running"
else
    fail "READY=1" "Type=$(get Type) ActiveState=$(get ActiveState) SubState=$(get SubState)"
fi
if get StatusText | grep -Eq '^serving key_id=sceau-[0-9]+\.[0-9]+-[0-9a-f]{16}$'; then
    pass "StatusText: $(get StatusText)"
else
    fail "StatusText" "'$(get StatusText)'"
fi
if [ "$(get NRestarts)" = 0 ]; then
    pass "no restarts"
else
    fail "no restarts" "NRestarts=$(get NRestarts)"
fi

journal=$(journalctl -b -u sceau.service -o cat --no-pager 2>&1)
if echo "$journal" | grep -q 'serving key_id=sceau-.* on the socket systemd passed'; then
    pass "sceau serves on the fd systemd passed (the socket named kms, from sceau.socket)"
else
    fail "fd from systemd" "no 'on the socket systemd passed' in the journal"
fi

# --- the live process -------------------------------------------------------
pid=$(get MainPID)
pidof_out=$(pidof sceau)
if [ "$pid" != 0 ] && [ "$pidof_out" = "$pid" ]; then
    pass "one sceau process, MainPID $pid"
else
    fail "sceau process" "MainPID=$pid pidof='$pidof_out'"
fi
status=$(cat "/proc/$pid/status" 2>&1)
echo "$status" | grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Threads):' | show
field() { echo "$status" | awk -v k="$1:" '$1 == k { $1 = ""; sub(/^ /, ""); print }'; }
for want in "CapEff 0000000000000000" "CapPrm 0000000000000000" "CapBnd 0000000000000000" \
    "NoNewPrivs 1" "Seccomp 2"; do
    set -- $want
    if [ "$(field "$1")" = "$2" ]; then
        pass "/proc/PID/status $1: $2"
    else
        fail "/proc/PID/status $1" "'$(field "$1")', expected $2"
    fi
done
uid=$(field Uid | awk '{print $1}')
tss_gid=$(getent group tss | cut -d: -f3)
sceau_uid=$(id -u sceau 2>/dev/null)
if [ -n "$sceau_uid" ] && [ "${uid:-0}" = "$sceau_uid" ] && [ "$sceau_uid" -lt 1000 ] && field Groups | grep -qw "$tss_gid"; then
    pass "system user sceau (uid $uid, from sysusers.d) with supplementary group tss ($tss_gid)"
else
    fail "system user sceau" "uid=$uid sceau=$sceau_uid groups='$(field Groups)' tss=$tss_gid"
fi
state_perm=$(stat -c '%U:%G %a' /var/lib/sceau /var/lib/sceau/kek-ledger 2>&1 | tr '\n' ' ')
if [ "$state_perm" = "sceau:sceau 700 sceau:sceau 600 " ]; then
    pass "state directory /var/lib/sceau 0700 and its ledger 0600, both sceau's (StateDirectory=)"
else
    fail "state directory" "$state_perm"
fi
fds=$(ls -l "/proc/$pid/fd" 2>&1)
if echo "$fds" | grep -q -- '-> /dev/tpmrm0$' && ! echo "$fds" | grep -q -- '-> /dev/tpm0$'; then
    pass "sceau holds /dev/tpmrm0 open (the kernel resource manager), not /dev/tpm0"
else
    fail "TPM device fd" "$(echo "$fds" | grep -c dev/tpm) TPM fds"
    echo "$fds" | show
fi
if grep -Eq '^Max core file size +0 +0 ' "/proc/$pid/limits"; then
    pass "core file limit 0 0"
else
    fail "core limit" "$(grep 'core file' "/proc/$pid/limits")"
fi

# --- Landlock on this kernel ---------------------------------------------
ll=$(echo "$journal" | grep -m1 'landlock:')
info "sceau's log: ${ll:-<no landlock line>}"
# sceau logs e.g. "landlock: partially enforced (kernel Landlock ABI 6; …)".
abi=$(echo "$ll" | grep -Eo 'Landlock ABI [0-9]+' | head -1 | grep -Eo '[0-9]+$')
if [ -z "$ll" ]; then
    fail "landlock" "sceau logged no 'landlock:' line"
elif [ "$tag" != old ]; then
    if [ "${abi:-0}" -ge 4 ] && ! echo "$ll" | grep -q 'not enforced'; then
        pass "Landlock enforced with ABI $abi (>= 4) on $(uname -r)"
    else
        fail "Landlock ABI >= 4" "$ll"
    fi
else
    if echo "$ll" | grep -q 'not enforced'; then
        fail "Landlock on the older ABI" "$ll"
    else
        pass "Landlock on the older ABI ($abi, $(uname -r)): partially enforced, sceau still serves"
    fi
fi

# --- sceau's own sandbox probes -------------------------------------------
st_out=$(timeout 60 sceau selftest --sandbox 2>/run/selftest.err)
st_rc=$?
show </run/selftest.err
n=0
while IFS= read -r line; do
    case $line in
    PASS\ *) pass "selftest --sandbox: ${line#PASS }"; n=$((n + 1)) ;;
    FAIL\ *) fail "selftest --sandbox" "${line#FAIL }" ;;
    *) info "selftest: $line" ;;
    esac
done <<<"$st_out"
if [ $st_rc -ne 0 ] || [ $n -lt 9 ]; then
    fail "selftest --sandbox" "exit $st_rc, $n PASS lines"
fi

# --- the unit's exposure score on the live system -------------------------
sec=$(timeout 60 systemd-analyze security --no-pager sceau.service 2>&1)
score=$(echo "$sec" | grep -E 'Overall exposure level for sceau.service' | sed 's/^[^O]*//')
if [ -n "$score" ]; then
    pass "systemd-analyze security: $score"
else
    fail "systemd-analyze security" "$(echo "$sec" | tail -1)"
fi

# --- journal -----------------------------------------------------------------
echo "$journal" | tail -n 20 | show
errors=$(journalctl -b -p err -o cat --no-pager -u sceau.service -u sceau.socket 2>&1 | grep -v '^-- ')
if [ -z "$errors" ]; then
    pass "no error-level journal entries from sceau.socket/sceau.service"
else
    fail "journal errors" "$(echo "$errors" | head -1)"
fi

# --- an upgrade: the package installed again over itself -------------------
# postinst's upgrade path: the old daemon served until now; the service is
# restarted onto the (new) binary, and the socket is not touched, so clients
# wait in its backlog instead of being refused.
sock_since=$(systemctl show -p ActiveEnterTimestampMonotonic --value sceau.socket)
upgrade_out=$(DEBIAN_FRONTEND=noninteractive timeout 150 dpkg -i "$P"/sceau_*.deb 2>&1)
upgrade_rc=$?
upgraded_pid=$(systemctl show -p MainPID --value sceau.service)
after_out=$(timeout 60 sceau check --socket /run/sceau/kms.sock 2>&1)
if [ $upgrade_rc -eq 0 ] && [ "$upgraded_pid" != 0 ] && [ "$upgraded_pid" != "$pid" ] &&
    [ "$(systemctl show -p ActiveEnterTimestampMonotonic --value sceau.socket)" = "$sock_since" ] &&
    echo "$after_out" | grep -q '^round trip: ok'; then
    pass "upgrade (dpkg -i over the installed version): sceau.service restarted (MainPID $pid -> $upgraded_pid), sceau.socket kept listening, round trip ok"
else
    fail "upgrade" "dpkg -i exit $upgrade_rc, MainPID $pid -> $upgraded_pid, socket entered active at $sock_since then $(systemctl show -p ActiveEnterTimestampMonotonic --value sceau.socket); check: $(echo "$after_out" | tail -1)"
    echo "$upgrade_out" | tail -n 10 | show
fi

# --- socket activation ----------------------------------------------------------
# With the service stopped and the socket listening, the first connection
# starts sceau (the start at boot and at installation only saves that wait).
systemctl stop sceau.service
sock_state=$(systemctl show -p ActiveState --value sceau.socket)
svc_state=$(systemctl show -p ActiveState --value sceau.service)
activation_out=$(timeout 150 sceau check --socket /run/sceau/kms.sock 2>&1)
pid=$(systemctl show -p MainPID --value sceau.service)
if [ "$sock_state" = active ] && [ "$svc_state" = inactive ] &&
    echo "$activation_out" | grep -q '^round trip: ok' && [ "$pid" != 0 ]; then
    pass "socket activation: with sceau.service stopped, a client's connection starts it (MainPID $pid) and is served"
else
    fail "socket activation" "after stopping the service: sceau.socket=$sock_state sceau.service=$svc_state; check: $(echo "$activation_out" | tail -1)"
fi

# --- lifecycle under real systemd ---------------------------------------------
# A crash: Restart=always brings sceau back after RestartSec=3s. The units'
# comments say the socket and its backlog stay across automatic restarts, so a
# client that connects in between must be served by the new process.
closed_before=$(journalctl -b -u sceau.socket -o cat --no-pager | grep -c '^Closed sceau.socket')
restarts_before=$(systemctl show -p NRestarts --value sceau.service)
kill -KILL "$pid"
sleep 0.5
timeout 60 sceau check --socket /run/sceau/kms.sock >/run/backlog.out 2>&1 &
backlog_pid=$!
new_pid=0
for _ in $(seq 60); do
    new_pid=$(systemctl show -p MainPID --value sceau.service)
    [ "$(systemctl show -p ActiveState --value sceau.service)" = active ] && [ "$new_pid" != 0 ] &&
        [ "$new_pid" != "$pid" ] && break
    sleep 0.5
done
after_out=$(timeout 60 sceau check --socket /run/sceau/kms.sock 2>&1)
restarts=$(systemctl show -p NRestarts --value sceau.service)
sock_state=$(systemctl show -p ActiveState --value sceau.socket)
if echo "$after_out" | grep -q '^round trip: ok' && [ "$restarts" = $((restarts_before + 1)) ] && [ "$sock_state" = active ]; then
    pass "after SIGKILL: systemd restarted sceau (NRestarts $restarts_before -> $restarts, MainPID $pid -> $new_pid) and it serves again"
else
    fail "restart after SIGKILL" "check: $(echo "$after_out" | tail -1); MainPID $pid -> $new_pid, NRestarts=$restarts, socket $sock_state"
fi
wait "$backlog_pid"
backlog_rc=$?
closed=$(($(journalctl -b -u sceau.socket -o cat --no-pager | grep -c '^Closed sceau.socket') - closed_before))
if [ $backlog_rc -eq 0 ] && grep -q '^round trip: ok' /run/backlog.out; then
    pass "a client waiting in the backlog across the automatic restart is served"
else
    fail "client in the backlog across the automatic restart" "$(tail -1 /run/backlog.out | cut -c1-200); systemd closed and reopened sceau.socket $closed time(s) during the restart"
    journalctl -b -u sceau.service -u sceau.socket -o short-monotonic --no-pager | grep -A12 'status=9/KILL' | show
fi
# --- the TPM shared through the kernel's resource manager ----------------
# The fault matrix's contention row: another process uses the TPM through
# /dev/tpmrm0 while sceau serves. The contender is the SPIRE agent plugin's
# TPM work (attest_once: EK, AK, CertifyCreation, ActivateCredential, Quote,
# dozens of commands each) in a loop; the kernel serialises the two
# processes' commands and swaps each one's objects and sessions in and out.
# Every round trip must still pass, and the contender must have run.
rm -f /run/contend.stop /run/contend.count
(
    rounds=0 failures=0
    while [ ! -e /run/contend.stop ]; do
        if timeout 120 "$P/attest_once" device:/dev/tpmrm0 ecc >/dev/null 2>&1; then
            rounds=$((rounds + 1))
        else
            failures=$((failures + 1))
        fi
    done
    echo "$rounds $failures" >/run/contend.count
) &
contender=$!
sleep 2
contended=0
t0=$(cut -d' ' -f1 /proc/uptime)
for _ in 1 2 3 4 5; do
    timeout 150 sceau check --socket /run/sceau/kms.sock 2>&1 | grep -q '^round trip: ok' && contended=$((contended + 1))
done
t1=$(cut -d' ' -f1 /proc/uptime)
touch /run/contend.stop
wait "$contender"
read -r rounds failures </run/contend.count
if [ "$contended" = 5 ] && [ "$rounds" -gt 0 ] && [ "$failures" = 0 ]; then
    pass "TPM contended through /dev/tpmrm0: 5 of 5 round trips ok in $(echo "$t1 $t0" | awk '{printf "%.1f", $1 - $2}') s while another process completed $rounds attestations"
else
    fail "TPM contended through /dev/tpmrm0" "$contended of 5 round trips ok; contender: $rounds attestations, $failures failed"
fi

# --- KEK rotation beside the serving daemon, then systemctl reload -----------
# docs/rotation-and-backup.md on one node: `sceau kek rotate` as root through
# /dev/tpmrm0 while sceau serves (the kernel's resource manager keeps the two
# apart), `systemctl reload sceau` (ExecReload=: SIGHUP), and the new key_id
# served at once by the same process; then a second rotation and the retire
# of the first generation; a restart keeps the key_id.
status_key_id() { systemctl show -p StatusText --value sceau.service | sed -n 's/^serving key_id=//p'; }
reload_to() { # reload_to KEY_ID: systemctl reload, then StatusText names KEY_ID (<= 10 s)
    systemctl reload sceau.service || return 1
    for _ in $(seq 50); do
        [ "$(status_key_id)" = "$1" ] && return 0
        sleep 0.2
    done
    return 1
}
kek_pid=$(systemctl show -p MainPID --value sceau.service)
key_id0=$(status_key_id)
rotate_out=$(timeout 60 sceau kek rotate 2>/run/kek.err)
key_id1=$(echo "$rotate_out" | awk '/^generation / {print $4}')
if [ -n "$key_id1" ] && [ "$key_id1" != "$key_id0" ] && reload_to "$key_id1" &&
    [ "$(systemctl show -p MainPID --value sceau.service)" = "$kek_pid" ] &&
    timeout 60 sceau check --socket /run/sceau/kms.sock | grep -q '^round trip: ok'; then
    pass "kek rotate beside the serving sceau, then systemctl reload: $key_id0 -> $key_id1 in the same process (MainPID $kek_pid), round trip ok"
else
    fail "kek rotate and reload" "rotate: $rotate_out $(tail -1 /run/kek.err); StatusText key_id $(status_key_id); MainPID $kek_pid -> $(systemctl show -p MainPID --value sceau.service)"
    journalctl -b -u sceau.service -o cat --no-pager | tail -n 6 | show
fi
rotate_out=$(timeout 60 sceau kek rotate 2>/run/kek.err)
key_id2=$(echo "$rotate_out" | awk '/^generation / {print $4}')
reload_to "$key_id2"
retire_out=$(timeout 60 sceau kek retire --generation 1 2>&1)
list_out=$(timeout 60 sceau kek list 2>&1)
echo "$list_out" | show
if echo "$retire_out" | grep -q 'generation 1 retired' && echo "$list_out" | grep -Eq '^1 +retired' &&
    echo "$list_out" | grep -Eq "^2 +current .*$key_id2" &&
    timeout 60 sceau check --socket /run/sceau/kms.sock | grep -q '^round trip: ok'; then
    pass "second rotation, reload, kek retire --generation 1 beside sceau: $(echo "$retire_out" | head -c 120)…"
else
    fail "kek retire" "$retire_out; list: $(echo "$list_out" | tr '\n' ' ' | head -c 300)"
fi
systemctl restart sceau.service
if [ "$(status_key_id)" = "$key_id2" ]; then
    pass "restart without change keeps the key_id ($key_id2)"
else
    fail "key_id across a restart" "$key_id2 before, $(status_key_id) after"
fi

# --- the audit trail in the journal -------------------------------------------
# The lifecycle events as native journal records (src/events.rs): found by
# MESSAGE_ID, with their SCEAU_ fields, journald's trusted _UID for the
# commands an operator ran, and the text of the catalog the package
# installed (journalctl -x), indexed by systemd's own trigger.
id_started=3166a606872f4f1da0cee51f1e993b44
id_key_id_changed=007b11f8cf7643d3953737c043da158d
id_reloaded=9011f275aaf444f281f48e00141d9ec5
id_kek_rotated=81689816d8d54b938aa664a45d61736c
id_kek_retired=7e3cc07aa35044ad9aada9a9991f0ef5
id_call_refused=26aad01f05d04dbdb22b92373f70a801
id_sandbox=9d946c948cb8443fbad0acfae53d9019
records() { journalctl -b -q --no-pager "$@" 2>/dev/null; }
count() { records "$@" -o cat | grep -c .; }
field() { # FIELD MATCH...: FIELD of the last record that matches
    local name=$1
    shift
    records "$@" -o verbose -n 1 | sed -n "s/^ *$name=//p" | head -n 1
}
started_key=$(field SCEAU_KEY_ID MESSAGE_ID=$id_started)
digest=$(field SCEAU_CONFIG_DIGEST MESSAGE_ID=$id_started)
landlock=$(field SCEAU_LANDLOCK MESSAGE_ID=$id_sandbox _SYSTEMD_UNIT=sceau.service)
rotations=$(count MESSAGE_ID=$id_kek_rotated _UID=0)
retired=$(field SCEAU_GENERATION MESSAGE_ID=$id_kek_retired)
changes=$(count MESSAGE_ID=$id_key_id_changed _SYSTEMD_UNIT=sceau.service)
if [ "$started_key" = "$key_id2" ] && echo "$digest" | grep -Eq '^[0-9a-f]{64}$' &&
    [ "$landlock" = enforced ] && [ "$rotations" = 2 ] && [ "$retired" = 1 ] && [ "$changes" -ge 2 ]; then
    pass "lifecycle events in the journal by MESSAGE_ID: started (SCEAU_KEY_ID $started_key, configuration ${digest:0:12}…), sandbox (Landlock $landlock), $rotations kek-rotated by _UID=0, kek-retired generation $retired, $changes key-id-changed"
else
    fail "lifecycle events in the journal" "started '$started_key' (want $key_id2), digest '$digest', landlock '$landlock', rotations $rotations, retired '$retired', key-id changes $changes"
    records -u sceau.service -o verbose -n 30 | grep -E 'MESSAGE(_ID)?=|SCEAU_' | tail -n 20 | show
fi
explained=$(records -x MESSAGE_ID=$id_started -n 1)
if echo "$explained" | grep -q "Subject: sceau started serving key_id $key_id2" &&
    echo "$explained" | grep -q 'SCEAU_CONFIG_DIGEST is the SHA-256'; then
    pass "journalctl -x explains the start from the packaged catalog: $(echo "$explained" | grep -o 'Subject: .*' | head -n 1)"
else
    fail "catalog" "journalctl -x shows: $(echo "$explained" | tr '\n' ' ' | cut -c1-300); catalog file: $(ls -l /usr/lib/systemd/catalog/sceau.catalog 2>&1)"
fi

# No record lost under a flood of successful calls. journald drops a unit's
# messages past its burst; this host's journald.conf is made strict (200 in
# 30 s) so that 3,000 calls are a flood here: the unit's own limit (a
# million a second) must keep every record anyway. Then the same
# flood with the unit's limit put back shows what that setting prevents:
# journald suppresses records, the NOTICE reload event among them, while
# the refusals, WARNING and in a rate-limit pool of their own, survive.
flood_totals() { # status-records refusals reloads stderr-refusals, in this boot
    echo "$(records _SYSTEMD_UNIT=sceau.service -o cat | grep -c 'call method=Status .*code=OK')" \
        "$(count MESSAGE_ID=$id_call_refused)" \
        "$(count MESSAGE_ID=$id_reloaded)" \
        "$(records _SYSTEMD_UNIT=sceau.service -o cat | grep -c 'event=call-refused')"
}
flood_once() { # prints what the flood added: status-records refusals reloads stderr-refusals
    local before after out
    read -r -a before <<<"$(flood_totals)"
    out=$(timeout 120 "$P/kms_envelope" flood /run/sceau/kms.sock 3000/30 | tail -n 1)
    systemctl reload sceau.service
    sleep 3
    echo "$out" >/run/flood.out
    read -r -a after <<<"$(flood_totals)"
    echo "$((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2])) $((after[3] - before[3]))"
}
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nRateLimitIntervalSec=30s\nRateLimitBurst=200\n' >/etc/systemd/journald.conf.d/strict.conf
systemctl restart systemd-journald
read -r statuses refusals reloads fallbacks <<<"$(flood_once)"
show </run/flood.out
if [ "$statuses" -ge 3000 ] && [ "$refusals" = 30 ] && [ "$reloads" = 1 ]; then
    pass "a flood of 3000 Status calls and 30 refused Decrypts under a strict journald (200 in 30 s): $statuses call records, $refusals/30 refusals, the reload event"
else
    fail "records under a flood" "$statuses Status records, $refusals/30 refusals ($fallbacks as stderr lines), $reloads reload events; $(systemctl show -p LogRateLimitIntervalUSec,LogRateLimitBurst sceau.service | tr '\n' ' ')"
    records -o verbose | grep -E '^ *SCEAU_EVENT=' | sort | uniq -c | show
    records _SYSTEMD_UNIT=sceau.service -o cat | grep -E 'reload|SIGHUP' | tail -n 5 | show
fi
mkdir -p /etc/systemd/system/sceau.service.d
# Five minutes, so that the window cannot end during a slow flood.
printf '[Service]\nLogRateLimitIntervalSec=5min\nLogRateLimitBurst=200\n' >/etc/systemd/system/sceau.service.d/rate-limit.conf
systemctl daemon-reload && systemctl restart sceau.service
read -r statuses refusals reloads fallbacks <<<"$(flood_once)"
show </run/flood.out
if [ "$statuses" -lt 3000 ] && [ "$reloads" = 0 ] && [ "$refusals" = 30 ]; then
    pass "with the unit's rate limit put back (200 in 5 minutes), the same flood loses records ($statuses of 3000 Status records kept, the reload event lost) and keeps the refusals ($refusals/30, WARNING's own pool)"
else
    fail "the flood with journald's rate limit" "$statuses Status records, $refusals/30 refusals ($fallbacks as stderr lines), $reloads reload events"
fi
rm -f /etc/systemd/system/sceau.service.d/rate-limit.conf /etc/systemd/journald.conf.d/strict.conf
systemctl daemon-reload && systemctl restart systemd-journald sceau.service

# Forward Secure Sealing (docs/audit-trail.md): a persistent journal, its
# sealing key, records sealed into it; journalctl --verify passes with the
# verification key, and one byte changed in a sealed file fails it.
mkdir -p /var/log/journal
systemd-tmpfiles --create --prefix /var/log/journal >/dev/null 2>&1
journalctl --flush
verify_key=$(journalctl --setup-keys --force --interval=2s 2>/dev/null | tr -d '\n')
journalctl --rotate
timeout 60 sceau check --socket /run/sceau/kms.sock >/dev/null 2>&1
sleep 3
timeout 60 sceau check --socket /run/sceau/kms.sock >/dev/null 2>&1
journalctl --rotate
sealed=$(ls -t /var/log/journal/*/system@*.journal 2>/dev/null | head -n 1)
sealed_records=$(journalctl --file "$sealed" -q -o cat _SYSTEMD_UNIT=sceau.service 2>/dev/null | grep -c 'call method=')
verified=$(journalctl --verify --verify-key="$verify_key" --file "$sealed" 2>&1)
verified_rc=$?
altered=/var/tmp/altered.journal
cp "$sealed" "$altered"
size=$(stat -c %s "$altered")
# One byte inside a sealed record's text. (A fixed offset can land in the
# file's preallocated free space, which no hash covers: systemd 257 lays
# its files out so.)
offset=$(grep -abo 'call method=' "$altered" | tail -n 1 | cut -d: -f1)
[ -n "$offset" ] || offset=$((size * 3 / 4))
printf '\x5a' | dd of="$altered" bs=1 seek=$((offset + 5)) conv=notrunc status=none
tampered=$(journalctl --verify --verify-key="$verify_key" --file "$altered" 2>&1)
tampered_rc=$?
if [ -n "$verify_key" ] && [ "$sealed_records" -ge 2 ] && [ $verified_rc -eq 0 ] && [ $tampered_rc -ne 0 ]; then
    pass "Forward Secure Sealing: $sealed_records sceau records in a sealed file verify ($(echo "$verified" | grep -o 'PASS.*' | head -n 1 | cut -c1-80)), and one changed byte fails it ($(echo "$tampered" | grep -v '^PASS' | head -n 1 | cut -c1-100))"
else
    fail "Forward Secure Sealing" "key '${verify_key:0:12}…', $sealed_records records in '$sealed', verify rc $verified_rc ($(echo "$verified" | head -n 2 | tr '\n' ' ' | cut -c1-200)), altered rc $tampered_rc"
fi
rm -f "$altered"

# Shipping off the node (docs/audit-trail.md), configured as the guide
# says: systemd-journal-upload, its key handed to the unit's dynamic user
# as a credential, sends the journal over HTTPS to a systemd-journal-remote
# collector (on loopback: the guest has no second machine) whose
# certificate it checks against the CA. The collector's files hold
# sceau's records with their fields. The control first: an upload that
# trusts another CA sends nothing. (Debian builds journal-remote without
# GnuTLS, so it cannot check the node's certificate: "Option --trust is
# not available".)
collected=/var/tmp/collected
tls=$P/journal-tls
mkdir -p "$collected" /etc/systemd/journal-upload /etc/systemd/journal-upload.conf.d \
    /etc/systemd/system/systemd-journal-upload.service.d
systemd-run --quiet --unit=log-collector /lib/systemd/systemd-journal-remote \
    --listen-https=127.0.0.1:19532 --key="$tls/collector.key" --cert="$tls/collector.pem" \
    --output="$collected/"
sleep 2
timeout 20 /lib/systemd/systemd-journal-upload --url=https://127.0.0.1:19532 --key=- --cert=- \
    --trust="$tls/other-ca.pem" --follow=no >/var/tmp/impostor-upload.out 2>&1
impostor_rc=$?
impostor=$(journalctl -D "$collected" -q -o cat 2>/dev/null | grep -c .)
install -m 0644 "$tls/ca.pem" "$tls/node.pem" /etc/systemd/journal-upload/
install -m 0600 "$tls/node.key" /etc/systemd/journal-upload/
printf '[Service]\nLoadCredential=upload.key:/etc/systemd/journal-upload/node.key\n' \
    >/etc/systemd/system/systemd-journal-upload.service.d/key.conf
printf '[Upload]\nURL=https://127.0.0.1:19532\nServerKeyFile=/run/credentials/systemd-journal-upload.service/upload.key\nServerCertificateFile=/etc/systemd/journal-upload/node.pem\nTrustedCertificateFile=/etc/systemd/journal-upload/ca.pem\n' \
    >/etc/systemd/journal-upload.conf.d/collector.conf
systemctl daemon-reload
systemctl start systemd-journal-upload.service
systemctl reload sceau.service
local_reloads=$(count MESSAGE_ID=$id_reloaded)
shipped() { journalctl -D "$collected" -q --no-pager "$@" 2>/dev/null; }
for _ in $(seq 60); do
    [ "$(shipped MESSAGE_ID=$id_reloaded -o cat | grep -c .)" = "$local_reloads" ] && break
    sleep 1
done
remote_reloads=$(shipped MESSAGE_ID=$id_reloaded -o cat | grep -c .)
remote_calls=$(shipped _SYSTEMD_UNIT=sceau.service -o cat | grep -c 'call method=')
local_calls=$(records _SYSTEMD_UNIT=sceau.service -o cat | grep -c 'call method=')
remote_key=$(shipped MESSAGE_ID=$id_started -o verbose -n 1 | sed -n 's/^ *SCEAU_KEY_ID=//p' | head -n 1)
local_key=$(field SCEAU_KEY_ID MESSAGE_ID=$id_started)
if [ "$impostor_rc" -ne 0 ] && [ "$impostor" = 0 ] && [ "$local_reloads" -ge 1 ] &&
    [ "$remote_reloads" = "$local_reloads" ] && [ "$remote_calls" -ge 3000 ] &&
    [ "$remote_calls" = "$local_calls" ] && [ -n "$remote_key" ] && [ "$remote_key" = "$local_key" ]; then
    pass "journal shipped by systemd-journal-upload (key as a credential) to systemd-journal-remote over HTTPS: $remote_calls/$local_calls call records, $remote_reloads/$local_reloads reload events, SCEAU_KEY_ID $remote_key kept; an upload trusting another CA sent nothing (exit $impostor_rc)"
else
    fail "journal shipping" "upload trusting another CA: exit $impostor_rc, $impostor records collected; reload events $remote_reloads shipped of $local_reloads; call records $remote_calls of $local_calls; key '$remote_key' (local '$local_key'); upload $(systemctl is-active systemd-journal-upload.service), collector $(systemctl is-active log-collector.service)"
    tail -n 3 /var/tmp/impostor-upload.out | show
    journalctl -b -q --no-pager -u log-collector.service -n 6 | show
    journalctl -b -q --no-pager -u systemd-journal-upload.service -n 6 | show
fi
systemctl stop systemd-journal-upload.service log-collector.service 2>/dev/null

# --- signed envelopes under systemd -------------------------------------------
# docs/ha.md's set-up on one node: the member file `sceau srk-public` writes
# (the SRK and the envelope signing key, both recreated by this TPM), a
# recovery key, and the drop-in that adds them to the shipped command line.
# Every Encrypt then signs its envelope in the TPM through /dev/tpmrm0, and
# every Decrypt checks that signature first. One member and the recovery key
# make a 546-byte signed envelope (docs/envelope.md; 481 unsigned), so the
# length `sceau check` prints shows which kind the service wrote.
mkdir -p /etc/sceau/members /etc/systemd/system/sceau.service.d
member_out=$(timeout 120 sceau srk-public --tcti device:/dev/tpmrm0 2>&1 >/etc/sceau/members/vm.pub)
keygen_out=$(timeout 60 sceau-recover recovery-keygen --identity /run/recovery.identity --public /etc/sceau/recovery.pub --unencrypted-private-key 2>&1)
shipped=$(grep '^ExecStart=' /usr/lib/systemd/system/sceau.service | cut -d= -f2-)
printf '[Service]\nExecStart=\nExecStart=%s --members /etc/sceau/members --recovery-key /etc/sceau/recovery.pub\n' \
    "$shipped" >/etc/systemd/system/sceau.service.d/cluster.conf
systemctl daemon-reload
systemctl restart sceau.service
signed_out=$(timeout 150 sceau check --socket /run/sceau/kms.sock 2>&1)
if grep -q 'BEGIN SCEAU ENVELOPE SIGNING KEY' /etc/sceau/members/vm.pub &&
    echo "$signed_out" | grep -q '^round trip: ok (32-byte DEK, 546-byte ciphertext'; then
    pass "signed envelopes: with --members and --recovery-key, $(echo "$signed_out" | grep '^round trip')"
else
    fail "signed envelopes" "srk-public: $(echo "$member_out" | tail -1); keygen: $(echo "$keygen_out" | tail -1); check: $(echo "$signed_out" | tail -1)"
    journalctl -b -u sceau.service -o cat --no-pager | tail -n 8 | show
fi
# Back to the shipped command line; the administrator's files go by hand, as
# purge keeps them (packaging/debian/sceau.postrm).
rm -rf /etc/systemd/system/sceau.service.d /etc/sceau /run/recovery.identity
systemctl daemon-reload
systemctl restart sceau.service

# A stop of both units (the documented way to stop the plugin): the socket
# is closed and RemoveOnStop= unlinks the node, so a stopped plugin is
# absent (ENOENT), not a dead node.
systemctl stop sceau.socket sceau.service
sock_state=$(systemctl show -p ActiveState --value sceau.socket)
svc_state=$(systemctl show -p ActiveState --value sceau.service)
if [ "$sock_state" = inactive ] && [ "$svc_state" = inactive ] && [ ! -e /run/sceau/kms.sock ]; then
    pass "systemctl stop sceau.socket sceau.service: both inactive, /run/sceau/kms.sock removed"
else
    fail "stop" "sceau.socket=$sock_state sceau.service=$svc_state node: $(ls -l /run/sceau/kms.sock 2>&1)"
fi

# The SPIRE agent plugin's TPM work through the kernel's resource manager:
# EK, AK, TPM2_CertifyCreation on a second open of /dev/tpmrm0
# with the AK's saved context, ActivateCredential and a quote, checked by the
# server plugin's code in the same process.
for algorithm in rsa ecc; do
    out=$(timeout 120 "$P/attest_once" device:/dev/tpmrm0 "$algorithm" 2>&1)
    if [ $? -eq 0 ]; then
        pass "SPIRE attestation through /dev/tpmrm0: $out"
    else
        fail "SPIRE attestation through /dev/tpmrm0 ($algorithm EK)" "$(echo "$out" | tail -3 | tr '\n' ' ' | cut -c1-300)"
    fi
done

# --- the static pod's image under a real container runtime --------------------
# scripts/package-oci.sh's image, run by Debian's podman (crun) as the
# static pod would run it: the image's user, a read-only root, no
# capabilities, no new privileges, /dev/tpmrm0 through the CDI spec the
# package ships for pods, and the pod's two host directories
# (sceau-pod.tmpfiles.conf, here under other names beside the packaged
# service, which keeps /run/sceau). The installed `sceau check` is the client,
# as root, as kube-apiserver would be.
pod_apiserver_round_trip() {
    local k8s=/var/tmp/k8s etcd_pid api_pid token code t0 value got raw encrypts
    mkdir -p "$k8s"
    "$P/k8s/etcd" --name pod --data-dir "$k8s/etcd" --log-level warn \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster pod=http://127.0.0.1:2380 >"$k8s/etcd.log" 2>&1 &
    etcd_pid=$!
    cat >"$k8s/encryption.yaml" <<'ENC'
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms:
          apiVersion: v2
          name: sceau
          endpoint: unix:///run/sceau-pod/kms.sock
          timeout: 3s
      - identity: {}
ENC
    "$P/k8s/kube-apiserver" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 \
        --etcd-servers=http://127.0.0.1:2379 --encryption-provider-config="$k8s/encryption.yaml" \
        --service-cluster-ip-range=10.96.0.0/24 \
        --tls-cert-file="$P/k8s/apiserver.crt" --tls-private-key-file="$P/k8s/apiserver.key" \
        --token-auth-file="$P/k8s/tokens.csv" --authorization-mode=AlwaysAllow \
        --endpoint-reconciler-type=none --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$P/k8s/sa.key" --service-account-signing-key-file="$P/k8s/sa.key" \
        --cert-dir="$k8s/certs" --profiling=false >"$k8s/apiserver.log" 2>&1 &
    api_pid=$!
    token=$(cut -d, -f1 "$P/k8s/tokens.csv")
    api() { curl -s --max-time 20 --cacert "$P/k8s/ca.crt" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -w '\n%{http_code}' "$@"; }
    t0=$(cut -d. -f1 /proc/uptime)
    code=""
    while [ $(($(cut -d. -f1 /proc/uptime) - t0)) -lt 240 ] && kill -0 "$api_pid" 2>/dev/null; do
        code=$(api https://127.0.0.1:6443/readyz -o /dev/null 2>/dev/null | tail -n 1)
        [ "$code" = 200 ] && break
        sleep 1
    done
    if [ "$code" != 200 ]; then
        fail "kube-apiserver through the pod" "not ready within 240 s (readyz $code): $(tail -n 3 "$k8s/apiserver.log" | tr '\n' ' ' | cut -c1-300)"
    else
        info "kube-apiserver ready $(($(cut -d. -f1 /proc/uptime) - t0)) s after its start"
        value=$(head -c 24 /dev/urandom | base64)
        api -X POST https://127.0.0.1:6443/api/v1/namespaces \
            -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"pod-check"}}' >/dev/null
        code=$(api -X POST https://127.0.0.1:6443/api/v1/namespaces/pod-check/secrets \
            -d "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"through-the-pod\"},\"data\":{\"v\":\"$value\"}}" | tail -n 1)
        got=$(api https://127.0.0.1:6443/api/v1/namespaces/pod-check/secrets/through-the-pod | sed '$d' | grep -o '"v": *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/')
        raw=$(timeout 30 "$P/k8s/etcdget" --endpoint http://127.0.0.1:2379 /registry/secrets/pod-check/through-the-pod 2>&1 | head -c 40 | tr -cd '[:print:]')
        encrypts=$(timeout 30 podman logs sceau-pod 2>&1 | grep -c 'call method=Encrypt .*code=OK')
        if [ "$code" = 201 ] && [ "$got" = "$value" ] && [ "${raw#k8s:enc:kms:v2:sceau:}" != "$raw" ] && [ "$encrypts" -ge 2 ]; then
            pass "kube-apiserver wrote a Secret through the pod's socket and read it back (HTTP 201, etcd holds ${raw%%:sceau:*}:sceau:…, $encrypts Encrypts in the pod's log)"
        else
            fail "kube-apiserver through the pod" "create HTTP $code, read back ${got:-nothing}, etcd ${raw:-nothing}, Encrypts in the pod's log: $encrypts; $(grep -i kms "$k8s/apiserver.log" | tail -n 2 | tr '\n' ' ' | cut -c1-300)"
        fi
    fi
    # SIGKILL, not SIGTERM: kube-apiserver's graceful shutdown waits for its
    # watches and the KMS health checks (up to a minute under TCG), nothing
    # here tests it, and the guest's time is bounded.
    t0=$(cut -d. -f1 /proc/uptime)
    kill -KILL "$api_pid" "$etcd_pid" 2>/dev/null
    wait "$api_pid" "$etcd_pid" 2>/dev/null
    rm -rf "$k8s"
    info "kube-apiserver and etcd stopped and removed in $(($(cut -d. -f1 /proc/uptime) - t0)) s"
}

if [ "$tag" != old ] && command -v podman >/dev/null; then
    mkdir -p /etc/cdi
    install -m 0644 "$P/sceau-cdi.yaml" /etc/cdi/sceau.yaml
    install -d -o 65532 -g 65532 -m 0750 /run/sceau-pod
    install -d -o 65532 -g 65532 -m 0700 /var/lib/sceau-pod
    loaded=$(timeout 120 podman load -i "$P/sceau-oci.tar" 2>&1 | sed -n 's/^Loaded image: //p')
    pod_args=(--network none --read-only --cap-drop=all --security-opt no-new-privileges
        --device sceau.io/tpm=tpmrm0 -v /run/sceau-pod:/run/sceau -v /var/lib/sceau-pod:/var/lib/sceau)
    if [ -n "$loaded" ] && timeout 60 podman run -d --name sceau-pod "${pod_args[@]}" "$loaded" \
        --socket=/run/sceau/kms.sock --tcti=device:/dev/tpmrm0 --state-dir=/var/lib/sceau --allow-uid=65532 >/dev/null 2>/tmp/pod.err; then
        for _ in $(seq 150); do [ -S /run/sceau-pod/kms.sock ] && break; sleep 0.2; done
        out=$(timeout 60 sceau check --socket /run/sceau-pod/kms.sock 2>&1)
        if [ $? -eq 0 ]; then
            pass "podman runs the image ($loaded) read-only, no capabilities, /dev/tpmrm0 by CDI: $(echo "$out" | tr '\n' ' ' | cut -c1-200)"
        else
            fail "podman image round trip" "$(echo "$out" | tr '\n' ' ' | cut -c1-200); log: $(podman logs sceau-pod 2>&1 | tail -n 4 | tr '\n' ' ' | cut -c1-400)"
        fi
        log=$(timeout 30 podman logs sceau-pod 2>&1)
        if echo "$log" | grep -q 'a socket sceau bound itself (no socket activation)'; then
            pass "in the pod sceau says it bound its own socket: $(echo "$log" | grep -o 'serving key_id=.*' | head -n 1 | cut -c1-160)"
        else
            fail "pod log" "$(echo "$log" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
        fi
        pid=$(podman inspect -f '{{.State.Pid}}' sceau-pod)
        st=$(grep -E '^(Uid|Gid|CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' "/proc/$pid/status" | tr -s '\t ' ' ' | tr '\n' ';')
        if echo "$st" | grep -q 'Uid: 65532 65532 65532 65532;' && echo "$st" | grep -q 'CapEff: 0000000000000000;' &&
            echo "$st" | grep -q 'CapBnd: 0000000000000000;' && echo "$st" | grep -q 'NoNewPrivs: 1;' && echo "$st" | grep -q 'Seccomp: 2;'; then
            pass "the pod's sceau runs as 65532 with no capability, no_new_privs and its seccomp filter ($st)"
        else
            fail "the pod's process" "$st"
        fi
        if echo "$log" | grep -qE 'landlock: (fully|partially) enforced'; then
            pass "Landlock inside the container: $(echo "$log" | grep -oE 'landlock: [^;(]*' | head -n 1)"
        else
            fail "Landlock in the pod" "$(echo "$log" | grep -i landlock | head -n 2 | tr '\n' ' ')"
        fi
        probe=$(timeout 30 podman exec sceau-pod /usr/sbin/sceau check --status-only --socket=/run/sceau/kms.sock 2>&1)
        if [ $? -eq 0 ] && ! echo "$probe" | grep -q 'round trip'; then
            pass "the liveness probe's command in the pod: $probe"
        else
            fail "liveness probe" "$probe"
        fi
        # A real kube-apiserver (with etcd, from the payload) whose
        # EncryptionConfiguration names the pod's socket writes a Secret and
        # reads it back: Encrypt goes through the pod, and etcd holds a KMS v2
        # value of provider sceau. The "new" boot only: under TCG the
        # apiserver alone takes a minute or more to be ready.
        if [ "$tag" = new ] && [ -x "$P/k8s/kube-apiserver" ]; then
            pod_apiserver_round_trip
        fi
        if touch_out=$(timeout 60 podman exec sceau-pod /usr/sbin/sceau kek list --tcti device:/dev/tpmrm0 --state-dir /var/lib/sceau 2>&1); then
            pass "kek list in the pod through /dev/tpmrm0 beside the served one: $(echo "$touch_out" | tail -n 1)"
        else
            fail "kek list in the pod" "$(echo "$touch_out" | tail -n 2 | tr '\n' ' ')"
        fi
        timeout 30 podman stop -t 10 sceau-pod >/dev/null 2>&1
        code=$(podman inspect -f '{{.State.ExitCode}}' sceau-pod)
        if [ "$code" = 0 ] && [ ! -e /run/sceau-pod/kms.sock ]; then
            pass "podman stop: sceau exits 0 on SIGTERM and removes its socket"
        else
            fail "pod stop" "exit code $code; $(ls -l /run/sceau-pod 2>&1 | tr '\n' ' ')"
        fi
        timeout 60 podman rm -f sceau-pod >/dev/null 2>&1
    else
        fail "podman run" "${loaded:-podman load loaded nothing}: $(tr '\n' ' ' </tmp/pod.err | cut -c1-400)"
    fi
    timeout 60 podman rmi -af >/dev/null 2>&1
    rm -rf /etc/cdi /run/sceau-pod /var/lib/sceau-pod /var/lib/containers /var/cache/containers
fi

# --- purge: nothing of the package is left -----------------------------------
# The units run again first, so prerm has something to stop. The units the
# package ships disabled are enabled by hand, as an operator would: purge
# must remove those links too (postinst recorded them with update-state).
systemctl start sceau.socket sceau.service
for unit in "$P"/units/*; do
    case $(basename "$unit") in sceau.socket | sceau.service) ;; *) systemctl enable --quiet "$(basename "$unit")" ;; esac
done
purge_out=$(DEBIAN_FRONTEND=noninteractive timeout 150 apt-get purge -y -q sceau sceau-spire 2>&1)
purge_rc=$?
echo "$purge_out" | tail -n 8 | show
# Status-Abbrev's second letter is the state: "n" not installed (nothing,
# not even config-files "c"), or dpkg no longer knows the package at all.
status=$(dpkg-query -W -f='${db:Status-Abbrev}' sceau sceau-spire 2>/dev/null)
if [ $purge_rc -eq 0 ] && [ -z "$(echo "$status" | tr -s ' ' '\n' | grep -v '^.n$')" ]; then
    pass "apt-get purge sceau sceau-spire"
else
    fail "apt-get purge" "exit $purge_rc, dpkg status '$status'"
fi
if ! pidof sceau >/dev/null && [ ! -e /run/sceau ] &&
    [ "$(systemctl show -p LoadState --value sceau.socket sceau.service | grep . | sort -u)" = not-found ]; then
    pass "prerm stopped sceau; its units are unknown to systemd; /run/sceau is gone"
else
    fail "units after purge" "pidof: $(pidof sceau); LoadState: $(systemctl show -p LoadState --value sceau.socket sceau.service | tr '\n' ' '); /run/sceau: $(ls -ld /run/sceau 2>&1)"
fi
# Every file dpkg listed is gone; a listed directory may stay only while
# other packages' files are in it (/usr/bin, /usr/share/doc, ...), or, empty,
# while another package lists it, as dpkg keeps such directories: the image's
# packages were unpacked without their man pages, so /usr/share/man stays
# empty after purge, owned by them.
left=$(while IFS= read -r f; do
    if [ -d "$f" ] && [ ! -L "$f" ]; then
        [ -z "$(ls -A "$f")" ] && ! dpkg -S "$f" >/dev/null 2>&1 && echo "$f (empty directory)"
    elif [ -e "$f" ] || [ -L "$f" ]; then
        echo "$f"
    fi
done </run/pkg-files)
# Whatever else carries the name: enablement links, deb-systemd-helper's
# state, dpkg's own records. The test's runner (sceau-vm.service, and
# systemd's invocation:sceau-vm.service record of it) is not the package's.
strays=$(find / /run -xdev \( -path /proc -o -path /sys -o -path /payload \) -prune -o \
    -name '*sceau*' ! -name '*sceau-vm*' -print 2>/dev/null)
if [ -z "$left" ] && [ -z "$strays" ]; then
    pass "after purge no file of the package is left ($(wc -l </run/pkg-files) paths checked), and no file named *sceau* anywhere"
else
    fail "files left after purge" "$(echo "$left $strays" | head -5 | tr '\n' ' ')"
fi

summary
