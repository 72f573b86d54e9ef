//! What the fuzz targets and the seed generator share: the daemon's one fake
//! TPM ([`FakeTpm`], from `sceau::kms::fake`), the one-byte header that tells the `kms_request`
//! target which call to make, the input framing and small encoders of the
//! cluster and recovery targets ([`codec`]), and the cluster-mode material
//! pinned in `fuzz/pinned/` ([`pinned`]).
#![forbid(unsafe_code)]

pub mod codec;
pub mod pinned;

pub use sceau::kms::fake::FakeTpm;
use sceau_tpm::Fault;

/// Which service method a `kms_request` input calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Status,
    Encrypt,
    Decrypt,
    /// Decrypt with the right key_id and no annotations, so that mutations
    /// of the ciphertext are not all stopped by the cheaper checks first.
    DecryptAddressed,
}

const CALLS: [Call; 4] = [
    Call::Status,
    Call::Encrypt,
    Call::Decrypt,
    Call::DecryptAddressed,
];

/// Every fault a real TPM worker can report.
pub const FAULTS: [Fault; Fault::ALL.len()] = Fault::ALL;

/// The first byte of a `kms_request` input: bits 0..2 pick the call, bits
/// 2..8 the injected fault (1..=7 index [`FAULTS`]; anything else is none,
/// so most inputs see a healthy TPM). The rest is the protobuf request.
pub fn decode_header(byte: u8) -> (Call, Option<Fault>) {
    let call = CALLS[usize::from(byte & 0b11)];
    let fault = usize::from(byte >> 2)
        .checked_sub(1)
        .and_then(|i| FAULTS.get(i).copied());
    (call, fault)
}

/// The inverse of [`decode_header`], for the seed generator.
pub fn encode_header(call: Call, fault: Option<Fault>) -> u8 {
    let call_bits = CALLS.iter().position(|c| *c == call).unwrap_or(0) as u8;
    let fault_bits = fault
        .and_then(|f| FAULTS.iter().position(|g| *g == f))
        .map_or(0, |i| i as u8 + 1);
    call_bits | (fault_bits << 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        for call in CALLS {
            for fault in std::iter::once(None).chain(FAULTS.map(Some)) {
                assert_eq!(decode_header(encode_header(call, fault)), (call, fault));
            }
        }
    }
}
