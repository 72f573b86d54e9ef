//! The TPM's key derivation functions (TPM 2.0 Part 1, §11.4.10), with
//! SHA-256 as the hash: the only nameAlg sceau's SRK template and sealed
//! objects use.

use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

type HmacSha256 = Hmac<Sha256>;

/// KDFa: SP 800-108 counter mode with HMAC-SHA-256. `label` is given without
/// its terminating zero, which the TPM counts as part of the label.
pub fn kdfa(
    key: &[u8],
    label: &str,
    context_u: &[u8],
    context_v: &[u8],
    bits: u32,
) -> Zeroizing<Vec<u8>> {
    counter_mode(bits, |counter| {
        hmac_sha256(
            key,
            &[
                &counter.to_be_bytes(),
                label.as_bytes(),
                &[0],
                context_u,
                context_v,
                &bits.to_be_bytes(),
            ],
        )
    })
}

/// KDFe: the SP 800-56A concatenation KDF the TPM applies to an ECDH shared
/// secret `z` (its x-coordinate). `party_u` is the ephemeral key's x and
/// `party_v` the static (SRK) key's x.
pub fn kdfe(
    z: &[u8],
    label: &str,
    party_u: &[u8],
    party_v: &[u8],
    bits: u32,
) -> Zeroizing<Vec<u8>> {
    counter_mode(bits, |counter| {
        let mut hash = Sha256::new();
        hash.update(counter.to_be_bytes());
        hash.update(z);
        hash.update(label.as_bytes());
        hash.update([0]);
        hash.update(party_u);
        hash.update(party_v);
        hash.finalize().into()
    })
}

/// Both KDFs: blocks for counter 1, 2, … concatenated, cut to `bits`.
fn counter_mode(bits: u32, mut block: impl FnMut(u32) -> [u8; 32]) -> Zeroizing<Vec<u8>> {
    let len = output_len(bits);
    let mut out = Zeroizing::new(Vec::with_capacity(len.next_multiple_of(32)));
    let mut counter: u32 = 1;
    while out.len() < len {
        out.extend_from_slice(Zeroizing::new(block(counter)).as_ref());
        counter += 1;
    }
    out.truncate(len);
    out
}

/// HMAC-SHA-256 over the concatenation of `parts`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Checks an HMAC-SHA-256 in constant time.
pub fn hmac_sha256_verify(key: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(expected).is_ok()
}

fn output_len(bits: u32) -> usize {
    (bits as usize).div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    // KDFa with one block equals one HMAC over the documented input layout.
    #[test]
    fn kdfa_single_block_is_the_documented_hmac() {
        let key = [7u8; 32];
        let expected = hmac_sha256(
            &key,
            &[
                &1u32.to_be_bytes(),
                b"STORAGE\0",
                b"name",
                b"",
                &128u32.to_be_bytes(),
            ],
        );
        let derived = kdfa(&key, "STORAGE", b"name", b"", 128);
        assert_eq!(derived.as_slice(), &expected[..16]);
    }

    #[test]
    fn kdfa_and_kdfe_fill_multiple_blocks() {
        assert_eq!(kdfa(b"k", "L", b"", b"", 520).len(), 65);
        let e = kdfe(b"z", "DUPLICATE", b"u", b"v", 256);
        let mut h = Sha256::new();
        h.update(1u32.to_be_bytes());
        h.update(b"zDUPLICATE\0uv");
        assert_eq!(e.as_slice(), h.finalize().as_slice());
    }
}
