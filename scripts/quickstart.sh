#!/usr/bin/env bash
# Quick start: build sceau, start a throwaway software TPM, serve on
# ./run/kms.sock, prove one Encrypt/Decrypt round trip, and keep serving
# until Ctrl-C. Everything it creates lives in ./run and is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_packages
require_cargo
# sceau-rig is the test kit's swtpm starter (crates/testkit), used by start_swtpm.
cargo build --release --locked --bin sceau --bin sceau-rig
# shellcheck disable=SC2034 # read by start_swtpm (lib.sh)
sceau_rig=target/release/sceau-rig

run_dir="$PWD/run"
rm -rf "$run_dir"
mkdir -p "$run_dir"

cleanup() {
    [ -n "${sceau_pid:-}" ] && kill "$sceau_pid" 2>/dev/null && wait "$sceau_pid" 2>/dev/null
    [ -n "${swtpm_pid:-}" ] && kill "$swtpm_pid" 2>/dev/null && wait "$swtpm_pid" 2>/dev/null
    rm -rf "$run_dir"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# swtpm's usual port 2321 if it is free, else another pair.
start_swtpm "$run_dir/tpm-state" 2321
port=$swtpm_port
echo "software TPM on 127.0.0.1:$port (throwaway state in $run_dir/tpm-state)"

./target/release/sceau serve --socket "$run_dir/kms.sock" \
    --tcti "swtpm:host=127.0.0.1,port=$port" --state-dir "$run_dir/state" &
sceau_pid=$!
# The socket appears once the SRK is ready; give up if sceau exits first.
for _ in $(seq 300); do
    [ -S "$run_dir/kms.sock" ] && break
    kill -0 "$sceau_pid" 2>/dev/null || { echo "sceau failed to start" >&2; exit 1; }
    sleep 0.1
done

./target/release/sceau check --socket "$run_dir/kms.sock"
echo "sceau is serving on $run_dir/kms.sock; press Ctrl-C to stop"
wait "$sceau_pid"
