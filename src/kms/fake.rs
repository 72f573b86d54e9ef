//! The one stand-in for a TPM behind [`SealingTpm`]: the kms unit tests, the
//! fuzz targets and their seed generator, and the bench run the real modes
//! (single-node and cluster) and service over it. Built only for tests and
//! with the `insecure-test-hooks` feature, never into a release daemon.
//!
//! Its envelopes are real sceau envelopes: the public blob is the genuine
//! sealed-data template, so mutated ciphertexts go through the real parser
//! and checks before they reach [`SealingTpm::unseal`]. It is stateless
//! (the "private blob" is the DEK, tagged and masked), so an envelope it made
//! opens in any process: fuzz seeds stay valid from one run to the next.
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sceau_format::members::{Member, Membership};
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::sealed::SealedBlobs;
use sceau_format::signing_key::{SIGNATURE_LEN, SigningKey, SoftwareSigner};
use sceau_tpm::device::Generations;
use sceau_tpm::sealed::{ImportableObject, LoadableObject, unbound_blobs_with_private};
use sceau_tpm::secret::{Dek, MAX_DEK_LEN};
use sceau_tpm::worker::SealingTpm;
use sceau_tpm::{Fault, KeyId};

/// Marks a private blob as one [`FakeTpm`] wrote, as a real TPM's integrity
/// HMAC marks its own.
const TAG: &[u8] = b"sceau-fuzz";
/// "Sealing" XORs the DEK with this, so a sealed DEK is not its plaintext.
const MASK: u8 = 0x5a;
/// The fake's envelope signing key: fixed, so that signed fuzz seeds stay
/// valid from one run to the next.
const SIGNING_SECRET: [u8; 32] = [0x5e; 32];

pub struct FakeTpm {
    key_id: KeyId,
    fault: Mutex<Option<Fault>>,
    unseal_delay: Duration,
    seals: AtomicUsize,
    unseals: AtomicUsize,
}

impl Default for FakeTpm {
    fn default() -> Self {
        Self {
            // The fuzz seed corpus holds Decrypt requests for this key_id.
            key_id: KeyId::from_srk_name(b"sceau-fuzz"),
            fault: Mutex::new(None),
            unseal_delay: Duration::ZERO,
            seals: AtomicUsize::new(0),
            unseals: AtomicUsize::new(0),
        }
    }
}

impl FakeTpm {
    /// Every Unseal takes this long, so that concurrent callers overlap.
    pub fn with_unseal_delay(delay: Duration) -> Self {
        Self {
            unseal_delay: delay,
            ..Self::default()
        }
    }

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

    /// How many Seal calls reached this TPM.
    pub fn seals(&self) -> usize {
        self.seals.load(Ordering::SeqCst)
    }

    /// How many Unseal calls (of either envelope version) reached this TPM.
    pub fn unseals(&self) -> usize {
        self.unseals.load(Ordering::SeqCst)
    }

    /// The envelope blobs this fake returns for `dek`.
    pub fn seal_bytes(dek: &[u8]) -> SealedBlobs {
        let mut content = TAG.to_vec();
        content.extend(dek.iter().map(|b| b ^ MASK));
        unbound_blobs_with_private(&content).expect("tag and DEK fit a TPM2B_PRIVATE")
    }

    /// The public half of the fake's envelope signing key, for the
    /// membership of a cluster over this fake.
    pub fn signing_key() -> SigningKey {
        SoftwareSigner::from_bytes(&SIGNING_SECRET).public()
    }

    /// A cluster over this fake: this node (a fresh software SRK and the
    /// fake's signing key), one more member and a recovery key, all
    /// software keys, none of which the fake can Import for: what a service
    /// in cluster mode needs to start, sign and verify.
    pub fn cluster_membership() -> Membership {
        let key = || RecoveryIdentity::generate().public().clone();
        let own = Member {
            srk: key(),
            signing: Self::signing_key(),
        };
        let other = Member {
            srk: key(),
            signing: SoftwareSigner::from_bytes(&[0x77; 32]).public(),
        };
        Membership::from_keys(own.clone(), vec![own, other], Some(key()))
            .expect("a valid membership")
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

impl FakeTpm {
    /// The one key_id the fake serves, of the form before generations.
    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    /// The served-key table over [`FakeTpm::key_id`], for `service_for`.
    pub fn served_keys(&self) -> std::sync::Arc<super::key_ids::ServedKeys> {
        std::sync::Arc::new(super::key_ids::ServedKeys::fixed(self.key_id.clone()))
    }
}

impl SealingTpm for FakeTpm {
    async fn seal(&self, dek: Dek, _generation: u32) -> Result<SealedBlobs, Fault> {
        self.injected()?;
        self.seals.fetch_add(1, Ordering::SeqCst);
        Ok(Self::seal_bytes(dek.expose()))
    }

    /// A real TPM refuses a private blob whose HMAC it did not write.
    async fn unseal(&self, object: LoadableObject, _generation: u32) -> Result<Dek, Fault> {
        self.unseals.fetch_add(1, Ordering::SeqCst);
        // Only when asked: the fuzz targets' runtime has no timer.
        if !self.unseal_delay.is_zero() {
            tokio::time::sleep(self.unseal_delay).await;
        }
        self.injected()?;
        let dek = Self::open(object.private.value()).ok_or(Fault::EnvelopeRejected)?;
        Ok(Dek::copy_from(&dek))
    }

    /// The fake holds no storage key, so no import succeeds: a real TPM
    /// refuses every entry that was not wrapped for its SRK.
    async fn unseal_imported(
        &self,
        _object: ImportableObject,
        _generation: u32,
    ) -> Result<Dek, Fault> {
        self.unseals.fetch_add(1, Ordering::SeqCst);
        self.injected()?;
        Err(Fault::EnvelopeRejected)
    }

    async fn sign_envelope(&self, digest: [u8; 32]) -> Result<[u8; SIGNATURE_LEN], Fault> {
        self.injected()?;
        Ok(SoftwareSigner::from_bytes(&SIGNING_SECRET).sign(&digest))
    }

    /// Generation 0 only, and a counter that never moves.
    async fn read_generations(&self) -> Result<Generations, Fault> {
        Ok(Generations {
            open: std::collections::BTreeMap::from([(0, b"sceau-fuzz".to_vec())]),
            counter: 0,
        })
    }

    async fn next_epoch(&self) -> Result<u64, Fault> {
        Err(Fault::Failure)
    }

    async fn health(&self) -> Result<(), Fault> {
        self.injected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_blobs_open_to_the_dek() {
        let blobs = FakeTpm::seal_bytes(b"dek");
        assert_eq!(FakeTpm::open(&blobs.private[2..]), Some(b"dek".to_vec()));
        assert!(LoadableObject::from_blobs(&blobs).is_ok());
    }
}
