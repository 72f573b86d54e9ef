//! The envelope signing key: an ECC P-256 ECDSA-SHA256 primary key under
//! the owner hierarchy, recreated from a fixed template at every start like
//! the SRK, so that no state lives on disk and the same TPM always yields
//! the same key. The TPM made it and never lets it out (fixedTPM,
//! fixedParent, sensitiveDataOrigin); sceau uses it for cluster envelopes
//! only, and its template's `unique` is sceau's own, so that no other
//! program that asks the TPM for "an ECDSA key" gets this one by accident
//! and signs its own data with it.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::attributes::ObjectAttributesBuilder;
use tss_esapi::constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK};
use tss_esapi::handles::{KeyHandle, ObjectHandle};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{
    Digest, EccParameter, EccPoint, EccScheme, HashScheme, HashcheckTicket,
    KeyDerivationFunctionScheme, Public, PublicBuffer, PublicBuilder, PublicEccParametersBuilder,
    Signature, SignatureScheme,
};
use tss_esapi::traits::Marshall as _;
use tss_esapi::tss2_esys::TPMT_TK_HASHCHECK;
use tss_esapi::utils::TpmsContext;

use super::fault::TpmError;
use super::observe::{Observer, TpmCommand};
use sceau_format::signing_key::{SIGNATURE_LEN, canonical_signature};

/// The template's `unique.x`: part of the key's derivation, so a different
/// value is a different key. Frozen: changing it changes every member's
/// signing key, its member file and the cluster key_id.
const UNIQUE_LABEL: &[u8] = b"sceau envelope signing key";

/// The key this TPM signs envelopes with, loaded for the life of the
/// process.
#[derive(Debug)]
pub struct EnvelopeSigningKey {
    handle: KeyHandle,
    public: Public,
    /// Set while the key is out of the TPM ([`EnvelopeSigningKey::set_aside`]).
    saved: Option<TpmsContext>,
}

impl EnvelopeSigningKey {
    /// One CreatePrimary under the owner hierarchy.
    pub fn recreate(ctx: &mut Context) -> Result<Self, TpmError> {
        let template = template().map_err(|e| TpmError::new("signing key template", e))?;
        let created = ctx
            .execute_with_session(Some(AuthSession::Password), |c| {
                c.create_primary(Hierarchy::Owner, template, None, None, None, None)
            })
            .map_err(|e| TpmError::new("CreatePrimary (signing key)", e))?;
        Ok(Self {
            handle: created.key_handle,
            public: created.out_public,
            saved: None,
        })
    }

    pub fn handle(&self) -> KeyHandle {
        self.handle
    }

    /// The public area as a marshalled TPM2B_PUBLIC, the member file's
    /// second block.
    pub fn tpm2b_public(&self) -> Result<Vec<u8>, TpmError> {
        PublicBuffer::try_from(self.public.clone())
            .and_then(|buffer| buffer.marshall())
            .map_err(|e| TpmError::new("marshal signing key public", e))
    }

    /// TPM2_Sign of a SHA-256 digest sceau computed: with a null ticket,
    /// which an unrestricted key accepts. Returns `r ‖ s`, low s.
    /// Gives the key's object slot back to the TPM (ContextSave, then
    /// FlushContext) until the next Sign loads it again: a TPM may hold as
    /// few as three objects, cluster mode keeps the SRK and this key, and a
    /// Load under a KEK generation (a persistent key, which takes a slot
    /// while in use) needs two more. Linux's /dev/tpmrm0 does not help: it
    /// loads every object the process holds before each of its commands.
    pub fn set_aside(&mut self, ctx: &mut Context) -> Result<(), TpmError> {
        if self.saved.is_some() {
            return Ok(());
        }
        let saved = ctx
            .context_save(self.handle.into())
            .map_err(|e| TpmError::new("ContextSave (signing key)", e))?;
        ctx.flush_context(self.handle.into())
            .map_err(|e| TpmError::new("FlushContext (signing key)", e))?;
        self.saved = Some(saved);
        Ok(())
    }

    /// The key's handle, loaded again first if it was set aside.
    fn loaded(&mut self, ctx: &mut Context) -> Result<KeyHandle, TpmError> {
        if let Some(saved) = self.saved.take() {
            let object = ctx
                .context_load(saved)
                .map_err(|e| TpmError::new("ContextLoad (signing key)", e))?;
            self.handle = KeyHandle::from(object);
        }
        Ok(self.handle)
    }

    pub fn sign(
        &mut self,
        ctx: &mut Context,
        observer: &Observer,
        digest: &[u8; 32],
    ) -> Result<[u8; SIGNATURE_LEN], TpmError> {
        let wrap = |e| TpmError::new("Sign", e);
        let handle = self.loaded(ctx)?;
        let digest = Digest::try_from(digest.to_vec()).map_err(wrap)?;
        let ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
            tag: TPM2_ST_HASHCHECK,
            hierarchy: TPM2_RH_NULL,
            digest: Default::default(),
        })
        .map_err(wrap)?;
        let signature = observer
            .timed(TpmCommand::Sign, || {
                ctx.execute_with_session(Some(AuthSession::Password), |c| {
                    c.sign(handle, digest, SignatureScheme::Null, ticket)
                })
            })
            .map_err(wrap)?;
        let Signature::EcDsa(ecdsa) = signature else {
            return Err(wrap(tss_esapi::Error::WrapperError(
                tss_esapi::WrapperErrorKind::InconsistentParams,
            )));
        };
        canonical_signature(ecdsa.signature_r().value(), ecdsa.signature_s().value()).map_err(
            |_| {
                wrap(tss_esapi::Error::WrapperError(
                    tss_esapi::WrapperErrorKind::InconsistentParams,
                ))
            },
        )
    }

    /// Unloads the key (a one-off command's TPM, which is closed next).
    pub fn flush(self, ctx: &mut Context) {
        if let Err(e) = ctx.flush_context(ObjectHandle::from(self.handle)) {
            log::debug!("FlushContext of the signing key: {e}");
        }
    }
}

/// The envelope signing key's template.
pub fn template() -> Result<Public, tss_esapi::Error> {
    let unique = EccPoint::new(
        EccParameter::try_from(UNIQUE_LABEL.to_vec())?,
        EccParameter::default(),
    );
    ecdsa_p256_template(false, unique)
}

/// An ECC P-256, ECDSA-SHA256, nameAlg SHA-256 signing key that never
/// leaves its TPM (fixedTPM, fixedParent, sensitiveDataOrigin), used with an
/// empty authValue (userWithAuth) and exempt from the dictionary-attack
/// counter (noDA): the envelope signing key (unrestricted) and the SPIRE
/// agent's attestation key (restricted) differ only in `restricted` and
/// `unique`.
pub fn ecdsa_p256_template(restricted: bool, unique: EccPoint) -> Result<Public, tss_esapi::Error> {
    let attributes = ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_restricted(restricted)
        .with_sign_encrypt(true)
        .build()?;
    let parameters = PublicEccParametersBuilder::new()
        .with_ecc_scheme(EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)))
        .with_curve(EccCurve::NistP256)
        .with_key_derivation_function_scheme(KeyDerivationFunctionScheme::Null)
        .with_is_signing_key(true)
        .with_is_decryption_key(false)
        .with_restricted(restricted)
        .build()?;
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::Ecc)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attributes)
        .with_ecc_parameters(parameters)
        .with_ecc_unique_identifier(unique)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sceau_format::signing_key::SIGNING_ATTRIBUTES;
    use tss_esapi::traits::Marshall;

    /// The template carries exactly the attributes the member-file reader
    /// demands, so a key from it is accepted there and nothing else is.
    #[test]
    fn the_template_has_the_attributes_member_files_require() {
        let public = template().unwrap();
        assert_eq!(u32::from(public.object_attributes()), SIGNING_ATTRIBUTES);
        let bytes = public.marshall().unwrap();
        // type ECC, nameAlg SHA-256, attributes, empty policy, no symmetric,
        // ECDSA with SHA-256, P-256, no KDF.
        let head = "0023000b00040472000000100018000b00030010";
        assert!(sceau_format::key_id::hex(&bytes).starts_with(head));
    }
}
