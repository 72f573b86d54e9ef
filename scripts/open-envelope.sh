#!/usr/bin/env bash
# Opens a version-1 sceau envelope with tpm2-tools alone, for when sceau is
# gone. Run it on the machine whose TPM sealed the envelope.
#
#   scripts/open-envelope.sh ENVELOPE_FILE > dek.bin
#
# The TPM connection comes from TPM2TOOLS_TCTI (default: the kernel's
# resource manager). The DEK goes to stdout, so the script refuses a terminal.
set -euo pipefail

envelope=${1:?usage: open-envelope.sh ENVELOPE_FILE > dek.bin}
[ -t 1 ] && { echo "refusing to write a DEK to a terminal; redirect stdout" >&2; exit 2; }
export TPM2TOOLS_TCTI=${TPM2TOOLS_TCTI:-device:/dev/tpmrm0}

byte() { od -An -tu1 -j"$1" -N1 "$envelope" | tr -d ' '; }
[ "$(byte 0)" = 1 ] || { echo "not a version-1 sceau envelope" >&2; exit 1; }
public_len=$(( $(byte 1) * 256 + $(byte 2) ))

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tail -c +4 "$envelope" | head -c "$public_len" > "$work/seal.pub"
tail -c +$((4 + public_len)) "$envelope" > "$work/seal.priv"

tpm2_createprimary -Q -C o -g sha256 -G ecc256:null:aes128cfb \
    -a 'fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|restricted|decrypt' \
    -c "$work/srk.ctx"
tpm2_load -Q -C "$work/srk.ctx" -u "$work/seal.pub" -r "$work/seal.priv" -c "$work/seal.ctx"
tpm2_flushcontext -t
tpm2_unseal -c "$work/seal.ctx"
tpm2_flushcontext -t
