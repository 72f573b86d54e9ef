#!/usr/bin/env bash
# The whole test suite: unit tests, and integration tests that start their own
# swtpm instances and drive the real sceau binary, tpm2-tools and TCTI.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_packages
require_cargo
# The integration tests run sceau-recover too; cargo test builds only the
# binaries of packages that have integration tests, so build it first.
cargo build --locked -p sceau-recover
# insecure-test-hooks lets the bus-capture control case turn parameter
# encryption off in-process; the sceau binary has no way to reach it.
cargo test --locked --workspace --features sceau/insecure-test-hooks "$@"
# The one timing test, alone: run beside the suite's other tests, its niced
# scrape flooders got no CPU (tests/integration/metrics/abuse.rs).
cargo test --locked --features sceau/insecure-test-hooks --test integration -- \
    --ignored --exact metrics::abuse::a_scrape_flood_leaves_kms_latency_alone
