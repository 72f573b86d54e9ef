# shellcheck shell=bash
# Sourced by the guest's check scripts (guest-checks.sh, guest-binding.sh,
# guest-firmware.sh): the lines the host parses from the serial console,
# one "PASS [tag] name" or "FAIL [tag] name: why" per check and
# "INFO [tag] ..." for context, with the counts, and the closing summary.
# The caller sets `tag` before it calls any of them.
# shellcheck disable=SC2154 # tag: set by the sourcing script
passed=0
failed=0
pass() { echo "PASS [$tag] $1"; passed=$((passed + 1)); }
fail() { echo "FAIL [$tag] $1: $2"; failed=$((failed + 1)); }
info() { echo "INFO [$tag] $*"; }
# Prints a command's output as INFO lines (for context on failures).
show() { sed "s/^/INFO [$tag]   /"; }

# The uptime the checks start at, for the summary's duration.
checks_start=$(cut -d' ' -f1 /proc/uptime)

# The last lines of a check script: the counts and the time taken; the
# status is the script's (0 only with no FAIL).
summary() {
    info "guest: $passed passed, $failed failed; checks took $(awk -v s="$checks_start" '{printf "%.1f", $1 - s}' /proc/uptime) s"
    [ "$failed" -eq 0 ]
}
