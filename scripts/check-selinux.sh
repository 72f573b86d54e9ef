#!/usr/bin/env bash
# The SELinux policy module (packaging/selinux/): compiled with the
# reference policy's development Makefile and checkmodule, as an operator
# on an SELinux host builds it. Debian ships the tools and the reference
# policy's interfaces (selinux-policy-dev), not RHEL's targeted policy, so
# this proves the module's syntax and that every interface it calls exists
# in the reference policy; it loads nothing (no SELinux kernel here).
# Shown failing: with dev_rw_tpm misspelt, checkmodule stops at a syntax
# error and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

SCEAU_PACKAGES+=(selinux-policy-dev checkpolicy semodule-utils make)
install_packages

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp packaging/selinux/sceau.te packaging/selinux/sceau.fc packaging/selinux/sceau.if "$work/"
if ! (cd "$work" && make -s -f /usr/share/selinux/devel/Makefile sceau.pp) >"$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    echo "FAIL selinux module: it does not compile (log above)"
    exit 1
fi
# The module carries its types and its file contexts.
strings "$work/sceau.pp" >"$work/strings"
for want in sceau_t sceau_exec_t sceau_runtime_t sceau_var_lib_t /usr/sbin/sceau /run/sceau; do
    if ! grep -qF "$want" "$work/strings"; then
        echo "FAIL selinux module: $want is not in sceau.pp"
        exit 1
    fi
done
echo "PASS selinux module: sceau.pp ($(stat -c %s "$work/sceau.pp") bytes) against $(dpkg-query -W -f='selinux-policy-dev ${Version}' selinux-policy-dev)"
