//! What the fuzz targets and the seed generator share: a deterministic fake
//! TPM behind [`Sealer`], the one-byte header that tells the `kms_request`
//! target which call to make, the input framing and small encoders of the
//! cluster and recovery targets ([`codec`]), and the cluster-mode material
//! pinned in `fuzz/pinned/` ([`pinned`]).
#![forbid(unsafe_code)]

pub mod codec;
pub mod pinned;

use std::sync::Mutex;

use sceau::kms::Sealer;
use sceau::secret::{Dek, MAX_DEK_LEN};
use sceau_format::sealed::SealedBlobs;
use sceau::tpm::sealed::{LoadableObject, blobs_from_created, sealed_template};
use sceau::tpm::{Fault, KeyId};
use tss_esapi::structures::Private;

/// Marks a private blob as one [`FakeSealer`] wrote, as a real TPM's
/// integrity HMAC marks its own.
const TAG: &[u8] = b"sceau-fuzz";
/// "Sealing" XORs the DEK with this, so a sealed DEK is not its plaintext.
const MASK: u8 = 0x5a;

/// A TPM stand-in whose envelopes are real sceau envelopes (the public blob
/// is the genuine sealed-data template), so that fuzzer-mutated ciphertexts
/// go through the real parser and checks before reaching [`Sealer::unseal`].
/// It is stateless, so any valid envelope opens in any run of the target.
pub struct FakeSealer {
    key_id: KeyId,
    fault: Mutex<Option<Fault>>,
}

impl Default for FakeSealer {
    fn default() -> Self {
        Self {
            key_id: KeyId::from_srk_name(b"sceau-fuzz"),
            fault: Mutex::new(None),
        }
    }
}

impl FakeSealer {
    /// Makes every later TPM call fail with `fault` (or succeed, with `None`).
    pub fn inject(&self, fault: Option<Fault>) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    fn injected(&self) -> Result<(), Fault> {
        self.fault
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(Ok(()), Err)
    }

    /// The envelope blobs this fake returns for `dek`.
    pub fn seal_bytes(dek: &[u8]) -> SealedBlobs {
        let mut content = TAG.to_vec();
        content.extend(dek.iter().map(|b| b ^ MASK));
        let private = Private::try_from(content).expect("tag and DEK fit a TPM2B_PRIVATE");
        let template = sealed_template().expect("the sealed-data template builds");
        blobs_from_created(template, &private).expect("the template marshals")
    }

    /// The DEK inside a private blob's content, if this fake sealed it; what
    /// the fake's Unseal returns, so fuzz targets can predict it.
    pub fn open(private_content: &[u8]) -> Option<Vec<u8>> {
        let masked = private_content.strip_prefix(TAG)?;
        (1..=MAX_DEK_LEN)
            .contains(&masked.len())
            .then(|| masked.iter().map(|b| b ^ MASK).collect())
    }
}

impl Sealer for FakeSealer {
    fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    async fn seal(&self, dek: Dek) -> Result<SealedBlobs, Fault> {
        self.injected()?;
        Ok(Self::seal_bytes(dek.expose()))
    }

    /// A real TPM refuses a private blob whose HMAC it did not write.
    async fn unseal(&self, object: LoadableObject) -> Result<Dek, Fault> {
        self.injected()?;
        let dek = Self::open(object.private.value()).ok_or(Fault::EnvelopeRejected)?;
        Ok(Dek::copy_from(&dek))
    }

    async fn health(&self) -> Result<(), Fault> {
        self.injected()
    }
}

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
pub const FAULTS: [Fault; 6] = Fault::ALL;

/// The first byte of a `kms_request` input: bits 0..2 pick the call, bits
/// 2..8 the injected fault (1..=6 index [`FAULTS`]; anything else is none,
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

    #[test]
    fn sealed_blobs_open_to_the_dek() {
        let blobs = FakeSealer::seal_bytes(b"dek");
        assert_eq!(FakeSealer::open(&blobs.private[2..]), Some(b"dek".to_vec()));
        assert!(LoadableObject::from_blobs(&blobs).is_ok());
    }
}
