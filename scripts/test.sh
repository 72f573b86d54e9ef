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
# The daemon's tests turn on its insecure-test-hooks themselves (a
# dev-dependency on itself in Cargo.toml): this is the whole suite, as
# `cargo test --workspace` runs it anywhere. Tests bound times (a fault
# ends, never hangs) but measure no speed: the figures come from the
# benches (docs/performance.md).
cargo test --locked --workspace "$@"
