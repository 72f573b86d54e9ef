//! The storage root key: recreated from the TCG template at every start, so
//! that the same TPM always yields the same key and the same key_id.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::attributes::{ObjectAttributes, ObjectAttributesBuilder};
use tss_esapi::handles::{KeyHandle, ObjectHandle, PersistentTpmHandle, TpmHandle};
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
    /// Set when `--srk-handle` pointed at a persistent copy of the same key.
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
        "persistent key {handle:#010x} has Name {found}, but the SRK template gives {expected}; refusing to use it"
    )]
    PersistentMismatch {
        handle: u32,
        found: String,
        expected: String,
    },
    /// Opening also loads the signed boot policies, and refuses bad ones.
    #[error(transparent)]
    BootPolicy(#[from] super::boot_policy::BootPolicyError),
    #[error(
        "the TPM at {tcti} has no resource manager and holds {loaded} objects or sessions \
         another process loaded (a serving sceau?): stop sceau first (systemctl stop sceau), \
         or use device:/dev/tpmrm0, where both run at once"
    )]
    InUse { tcti: String, loaded: usize },
    /// Opening also finds the KEK generations the TPM holds.
    #[error(transparent)]
    Kek(super::kek::KekError),
}

impl Srk {
    /// Runs CreatePrimary with the best template the TPM supports; with
    /// `persistent`, switches to that persistent key if it is the same key.
    pub fn recreate(ctx: &mut Context, persistent: Option<u32>) -> Result<Self, SrkError> {
        let algorithm = best_algorithm(ctx)?;
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
        let srk = Srk {
            handle,
            name,
            public: created.out_public,
            algorithm,
            persistent: None,
        };
        match persistent {
            None => Ok(srk),
            Some(raw) => srk.switch_to_persistent(ctx, raw),
        }
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

    /// Uses a persistent copy of the SRK, but only if it is provably the
    /// template's key: its Name must equal that of the key CreatePrimary just
    /// made. Under /dev/tpmrm0 a persistent SRK spares the kernel a context
    /// swap of the transient one around every command.
    fn switch_to_persistent(self, ctx: &mut Context, raw: u32) -> Result<Self, SrkError> {
        let tpm_handle = PersistentTpmHandle::new(raw).map_err(|_| SrkError::NotPersistent(raw))?;
        let object = ctx
            .execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::Persistent(tpm_handle)))
            .map_err(|e| TpmError::new("TR_FromTPMPublic", e))?;
        let found = ctx
            .tr_get_name(object)
            .map_err(|e| TpmError::new("TR_GetName", e))?;
        if found.value() != self.name.value() {
            return Err(SrkError::PersistentMismatch {
                handle: raw,
                found: hex(found.value()),
                expected: hex(self.name.value()),
            });
        }
        ctx.flush_context(ObjectHandle::from(self.handle))
            .map_err(|e| TpmError::new("FlushContext", e))?;
        Ok(Srk {
            handle: KeyHandle::from(object),
            persistent: Some(raw),
            ..self
        })
    }
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
