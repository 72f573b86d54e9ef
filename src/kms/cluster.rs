//! Cluster mode (`serve --members`): Encrypt wraps the DEK in software for
//! every member and the recovery key (version 2 envelopes), on the wrapping
//! thread and never on the TPM; Decrypt picks this node's entry of a version
//! 2 envelope, after checking it against the request, and imports it on the
//! TPM thread. Version 1 envelopes this TPM sealed before cluster mode still
//! open, under their own key_id, as in single-node mode.
#![forbid(unsafe_code)]

use std::sync::Arc;

use tonic::Status;

use super::sealer::{Pending, Sealer};
use super::single::SingleNode;
use super::status::{malformed, refused_envelope};
use super::wrapping::{WrapError, WrappingThread};
use sceau_format::duplicate::check_sealed_public;
use sceau_format::envelope::Envelope;
use sceau_format::members::{Membership, envelope_key_id};
use sceau_format::text::printable;
use sceau_format::wrapped::{ClusterEnvelope, Encoded, Role};
use sceau_kms_api::pb::DecryptRequest;
use sceau_tpm::sealed::ImportableObject;
use sceau_tpm::secret::Dek;
use sceau_tpm::srk::hex;
use sceau_tpm::worker::SealingTpm;
use sceau_tpm::{Fault, KeyId};

pub struct Cluster<T> {
    tpm: Arc<T>,
    membership: Arc<Membership>,
    wrapping: WrappingThread,
    /// Opens this TPM's version 1 envelopes.
    single: SingleNode<T>,
}

impl<T: SealingTpm> Cluster<T> {
    /// Starts the wrapping thread, which Encrypt needs. In the daemon this
    /// runs inside the sandbox, so the thread inherits it.
    pub fn start(tpm: Arc<T>, membership: Arc<Membership>) -> std::io::Result<Self> {
        Ok(Self {
            single: SingleNode::new(tpm.clone()),
            wrapping: WrappingThread::spawn(membership.clone())?,
            membership,
            tpm,
        })
    }

    /// Accepts an envelope whose recipient set hashes to the request's key_id
    /// (so envelopes of a former membership still open) and names this node.
    fn importable_entry(
        &self,
        key_id: &str,
        envelope: &ClusterEnvelope,
    ) -> Result<ImportableObject, Status> {
        let recipients_key_id = envelope_key_id(envelope);
        if key_id != recipients_key_id.as_str() {
            return Err(Status::invalid_argument(format!(
                "key_id {} does not match the envelope's recipients ({recipients_key_id})",
                printable(key_id)
            )));
        }
        let own_name = self.membership.own_name();
        let entry = envelope.entry_for(own_name).ok_or_else(|| {
            Status::invalid_argument(format!(
                "envelope-not-for-this-tpm: this node's SRK {} is not a recipient; the recipients are {}",
                hex(own_name),
                describe_recipients(envelope)
            ))
        })?;
        let unique = check_sealed_public(&envelope.object_public).map_err(malformed)?;
        ImportableObject::for_checked_public(
            &unique,
            &entry.blob.duplicate,
            &entry.blob.in_sym_seed,
        )
        .map_err(malformed)
    }
}

impl<T: SealingTpm> Sealer for Cluster<T> {
    fn key_id(&self) -> &KeyId {
        self.membership.key_id()
    }

    fn seal(&self, dek: Dek) -> Pending<'_, Result<Encoded, Status>> {
        Box::pin(async move {
            self.wrapping.seal(dek).await.map_err(|e| match e {
                WrapError::Busy => Status::unavailable("busy"),
                e => {
                    log::error!("cluster envelope: {e}");
                    Status::internal("envelope-encoding-failed")
                }
            })
        })
    }

    fn open<'a>(
        &'a self,
        request: &DecryptRequest,
    ) -> Result<Pending<'a, Result<Dek, Fault>>, Status> {
        match Envelope::parse(&request.ciphertext, &request.annotations) {
            Ok(Envelope::Wrapped(envelope)) => {
                let object = self.importable_entry(&request.key_id, &envelope)?;
                Ok(Box::pin(self.tpm.unseal_imported(object)))
            }
            Ok(Envelope::Sealed(blobs)) => {
                self.single.check_key_id(&request.key_id)?;
                self.single.open_sealed(&blobs)
            }
            Err(error) => Err(refused_envelope(error)),
        }
    }

    fn health(&self) -> Pending<'_, Result<(), Fault>> {
        Box::pin(self.tpm.health())
    }
}

fn describe_recipients(envelope: &ClusterEnvelope) -> String {
    let names: Vec<String> = envelope
        .recipients
        .iter()
        .map(|r| match r.role {
            Role::Member => format!("member {}", hex(&r.name)),
            Role::Recovery => format!("recovery {}", hex(&r.name)),
        })
        .collect();
    names.join(", ")
}
