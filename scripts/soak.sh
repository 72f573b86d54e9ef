#!/usr/bin/env bash
# The soak, for as long as you like: 64 clients in a
# bounded request loop against sceau on a modelled discrete TPM (the test
# kit's TPM proxy), sampling RSS, fds, threads and TPM handles every 5 s.
# CI runs the same test for 60 s inside the test suite
# (tests/integration/soak.rs); docs/reliability.md has a 30-minute run.
#
# Usage: bash scripts/soak.sh [SECONDS]   (default 1800)
# Prints the sample table and exits non-zero if a call failed or something
# grew. Needs root, like the integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_packages
require_cargo
SCEAU_SOAK_SECONDS=${1:-1800} cargo test --locked \
    --test integration soak:: -- --nocapture
