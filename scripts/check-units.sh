#!/usr/bin/env bash
# Checks the shipped systemd units as they are, without editing them:
#
#   1. systemd-analyze verify systemd/sceau.socket systemd/sceau.service
#      passes and prints nothing. verify also checks that ExecStart's binary,
#      /usr/sbin/sceau, exists and is executable. To check the shipped unit
#      unchanged, the built binary is installed as /usr/sbin/sceau in a
#      throwaway root (--root=) that also holds the distribution's own units
#      (sysinit.target and so on).
#   2. systemd-analyze security --offline=true rates sceau.service with
#      exposure <= 1.0. The last line of its table is printed.
#   3. The unit's SystemCallFilter= lines, evaluated as systemd does (ordered
#      adds and removes over the groups of this systemd version), still allow
#      every system call sceau makes. That covers the calls seen under strace
#      at start-up and while serving, and every call in sceau's own seccomp
#      allowlist. A call missing there would fail with EPERM under the unit
#      (SystemCallErrorNumber=EPERM).
#
# Usage: scripts/check-units.sh [PATH_TO_BUILT_SCEAU]
#   Without an argument it uses /usr/sbin/sceau, where the Debian package
#   installs it.
#   SCEAU_MAX_EXPOSURE (default 1.0) sets the highest acceptable score.
#
# Needs only the systemd package (systemd-analyze, Debian 12: systemd 252).
# Runs as root or as any user. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

units=(systemd/sceau.socket systemd/sceau-metrics.socket systemd/sceau.service)
service=systemd/sceau.service
max_exposure=${SCEAU_MAX_EXPOSURE:-1.0}

# System calls sceau needs to be allowed by the unit's filter. They were
# traced with `strace -f` on sceau serve under systemd-socket-activate: start-up,
# Encrypt/Decrypt calls, watchdog pings and SIGTERM. Calls in
# src/sandbox/seccomp.rs are added automatically below.
# glibc implements setrlimit(2) with prlimit64, so prlimit64 must stay allowed
# and setrlimit need not be (sceau sets RLIMIT_CORE=0 at start and refuses to
# start if that fails).
required_syscalls=(
    # the dynamic loader, and dlopen of libtss2-tcti-device
    execve arch_prctl set_tid_address brk mmap munmap mprotect pread64 access
    openat newfstatat read close
    # process hardening: non-dumpable, RLIMIT_CORE, capabilities, Landlock, seccomp
    prctl prlimit64 capget
    landlock_create_ruleset landlock_add_rule landlock_restrict_self seccomp
    # memory hygiene around key material
    madvise mlock munlock
    # threads and the async runtime (clone is glibc's fallback when clone3 gets ENOSYS)
    clone clone3 futex set_robust_list rseq sched_getaffinity sigaltstack
    # the metrics thread moving itself to SCHED_IDLE (before sceau's own filter)
    sched_setscheduler
    rt_sigaction rt_sigprocmask rt_sigreturn getpid gettid getrandom
    epoll_create1 epoll_ctl epoll_wait eventfd2 socketpair poll clock_nanosleep
    exit exit_group
    # TPM device I/O, gRPC on the passed socket, sd_notify datagrams
    write writev fcntl ioctl socket connect sendto sendmsg recvfrom recvmsg
    accept4 getsockopt getpeername shutdown
)

failed=0
fail() {
    echo "FAIL: $*" >&2
    failed=1
}

command -v systemd-analyze >/dev/null || {
    echo "systemd-analyze not found (install the systemd package)" >&2
    exit 2
}
for unit in "${units[@]}"; do
    [ -f "$unit" ] || {
        echo "missing $unit" >&2
        exit 2
    }
done
echo "== $(systemd-analyze --version | head -n1)"

# --- The binary ExecStart= names ---------------------------------------------
binary=${1:-/usr/sbin/sceau}
if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then
    echo "no executable sceau at $binary: pass the built binary, e.g." >&2
    echo "  $0 target/release/sceau" >&2
    exit 2
fi
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$service")
[ "$exec_path" = /usr/sbin/sceau ] ||
    fail "$service: ExecStart= runs '$exec_path', expected /usr/sbin/sceau"
echo "== binary: $binary ($("$binary" --version 2>&1 | head -n1))"

# --- 1. systemd-analyze verify -------------------------------------------------
root=$(mktemp -d "${TMPDIR:-/tmp}/sceau-units.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc/systemd/system" "$root/usr/lib/systemd/system" "$root/usr/sbin"
# The distribution's units (sysinit.target, sockets.target, …), which the
# default dependencies of the two units refer to.
for dir in /usr/lib/systemd/system /lib/systemd/system; do
    [ -d "$dir" ] && cp -a "$dir/." "$root/usr/lib/systemd/system/"
done
cp "${units[@]}" "$root/etc/systemd/system/"
ln "$binary" "$root/usr/sbin/sceau" 2>/dev/null || cp "$binary" "$root/usr/sbin/sceau"
# ExecReload= runs /bin/kill (procps; /bin is /usr/bin on a merged-/usr
# system), which verify also wants executable in the root.
mkdir -p "$root/bin"
cp "$(type -P kill)" "$root/bin/kill"

echo "== systemd-analyze verify ${units[*]} (root: /usr/sbin/sceau = $binary)"
verify_rc=0
verify_out=$(systemd-analyze verify --root="$root" sceau.socket sceau.service 2>&1) || verify_rc=$?
if [ "$verify_rc" -ne 0 ] || [ -n "$verify_out" ]; then
    printf '%s\n' "$verify_out" >&2
    fail "systemd-analyze verify (exit $verify_rc; a clean unit prints nothing)"
else
    echo "ok: no errors, no warnings"
fi

# --- 2. systemd-analyze security ---------------------------------------------
# On systemd 252, --threshold= is an integer in tenths of the displayed score
# (0-100; "--threshold=1.0" is rejected with "Failed to parse threshold").
threshold=$(awk -v s="$max_exposure" 'BEGIN { printf "%d", s * 10 + 0.5 }')
echo "== systemd-analyze security --offline=true --threshold=$threshold $service (exposure <= $max_exposure)"
security_rc=0
security_out=$(systemd-analyze security --no-pager --offline=true --threshold="$threshold" "$service" 2>&1) ||
    security_rc=$?
score_line=$(printf '%s\n' "$security_out" | grep 'Overall exposure level' | tail -n1 || true)
printf '%s\n' "$security_out" | grep '✗' || true
echo "$score_line"
score=$(printf '%s\n' "$score_line" | sed -n 's/.*: \([0-9][0-9.]*\) .*/\1/p')
if [ "$security_rc" -ne 0 ] || [ -z "$score" ]; then
    [ -n "$score_line" ] || printf '%s\n' "$security_out" >&2
    fail "systemd-analyze security (exit $security_rc)"
elif ! awk -v s="$score" -v m="$max_exposure" 'BEGIN { exit !(s <= m) }'; then
    fail "exposure $score is above $max_exposure"
fi

# --- 3. The system call filter keeps what sceau calls -------------------------
own_allowlist=src/sandbox/seccomp.rs
traced_count=${#required_syscalls[@]}
if [ -f "$own_allowlist" ]; then
    # Only the filter itself: names in its unit tests (such as calls it must
    # not allow) are not calls sceau makes.
    mapfile -t own < <(sed '/^#\[cfg(test)\]/,$d' "$own_allowlist" | grep -o 'libc::SYS_[a-z0-9_]*' | sed 's/^libc::SYS_//' | sort -u)
    required_syscalls+=("${own[@]}")
    source_note="$traced_count traced, ${#own[@]} in $own_allowlist"
else
    source_note="$traced_count traced; $own_allowlist not found"
fi
echo "== SystemCallFilter= of $service allows the calls sceau makes ($source_note)"
filter_result=$(
    {
        # Groups of this systemd version: "@group" headers, 4-space-indented members.
        systemd-analyze syscall-filter --no-pager 2>/dev/null |
            awk '/^@/ { g = $1; next } /^ +#/ { next } /^    [^ #]/ && g != "" { print "G", g, $1; next } { g = "" }'
        # The unit's SystemCallFilter= lines, in order (drop-ins are not shipped).
        sed -n 's/^SystemCallFilter=\(.*\)$/\1/p' "$service" | sed 's/^/F /'
        printf 'R %s\n' "${required_syscalls[@]}"
    } | awk '
        function add(name, on,    i, n, list) {
            if (name ~ /^@/) {
                if (depth[name]++) return
                n = split(members[name], list, " ")
                for (i = 1; i <= n; i++) add(list[i], on)
                depth[name]--
                return
            }
            if (on) allowed[name] = 1; else delete allowed[name]
        }
        $1 == "G" { members[$2] = members[$2] " " $3; if ($2 == "@known") known[$3] = 1; next }
        $1 == "F" {
            line = substr($0, 3)
            if (line == "") { started = 0; split("", allowed); next }
            deny = sub(/^~/, "", line)
            if (!started) { started = 1; allow_list = !deny; if (allow_list) add("@default", 1) }
            n = split(line, words, /[ \t]+/)
            for (i = 1; i <= n; i++) {
                w = words[i]; sub(/:.*/, "", w)
                if (w == "") continue
                # In an allow-list, "~" lines remove; in a deny-list, plain lines add to the deny set.
                add(w, allow_list ? !deny : deny)
            }
            next
        }
        $1 == "R" {
            if (!started) next
            ok = allow_list ? ($2 in allowed) : !($2 in allowed)
            if (!ok) print "DENIED", $2
            else if (("@known" in members) && !($2 in known)) print "UNKNOWN", $2
        }
        END {
            if (!("@system-service" in members)) print "NOGROUPS"
            if (!started) print "NOFILTER"
        }
    '
)
if grep -q '^NOGROUPS' <<<"$filter_result"; then
    fail "could not read the system call groups from systemd-analyze syscall-filter"
elif grep -q '^NOFILTER' <<<"$filter_result"; then
    fail "$service has no SystemCallFilter="
fi
unknown=$(sed -n 's/^UNKNOWN //p' <<<"$filter_result" | sort -u | tr '\n' ' ')
[ -z "$unknown" ] || echo "note: not known to this systemd (checked as names only): $unknown"
denied=$(sed -n 's/^DENIED //p' <<<"$filter_result" | sort -u | tr '\n' ' ')
if [ -n "$denied" ]; then
    fail "the unit's SystemCallFilter= denies calls sceau makes: $denied"
else
    echo "ok: all allowed (argument filters of RestrictNamespaces=, MemoryDenyWriteExecute=, RestrictAddressFamilies= are not modelled)"
fi

if [ "$failed" -ne 0 ]; then
    echo "check-units: FAILED" >&2
    exit 1
fi
echo "check-units: ok"
