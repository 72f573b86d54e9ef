#!/usr/bin/env bash
# Builds the Debian packages sceau_VERSION_ARCH.deb and
# sceau-spire_VERSION_ARCH.deb from the workspace.
#
# Plain dpkg-dev, no cargo-deb and no debhelper: fewer moving parts (no new
# crate or cargo tool to pin, vet and audit), and everything that ends up in
# the package is in packaging/ as reviewable text: the control file, the
# maintainer scripts, copyright, changelog, lintian overrides, the example.
# dpkg-shlibdeps computes Depends from the binaries' ELF NEEDED entries;
# dpkg-gencontrol writes DEBIAN/control; dpkg-deb builds the archive.
#
# Two packages, because they go on different machines: `sceau` (the KMS
# daemon, its units, sceau-recover) is enabled and started on installation,
# which a SPIRE server, which needs only sceau-spire-server, must not get.
#
# Usage: scripts/package-deb.sh [OUTDIR]      (default target/debian)
#   SCEAU_DEB_NO_BUILD=1 packages target/release as it is (no cargo build).
# Prints the path of each .deb on the last lines ("built: PATH").
#
# Man pages and completions come from the binaries themselves
# (`sceau --generate man|complete-bash|complete-zsh`, the same flag table as
# --help). A binary without that flag gets a "SKIP ..." line and the package
# goes without them (check-deb.sh then fails on lintian's
# binary-without-manpage).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/lib.sh

outdir=${1:-target/debian}
SCEAU_PACKAGES+=(dpkg-dev binutils gzip)
install_packages
require_cargo

# --- version: Cargo.toml is the source; the changelog must agree ------------
upstream=$(awk -F'"' '/^\[/ { in_pkg = ($0 == "[package]") } in_pkg && /^version *=/ { print $2; exit }' Cargo.toml)
deb_version=$(dpkg-parsechangelog -l packaging/debian/changelog -S Version)
if [ "${deb_version%-*}" != "$upstream" ]; then
    echo "package-deb: Cargo.toml says version $upstream but packaging/debian/changelog's top entry is $deb_version; add a changelog entry for $upstream-1 (dch -c packaging/debian/changelog -v $upstream-1)" >&2
    exit 1
fi

# --- the binaries --------------------------------------------------------------
# Two cargo runs, not one: building sceau-spire in the same run would unify
# its dependency features into the daemon's and change the daemon binary.
# `-p sceau -p sceau-recover` is exactly scripts/size.sh's build, so the
# packaged daemon is the one whose size and crate count CI checks.
if [ -z "${SCEAU_DEB_NO_BUILD:-}" ]; then
    echo "== cargo build --release --locked -p sceau -p sceau-recover; then -p sceau-spire --bins"
    cargo build --release --locked --quiet -p sceau -p sceau-recover
    cargo build --release --locked --quiet -p sceau-spire --bins
fi
rel=target/release
for bin in sceau sceau-recover sceau-spire-server sceau-spire-agent; do
    [ -x "$rel/$bin" ] || {
        echo "package-deb: $rel/$bin is missing (run without SCEAU_DEB_NO_BUILD)" >&2
        exit 1
    }
done

# Reproducible: every file is dated from the changelog entry (and owned by
# root). Exported after cargo, so it cannot make cargo rebuild what
# scripts/size.sh built, and before the man pages are generated, for their
# date.
SOURCE_DATE_EPOCH=$(dpkg-parsechangelog -l packaging/debian/changelog -S Timestamp)
export SOURCE_DATE_EPOCH

# --- a throwaway tree laid out as dpkg-dev expects (debian/ + one root each) --
mkdir -p target
tree=$(mktemp -d "$repo/target/deb-tree.XXXXXX")
trap 'rm -rf "$tree"' EXIT
cp -r packaging/debian "$tree/debian"
root=$tree/debian/sceau
spire_root=$tree/debian/sceau-spire
doc=$root/usr/share/doc/sceau

# Stripped the way dh_strip does it (lintian: unstripped-binary-or-object,
# binary-has-unneeded-section).
install_stripped() { # SRC DEST
    install -D -m 0755 "$1" "$2"
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$2"
}
install_stripped "$rel/sceau" "$root/usr/sbin/sceau"
install_stripped "$rel/sceau-recover" "$root/usr/bin/sceau-recover"
# SPIRE loads its plugins by path (plugin_cmd, docs/spire.md); they are not
# commands, so they stay off PATH.
install_stripped "$rel/sceau-spire-server" "$spire_root/usr/libexec/sceau/sceau-spire-server"
install_stripped "$rel/sceau-spire-agent" "$spire_root/usr/libexec/sceau/sceau-spire-agent"

# Every unit in systemd/, byte for byte. Only sceau.socket and
# sceau.service are enabled (postinst); the others ship disabled.
units=()
for unit in systemd/*.socket systemd/*.service; do
    [ -e "$unit" ] || continue
    install -D -m 0644 "$unit" "$root/usr/lib/systemd/system/$(basename "$unit")"
    units+=("$(basename "$unit")")
done
# The service's user, made by postinst with systemd-sysusers.
install -D -m 0644 packaging/sysusers/sceau.conf "$root/usr/lib/sysusers.d/sceau.conf"
for needed in sceau.socket sceau.service; do
    [ -e "systemd/$needed" ] || {
        echo "package-deb: systemd/$needed is missing" >&2
        exit 1
    }
done
other_units=()
for unit in "${units[@]}"; do
    case $unit in sceau.socket | sceau.service) ;; *) other_units+=("$unit") ;; esac
done

# Man pages and completions, generated by the binaries that were just built.
generated() { # BINARY WHAT DEST: BINARY --generate WHAT > DEST, or a SKIP line
    local out
    if out=$("$1" --generate "$2" 2>/dev/null) && [ -n "$out" ]; then
        mkdir -p "$(dirname "$3")"
        printf '%s\n' "$out" >"$3"
        return 0
    fi
    echo "SKIP /${3#"$root"/}: '$(basename "$1") --generate $2' is not supported by this build, so the package goes without it (re-run once the binary has --generate)"
    return 1
}
man_pages=0
for spec in "sceau 8" "sceau-recover 1"; do
    read -r name section <<<"$spec"
    bin=$rel/$name
    page=$root/usr/share/man/man$section/$name.$section
    if generated "$bin" man "$page"; then
        gzip -9n "$page"
        man_pages=$((man_pages + 1))
    fi
    generated "$bin" complete-bash "$root/usr/share/bash-completion/completions/$name" || true
    generated "$bin" complete-zsh "$root/usr/share/zsh/vendor-completions/_$name" || true
done

# Documentation: copyright, changelog, the example EncryptionConfiguration.
for pkg_doc in "$doc" "$spire_root/usr/share/doc/sceau-spire"; do
    install -D -m 0644 packaging/debian/copyright "$pkg_doc/copyright"
    gzip -9n <packaging/debian/changelog >"$pkg_doc/changelog.Debian.gz"
    chmod 0644 "$pkg_doc/changelog.Debian.gz"
done
install -D -m 0644 packaging/examples/encryption-config.yaml "$doc/examples/encryption-config.yaml"
install -D -m 0644 packaging/prometheus/sceau-rules.yml "$doc/examples/sceau-rules.yml"
for pkg in sceau sceau-spire; do
    if [ -e "packaging/debian/$pkg.lintian-overrides" ]; then
        install -D -m 0644 "packaging/debian/$pkg.lintian-overrides" \
            "$tree/debian/$pkg/usr/share/lintian/overrides/$pkg"
    fi
done

# Maintainer scripts, with the unit lists filled in.
mkdir -p "$root/DEBIAN" "$spire_root/DEBIAN"
for script in postinst prerm postrm; do
    sed -e "s/#ALL_UNITS#/${units[*]}/" -e "s/#OTHER_UNITS#/${other_units[*]}/" \
        "packaging/debian/sceau.$script" >"$root/DEBIAN/$script"
    chmod 0755 "$root/DEBIAN/$script"
done

mkdir -p "$outdir"
built=()
for pkg in sceau sceau-spire; do
    pkg_root=$tree/debian/$pkg
    # Depends: the libraries the binaries link (dpkg-shlibdeps reads their
    # NEEDED entries and the libraries' shlibs/symbols files). The TCTI
    # library tpm2-tss dlopens at run time is not a NEEDED entry, so
    # debian/control names it.
    mapfile -t elves < <(find "$pkg_root" -type f -perm -0100 ! -path '*/DEBIAN/*' | sort)
    (cd "$tree" && dpkg-shlibdeps -T"debian/$pkg.substvars" "${elves[@]#"$tree/"}")
    # Debian 13 renamed libtss2-mu0 to libtss2-mu-4.0.1-0t64 (same SONAME,
    # no Provides of the old name): name it as the alternative, so that one
    # package installs on both suites (debian/control says why that is safe).
    sed -i -E 's/(libtss2-mu0 \([^)]*\))/\1 | libtss2-mu-4.0.1-0t64/' "$tree/debian/$pkg.substvars"
    (cd "$tree" && find "debian/$pkg" -type f ! -path '*/DEBIAN/*' -printf '%P\0' |
        LC_ALL=C sort -z | (cd "debian/$pkg" && xargs -0 md5sum) >"debian/$pkg/DEBIAN/md5sums")
    chmod 0644 "$pkg_root/DEBIAN/md5sums"
    (cd "$tree" && dpkg-gencontrol -p"$pkg" -ldebian/changelog -cdebian/control \
        -T"debian/$pkg.substvars" -P"debian/$pkg" -v"$deb_version")
    find "$pkg_root" -exec touch --no-dereference -d "@$SOURCE_DATE_EPOCH" {} +
    arch=$(dpkg-architecture -qDEB_HOST_ARCH)
    deb=$outdir/${pkg}_${deb_version}_$arch.deb
    dpkg-deb --root-owner-group -Zxz --build "$pkg_root" "$deb" >/dev/null
    built+=("$deb")
done

echo "man pages: $man_pages of 2 generated"
for deb in "${built[@]}"; do
    echo "== $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
done
for deb in "${built[@]}"; do echo "built: $deb"; done
