//! Public keys as the server meets them, in TPM form (an EK's or AK's
//! TPMT_PUBLIC) and in X.509 form (a certificate's SubjectPublicKeyInfo),
//! compared by value, and the signature checks the server makes with them.
//!
//! One type for both forms is what lets the server refuse a certificate
//! whose key is not the EK it makes the credential for: the comparison is of
//! the key itself (RSA modulus and exponent, or the ECC point), not of two
//! encodings.

use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use rsa::pkcs1::DecodeRsaPublicKey as _;
use rsa::pkcs8::EncodePublicKey as _;
use rsa::traits::PublicKeyParts as _;
use rsa::{BigUint, Pkcs1v15Sign, RsaPublicKey};
use sha2::{Digest as _, Sha256, Sha384, Sha512};
use x509_cert::spki::SubjectPublicKeyInfoOwned;

use sceau_format::public::PublicKey as TpmPublicKey;
use sceau_format::wire::ECC_NIST_P256;

const OID_RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
/// id-RSAES-OAEP: some EK certificates name their key this way.
const OID_RSAES_OAEP: &str = "1.2.840.113549.1.1.7";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";

/// The smallest RSA key accepted anywhere (EK, AK, CA).
pub const MIN_RSA_BITS: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("unsupported key: {0}")]
    Unsupported(&'static str),
    #[error("malformed key: {0}")]
    Malformed(&'static str),
    #[error("the signature does not verify")]
    BadSignature,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Rsa(RsaPublicKey),
    P256(p256::PublicKey),
    P384(p384::PublicKey),
}

/// The hash a signature was made over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    pub fn digest(self, message: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(message).to_vec(),
            Hash::Sha384 => Sha384::digest(message).to_vec(),
            Hash::Sha512 => Sha512::digest(message).to_vec(),
        }
    }

    fn pkcs1v15(self) -> Pkcs1v15Sign {
        match self {
            Hash::Sha256 => Pkcs1v15Sign::new::<Sha256>(),
            Hash::Sha384 => Pkcs1v15Sign::new::<Sha384>(),
            Hash::Sha512 => Pkcs1v15Sign::new::<Sha512>(),
        }
    }
}

impl Key {
    /// The key of a TPM public area (RSA of at least 2048 bits, or P-256).
    pub fn from_tpm(key: &TpmPublicKey) -> Result<Self, KeyError> {
        match key {
            TpmPublicKey::Rsa {
                exponent, modulus, ..
            } => {
                let exponent = if *exponent == 0 { 65537 } else { *exponent };
                let key =
                    RsaPublicKey::new(BigUint::from_bytes_be(modulus), BigUint::from(exponent))
                        .map_err(|_| KeyError::Malformed("RSA modulus or exponent"))?;
                Self::checked_rsa(key)
            }
            TpmPublicKey::Ecc { curve, x, y, .. } => {
                if *curve != ECC_NIST_P256 {
                    return Err(KeyError::Unsupported("ECC curve other than NIST P-256"));
                }
                if x.len() != 32 || y.len() != 32 {
                    return Err(KeyError::Malformed("P-256 coordinates"));
                }
                let mut sec1 = Vec::with_capacity(65);
                sec1.push(4);
                sec1.extend_from_slice(x);
                sec1.extend_from_slice(y);
                p256::PublicKey::from_sec1_bytes(&sec1)
                    .map(Key::P256)
                    .map_err(|_| KeyError::Malformed("P-256 point not on the curve"))
            }
            TpmPublicKey::KeyedHash { .. } => Err(KeyError::Unsupported("key type (RSA or ECC)")),
        }
    }

    /// The key of an X.509 SubjectPublicKeyInfo.
    pub fn from_spki(spki: &SubjectPublicKeyInfoOwned) -> Result<Self, KeyError> {
        let bits = spki
            .subject_public_key
            .as_bytes()
            .ok_or(KeyError::Malformed("public key bit string"))?;
        match spki.algorithm.oid.to_string().as_str() {
            OID_RSA_ENCRYPTION | OID_RSAES_OAEP => {
                let key = RsaPublicKey::from_pkcs1_der(bits)
                    .map_err(|_| KeyError::Malformed("RSA public key"))?;
                Self::checked_rsa(key)
            }
            OID_EC_PUBLIC_KEY => {
                let curve = spki
                    .algorithm
                    .parameters
                    .as_ref()
                    .and_then(|p| p.decode_as::<der::asn1::ObjectIdentifier>().ok())
                    .ok_or(KeyError::Malformed("EC curve parameter"))?;
                match curve.to_string().as_str() {
                    OID_P256 => p256::PublicKey::from_sec1_bytes(bits)
                        .map(Key::P256)
                        .map_err(|_| KeyError::Malformed("P-256 point")),
                    OID_P384 => p384::PublicKey::from_sec1_bytes(bits)
                        .map(Key::P384)
                        .map_err(|_| KeyError::Malformed("P-384 point")),
                    _ => Err(KeyError::Unsupported("EC curve other than P-256 and P-384")),
                }
            }
            _ => Err(KeyError::Unsupported("key algorithm other than RSA and EC")),
        }
    }

    fn checked_rsa(key: RsaPublicKey) -> Result<Self, KeyError> {
        if key.n().bits() < MIN_RSA_BITS {
            return Err(KeyError::Unsupported("RSA key shorter than 2048 bits"));
        }
        Ok(Key::Rsa(key))
    }

    /// The DER SubjectPublicKeyInfo (rsaEncryption or id-ecPublicKey with
    /// uncompressed point), the form `pub_hash` is computed over, the same
    /// as spire-tpm-plugin's so that existing allow lists carry over.
    pub fn spki_der(&self) -> Vec<u8> {
        match self {
            Key::Rsa(key) => key
                .to_public_key_der()
                .expect("an RSA public key encodes")
                .into_vec(),
            Key::P256(key) => ec_spki(
                &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
                p256::EncodedPoint::from(key).as_bytes(),
            ),
            Key::P384(key) => ec_spki(
                &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22],
                p384::EncodedPoint::from(key).as_bytes(),
            ),
        }
    }

    /// Lowercase hex SHA-256 of [`Key::spki_der`].
    pub fn pub_hash(&self) -> String {
        sceau_format::key_id::hex(&Sha256::digest(self.spki_der()))
    }

    pub fn algorithm(&self) -> &'static str {
        match self {
            Key::Rsa(_) => "rsa",
            Key::P256(_) | Key::P384(_) => "ecc",
        }
    }

    /// Checks an X.509 signature: PKCS #1 v1.5 for RSA keys, DER ECDSA for
    /// EC keys, over `hash(message)`.
    pub fn verify_x509(
        &self,
        hash: Hash,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), KeyError> {
        let digest = hash.digest(message);
        let verified = match self {
            Key::Rsa(key) => key.verify(hash.pkcs1v15(), &digest, signature).is_ok(),
            Key::P256(key) => p256::ecdsa::Signature::from_der(signature).is_ok_and(|sig| {
                p256::ecdsa::VerifyingKey::from(key)
                    .verify_prehash(&digest, &sig)
                    .is_ok()
            }),
            Key::P384(key) => p384::ecdsa::Signature::from_der(signature).is_ok_and(|sig| {
                p384::ecdsa::VerifyingKey::from(key)
                    .verify_prehash(&digest, &sig)
                    .is_ok()
            }),
        };
        verified.then_some(()).ok_or(KeyError::BadSignature)
    }
}

/// SEQUENCE { SEQUENCE { id-ecPublicKey, curve }, BIT STRING point }.
fn ec_spki(curve_oid: &[u8], point: &[u8]) -> Vec<u8> {
    let ec_public_key = [0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    let mut algorithm = vec![0x30, (ec_public_key.len() + curve_oid.len()) as u8];
    algorithm.extend_from_slice(&ec_public_key);
    algorithm.extend_from_slice(curve_oid);
    let mut bit_string = vec![0x03, (point.len() + 1) as u8, 0x00];
    bit_string.extend_from_slice(point);
    let mut out = vec![0x30, (algorithm.len() + bit_string.len()) as u8];
    out.extend_from_slice(&algorithm);
    out.extend_from_slice(&bit_string);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use der::Decode as _;

    #[test]
    fn a_p256_spki_round_trips_through_x509_parsing() {
        let secret = p256::SecretKey::from_slice(&[7u8; 32]).unwrap();
        let key = Key::P256(secret.public_key());
        let der = key.spki_der();
        assert_eq!(der.len(), 91);
        let spki = SubjectPublicKeyInfoOwned::from_der(&der).unwrap();
        assert_eq!(Key::from_spki(&spki).unwrap(), key);
    }
}
