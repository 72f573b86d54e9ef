#!/usr/bin/env bash
# Checks the Debian packages: builds them with
# scripts/package-deb.sh, runs lintian on each (no error, no warning; every
# override carries its reason in packaging/debian/*.lintian-overrides), and
# checks what each .deb holds against the list below: every file, its owner
# and mode, the control fields and the maintainer scripts.
#
# Installing, serving, upgrading and purging are checked under real systemd in
# the VM test (scripts/vm-e2e.sh), which installs the same .deb.
#
# Usage: scripts/check-deb.sh [OUTDIR]       (default target/debian)
# Prints "PASS name" / "FAIL name: why" lines and "N passed, M failed" last;
# exits 1 on any FAIL.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

outdir=${1:-target/debian}
SCEAU_PACKAGES+=(lintian dpkg-dev)
install_packages

count_checks

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! bash scripts/package-deb.sh "$outdir" | tee "$log"; then
    fail "package-deb.sh" "it failed (output above)"
    echo "$passed passed, $failed failed"
    exit 1
fi
mapfile -t debs < <(sed -n 's/^built: //p' "$log")
deb=$(printf '%s\n' "${debs[@]}" | grep '/sceau_')
spire_deb=$(printf '%s\n' "${debs[@]}" | grep '/sceau-spire_')
pass "package-deb.sh built $(basename "$deb") and $(basename "$spire_deb")"
if grep -q '^SKIP ' "$log"; then
    fail "man pages and completions" "$(grep -c '^SKIP ' "$log") generated file(s) skipped: the binaries lack --generate (see the SKIP lines)"
fi

# --- lintian ---------------------------------------------------------------------
for d in "$deb" "$spire_deb"; do
    name=$(basename "$d")
    out=$(lintian --fail-on none --show-overrides --no-tag-display-limit "$d" 2>&1) || true
    echo "$out" | sed 's/^/  lintian: /'
    bad=$(echo "$out" | grep -E '^[EW]: ' || true)
    overridden=$(echo "$out" | grep -c '^O: ' || true)
    if [ -z "$bad" ]; then
        pass "lintian $name: 0 errors, 0 warnings ($overridden overridden, each with its reason)"
    else
        fail "lintian $name" "$(echo "$bad" | grep -c '^E: ') error(s), $(echo "$bad" | grep -c '^W: ') warning(s) (listed above)"
    fi
done

# --- the file lists --------------------------------------------------------------
# Every path a package must hold, and nothing else: "mode path" per file.
expected_sceau=(
    "0755 ./usr/sbin/sceau"
    "0755 ./usr/bin/sceau-recover"
    "0644 ./usr/share/man/man8/sceau.8.gz"
    "0644 ./usr/share/man/man1/sceau-recover.1.gz"
    "0644 ./usr/share/bash-completion/completions/sceau"
    "0644 ./usr/share/bash-completion/completions/sceau-recover"
    "0644 ./usr/share/zsh/vendor-completions/_sceau"
    "0644 ./usr/share/zsh/vendor-completions/_sceau-recover"
    "0644 ./usr/share/doc/sceau/copyright"
    "0644 ./usr/share/doc/sceau/changelog.Debian.gz"
    "0644 ./usr/share/doc/sceau/examples/encryption-config.yaml"
    "0644 ./usr/share/doc/sceau/examples/sceau-rules.yml"
    "0644 ./usr/share/doc/sceau/examples/sceau-dashboard.json"
    "0644 ./usr/lib/sysusers.d/sceau.conf"
    "0644 ./usr/lib/systemd/catalog/sceau.catalog"
)
for unit in systemd/*.socket systemd/*.service; do
    expected_sceau+=("0644 ./usr/lib/systemd/system/$(basename "$unit")")
done
[ -e packaging/debian/sceau.lintian-overrides ] &&
    expected_sceau+=("0644 ./usr/share/lintian/overrides/sceau")
expected_spire=(
    "0755 ./usr/libexec/sceau/sceau-spire-server"
    "0755 ./usr/libexec/sceau/sceau-spire-agent"
    "0644 ./usr/share/doc/sceau-spire/copyright"
    "0644 ./usr/share/doc/sceau-spire/changelog.Debian.gz"
)
[ -e packaging/debian/sceau-spire.lintian-overrides ] &&
    expected_spire+=("0644 ./usr/share/lintian/overrides/sceau-spire")

# "dpkg-deb -c" prints "-rwxr-xr-x root/root SIZE DATE TIME ./path".
octal() { # a 9-character ls mode, e.g. rwxr-xr-x -> 0755
    local s=$1 n=0 i
    for i in 0 1 2 3 4 5 6 7 8; do
        n=$((n * 2))
        [ "${s:$i:1}" != - ] && n=$((n + 1))
    done
    printf '0%o' "$n"
}
check_list() { # DEB EXPECTED...
    local d=$1 name kind owner path want got extra entries=()
    shift
    name=$(basename "$d")
    while read -r kind owner _ _ _ path _; do
        [ "$owner" = root/root ] || fail "$name: owner of $path" "$owner, expected root/root"
        case $kind in
        d*) ;;
        -*) entries+=("$(octal "${kind:1:9}") $path") ;;
        *) entries+=("${kind:0:1} $path") ;;
        esac
    done < <(dpkg-deb -c "$d")
    want=$(printf '%s\n' "$@" | sort)
    got=$(printf '%s\n' "${entries[@]}" | sort)
    if [ "$want" = "$got" ]; then
        pass "$name holds exactly the $# expected files, modes as listed, all root/root"
    else
        extra=$(comm -13 <(echo "$want") <(echo "$got") | tr '\n' ' ')
        fail "$name file list" "missing: $(comm -23 <(echo "$want") <(echo "$got") | tr '\n' ' '); unexpected: $extra"
    fi
}
check_list "$deb" "${expected_sceau[@]}"
check_list "$spire_deb" "${expected_spire[@]}"

# --- control fields ---------------------------------------------------------------
upstream=$(package_version)
for d in "$deb" "$spire_deb"; do
    version=$(dpkg-deb -f "$d" Version)
    if [ "${version%-*}" = "$upstream" ]; then
        pass "$(basename "$d"): Version $version from Cargo.toml's $upstream"
    else
        fail "$(basename "$d") Version" "$version, Cargo.toml says $upstream"
    fi
done
depends=$(dpkg-deb -f "$deb" Depends)
missing=()
# From dpkg-shlibdeps (the daemon links ESYS, the TCTI loader, libcrypto and
# libc), and
# the two debian/control adds: the TCTI library the loader dlopens, and the
# group tss with the udev rule for /dev/tpmrm0.
for pkg in libc6 libssl3 libtss2-esys-3.0.2-0 libtss2-tctildr0 libtss2-tcti-device0 tpm-udev; do
    echo "$depends" | grep -Eq "(^|, )$pkg( |,|$)" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
    pass "sceau Depends: $depends"
else
    fail "sceau Depends" "lacks ${missing[*]}: $depends"
fi
# Debian 12 and 13: no upper bound on tpm2-tss, and Debian 13's name for
# libtss2-mu as the alternative (scripts/check-deb-suites.sh installs it in
# a clean root of each).
if echo "$depends" | grep -q '<<'; then
    fail "sceau Depends" "an upper bound keeps it off Debian 13: $depends"
elif echo "$depends" | grep -Eq '(^|, )libtss2-mu0 \([^)]*\) \| libtss2-mu-4\.0\.1-0t64(,|$)'; then
    pass "sceau Depends: libtss2-mu0 or Debian 13's libtss2-mu-4.0.1-0t64, no upper bound"
else
    fail "sceau Depends" "no 'libtss2-mu0 (...) | libtss2-mu-4.0.1-0t64' alternative: $depends"
fi

# --- maintainer scripts -------------------------------------------------------------
ctl=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
for script in postinst prerm postrm; do
    f=$ctl/$script
    if [ ! -x "$f" ]; then
        fail "maintainer script $script" "missing or not executable"
    elif ! sh -n "$f"; then
        fail "maintainer script $script" "sh -n refuses it"
    elif grep -q '#[A-Z_]*UNITS#' "$f"; then
        fail "maintainer script $script" "a unit list was not filled in"
    else
        pass "maintainer script $script: executable, valid sh, unit lists filled in"
    fi
done
enabled=$(sed -n 's/^enabled_units="\(.*\)"$/\1/p' "$ctl/postinst")
others=$(sed -n 's/^other_units="\(.*\)"$/\1/p' "$ctl/postinst")
all=$(sed -n 's/^units="\(.*\)"$/\1/p' "$ctl/prerm")
if [ "$enabled" = "sceau.socket sceau.service" ] &&
    [ "$(echo "$enabled $others" | tr ' ' '\n' | grep . | sort)" = "$(echo "$all" | tr ' ' '\n' | sort)" ]; then
    pass "postinst enables sceau.socket and sceau.service only; ships '${others:-nothing else}' disabled; prerm/postrm cover all: $all"
else
    fail "unit lists" "enabled='$enabled' others='$others' prerm='$all'"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
