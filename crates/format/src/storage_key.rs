//! The public half of an ECC P-256 storage key: a member TPM's SRK, or the
//! offline recovery key, which sceau describes with the very same TCG SRK
//! template so that one wrapping construction serves every recipient.

use p256::elliptic_curve::sec1::{FromEncodedPoint as _, ToEncodedPoint as _};
use p256::{EncodedPoint, PublicKey};

use super::public::{PublicArea, PublicAreaError, PublicKey as TpmPublicKey, expect};
use super::wire::{
    ALG_AES, ALG_CFB, ALG_ECC, ALG_NULL, ALG_SHA256, ECC_NIST_P256, NAME_LEN, Reader, WireError,
    Writer, sha256_name,
};

/// TCG Provisioning Guidance SRK attributes: fixedTPM, fixedParent,
/// sensitiveDataOrigin, userWithAuth, noDA, restricted, decrypt.
pub const SRK_ATTRIBUTES: u32 = 0x0003_0472;
/// fixedTPM, fixedParent and sensitiveDataOrigin: the TPM generated the
/// private key and will never let it out (TPM2_Import and TPM2_LoadExternal
/// of a private key both require fixedTPM clear).
const TPM_RESIDENT: u32 = (1 << 1) | (1 << 4) | (1 << 5);
const RESTRICTED: u32 = 1 << 16;
const DECRYPT: u32 = 1 << 17;
const SIGN: u32 = 1 << 18;
/// The parent's symmetric key size: KDFa derives the AES-128 wrapping key.
pub const PARENT_SYM_BITS: u16 = 128;
pub const COORDINATE_LEN: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageKeyError {
    // The cause is in the message, not a source: the tools print the chain
    // of sources, and it would be printed twice (`inner_errors!`).
    #[error("malformed TPM2B_PUBLIC: {0}")]
    Wire(WireError),
    #[error("malformed TPM2B_PUBLIC: {0}")]
    Public(PublicAreaError),
    #[error("not a storage key: not an ECC key")]
    NotEcc,
    #[error("not a storage key: attributes {0:#010x} lack restricted+decrypt or have sign")]
    NotStorage(u32),
    #[error("the ECC point is not on the P-256 curve")]
    BadPoint,
}

crate::inner_errors!(StorageKeyError {
    Wire(WireError),
    Public(PublicAreaError),
});

/// What every P-256 key read from a TPM keeps, whatever its template
/// (the storage keys here, the envelope signing keys of `signing_key`): its
/// marshalled TPMT_PUBLIC, its Name (nameAlg SHA-256), and the point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EccPublic {
    tpmt_public: Vec<u8>,
    name: [u8; NAME_LEN],
    point: PublicKey,
}

impl EccPublic {
    /// `tpmt_public` is the area `point` was read from or written into.
    pub fn new(tpmt_public: Vec<u8>, point: PublicKey) -> Self {
        Self {
            name: sha256_name(&tpmt_public),
            tpmt_public,
            point,
        }
    }

    /// The area as a TPM2B_PUBLIC, as `tpm2_readpublic -o` writes it.
    pub fn to_tpm2b_public(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.tpm2b(&self.tpmt_public);
        w.finish()
    }

    pub fn name(&self) -> &[u8; NAME_LEN] {
        &self.name
    }

    pub fn point(&self) -> &PublicKey {
        &self.point
    }
}

/// A parsed, validated storage key public and its TPM Name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageKey {
    public: EccPublic,
    attributes: u32,
}

impl StorageKey {
    /// Parses a marshalled TPM2B_PUBLIC (as `tpm2_readpublic -o` writes it)
    /// and accepts only what sceau can wrap to: an ECC P-256 restricted
    /// decryption key with nameAlg SHA-256, AES-128-CFB, no scheme, no KDF.
    pub fn from_tpm2b_public(bytes: &[u8]) -> Result<Self, StorageKeyError> {
        let mut outer = Reader::new(bytes);
        let tpmt_public = outer.tpm2b("TPM2B_PUBLIC size")?;
        outer.finish("TPM2B_PUBLIC")?;
        Self::from_tpmt_public(tpmt_public)
    }

    pub fn from_tpmt_public(tpmt_public: &[u8]) -> Result<Self, StorageKeyError> {
        let area = PublicArea::parse(tpmt_public)?;
        let TpmPublicKey::Ecc { curve, kdf, x, y } = &area.key else {
            return Err(StorageKeyError::NotEcc);
        };
        expect("nameAlg", area.name_alg, ALG_SHA256)?;
        let attributes = area.attributes;
        if attributes & (RESTRICTED | DECRYPT) != (RESTRICTED | DECRYPT) || attributes & SIGN != 0 {
            return Err(StorageKeyError::NotStorage(attributes));
        }
        let (algorithm, bits, mode) = area.symmetric.unwrap_or((ALG_NULL, 0, 0));
        expect("symmetric algorithm", algorithm, ALG_AES)?;
        expect("symmetric key bits", bits, PARENT_SYM_BITS)?;
        expect("symmetric mode", mode, ALG_CFB)?;
        expect(
            "scheme",
            area.scheme.map_or(ALG_NULL, |(scheme, _)| scheme),
            ALG_NULL,
        )?;
        expect("curve", *curve, ECC_NIST_P256)?;
        expect("kdf", kdf.map_or(ALG_NULL, |(kdf, _)| kdf), ALG_NULL)?;
        Ok(Self {
            public: EccPublic::new(tpmt_public.to_vec(), point_from_coordinates(x, y)?),
            attributes,
        })
    }

    /// Describes a software P-256 key with the SRK template (the recovery key).
    pub fn from_point(point: &PublicKey) -> Self {
        Self {
            public: EccPublic::new(ecc_storage_public(SRK_ATTRIBUTES, point), *point),
            attributes: SRK_ATTRIBUTES,
        }
    }

    pub fn to_tpm2b_public(&self) -> Vec<u8> {
        self.public.to_tpm2b_public()
    }

    pub fn name(&self) -> &[u8; NAME_LEN] {
        self.public.name()
    }

    pub fn attributes(&self) -> u32 {
        self.attributes
    }

    /// Exactly the TCG SRK attributes sceau's template gives: what every
    /// member file must carry (`sceau srk-public` prints nothing else).
    pub fn is_srk(&self) -> bool {
        self.attributes == SRK_ATTRIBUTES
    }

    /// A key the TPM generated and keeps (fixedTPM, fixedParent,
    /// sensitiveDataOrigin). A key made elsewhere and imported or loaded
    /// into a TPM lacks these, so credential activation against it proves
    /// nothing about where else its private half lives.
    pub fn is_tpm_resident(&self) -> bool {
        self.attributes & TPM_RESIDENT == TPM_RESIDENT
    }

    pub fn point(&self) -> &PublicKey {
        self.public.point()
    }

    /// The x-coordinate, as KDFe takes it.
    pub fn x(&self) -> [u8; COORDINATE_LEN] {
        coordinates(self.public.point()).0
    }
}

/// Fixed-width affine coordinates of a P-256 point.
pub fn coordinates(point: &PublicKey) -> ([u8; COORDINATE_LEN], [u8; COORDINATE_LEN]) {
    let encoded = point.to_encoded_point(false);
    let mut x = [0u8; COORDINATE_LEN];
    let mut y = [0u8; COORDINATE_LEN];
    x.copy_from_slice(encoded.x().expect("an uncompressed point has x"));
    y.copy_from_slice(encoded.y().expect("an uncompressed point has y"));
    (x, y)
}

/// Builds a point from TPM coordinates, which a TPM may marshal without
/// leading zero bytes; rejects anything off the curve.
pub fn point_from_coordinates(x: &[u8], y: &[u8]) -> Result<PublicKey, StorageKeyError> {
    let x = left_pad(x).ok_or(StorageKeyError::BadPoint)?;
    let y = left_pad(y).ok_or(StorageKeyError::BadPoint)?;
    let encoded = EncodedPoint::from_affine_coordinates(&x.into(), &y.into(), false);
    Option::from(PublicKey::from_encoded_point(&encoded)).ok_or(StorageKeyError::BadPoint)
}

fn left_pad(bytes: &[u8]) -> Option<[u8; COORDINATE_LEN]> {
    if bytes.is_empty() || bytes.len() > COORDINATE_LEN {
        return None;
    }
    let mut out = [0u8; COORDINATE_LEN];
    out[COORDINATE_LEN - bytes.len()..].copy_from_slice(bytes);
    Some(out)
}

/// The public area of `point` as a key made in software and imported into a
/// TPM would have it: restricted|decrypt|userWithAuth|noDA, no fixedTPM.
#[cfg(any(test, feature = "test-support"))]
pub fn imported_lookalike(point: &PublicKey) -> StorageKey {
    StorageKey::from_tpmt_public(&ecc_storage_public(0x0003_0440, point))
        .expect("a well-formed storage key")
}

/// The storage key whose private scalar is `bytes`, described with the SRK
/// template: for tests that make cluster envelopes without a TPM.
#[cfg(any(test, feature = "test-support"))]
pub fn software_storage_key(bytes: &[u8; 32]) -> StorageKey {
    let secret = p256::SecretKey::from_slice(bytes).expect("a valid P-256 scalar");
    StorageKey::from_point(&secret.public_key())
}

/// TPMT_PUBLIC of an ECC P-256 storage key in the TCG SRK template's shape
/// (SHA-256, empty policy, AES-128-CFB, no scheme, no KDF), with `attributes`.
fn ecc_storage_public(attributes: u32, point: &PublicKey) -> Vec<u8> {
    let (x, y) = coordinates(point);
    let mut w = Writer::default();
    w.u16(ALG_ECC).u16(ALG_SHA256).u32(attributes).tpm2b(&[]);
    w.u16(ALG_AES).u16(PARENT_SYM_BITS).u16(ALG_CFB);
    w.u16(ALG_NULL).u16(ECC_NIST_P256).u16(ALG_NULL);
    w.tpm2b(&x).tpm2b(&y);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::SecretKey;

    fn sample() -> StorageKey {
        let secret = SecretKey::from_slice(&[0x11; 32]).unwrap();
        StorageKey::from_point(&secret.public_key())
    }

    #[test]
    fn software_key_round_trips_through_tpm2b_public() {
        let key = sample();
        let parsed = StorageKey::from_tpm2b_public(&key.to_tpm2b_public()).unwrap();
        assert_eq!(parsed, key);
        // TPM2B size + TPMT_PUBLIC of an ECC P-256 SRK.
        assert_eq!(key.to_tpm2b_public().len(), 2 + 90);
        assert_eq!(&key.name()[..2], &[0x00, 0x0b]);
    }

    #[test]
    fn refuses_signing_keys_other_curves_and_points_off_the_curve() {
        let mut bytes = sample().to_tpm2b_public();
        bytes[2 + 4 + 1] = 0x04; // attributes byte 2: sign instead of decrypt
        assert!(matches!(
            StorageKey::from_tpm2b_public(&bytes),
            Err(StorageKeyError::NotStorage(_))
        ));
        let mut bytes = sample().to_tpm2b_public();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(
            StorageKey::from_tpm2b_public(&bytes),
            Err(StorageKeyError::BadPoint)
        );
        let mut bytes = sample().to_tpm2b_public();
        bytes.push(0);
        assert!(StorageKey::from_tpm2b_public(&bytes).is_err());
    }
}
