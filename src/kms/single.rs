//! Single-node mode (`serve` without `--members`): Encrypt seals the DEK
//! under this TPM's SRK (version 1 envelopes), and Decrypt loads and unseals
//! envelopes this TPM sealed, all on the TPM thread.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use tonic::Status;

use super::sealer::{Pending, Sealer};
use super::status::{fault_status, malformed, refused_envelope};
use sceau_format::envelope::Envelope;
use sceau_format::sealed::SealedBlobs;
use sceau_format::text::printable;
use sceau_format::wrapped::Encoded;
use sceau_kms_api::pb::DecryptRequest;
use sceau_tpm::sealed::LoadableObject;
use sceau_tpm::secret::Dek;
use sceau_tpm::worker::SealingTpm;
use sceau_tpm::{Fault, KeyId};

pub struct SingleNode<T> {
    tpm: Arc<T>,
}

impl<T: SealingTpm> SingleNode<T> {
    pub fn new(tpm: Arc<T>) -> Self {
        Self { tpm }
    }

    /// A version 1 envelope opens only under the key_id of the TPM that
    /// sealed it: this TPM's, or, with a boot policy key, the key_id it had
    /// before (its objects are this SRK's too, and carry no policy), or the
    /// one it had with a `--former-policy-key` (their objects are sealed to
    /// that key).
    pub(super) fn check_key_id(&self, key_id: &str) -> Result<(), Status> {
        let ours = self.tpm.key_id().as_str();
        let before = self.tpm.unbound_key_id().map(KeyId::as_str);
        let former = self.tpm.former_key_ids().iter().map(KeyId::as_str);
        if key_id != ours && Some(key_id) != before && !former.into_iter().any(|f| f == key_id) {
            return Err(Status::invalid_argument(format!(
                "unknown key_id {}; this TPM only serves {ours}",
                printable(key_id)
            )));
        }
        Ok(())
    }

    /// The TPM's part of a version 1 Decrypt, once the blobs are known to
    /// be a sealed-data object that tpm2-tss reads as the envelope holds it.
    pub(super) fn open_sealed(
        &self,
        blobs: &SealedBlobs,
    ) -> Result<Pending<'_, Result<Dek, Fault>>, Status> {
        let object = LoadableObject::from_blobs(blobs).map_err(malformed)?;
        Ok(Box::pin(self.tpm.unseal(object)))
    }
}

impl<T: SealingTpm> Sealer for SingleNode<T> {
    fn key_id(&self) -> &KeyId {
        self.tpm.key_id()
    }

    fn seal(&self, dek: Dek) -> Pending<'_, Result<Encoded, Status>> {
        Box::pin(async move {
            let blobs = self.tpm.seal(dek).await.map_err(fault_status)?;
            Ok(Encoded {
                ciphertext: blobs.encode(),
                annotations: HashMap::new(),
            })
        })
    }

    /// The key_id first: it is the cheapest check, and a request for another
    /// TPM is told so whatever its ciphertext holds.
    fn open<'a>(
        &'a self,
        request: &DecryptRequest,
    ) -> Result<Pending<'a, Result<Dek, Fault>>, Status> {
        self.check_key_id(&request.key_id)?;
        match Envelope::parse(&request.ciphertext, &request.annotations) {
            Ok(Envelope::Sealed(blobs)) => self.open_sealed(&blobs),
            // Reachable only with this TPM's key_id on a cluster envelope.
            Ok(Envelope::Wrapped(_)) => Err(Status::invalid_argument(
                "a cluster envelope, but this node serves without --members",
            )),
            Err(error) => Err(refused_envelope(error)),
        }
    }

    fn health(&self) -> Pending<'_, Result<(), Fault>> {
        Box::pin(self.tpm.health())
    }
}
