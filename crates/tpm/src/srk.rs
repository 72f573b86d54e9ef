//! The storage root key: recreated from the TCG template at every start, so
//! that the same TPM always yields the same key and the same key_id.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::attributes::{ObjectAttributes, ObjectAttributesBuilder};
use tss_esapi::handles::{KeyHandle, PersistentTpmHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::key_bits::RsaKeyBits;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{
    EccPoint, Name, Public, PublicBuffer, PublicBuilder, PublicEccParameters,
    PublicEccParametersBuilder, PublicKeyRsa, PublicParameters, PublicRsaParameters,
    PublicRsaParametersBuilder, RsaExponent, SymmetricDefinitionObject,
};
use tss_esapi::traits::Marshall as _;

use super::fault::{Recovery, TpmError};
pub use sceau_format::key_id::{KeyId, hex};
use sceau_format::roca::has_roca_fingerprint;

/// TestParms answers RETRY or TESTING while the TPM self-tests after power-on.
const TEST_PARMS_ATTEMPTS: u32 = 6;
const FIRST_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

/// Which TCG storage template produced the SRK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrkAlgorithm {
    EccP256,
    Rsa2048,
}

/// The SRK this process uses, and how it was obtained.
#[derive(Debug)]
pub struct Srk {
    pub handle: KeyHandle,
    pub name: Name,
    /// The public area CreatePrimary returned: what `sceau srk-public` prints.
    pub public: Public,
    pub algorithm: SrkAlgorithm,
    /// Set when `--srk-handle` pointed at a persistent key of the template.
    pub persistent: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum SrkError {
    #[error(transparent)]
    Tpm(#[from] TpmError),
    #[error("invalid SRK template: {0}")]
    Template(tss_esapi::Error),
    #[error("persistent handle {0:#010x} is not in the persistent range 0x81000000..0x81ffffff")]
    NotPersistent(u32),
    #[error(
        "persistent key {handle:#010x} is not a key of the SRK template ({algorithm:?}): \
         refusing to use it; give the handle of this TPM's SRK, or leave out --srk-handle"
    )]
    NotTheTemplate {
        handle: u32,
        algorithm: SrkAlgorithm,
    },
    #[error(
        "this TPM's SRK has Name {found}, but --expect-srk-name pins {expected}: refusing to \
         use another TPM (swapped, its owner hierarchy cleared, or a key substituted on the \
         bus); if the TPM was replaced on purpose, re-enroll and pin the new Name"
    )]
    NotPinned { expected: String, found: String },
    #[error(
        "this TPM's RSA SRK has the ROCA fingerprint (CVE-2017-15361, Infineon RSALib): its \
         private key can be computed from its public one, and with it the session that hides \
         every DEK on the bus; update the TPM's firmware and clear the TPM"
    )]
    Roca,
}

impl Srk {
    /// The SRK: made by CreatePrimary with the best template the TPM
    /// supports, or, with `persistent`, the persistent key at that handle,
    /// read with ReadPublic alone (no owner authorization needed) and taken
    /// only if it is a key of that template. With `pinned`, any SRK whose
    /// Name differs is refused: a swapped TPM, a cleared owner hierarchy or
    /// a key substituted on the bus.
    pub fn recreate(
        ctx: &mut Context,
        persistent: Option<u32>,
        pinned: Option<&[u8]>,
    ) -> Result<Self, SrkError> {
        let algorithm = best_algorithm(ctx)?;
        let srk = match persistent {
            None => Self::create(ctx, algorithm)?,
            Some(raw) => Self::persistent(ctx, algorithm, raw)?,
        };
        if let Public::Rsa { unique, .. } = &srk.public
            && has_roca_fingerprint(unique.value())
        {
            return Err(SrkError::Roca);
        }
        match pinned {
            Some(expected) if expected != srk.name.value() => Err(SrkError::NotPinned {
                expected: hex(expected),
                found: hex(srk.name.value()),
            }),
            _ => Ok(srk),
        }
    }

    fn create(ctx: &mut Context, algorithm: SrkAlgorithm) -> Result<Self, SrkError> {
        let template = template(algorithm).map_err(SrkError::Template)?;
        let created = ctx
            .execute_with_session(Some(AuthSession::Password), |c| {
                c.create_primary(Hierarchy::Owner, template, None, None, None, None)
            })
            .map_err(|e| TpmError::new("CreatePrimary", e))?;
        let handle = created.key_handle;
        let name = ctx
            .tr_get_name(handle.into())
            .map_err(|e| TpmError::new("TR_GetName", e))?;
        Ok(Srk {
            handle,
            name,
            public: created.out_public,
            algorithm,
            persistent: None,
        })
    }

    pub fn key_id(&self) -> KeyId {
        KeyId::from_srk_name(self.name.value())
    }

    /// The public area as a marshalled TPM2B_PUBLIC (`tpm2_readpublic -o`).
    pub fn tpm2b_public(&self) -> Result<Vec<u8>, TpmError> {
        PublicBuffer::try_from(self.public.clone())
            .and_then(|buffer| buffer.marshall())
            .map_err(|e| TpmError::new("marshal SRK public", e))
    }

    /// A persistent copy of the SRK, taken only if its public area is the
    /// template's (attributes, algorithms and curve; the key itself aside).
    /// Under /dev/tpmrm0 a persistent SRK spares the kernel a context swap
    /// of the transient one around every command, and a real TPM the
    /// seconds an RSA CreatePrimary takes. Whether it is this TPM's own SRK
    /// is what `--expect-srk-name` pins.
    fn persistent(ctx: &mut Context, algorithm: SrkAlgorithm, raw: u32) -> Result<Self, SrkError> {
        let tpm_handle = PersistentTpmHandle::new(raw).map_err(|_| SrkError::NotPersistent(raw))?;
        let object = ctx
            .execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::Persistent(tpm_handle)))
            .map_err(|e| TpmError::new("TR_FromTPMPublic", e))?;
        let handle = KeyHandle::from(object);
        let (public, name, _) = ctx
            .execute_without_session(|c| c.read_public(handle))
            .map_err(|e| TpmError::new("ReadPublic", e))?;
        if !has_template(&public, algorithm) {
            return Err(SrkError::NotTheTemplate {
                handle: raw,
                algorithm,
            });
        }
        Ok(Srk {
            handle,
            name,
            public,
            algorithm,
            persistent: Some(raw),
        })
    }
}

/// Whether a public area is the SRK template of `algorithm` (the one KEK
/// generations use too): equal to it once its unique part, the key
/// itself, is the template's empty one.
pub fn has_template(public: &Public, algorithm: SrkAlgorithm) -> bool {
    let Ok(expected) = template(algorithm) else {
        return false;
    };
    let mut candidate = public.clone();
    match (&mut candidate, &expected) {
        (Public::Ecc { unique, .. }, Public::Ecc { unique: empty, .. }) => *unique = empty.clone(),
        (Public::Rsa { unique, .. }, Public::Rsa { unique: empty, .. }) => *unique = empty.clone(),
        _ => return false,
    }
    candidate == expected
}

/// P-256 is preferred, as systemd does; only a TPM that answers "unsupported"
/// to TestParms gets RSA-2048. Any other failure is an error: falling back
/// on a transient fault would silently change the key and the key_id, and
/// orphan every envelope.
fn best_algorithm(ctx: &mut Context) -> Result<SrkAlgorithm, SrkError> {
    let ecc = ecc_parameters().map_err(SrkError::Template)?;
    let mut delay = FIRST_RETRY_DELAY;
    for attempt in 1..=TEST_PARMS_ATTEMPTS {
        let error = match ctx.execute_without_session(|c| c.test_parms(PublicParameters::Ecc(ecc)))
        {
            Ok(()) => return Ok(SrkAlgorithm::EccP256),
            Err(e) => TpmError::new("TestParms", e),
        };
        if error.is_unsupported_parameter() {
            log::warn!("TPM does not support an ECC P-256 SRK ({error}); using RSA-2048");
            return Ok(SrkAlgorithm::Rsa2048);
        }
        if error.recovery() != Recovery::RetryLater || attempt == TEST_PARMS_ATTEMPTS {
            return Err(error.into());
        }
        std::thread::sleep(delay);
        delay *= 2;
    }
    unreachable!("the last attempt returns")
}

/// fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|noDA|restricted|decrypt
/// (0x00030472), the TCG Provisioning Guidance SRK attributes.
pub fn srk_attributes() -> Result<ObjectAttributes, tss_esapi::Error> {
    ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_restricted(true)
        .with_decrypt(true)
        .build()
}

fn ecc_parameters() -> Result<PublicEccParameters, tss_esapi::Error> {
    PublicEccParametersBuilder::new_restricted_decryption_key(
        SymmetricDefinitionObject::AES_128_CFB,
        EccCurve::NistP256,
    )
    .build()
}

fn rsa_parameters() -> Result<PublicRsaParameters, tss_esapi::Error> {
    PublicRsaParametersBuilder::new_restricted_decryption_key(
        SymmetricDefinitionObject::AES_128_CFB,
        RsaKeyBits::Rsa2048,
        RsaExponent::default(),
    )
    .build()
}

/// The template with an empty `unique`, which is what systemd and a plain
/// `tpm2_createprimary -G ecc256:null:aes128cfb` use. This choice is frozen:
/// a different `unique` is a different key and would orphan every envelope.
pub fn template(algorithm: SrkAlgorithm) -> Result<Public, tss_esapi::Error> {
    let builder = PublicBuilder::new()
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(srk_attributes()?);
    match algorithm {
        SrkAlgorithm::EccP256 => builder
            .with_public_algorithm(PublicAlgorithm::Ecc)
            .with_ecc_parameters(ecc_parameters()?)
            .with_ecc_unique_identifier(EccPoint::default())
            .build(),
        SrkAlgorithm::Rsa2048 => builder
            .with_public_algorithm(PublicAlgorithm::Rsa)
            .with_rsa_parameters(rsa_parameters()?)
            .with_rsa_unique_identifier(PublicKeyRsa::default())
            .build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tss_esapi::traits::Marshall;

    #[test]
    fn attributes_are_the_tcg_srk_value() {
        let attrs = srk_attributes().unwrap();
        assert_eq!(u32::from(attrs), 0x0003_0472);
    }

    #[test]
    fn ecc_template_marshals_to_the_tcg_layout() {
        let bytes = template(SrkAlgorithm::EccP256).unwrap().marshall().unwrap();
        // type ECC, nameAlg SHA-256, attributes, empty policy, AES-128-CFB,
        // null scheme, P-256, null KDF, empty x and y.
        let expected = "0023000b000304720000000600800043001000030010000000000";
        assert!(hex(&bytes).starts_with(&expected[..48]), "{}", hex(&bytes));
    }
}
