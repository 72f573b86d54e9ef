//! Cluster mode (`serve --members`): Encrypt wraps the DEK in software for
//! every member and the recovery key on the wrapping thread, then this
//! TPM signs the envelope (one TPM2_Sign: version 3). Decrypt verifies the
//! signature and the key_id against the known members in software, before
//! any TPM work, picks this node's entry and imports it on the TPM thread.
//! Unsigned version 2 envelopes open only with `--accept-unsigned-envelopes`;
//! version 1 envelopes this TPM sealed before cluster mode still open, under
//! their own key_id, as in single-node mode.
#![forbid(unsafe_code)]

use std::sync::Arc;

use tonic::Status;

use super::key_ids::ServedKeys;
use super::sealer::{Pending, Sealer};
use super::single::SingleNode;
use super::status::{fault_status, malformed, refused_envelope};
use super::wrapping::{WrapError, WrappingThread};
use crate::metrics::METRICS;
use sceau_format::duplicate::check_sealed_public;
use sceau_format::envelope::Envelope;
use sceau_format::members::{Membership, Refusal, unsigned_envelope_key_id};
use sceau_format::text::printable;
use sceau_format::wrapped::{ClusterEnvelope, Encoded, Recipient, Role};
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
    /// `--accept-unsigned-envelopes`: version 2 envelopes open, checked as
    /// before signatures.
    accept_unsigned: bool,
}

impl<T: SealingTpm> Cluster<T> {
    /// Starts the wrapping thread, which Encrypt needs. In the daemon this
    /// runs inside the sandbox, so the thread inherits it.
    pub fn start(
        tpm: Arc<T>,
        keys: Arc<ServedKeys>,
        membership: Arc<Membership>,
        accept_unsigned: bool,
    ) -> std::io::Result<Self> {
        Ok(Self {
            accept_unsigned,
            single: SingleNode::new(tpm.clone(), keys),
            wrapping: WrappingThread::spawn(membership.clone())?,
            membership,
            tpm,
        })
    }

    /// Accepts a signed envelope of a known membership whose key_id is the
    /// request's (so envelopes of a former membership still open), or, while
    /// the operator allows it, an unsigned one whose recipient set hashes to
    /// the request's key_id; and it must name this node.
    fn importable_entry(
        &self,
        key_id: &str,
        envelope: &ClusterEnvelope,
    ) -> Result<(ImportableObject, u32), Status> {
        match self.membership.verify(envelope, key_id) {
            Ok(()) => {}
            Err(Refusal::Unsigned) if self.accept_unsigned => {
                let recipients_key_id = unsigned_envelope_key_id(envelope);
                if key_id != recipients_key_id.as_str() {
                    return Err(Status::invalid_argument(format!(
                        "key_id {} does not match the envelope's recipients ({recipients_key_id})",
                        printable(key_id)
                    )));
                }
            }
            Err(refusal) => {
                METRICS.envelope_refused(&refusal);
                // After an upgrade, this is the one line that tells the
                // operator why every old Secret stopped opening.
                let hint = match refusal {
                    Refusal::Unsigned => {
                        "; written by a sceau before signed envelopes, or forged: while \
                         upgrading, serve --accept-unsigned-envelopes opens it (docs/ha.md)"
                    }
                    _ => "",
                };
                log::info!("refused a cluster envelope: {refusal}{hint}");
                return Err(Status::invalid_argument(refusal.class()));
            }
        }
        let own_name = self.membership.own_name();
        let (entry, generation) = self.own_entry(envelope).ok_or_else(|| {
            Status::invalid_argument(format!(
                "envelope-not-for-this-tpm: none of this node's KEK generations (member key {}) is a \
                 recipient; the recipients are {}",
                hex(own_name),
                describe_recipients(envelope)
            ))
        })?;
        let area = check_sealed_public(&envelope.object_public).map_err(malformed)?;
        ImportableObject::for_checked_public(&area, &entry.blob.duplicate, &entry.blob.in_sym_seed)
            .map(|object| (object, generation))
            .map_err(malformed)
    }

    /// This node's entry in an envelope, and the KEK generation it was
    /// wrapped for: a member entry whose Name is one of the generations the
    /// TPM holds (a member file made before a rotation names an older one),
    /// else the membership's own key, which a fake TPM holds under no
    /// generation.
    fn own_entry<'e>(&self, envelope: &'e ClusterEnvelope) -> Option<(&'e Recipient, u32)> {
        let table = self.single.keys().table();
        envelope
            .recipients
            .iter()
            .filter(|r| r.role == Role::Member)
            .find_map(|r| table.generation_named(&r.name).map(|g| (r, g)))
            .or_else(|| {
                envelope
                    .entry_for(self.membership.own_name())
                    .map(|entry| (entry, 0))
            })
    }
}

impl<T: SealingTpm> Sealer for Cluster<T> {
    fn key_id(&self) -> KeyId {
        self.membership.key_id().clone()
    }

    fn seal(&self, dek: Dek) -> Pending<'_, Result<(Encoded, KeyId), Status>> {
        Box::pin(async move {
            let to_sign = self.wrapping.seal(dek).await.map_err(|e| match e {
                WrapError::Busy => Status::unavailable("busy"),
                e => {
                    log::error!("cluster envelope: {e}");
                    Status::internal("envelope-encoding-failed")
                }
            })?;
            let signature = self
                .tpm
                .sign_envelope(*to_sign.digest())
                .await
                .map_err(fault_status)?;
            Ok((to_sign.finish(&signature), self.membership.key_id().clone()))
        })
    }

    fn open<'a>(
        &'a self,
        request: &DecryptRequest,
    ) -> Result<Pending<'a, Result<Dek, Fault>>, Status> {
        match Envelope::parse(&request.ciphertext, &request.annotations) {
            Ok(Envelope::Wrapped(envelope)) => {
                let (object, generation) = self.importable_entry(&request.key_id, &envelope)?;
                Ok(Box::pin(self.tpm.unseal_imported(object, generation)))
            }
            Ok(Envelope::Sealed(blobs)) => {
                let generation = self.single.check_key_id(&request.key_id)?;
                self.single.open_sealed(&blobs, generation)
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
