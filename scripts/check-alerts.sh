#!/usr/bin/env bash
# The Prometheus alerting rules (packaging/prometheus/sceau-rules.yml):
# `promtool check rules` and `promtool test rules` with Debian's own
# promtool. The prometheus package is unpacked, not installed: installing it
# starts a Prometheus server, which a test machine has no use for. The
# unpacked tree is kept outside the clone, keyed by version.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

cache=${SCEAU_INTEROP_CACHE:-$HOME/.cache/sceau-interop}
version=$(apt-cache policy prometheus | awk '/Candidate:/ {print $2}')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    apt-get update -qq
    version=$(apt-cache policy prometheus | awk '/Candidate:/ {print $2}')
fi
root="$cache/prometheus-${version//[:+~]/_}"
if [ ! -x "$root/usr/bin/promtool" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get download -qq "prometheus=$version")
    mkdir -p "$root"
    dpkg-deb -x "$work"/prometheus_*.deb "$root"
fi
promtool="$root/usr/bin/promtool"
echo "== promtool $("$promtool" --version 2>&1 | head -n 1)"
cd packaging/prometheus
"$promtool" check rules sceau-rules.yml
"$promtool" test rules sceau-rules.test.yml
