//! The service's cluster-mode steps (`serve --members`): Encrypt wraps in
//! software for every member, on the wrapping thread; Decrypt picks this node's entry of a version 2
//! envelope after checking it against the request, before the TPM sees it.
#![forbid(unsafe_code)]

use tonic::Status;

use super::service::malformed;
use super::wrapping::{WrapError, WrappingThread};
use crate::pb::{DecryptRequest, EncryptResponse};
use crate::secret::Dek;
use crate::tpm::sealed::ImportableObject;
use crate::tpm::srk::hex;
use sceau_format::duplicate::check_sealed_public;
use sceau_format::members::{Membership, envelope_key_id};
use sceau_format::wrapped::{ClusterEnvelope, Role};

/// Encrypt in cluster mode: wrapped on the wrapping thread, no TPM.
pub async fn seal(
    membership: &Membership,
    wrapping: &WrappingThread,
    dek: Dek,
) -> Result<EncryptResponse, Status> {
    let encoded = wrapping.seal(dek).await.map_err(|e| match e {
        WrapError::Busy => Status::unavailable("busy"),
        e => {
            log::error!("cluster envelope: {e}");
            Status::internal("envelope-encoding-failed")
        }
    })?;
    Ok(EncryptResponse {
        ciphertext: encoded.ciphertext,
        key_id: membership.key_id().to_string(),
        annotations: encoded.annotations,
    })
}

/// Accepts an envelope whose recipient set hashes to the request's key_id
/// (so envelopes of a former membership still open) and names this node.
pub fn importable_entry(
    membership: &Membership,
    request: &DecryptRequest,
) -> Result<ImportableObject, Status> {
    let envelope =
        ClusterEnvelope::parse(&request.ciphertext, &request.annotations).map_err(malformed)?;
    let recipients_key_id = envelope_key_id(&envelope);
    if request.key_id != recipients_key_id.as_str() {
        return Err(Status::invalid_argument(format!(
            "key_id {} does not match the envelope's recipients ({recipients_key_id})",
            super::service::printable(&request.key_id)
        )));
    }
    let entry = envelope.entry_for(membership.own_name()).ok_or_else(|| {
        Status::invalid_argument(format!(
            "envelope-not-for-this-tpm: this node's SRK {} is not a recipient; the recipients are {}",
            hex(membership.own_name()),
            describe_recipients(&envelope)
        ))
    })?;
    check_sealed_public(&envelope.object_public).map_err(malformed)?;
    ImportableObject::from_parts(
        &envelope.object_public,
        &entry.blob.duplicate,
        &entry.blob.in_sym_seed,
    )
    .map_err(malformed)
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
