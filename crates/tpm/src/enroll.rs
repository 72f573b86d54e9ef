//! The member's side of enrollment (`sceau enroll`): its endorsement key (EK)
//! from the TCG default ECC template, the EK certificate if the manufacturer
//! stored one, and TPM2_ActivateCredential of a verifier's challenge. The
//! SPIRE agent plugin (crates/spire) uses the same steps with an RSA or ECC
//! EK and its attestation key as the activated object.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::abstraction::{AsymmetricAlgorithmSelection, ek};
use tss_esapi::constants::SessionType;
use tss_esapi::handles::{AuthHandle, KeyHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Digest, EncryptedSecret, IdObject, Nonce, PublicBuffer, SymmetricDefinition,
};
use tss_esapi::traits::Marshall as _;
use zeroize::Zeroizing;

use super::fault::TpmError;

const EK_ALGORITHM: AsymmetricAlgorithmSelection =
    AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256);

pub struct EndorsementKey {
    handle: KeyHandle,
    /// Marshalled TPM2B_PUBLIC.
    pub public: Vec<u8>,
    /// DER X.509 certificate from the TCG NV index, when there is one.
    pub certificate: Option<Vec<u8>>,
}

impl EndorsementKey {
    /// The loaded EK; the caller flushes it when done.
    pub fn handle(&self) -> KeyHandle {
        self.handle
    }
}

/// CreatePrimary in the endorsement hierarchy with the TCG default ECC
/// P-256 template: the same key the manufacturer certified, if it did.
pub fn endorsement_key(ctx: &mut Context) -> Result<EndorsementKey, TpmError> {
    endorsement_key_for(ctx, EK_ALGORITHM)
}

/// As [`endorsement_key`], with the TCG default template of `algorithm`
/// (RSA-2048: NV index 0x01C00002; ECC P-256: 0x01C0000A).
pub fn endorsement_key_for(
    ctx: &mut Context,
    algorithm: AsymmetricAlgorithmSelection,
) -> Result<EndorsementKey, TpmError> {
    let handle = ek::create_ek_object_2(ctx, algorithm, None)
        .map_err(|e| TpmError::new("CreatePrimary (EK)", e))?;
    let (public, _, _) = ctx
        .execute_without_session(|c| c.read_public(handle))
        .map_err(|e| TpmError::new("ReadPublic (EK)", e))?;
    let public = PublicBuffer::try_from(public)
        .and_then(|buffer| buffer.marshall())
        .map_err(|e| TpmError::new("marshal EK public", e))?;
    // Most software TPMs and many firmware TPMs have no certificate; that is
    // reported to the verifier, not an error here.
    let certificate = ek::retrieve_ek_pubcert(ctx, algorithm).ok();
    Ok(EndorsementKey {
        handle,
        public,
        certificate,
    })
}

/// TPM2_ActivateCredential: `object` (the SRK or the envelope signing key,
/// password session) is the object the credential names, the EK (policy
/// session satisfying its PolicySecret on the endorsement hierarchy)
/// decrypts the seed. Returns the credential.
pub fn activate_credential(
    ctx: &mut Context,
    object: KeyHandle,
    ek: &EndorsementKey,
    credential_blob: &[u8],
    secret: &[u8],
) -> Result<Zeroizing<Vec<u8>>, TpmError> {
    activate_credential_for(
        ctx,
        object,
        AuthSession::Password,
        ek,
        credential_blob,
        secret,
    )
}

/// TPM2_ActivateCredential for any loaded `object` with an empty authValue,
/// authorized through `object_session` (a salted session with encrypt set
/// keeps the credential off the bus).
pub fn activate_credential_for(
    ctx: &mut Context,
    object: KeyHandle,
    object_session: AuthSession,
    ek: &EndorsementKey,
    credential_blob: &[u8],
    secret: &[u8],
) -> Result<Zeroizing<Vec<u8>>, TpmError> {
    let client_blob = |e| TpmError::on_client_blob("ActivateCredential", e);
    let id_object = IdObject::try_from(credential_blob.to_vec()).map_err(client_blob)?;
    let secret = EncryptedSecret::try_from(secret.to_vec()).map_err(client_blob)?;
    let policy = endorsement_policy_session(ctx)?;
    let credential = ctx
        .execute_with_sessions((Some(object_session), Some(policy), None), |c| {
            c.activate_credential(object, ek.handle, id_object, secret)
        })
        .map_err(client_blob);
    flush_session(ctx, policy);
    credential.map(|digest: Digest| Zeroizing::new(digest.value().to_vec()))
}

/// A fresh, unsalted SHA-256 policy session, with no assertion yet.
pub fn start_policy_session(ctx: &mut Context) -> Result<AuthSession, TpmError> {
    ctx.start_auth_session(
        None,
        None,
        None,
        SessionType::Policy,
        SymmetricDefinition::AES_128_CFB,
        HashingAlgorithm::Sha256,
    )
    .map_err(|e| TpmError::new("StartAuthSession (policy)", e))?
    .ok_or_else(|| TpmError::new("StartAuthSession (policy)", no_session()))
}

/// A policy session that satisfies the TCG EK's authPolicy,
/// PolicySecret(TPM_RH_ENDORSEMENT), with the (empty) endorsement auth. The
/// caller flushes it.
pub fn endorsement_policy_session(ctx: &mut Context) -> Result<AuthSession, TpmError> {
    let session = start_policy_session(ctx)?;
    let policy =
        PolicySession::try_from(session).map_err(|e| TpmError::new("policy session", e))?;
    let satisfied = ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.policy_secret(
            policy,
            AuthHandle::Endorsement,
            Nonce::default(),
            Digest::default(),
            Nonce::default(),
            None,
        )
    });
    if let Err(e) = satisfied {
        // The session would otherwise hold one of the TPM's few slots.
        flush_session(ctx, session);
        return Err(TpmError::new("PolicySecret (endorsement)", e));
    }
    Ok(session)
}

fn flush_session(ctx: &mut Context, session: AuthSession) {
    if let Err(e) = ctx.flush_context(tss_esapi::handles::SessionHandle::from(session).into()) {
        log::debug!("flushing the EK policy session failed: {e}");
    }
}

fn no_session() -> tss_esapi::Error {
    tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::WrongValueFromTpm)
}
