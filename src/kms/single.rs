//! Single-node mode (`serve` without `--members`): Encrypt seals the DEK
//! under this TPM's current KEK generation (version 1 envelopes), and
//! Decrypt loads and unseals envelopes this TPM sealed under the generation
//! their key_id names, all on the TPM thread.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use tonic::Status;

use super::key_ids::ServedKeys;
use super::sealer::{Pending, Sealer};
use super::status::{fault_status, malformed, refused_envelope};
use sceau_format::envelope::Envelope;
use sceau_format::kek::KeyIdVerdict;
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
    keys: Arc<ServedKeys>,
}

impl<T: SealingTpm> SingleNode<T> {
    pub fn new(tpm: Arc<T>, keys: Arc<ServedKeys>) -> Self {
        Self { tpm, keys }
    }

    /// The key_ids and generations served, which cluster mode reads too.
    pub(super) fn keys(&self) -> &ServedKeys {
        &self.keys
    }

    /// The generation a version 1 envelope's key_id names
    /// (`KeyIdTable::generation_for`): a key_id this node reported, or of
    /// the form before generations (the SRK's own, bound to a policy key
    /// or a former one). The TPM then refuses an object that is not that
    /// generation's, so an envelope presented with another generation's
    /// key_id does not open.
    pub(super) fn check_key_id(&self, key_id: &str) -> Result<u32, Status> {
        let table = self.keys.table();
        let ours = &table.current.key_id;
        match table.generation_for(key_id) {
            KeyIdVerdict::Opens(generation) => Ok(generation),
            KeyIdVerdict::Unknown => Err(Status::invalid_argument(format!(
                "unknown key_id {}; this TPM only serves {ours}",
                printable(key_id)
            ))),
            KeyIdVerdict::Retired(generation) => Err(Status::failed_precondition(format!(
                "key_id {} names KEK generation {generation}, which this TPM no longer holds                  (retired); only the recovery key, if one was configured, opens it",
                printable(key_id)
            ))),
            KeyIdVerdict::NotLoaded => Err(Status::unavailable(format!(
                "key_id {} is from a KEK rotation this sceau has not loaded: systemctl reload                  sceau",
                printable(key_id)
            ))),
        }
    }

    /// The TPM's part of a version 1 Decrypt, once the blobs are known to
    /// be a sealed-data object that tpm2-tss reads as the envelope holds it.
    pub(super) fn open_sealed(
        &self,
        blobs: &SealedBlobs,
        generation: u32,
    ) -> Result<Pending<'_, Result<Dek, Fault>>, Status> {
        let object = LoadableObject::from_blobs(blobs).map_err(malformed)?;
        Ok(Box::pin(self.tpm.unseal(object, generation)))
    }
}

impl<T: SealingTpm> Sealer for SingleNode<T> {
    fn key_id(&self) -> KeyId {
        self.keys.table().current.key_id.clone()
    }

    /// The key_id and the generation come from one table, so that a reload
    /// between them cannot stamp a key_id on another generation's object.
    fn seal(&self, dek: Dek) -> Pending<'_, Result<(Encoded, KeyId), Status>> {
        Box::pin(async move {
            let table = self.keys.table();
            let blobs = self
                .tpm
                .seal(dek, table.current.generation)
                .await
                .map_err(fault_status)?;
            let encoded = Encoded {
                ciphertext: blobs.encode(),
                annotations: HashMap::new(),
            };
            Ok((encoded, table.current.key_id.clone()))
        })
    }

    /// The key_id first: it is the cheapest check, and a request for another
    /// TPM is told so whatever its ciphertext holds.
    fn open<'a>(
        &'a self,
        request: &DecryptRequest,
    ) -> Result<Pending<'a, Result<Dek, Fault>>, Status> {
        let generation = self.check_key_id(&request.key_id)?;
        match Envelope::parse(&request.ciphertext, &request.annotations) {
            Ok(Envelope::Sealed(blobs)) => self.open_sealed(&blobs, generation),
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
