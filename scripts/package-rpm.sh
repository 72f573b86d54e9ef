#!/usr/bin/env bash
# Builds sceau-VERSION-1.ARCH.rpm and sceau-spire-VERSION-1.ARCH.rpm from
# packaging/rpm/sceau.spec with rpmbuild (Debian's `rpm` package), from
# the binaries scripts/package-deb.sh builds (`--with prebuilt`), then
# checks them:
#   - rpmlint (Debian's `rpmlint`) on the spec and both packages: no error
#     (its warnings are printed; the ones that only say "this host is not
#     RHEL" are listed in packaging/rpm/sceau.rpmlintrc with their reasons);
#   - every file, mode and owner in each package against the .deb's list;
#   - the scriptlets: the sysusers line is packaging/sysusers/sceau.conf's,
#     and the units are handed to systemd-update-helper.
# What cannot be checked here (no RHEL root can be fetched): installation
# with dnf, and the dependencies' names on RHEL (docs/install.md).
#
# Usage: scripts/package-rpm.sh [OUTDIR]       (default target/rpm)
#   SCEAU_RPM_NO_BUILD=1 packages target/release as it is (no cargo build).
# Prints "PASS name" / "FAIL name: why" lines and "N passed, M failed" last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

outdir=${1:-target/rpm}
SCEAU_PACKAGES+=(rpm rpmlint cpio)
install_packages
require_cargo

count_checks

version=$(package_version)
spec=packaging/rpm/sceau.spec
if ! grep -q "^\* .* - $version-1\$" "$spec"; then
    echo "package-rpm: Cargo.toml says version $version but $spec's %changelog has no $version-1 entry" >&2
    exit 1
fi
if [ -z "${SCEAU_RPM_NO_BUILD:-}" ]; then
    echo "== cargo build --release --locked -p sceau -p sceau-recover; then -p sceau-spire --bins"
    cargo build --release --locked --quiet -p sceau -p sceau-recover
    cargo build --release --locked --quiet -p sceau-spire --bins
fi

work=$(mktemp -d "$PWD/target/rpm-tree.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage
mkdir -p "$stage/bin" "$stage/units" "$stage/doc" "$work/SOURCES"
for bin in sceau sceau-recover sceau-spire-server sceau-spire-agent; do
    # Stripped as the .deb's are; rpmbuild's own strip needs debuginfo
    # tooling that is RHEL's, not Debian's.
    install -m 0755 "target/release/$bin" "$stage/bin/$bin"
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/bin/$bin"
done
cp systemd/*.socket systemd/*.service "$stage/units/"
cp packaging/examples/encryption-config.yaml packaging/prometheus/sceau-rules.yml \
    packaging/grafana/sceau-dashboard.json packaging/journald/sceau.catalog \
    packaging/debian/copyright "$stage/doc/"
cp packaging/sysusers/sceau.conf "$work/SOURCES/"

load=()
if [ "$(rpm --eval '%{?_unitdir}')" = "" ]; then
    load=(--load packaging/rpm/macros.build-host)
fi
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH
mkdir -p "$outdir"
if rpmbuild -bb --quiet "${load[@]}" --with prebuilt \
    --define "_topdir $work" --define "_rpmdir $PWD/$outdir" \
    --define "sceau_version $version" --define "sceau_stage $stage" \
    --define "_build_id_links none" --define "use_source_date_epoch_as_buildtime 1" \
    --define "clamp_mtime_to_source_date_epoch 1" --define "__os_install_post %{nil}" \
    --nodeps "$spec" >"$work/rpmbuild.log" 2>&1; then
    pass "rpmbuild -bb $spec (version $version)"
else
    cat "$work/rpmbuild.log"
    fail rpmbuild "it failed (output above)"
    echo "$passed passed, $failed failed"
    exit 1
fi
mapfile -t rpms < <(find "$outdir" -name "sceau*-$version-1.*.rpm" | sort)
rpm_main=$(printf '%s\n' "${rpms[@]}" | grep -v spire)
rpm_spire=$(printf '%s\n' "${rpms[@]}" | grep spire)

# --- rpmlint ------------------------------------------------------------------
lint=$(rpmlint -r packaging/rpm/sceau.rpmlintrc "$spec" "${rpms[@]}" 2>&1) || true
echo "$lint" | sed 's/^/  rpmlint: /'
errors=$(grep -cE ': E: ' <<<"$lint" || true)
if [ "$errors" -eq 0 ]; then
    pass "rpmlint $(rpmlint --version 2>/dev/null | head -n 1): 0 errors ($(grep -m1 -oE '[0-9]+ warnings' <<<"$lint" || echo '0 warnings'), listed above)"
else
    fail rpmlint "$errors error(s) (listed above)"
fi

# --- the file lists ---------------------------------------------------------------
# The same files as the .deb (scripts/check-deb.sh), at RHEL's paths: zsh
# completions in site-functions, the copyright as the license file, and the
# state directory owned by the package.
list() { # RPM: "mode owner:group path" per entry
    rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]' "$1" 2>/dev/null | sort
}
expected_main="-rw-r--r-- root:root /usr/lib/systemd/catalog/sceau.catalog
-rw-r--r-- root:root /usr/lib/systemd/system/sceau-metrics.socket
-rw-r--r-- root:root /usr/lib/systemd/system/sceau.service
-rw-r--r-- root:root /usr/lib/systemd/system/sceau.socket
-rw-r--r-- root:root /usr/lib/sysusers.d/sceau.conf
-rw-r--r-- root:root /usr/share/bash-completion/completions/sceau
-rw-r--r-- root:root /usr/share/bash-completion/completions/sceau-recover
-rw-r--r-- root:root /usr/share/doc/sceau/examples/encryption-config.yaml
-rw-r--r-- root:root /usr/share/doc/sceau/examples/sceau-dashboard.json
-rw-r--r-- root:root /usr/share/doc/sceau/examples/sceau-rules.yml
-rw-r--r-- root:root /usr/share/licenses/sceau/copyright
-rw-r--r-- root:root /usr/share/man/man1/sceau-recover.1.gz
-rw-r--r-- root:root /usr/share/man/man8/sceau.8.gz
-rw-r--r-- root:root /usr/share/zsh/site-functions/_sceau
-rw-r--r-- root:root /usr/share/zsh/site-functions/_sceau-recover
-rwxr-xr-x root:root /usr/bin/sceau-recover
-rwxr-xr-x root:root /usr/sbin/sceau
drwx------ sceau:sceau /var/lib/sceau
drwxr-xr-x root:root /usr/share/doc/sceau
drwxr-xr-x root:root /usr/share/doc/sceau/examples"
expected_spire="-rw-r--r-- root:root /usr/share/licenses/sceau-spire/copyright
-rwxr-xr-x root:root /usr/libexec/sceau/sceau-spire-agent
-rwxr-xr-x root:root /usr/libexec/sceau/sceau-spire-server
drwxr-xr-x root:root /usr/libexec/sceau"
check_list() { # RPM EXPECTED
    local file=$1 want got
    want=$(sort <<<"$2")
    got=$(list "$file")
    if [ "$want" = "$got" ]; then
        pass "$(basename "$file") holds exactly the $(wc -l <<<"$want") expected entries, modes and owners as listed"
    else
        fail "$(basename "$file") file list" "missing: $(comm -23 <(echo "$want") <(echo "$got") | tr '\n' ';') unexpected: $(comm -13 <(echo "$want") <(echo "$got") | tr '\n' ';')"
    fi
}
check_list "$rpm_main" "$expected_main"
check_list "$rpm_spire" "$expected_spire"

# --- scriptlets and dependencies ----------------------------------------------------
scripts=$(rpm -qp --scripts "$rpm_main" 2>/dev/null)
sysusers_line=$(grep -v '^#' packaging/sysusers/sceau.conf | grep .)
if grep -qF "$sysusers_line" <<<"$scripts" && grep -q 'systemd-sysusers --replace=/usr/lib/sysusers.d/sceau.conf' <<<"$scripts"; then
    pass "preinstall makes the user from sysusers.d before the files it owns ($sysusers_line)"
else
    fail "preinstall scriptlet" "no systemd-sysusers call with '$sysusers_line': $scripts"
fi
for verb in install-system-units remove-system-units mark-restart-system-units; do
    if grep -q "systemd-update-helper $verb" <<<"$scripts"; then
        pass "scriptlets: systemd-update-helper $verb"
    else
        fail "scriptlets" "no systemd-update-helper $verb"
    fi
done
requires=$(rpm -qp --requires "$rpm_main" 2>/dev/null | tr '\n' ' ')
missing=()
for need in 'libtss2-esys.so.0()(64bit)' 'libtss2-tctildr.so.0()(64bit)' 'tpm2-tss >= 3.0.1' 'libc.so.6(GLIBC_2.34)(64bit)'; do
    grep -qF "$need" <<<"$requires" || missing+=("$need")
done
if [ ${#missing[@]} -eq 0 ]; then
    pass "Requires: ${need_list:-}$(printf "%s, " 'libtss2-esys.so.0()(64bit)' 'libtss2-tctildr.so.0()(64bit)' 'tpm2-tss >= 3.0.1' 'libc.so.6(GLIBC_2.34)(64bit)')and the rest rpm found in the binaries"
else
    fail Requires "lacks ${missing[*]}: $requires"
fi
glibc=$(objdump -T "$stage/bin/sceau" | grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -n 1)
if [ "$(printf '%s\n' "$glibc" GLIBC_2.34 | sort -V | tail -n 1)" = GLIBC_2.34 ]; then
    pass "the daemon needs $glibc at most: RHEL 9's glibc is 2.34"
else
    fail "glibc" "the daemon needs $glibc, above RHEL 9's 2.34"
fi

for r in "${rpms[@]}"; do echo "built: $r"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
