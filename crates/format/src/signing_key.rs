//! A member's envelope signing key: an ECC P-256 ECDSA-SHA256 key its TPM
//! made and keeps, recreated from a fixed template at every start like the
//! SRK, and used for nothing but the signature of cluster envelopes.
//!
//! This module reads the key's public area (the second block of a member
//! file), checks that it is such a key, and verifies the signatures it made.
//! Signatures are kept in one encoding only: `r ‖ s`, 32 bytes each, with
//! `s` in the lower half of the group order. ECDSA accepts `(r, s)` and
//! `(r, n − s)` alike; refusing the second makes every signed envelope's
//! bytes unique, so no one can alter an envelope and keep it valid.

use p256::PublicKey;
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use p256::ecdsa::{Signature, VerifyingKey};

use super::public::{PublicArea, PublicAreaError, PublicKey as TpmPublicKey, expect};
use super::storage_key::{EccPublic, StorageKeyError, point_from_coordinates};
use super::wire::{ALG_NULL, ALG_SHA256, ECC_NIST_P256, NAME_LEN, Reader, WireError};

/// fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, noDA, sign:
/// the TPM made the key and will never let it out, it needs no password
/// (like the SRK, it is as reachable as the TPM itself), and it is neither
/// restricted (it signs digests sceau computed, not only TPM-made
/// structures) nor a decryption key.
pub const SIGNING_ATTRIBUTES: u32 = 0x0004_0472;
/// TPM_ALG_ECDSA.
pub const ALG_ECDSA: u16 = 0x0018;
/// `r ‖ s`.
pub const SIGNATURE_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningKeyError {
    // The cause is in the message, not a source: the tools print the chain
    // of sources, and it would be printed twice (`inner_errors!`).
    #[error("malformed TPM2B_PUBLIC: {0}")]
    Wire(WireError),
    #[error("malformed TPM2B_PUBLIC: {0}")]
    Public(PublicAreaError),
    #[error("not an envelope signing key: not an ECC key")]
    NotEcc,
    #[error(
        "not an envelope signing key: attributes {0:#010x} are not {SIGNING_ATTRIBUTES:#010x} \
         (a TPM-made, non-exportable, unrestricted signing key)"
    )]
    Attributes(u32),
    #[error("not an envelope signing key: it has an authPolicy")]
    Policy,
    #[error("not an envelope signing key: {0}")]
    Point(StorageKeyError),
}

crate::inner_errors!(SigningKeyError {
    Wire(WireError),
    Public(PublicAreaError),
    Point(StorageKeyError),
});

/// Why a signature does not stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature is not two scalars of the P-256 group")]
    Malformed,
    #[error("the signature's s is in the upper half of the group order")]
    HighS,
    #[error("the signature does not verify")]
    Invalid,
}

/// A parsed, validated signing key public and its TPM Name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKey {
    public: EccPublic,
}

impl SigningKey {
    /// Parses a marshalled TPM2B_PUBLIC and accepts only the key sceau's
    /// template makes: ECC P-256, nameAlg SHA-256, [`SIGNING_ATTRIBUTES`],
    /// no symmetric algorithm, ECDSA with SHA-256, no KDF, no policy.
    pub fn from_tpm2b_public(bytes: &[u8]) -> Result<Self, SigningKeyError> {
        let mut outer = Reader::new(bytes);
        let tpmt_public = outer.tpm2b("TPM2B_PUBLIC size")?;
        outer.finish("TPM2B_PUBLIC")?;
        let area = PublicArea::parse(tpmt_public)?;
        let TpmPublicKey::Ecc { curve, kdf, x, y } = &area.key else {
            return Err(SigningKeyError::NotEcc);
        };
        expect("nameAlg", area.name_alg, ALG_SHA256)?;
        if area.attributes != SIGNING_ATTRIBUTES {
            return Err(SigningKeyError::Attributes(area.attributes));
        }
        if !area.auth_policy.is_empty() {
            return Err(SigningKeyError::Policy);
        }
        let (symmetric, _, _) = area.symmetric.unwrap_or((ALG_NULL, 0, 0));
        expect("symmetric algorithm", symmetric, ALG_NULL)?;
        let (scheme, hash) = area.scheme.unwrap_or((ALG_NULL, ALG_NULL));
        expect("scheme", scheme, ALG_ECDSA)?;
        expect("scheme hash", hash, ALG_SHA256)?;
        expect("curve", *curve, ECC_NIST_P256)?;
        expect("kdf", kdf.map_or(ALG_NULL, |(kdf, _)| kdf), ALG_NULL)?;
        Ok(Self {
            public: EccPublic::new(tpmt_public.to_vec(), point_from_coordinates(x, y)?),
        })
    }

    /// Describes a software key with the signing template: for the tests'
    /// fake TPM and for forgers, never for a member.
    #[cfg(any(test, feature = "test-support"))]
    pub fn from_point(point: &PublicKey) -> Self {
        Self {
            public: EccPublic::new(signing_public(point), *point),
        }
    }

    pub fn to_tpm2b_public(&self) -> Vec<u8> {
        self.public.to_tpm2b_public()
    }

    pub fn name(&self) -> &[u8; NAME_LEN] {
        self.public.name()
    }

    /// Checks `signature` (`r ‖ s`, low s) over the SHA-256 `digest`.
    pub fn verify(&self, digest: &[u8; 32], signature: &[u8]) -> Result<(), SignatureError> {
        verify_prehash(self.public.point(), digest, signature)
    }
}

/// Checks an ECDSA P-256 `signature` (`r ‖ s`, low s) by `point` over the
/// SHA-256 `digest`: the one verifier of envelope signatures and of member
/// file endorsements.
pub fn verify_prehash(
    point: &PublicKey,
    digest: &[u8; 32],
    signature: &[u8],
) -> Result<(), SignatureError> {
    let parsed = Signature::from_slice(signature).map_err(|_| SignatureError::Malformed)?;
    if parsed.normalize_s().is_some() {
        return Err(SignatureError::HighS);
    }
    VerifyingKey::from(point)
        .verify_prehash(digest, &parsed)
        .map_err(|_| SignatureError::Invalid)
}

/// Signs the SHA-256 `digest` in software (RFC 6979 nonces), in the one
/// encoding sceau accepts: the enrollment key's endorsements, and the
/// tests' stand-ins for a TPM.
pub fn sign_prehash(secret: &p256::SecretKey, digest: &[u8; 32]) -> [u8; SIGNATURE_LEN] {
    use p256::ecdsa::signature::hazmat::PrehashSigner as _;
    let key = p256::ecdsa::SigningKey::from(secret);
    let signature: Signature = key.sign_prehash(digest).expect("a 32-byte digest");
    canonical_signature(&signature.r().to_bytes(), &signature.s().to_bytes())
        .expect("p256 makes valid signatures")
}

/// The one encoding sceau writes: `r ‖ s` with s in the lower half. A TPM
/// returns either half and may drop leading zero bytes of r and s.
pub fn canonical_signature(r: &[u8], s: &[u8]) -> Result<[u8; SIGNATURE_LEN], SignatureError> {
    let pad = |part: &[u8]| -> Result<[u8; 32], SignatureError> {
        let digits = part
            .iter()
            .position(|&b| b != 0)
            .map_or(&part[part.len()..], |first| &part[first..]);
        if digits.len() > 32 {
            return Err(SignatureError::Malformed);
        }
        let mut out = [0u8; 32];
        out[32 - digits.len()..].copy_from_slice(digits);
        Ok(out)
    };
    let parsed =
        Signature::from_scalars(pad(r)?, pad(s)?).map_err(|_| SignatureError::Malformed)?;
    let low = parsed.normalize_s().unwrap_or(parsed);
    Ok(low.to_bytes().into())
}

/// TPMT_PUBLIC of a P-256 key in the signing template's shape.
#[cfg(any(test, feature = "test-support"))]
fn signing_public(point: &PublicKey) -> Vec<u8> {
    use super::storage_key::coordinates;
    use super::wire::{ALG_ECC, Writer};
    let (x, y) = coordinates(point);
    let mut w = Writer::default();
    w.u16(ALG_ECC)
        .u16(ALG_SHA256)
        .u32(SIGNING_ATTRIBUTES)
        .tpm2b(&[]);
    w.u16(ALG_NULL).u16(ALG_ECDSA).u16(ALG_SHA256);
    w.u16(ECC_NIST_P256).u16(ALG_NULL);
    w.tpm2b(&x).tpm2b(&y);
    w.finish()
}

/// A signing key held in software, as a TPM holds its own: the fake TPM's,
/// and the tests' forgers'.
#[cfg(any(test, feature = "test-support"))]
pub struct SoftwareSigner(p256::SecretKey);

#[cfg(any(test, feature = "test-support"))]
impl SoftwareSigner {
    /// The key with scalar `bytes` (fixed keys keep fuzz seeds valid).
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        Self(p256::SecretKey::from_slice(bytes).expect("a valid P-256 scalar"))
    }

    pub fn public(&self) -> SigningKey {
        SigningKey::from_point(&self.0.public_key())
    }

    pub fn sign(&self, digest: &[u8; 32]) -> [u8; SIGNATURE_LEN] {
        sign_in_software(&self.0, digest)
    }
}

/// Signs in software as a TPM would: for the fake TPM and the tests'
/// forgers.
#[cfg(any(test, feature = "test-support"))]
pub fn sign_in_software(secret: &p256::SecretKey, digest: &[u8; 32]) -> [u8; SIGNATURE_LEN] {
    sign_prehash(secret, digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::SecretKey;

    fn secret() -> SecretKey {
        SecretKey::from_slice(&[0x22; 32]).unwrap()
    }

    #[test]
    fn a_software_key_round_trips_and_verifies_its_signature() {
        let key = SigningKey::from_point(&secret().public_key());
        let parsed = SigningKey::from_tpm2b_public(&key.to_tpm2b_public()).unwrap();
        assert_eq!(parsed, key);
        let digest = [7u8; 32];
        let signature = sign_in_software(&secret(), &digest);
        assert_eq!(key.verify(&digest, &signature), Ok(()));
        let mut other = digest;
        other[0] ^= 1;
        assert_eq!(key.verify(&other, &signature), Err(SignatureError::Invalid));
    }

    /// Without the low-s rule, `(r, n − s)` would verify too: an envelope
    /// with a second valid encoding.
    #[test]
    fn the_high_s_twin_of_a_valid_signature_is_refused() {
        let key = SigningKey::from_point(&secret().public_key());
        let digest = [9u8; 32];
        let low = Signature::from_slice(&sign_in_software(&secret(), &digest)).unwrap();
        let high = Signature::from_scalars(low.r().to_bytes(), (-*low.s()).to_bytes()).unwrap();
        assert_eq!(
            key.verify(&digest, &high.to_bytes()),
            Err(SignatureError::HighS)
        );
        assert_eq!(
            canonical_signature(&high.r().to_bytes(), &high.s().to_bytes()).unwrap(),
            <[u8; 64]>::from(low.to_bytes())
        );
    }

    #[test]
    fn refuses_storage_keys_restricted_keys_and_other_schemes() {
        let bytes = SigningKey::from_point(&secret().public_key()).to_tpm2b_public();
        let mut restricted = bytes.clone();
        restricted[2 + 4 + 1] |= 0x01; // attributes byte 2: restricted
        assert!(matches!(
            SigningKey::from_tpm2b_public(&restricted),
            Err(SigningKeyError::Attributes(_))
        ));
        let mut exportable = bytes.clone();
        exportable[2 + 4 + 3] &= !0x02; // attributes byte 4: fixedTPM
        assert!(matches!(
            SigningKey::from_tpm2b_public(&exportable),
            Err(SigningKeyError::Attributes(_))
        ));
        let mut schnorr = bytes.clone();
        schnorr[2 + 10 + 3] = 0x1c; // scheme: ECSCHNORR
        assert!(SigningKey::from_tpm2b_public(&schnorr).is_err());
        let srk = crate::storage_key::StorageKey::from_point(&secret().public_key());
        assert!(SigningKey::from_tpm2b_public(&srk.to_tpm2b_public()).is_err());
    }

    /// A malformed public area's cause is printed once: it was printed
    /// twice when the error was both in the message and the source.
    #[test]
    fn errors_name_their_cause_once() {
        use crate::storage_key::StorageKey;
        for bytes in [&[][..], &[0, 4, 0, 0x23, 0, 0x0b][..]] {
            let signing = SigningKey::from_tpm2b_public(bytes).unwrap_err();
            let storage = StorageKey::from_tpm2b_public(bytes).unwrap_err();
            let errors: [&dyn std::error::Error; 2] = [&signing, &storage];
            for error in errors {
                let printed = crate::as_printed(error);
                assert_eq!(printed, error.to_string(), "{printed}");
            }
        }
    }
}
