//! Parameter encryption on the TPM bus.
//!
//! Create carries the DEK to the TPM and Unseal carries it back. Both run in
//! one long-lived HMAC session salted with the SRK and with AES-128-CFB
//! encrypt and decrypt set, so a bus interposer sees only ciphertext. The
//! salt is encrypted to the SRK's public area as CreatePrimary returned it.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::attributes::SessionAttributesBuilder;
use tss_esapi::constants::SessionType;
use tss_esapi::handles::{KeyHandle, ObjectHandle, SessionHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::SymmetricDefinition;

use super::fault::TpmError;

/// Whether commands that carry a DEK are parameter-encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParameterEncryption {
    /// A session salted with the SRK (the only mode the `sceau` binary uses).
    SaltedSession,
    /// Plain password authorization: the DEK crosses the bus in the clear.
    /// It exists for the benchmark and for the test that proves the salted
    /// session hides the DEK, and only in builds with the
    /// `insecure-test-hooks` feature; no command-line flag selects it.
    #[cfg(feature = "insecure-test-hooks")]
    Off,
}

/// Starts a salted HMAC session with encrypt, decrypt and continueSession
/// set: Create's input and Unseal's output are encrypted.
pub fn start_salted(ctx: &mut Context, srk: KeyHandle) -> Result<AuthSession, TpmError> {
    start(ctx, srk, SessionType::Hmac, true)
}

/// Starts a salted policy session (boot-state binding) with encrypt and
/// continueSession set: Unseal's output is encrypted; Unseal has no input
/// to decrypt.
pub fn start_salted_policy(ctx: &mut Context, srk: KeyHandle) -> Result<PolicySession, TpmError> {
    let session = start(ctx, srk, SessionType::Policy, false)?;
    PolicySession::try_from(session).map_err(|e| TpmError::new("StartAuthSession", e))
}

fn start(
    ctx: &mut Context,
    srk: KeyHandle,
    session_type: SessionType,
    decrypt: bool,
) -> Result<AuthSession, TpmError> {
    let session = ctx
        .execute_without_session(|c| {
            c.start_auth_session(
                Some(srk),
                None,
                None,
                session_type,
                SymmetricDefinition::AES_128_CFB,
                HashingAlgorithm::Sha256,
            )
        })
        .map_err(|e| TpmError::new("StartAuthSession", e))?
        .ok_or_else(|| {
            TpmError::new(
                "StartAuthSession",
                tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::WrongValueFromTpm),
            )
        })?;
    let (attributes, mask) = SessionAttributesBuilder::new()
        .with_decrypt(decrypt)
        .with_encrypt(true)
        .with_continue_session(true)
        .build();
    if let Err(e) = ctx.tr_sess_set_attributes(session, attributes, mask) {
        let handle = ObjectHandle::from(SessionHandle::from(session));
        if let Err(flush) = ctx.flush_context(handle) {
            log::debug!("flushing the half-made session failed: {flush}");
        }
        return Err(TpmError::new("TRSess_SetAttributes", e));
    }
    Ok(session)
}
