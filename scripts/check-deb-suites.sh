#!/usr/bin/env bash
# Installs the .deb built by scripts/package-deb.sh into a clean root of
# each Debian suite sceau supports (12 bookworm, 13 trixie), as a new user
# would with `apt-get install ./sceau_….deb`, and in each root:
#   - apt resolves every Depends from that suite's own archive (Debian 13
#     renamed libtss2-mu0 to libtss2-mu-4.0.1-0t64; the others keep their
#     names through Provides);
#   - the installed /usr/sbin/sceau serves on that suite's tpm2-tss and
#     swtpm, and `sceau check` makes a Status and Encrypt/Decrypt round trip;
#     `sceau kek rotate` and a second round trip under generation 1 follow;
#   - the installed sceau-recover answers --version;
#   - that suite's lintian passes both packages (no error, no warning);
#   - every TPM and TSS structure layout the binary assumes (tss-esapi-sys's
#     bindings, compiled in) is that suite's tpm2-tss's: size and every
#     field offset, printed by a program scripts/tss-layouts.py writes and
#     the suite's gcc compiles against its libtss2-dev.
#
# The roots are made with mmdebstrap (a Debian package) from the package
# archive alone, and kept as tarballs in ~/.cache/sceau-interop/roots, keyed
# by suite and by the package list below; a root is unpacked afresh for
# every run, so nothing one run installs reaches the next.
#
# Usage: scripts/check-deb-suites.sh [OUTDIR]    (default target/debian; the
# .debs must be there: scripts/check-deb.sh builds them)
#   SCEAU_SUITES="trixie" checks one suite only.
# Prints "PASS name" / "FAIL name: why" lines and "N passed, M failed" last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

outdir=${1:-target/debian}
SCEAU_PACKAGES+=(mmdebstrap)
install_packages
suites=(${SCEAU_SUITES:-bookworm trixie})
# What each root holds before the .deb: systemd (systemd-sysusers makes the
# service's user), swtpm for the round trip, lintian for the suite's checks.
root_packages=systemd,swtpm,swtpm-tools,lintian,ca-certificates
cache=${XDG_CACHE_HOME:-$HOME/.cache}/sceau-interop/roots
mkdir -p "$cache"

count_checks

shopt -s nullglob
debs=("$outdir"/sceau_*.deb "$outdir"/sceau-spire_*.deb)
shopt -u nullglob
if [ ${#debs[@]} -ne 2 ]; then
    echo "check-deb-suites: expected sceau_*.deb and sceau-spire_*.deb in $outdir (run scripts/check-deb.sh first)" >&2
    exit 1
fi

# The layouts the binary assumes: the bindings of the tss-esapi-sys in
# Cargo.lock, as cargo unpacked them.
tss_sys=$(awk '/^name = "tss-esapi-sys"$/ { getline; sub(/^version = /, ""); gsub(/"/, ""); print; exit }' Cargo.lock)
bindings=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"tss-esapi-sys-$tss_sys/src/bindings/x86_64-unknown-linux-gnu.rs" 2>/dev/null | head -n 1)
if [ -z "$bindings" ]; then
    echo "check-deb-suites: tss-esapi-sys $tss_sys's sources are not in cargo's registry (run cargo fetch --locked)" >&2
    exit 1
fi

work=$(mktemp -d)
mounted=()
cleanup() {
    local m
    for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done
    # The roots' swtpm and sceau, if a check left them running.
    pkill -f "$work/" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

in_root() { # in_root ROOT CMD...: CMD in ROOT with /proc, /dev and /sys
    local root=$1
    shift
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}

# The TSS functions the packaged binaries import: the layout differences
# packaging/debian/tss-layouts.allowed accepts were judged for these calls.
mkdir -p "$work/unpacked"
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$work/unpacked"; done
imported=$(find "$work/unpacked" -type f -perm -0100 -exec nm -D --undefined-only {} \; |
    grep -oE '\b(Tss2_[A-Za-z0-9_]+|Esys_[A-Za-z0-9_]+)' | sort -u | tr '\n' ' ')
judged=$(sed -n 's/^functions: //p' packaging/debian/tss-layouts.allowed | tr ' ' '\n' | grep . | sort -u | tr '\n' ' ')
new_calls=$(comm -23 <(tr ' ' '\n' <<<"$imported" | grep .) <(tr ' ' '\n' <<<"$judged" | grep .) | tr '\n' ' ')
if [ -z "$new_calls" ]; then
    pass "the packaged binaries import $(wc -w <<<"$imported") TSS functions, each among those packaging/debian/tss-layouts.allowed was judged for"
else
    fail "TSS imports" "$new_calls: not among the functions packaging/debian/tss-layouts.allowed was judged for; check the layout differences for them and add them"
fi

for suite in "${suites[@]}"; do
    key=$(printf '%s' "$suite $root_packages" | sha256sum | cut -c1-12)
    tarball=$cache/$suite-$key.tar
    if [ ! -s "$tarball" ]; then
        echo "== mmdebstrap $suite (cached afterwards as $(basename "$tarball"))"
        if ! mmdebstrap --quiet --variant=apt --format=tar --include="$root_packages" \
            "$suite" "$tarball.partial" http://deb.debian.org/debian >"$work/mmdebstrap-$suite.log" 2>&1; then
            fail "$suite root" "mmdebstrap failed: $(tail -n 3 "$work/mmdebstrap-$suite.log" | tr '\n' ' ')"
            continue
        fi
        mv "$tarball.partial" "$tarball"
    fi
    root=$work/$suite
    mkdir -p "$root"
    tar -C "$root" -xf "$tarball"
    for fs in proc sys dev; do
        mount --rbind "/$fs" "$root/$fs"
        mount --make-rslave "$root/$fs"
        mounted=("$root/$fs" "${mounted[@]}")
    done
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    cp "${debs[@]}" "$root/tmp/"
    version=$(. "$root/etc/os-release" && echo "$PRETTY_NAME")

    # apt-get, as a user would: Depends resolved from the suite's archive.
    # policy-rc.d keeps the maintainer scripts from starting units in a
    # root that has no running systemd, as on any image build.
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    if in_root "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/sceau_*.deb /tmp/sceau-spire_*.deb' \
        >"$work/apt-$suite.log" 2>&1; then
        tss=$(in_root "$root" dpkg-query -W -f '${db:Status-Abbrev}${Package} ${Version}\n' 'libtss2-esys*' | sed -n 's/^ii  *//p' | head -n 1)
        pass "$suite: apt-get install ./sceau_*.deb ./sceau-spire_*.deb in a clean $version root ($tss)"
    else
        fail "$suite: apt-get install" "$(grep -E '^(E:| sceau|  Depends)' "$work/apt-$suite.log" | head -n 5 | tr '\n' ' ')"
        continue
    fi
    if in_root "$root" getent passwd sceau >/dev/null; then
        pass "$suite: postinst made the service's user sceau (systemd-sysusers)"
    else
        fail "$suite: user sceau" "postinst did not make it"
    fi

    # A round trip of the installed binary on the suite's tpm2-tss and swtpm.
    cat >"$root/tmp/round-trip.sh" <<'EOF'
set -eu
mkdir -p /tmp/tpm && mkdir -m 0700 /tmp/state
swtpm socket --tpm2 --tpmstate dir=/tmp/tpm --flags not-need-init,startup-clear \
    --server type=tcp,port=23221,bindaddr=127.0.0.1 --ctrl type=tcp,port=23222,bindaddr=127.0.0.1 \
    --daemon --pid file=/tmp/swtpm.pid --log file=/tmp/swtpm.log
tcti=swtpm:host=127.0.0.1,port=23221
serve() {
    sceau serve --tcti "$tcti" --socket /tmp/kms.sock --state-dir /tmp/state 2>>/tmp/sceau.log &
    echo $! >/tmp/sceau.pid
    i=0
    while [ ! -S /tmp/kms.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
stop() {
    kill -TERM "$(cat /tmp/sceau.pid)"
    wait "$(cat /tmp/sceau.pid)" || true
    rm -f /tmp/kms.sock
}
serve
sceau check --socket /tmp/kms.sock
stop
sceau kek rotate --tcti "$tcti" --state-dir /tmp/state
serve
sceau check --socket /tmp/kms.sock
stop
sceau-recover --version
kill "$(cat /tmp/swtpm.pid)"
EOF
    if out=$(in_root "$root" sh /tmp/round-trip.sh 2>&1); then
        first=$(grep -oE 'key_id=[^ ;]+' <<<"$out" | head -n 2 | tr '\n' ' ')
        pass "$suite: the installed sceau serves on swtpm, round trip, kek rotate, round trip under generation 1 (${first% }; $(grep '^sceau-recover ' <<<"$out" | head -n 1))"
    else
        fail "$suite: round trip" "$(tail -n 8 <<<"$out" | tr '\n' ' ' | head -c 800) $(tail -n 5 "$root/tmp/sceau.log" 2>/dev/null | tr '\n' ' ' | head -c 600)"
    fi

    # The suite's own lintian.
    for deb in "${debs[@]}"; do
        name=$(basename "$deb")
        lint=$(in_root "$root" lintian --fail-on none --no-tag-display-limit "/tmp/$name" 2>&1) || true
        bad=$(grep -E '^[EW]: ' <<<"$lint" || true)
        lintian_version=$(in_root "$root" lintian --version 2>/dev/null | head -n 1)
        if [ -z "$bad" ]; then
            pass "$suite: $lintian_version on $name: 0 errors, 0 warnings"
        else
            echo "$bad" | sed "s/^/  lintian ($suite): /"
            fail "$suite: lintian $name" "$(grep -c '^E: ' <<<"$bad") error(s), $(grep -c '^W: ' <<<"$bad") warning(s) (listed above)"
        fi
    done
    # The structure layouts: the suite's headers against the bindings.
    python3 scripts/tss-layouts.py "$bindings" >"$root/tmp/layouts.c"
    python3 scripts/tss-layouts.py --expected "$bindings" >"$work/expected-layouts"
    # A field the suite's headers no longer have is a compile error: its
    # line is dropped and the field reported as "absent".
    cat >"$root/tmp/layouts.sh" <<'EOF'
set -eu
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev libtss2-dev >/dev/null
: >/tmp/absent
for _ in $(seq 20); do
    if LC_ALL=C gcc -w -o /tmp/layouts /tmp/layouts.c 2>/tmp/gcc.err; then
        /tmp/layouts
        sed 's/$/ absent/' /tmp/absent
        exit 0
    fi
    # A field: "'T' has no member named 'F'"; a whole type: "before 'T'"
    # or "'T' undeclared".
    fields=$(sed -nE "s/.*'([A-Za-z0-9_]+)' has no member named '([A-Za-z0-9_]+)'.*/\1.\2/p" /tmp/gcc.err | sort -u)
    types=$(sed -nE -e "s/.*expected [a-z -]+ before '((TPM|TSS2|ESYS)[A-Za-z0-9_]*)'.*/\1/p" \
        -e "s/.*'((TPM|TSS2|ESYS)[A-Za-z0-9_]*)' undeclared.*/\1/p" /tmp/gcc.err | sort -u)
    [ -n "$fields$types" ] || { tail -n 5 /tmp/gcc.err >&2; exit 1; }
    for m in $fields; do
        echo "$m" >>/tmp/absent
        grep -vF "\"${m%%.*}\", \"${m#*.}\"" /tmp/layouts.c >/tmp/layouts.next
        mv /tmp/layouts.next /tmp/layouts.c
    done
    for t in $types; do
        echo "$t" >>/tmp/absent
        grep -vE "\"$t\"[,.]" /tmp/layouts.c >/tmp/layouts.next
        mv /tmp/layouts.next /tmp/layouts.c
    done
done
exit 1
EOF
    if in_root "$root" sh /tmp/layouts.sh 2>"$work/layouts-$suite.err" | sort >"$work/layouts-$suite"; then
        dev=$(in_root "$root" dpkg-query -W -f '${Version}' libtss2-dev)
        # Each difference: "bindings: LINE" (what the binary assumes) or
        # "suite: LINE" (what the headers say); every one must be explained
        # in packaging/debian/tss-layouts.allowed, by its structure or field.
        differ=$( (comm -3 "$work/expected-layouts" <(grep -v ' absent$' "$work/layouts-$suite") |
            sed -E 's/^\t/suite: /; t; s/^/bindings: /'
            grep ' absent$' "$work/layouts-$suite" | sed 's/^/suite: /') | grep . || true)
        unexplained=$(while read -r side name _; do
            [ -n "$name" ] || continue
            # A field of a structure that is explained whole is explained.
            grep -qxE "${name//./\\.}|${name%%.*}" <(sed -n 's/^\([A-Za-z0-9_.]*\):.*/\1/p' packaging/debian/tss-layouts.allowed) ||
                echo "$side $name"
        done <<<"$differ")
        count=$(grep -c . <<<"$differ" || true)
        [ -n "$differ" ] && sed "s/^/  layouts ($suite): /" <<<"$differ"
        if [ -s "$work/layouts-$suite" ] && [ -z "$unexplained" ]; then
            pass "$suite: the $(wc -l <"$work/expected-layouts") sizes and offsets of tss-esapi-sys $tss_sys's bindings match libtss2-dev $dev, but for $count line(s) packaging/debian/tss-layouts.allowed explains"
        else
            fail "$suite: layouts" "tss-esapi-sys $tss_sys's bindings and libtss2-dev $dev differ where packaging/debian/tss-layouts.allowed explains nothing: $(head -n 8 <<<"$unexplained" | tr '\n' ';')"
        fi
    else
        fail "$suite: layouts" "could not build the layout program: $(tail -n 3 "$work/layouts-$suite.err" | tr '\n' ' ')"
    fi
    for m in "$root/dev" "$root/sys" "$root/proc"; do umount -l "$m" 2>/dev/null || true; done
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
