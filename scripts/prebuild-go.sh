#!/usr/bin/env bash
# Builds every Go peer the interop steps use, into the same caches they use
# (Go's build cache, and ~/.cache/sceau-interop keyed by versions): the
# kube-apiserver's KMS v2 client, kube-apiserver, etcd, kubeadm, kubectl,
# SPIRE and the metrics check's Prometheus text parser. It changes no
# result: each interop script still builds whatever is missing itself, with
# the same functions.
#
# Why: on a cold 2-core machine these builds are most of CI's time, while the
# fuzz smoke runs (one core each) and the swtpm-bound integration tests leave
# a core idle. .ci/run starts this script in the background at nice 19 right
# after the packages are installed, so the Go builds take the idle core (and,
# where the kernel's autogroup is on, an equal share of the busy ones).
#
# Usage: bash scripts/prebuild-go.sh [MARK]. With MARK, the file MARK is
# created once everything but SPIRE is built: .ci/run starts the Kubernetes
# interop steps then, and SPIRE, built last, takes what those steps (mostly
# waiting on apiservers) leave of the CPU; .ci/run waits for the whole script
# before interop-spire. Without MARK, the order is the same.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/lib-apiserver.sh
source scripts/lib-spire.sh
source scripts/lib-metrics.sh
require_go

t0=$SECONDS
echo "== prebuild: the KMS v2 client (Go build cache only)"
(cd tests/interop && go build -mod=readonly -o /dev/null ./kmsv2client)
build_go_binaries
build_k8s_tools
build_metricscheck
if [ -n "${1:-}" ]; then
    echo "== prebuild: everything but SPIRE in $((SECONDS - t0)) s"
    touch "$1"
fi
build_spire
echo "== prebuild: done in $((SECONDS - t0)) s"
