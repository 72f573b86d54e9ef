//! The key that signs PCR policies, in the files operators already have:
//! its public half as a PEM SubjectPublicKeyInfo (P-256 or RSA-2048, the
//! format of systemd's `tpm2-pcr-public-key.pem` and of `openssl pkey
//! -pubout`), and, for `sceau-recover policy keygen|sign`, a P-256 private
//! half as PKCS#8 PEM (what `openssl genpkey` writes), so that either tool
//! can use the other's keys.
//!
//! The TPM knows the key by the Name of the public area sceau loads it
//! with ([`PolicyKey::tpmt_public`]); that Name is what a sealed object's
//! authPolicy commits to ([`PolicyKey::authorized_policy`]), so it must
//! never change for a given key.

use p256::PublicKey;
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::armor::{self, ArmorError};
use super::der::{self, DerError, DerReader};
use super::signing_key::sign_prehash;
use super::storage_key::{coordinates, point_from_coordinates};
use super::wire::{ALG_ECC, ALG_NULL, ALG_SHA256, ECC_NIST_P256, NAME_LEN, Writer, sha256_name};

/// TPM_ALG_RSA.
pub const ALG_RSA: u16 = 0x0001;
/// TPM_CC_PolicyAuthorize, as its policy digest update hashes it.
pub const TPM_CC_POLICY_AUTHORIZE: u32 = 0x0000_016A;
/// The one RSA size accepted: what systemd's documentation and TPMs support
/// everywhere (RSA-3072 is optional in the PC Client profile).
pub const RSA_BITS: u16 = 2048;

/// `sign | userWithAuth`: a verification key needs no more. Part of the
/// Name, so part of every authPolicy: never change it.
const POLICY_KEY_ATTRIBUTES: u32 = 0x0004_0040;

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
const OID_PRIME256V1: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07];
const OID_RSA_ENCRYPTION: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01];

const PUBLIC_LABEL: &str = "PUBLIC KEY";
const RSA_PUBLIC_LABEL: &str = "RSA PUBLIC KEY";
const PRIVATE_LABEL: &str = "PRIVATE KEY";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyKeyError {
    #[error("not a PEM public key ('-----BEGIN PUBLIC KEY-----')")]
    NotPem,
    #[error(transparent)]
    Armor(#[from] ArmorError),
    #[error("malformed key: {0}")]
    Der(#[from] DerError),
    #[error("the key is neither P-256 nor RSA; sceau's policy keys are P-256 or RSA-2048")]
    Algorithm,
    #[error("an RSA key of {0} bits; sceau's policy keys are RSA-2048 (or P-256)")]
    RsaSize(usize),
    #[error("an RSA exponent that is even, 1, or wider than 32 bits")]
    RsaExponent,
    #[error("the point is not an uncompressed point on P-256")]
    Point,
    #[error("the private key is not a P-256 scalar")]
    Scalar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicySignatureError {
    #[error("the signature is not a DER ECDSA signature")]
    Malformed,
    #[error("the signature does not verify with the policy key")]
    Invalid,
    #[error("RSA signatures are checked by the TPM, not in software")]
    Rsa,
}

/// A policy signing key's public half.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyKey {
    P256(PublicKey),
    /// RSA-2048: the modulus (256 bytes, big-endian) and the public exponent.
    Rsa {
        modulus: Vec<u8>,
        exponent: u32,
    },
}

impl PolicyKey {
    /// Reads a PEM SubjectPublicKeyInfo, or a PKCS#1 `RSA PUBLIC KEY`.
    pub fn from_pem(text: &str) -> Result<Self, PolicyKeyError> {
        if text.contains(&format!("-----BEGIN {RSA_PUBLIC_LABEL}-----")) {
            let armored = armor::decode(text, RSA_PUBLIC_LABEL)?;
            return Self::from_pkcs1(&armored.bytes);
        }
        if !text.contains(&format!("-----BEGIN {PUBLIC_LABEL}-----")) {
            return Err(PolicyKeyError::NotPem);
        }
        Self::from_spki(&armor::decode(text, PUBLIC_LABEL)?.bytes)
    }

    /// Reads a DER SubjectPublicKeyInfo.
    pub fn from_spki(bytes: &[u8]) -> Result<Self, PolicyKeyError> {
        let mut outer = DerReader::new(bytes);
        let mut spki = DerReader::new(outer.read(der::SEQUENCE)?);
        outer.finish()?;
        let mut algorithm = DerReader::new(spki.read(der::SEQUENCE)?);
        let key_bits = spki.read(der::BIT_STRING)?;
        spki.finish()?;
        let key = match key_bits {
            [0, key @ ..] => key,
            _ => return Err(DerError::Integer.into()),
        };
        let oid = algorithm.read(der::OID)?;
        if oid == OID_EC_PUBLIC_KEY {
            if algorithm.read(der::OID)? != OID_PRIME256V1 {
                return Err(PolicyKeyError::Algorithm);
            }
            algorithm.finish()?;
            // Uncompressed only (OpenSSL's default, and systemd's): read with
            // the coordinate decoder the TPM formats use, which also keeps
            // point decompression out of the daemon.
            let (x, y) = match key {
                [0x04, xy @ ..] if xy.len() == 64 => xy.split_at(32),
                _ => return Err(PolicyKeyError::Point),
            };
            let point = point_from_coordinates(x, y).map_err(|_| PolicyKeyError::Point)?;
            Ok(Self::P256(point))
        } else if oid == OID_RSA_ENCRYPTION {
            // The parameters are NULL, or absent in some writers.
            if let Ok(null) = algorithm.read(der::NULL)
                && !null.is_empty()
            {
                return Err(PolicyKeyError::Algorithm);
            }
            algorithm.finish()?;
            Self::from_pkcs1(key)
        } else {
            Err(PolicyKeyError::Algorithm)
        }
    }

    /// Reads a DER RSAPublicKey (PKCS#1).
    fn from_pkcs1(bytes: &[u8]) -> Result<Self, PolicyKeyError> {
        let mut outer = DerReader::new(bytes);
        let mut key = DerReader::new(outer.read(der::SEQUENCE)?);
        outer.finish()?;
        let modulus = key.unsigned_integer()?;
        let exponent = key.unsigned_integer()?;
        key.finish()?;
        let bits = modulus.len() * 8 - modulus[0].leading_zeros() as usize;
        if bits != usize::from(RSA_BITS) {
            return Err(PolicyKeyError::RsaSize(bits));
        }
        if exponent.len() > 4 {
            return Err(PolicyKeyError::RsaExponent);
        }
        let exponent = exponent.iter().fold(0u32, |e, &b| (e << 8) | u32::from(b));
        if exponent < 3 || exponent % 2 == 0 {
            return Err(PolicyKeyError::RsaExponent);
        }
        Ok(Self::Rsa {
            modulus: modulus.to_vec(),
            exponent,
        })
    }

    /// The DER SubjectPublicKeyInfo.
    pub fn to_spki(&self) -> Vec<u8> {
        let (algorithm, key) = match self {
            Self::P256(point) => (
                [
                    der::encode(der::OID, OID_EC_PUBLIC_KEY),
                    der::encode(der::OID, OID_PRIME256V1),
                ]
                .concat(),
                point.to_encoded_point(false).as_bytes().to_vec(),
            ),
            Self::Rsa { .. } => (
                [
                    der::encode(der::OID, OID_RSA_ENCRYPTION),
                    der::encode(der::NULL, &[]),
                ]
                .concat(),
                self.openssl_public_der(),
            ),
        };
        let bits = [&[0u8][..], &key].concat();
        der::encode(
            der::SEQUENCE,
            &[
                der::encode(der::SEQUENCE, &algorithm),
                der::encode(der::BIT_STRING, &bits),
            ]
            .concat(),
        )
    }

    /// The PEM file `--policy-key` reads.
    pub fn to_pem(&self) -> String {
        armor::encode(PUBLIC_LABEL, &[], &[], &self.to_spki())
    }

    /// The key as OpenSSL's `i2d_PublicKey` writes it: PKCS#1
    /// RSAPublicKey, or the uncompressed point.
    fn openssl_public_der(&self) -> Vec<u8> {
        match self {
            Self::P256(point) => point.to_encoded_point(false).as_bytes().to_vec(),
            Self::Rsa { modulus, exponent } => der::encode(
                der::SEQUENCE,
                &[
                    der::encode_unsigned(modulus),
                    der::encode_unsigned(&exponent.to_be_bytes()),
                ]
                .concat(),
            ),
        }
    }

    /// systemd's `pkfp`: SHA-256 of [`Self::openssl_public_der`], which is
    /// how a signed policy names the key that signed it.
    pub fn fingerprint(&self) -> [u8; 32] {
        Sha256::digest(self.openssl_public_der()).into()
    }

    /// The TPMT_PUBLIC sceau loads the key with (TPM2_LoadExternal, for
    /// TPM2_VerifySignature): nameAlg SHA-256, `sign | userWithAuth`, no
    /// scheme (so the signature names its own), no symmetric algorithm.
    pub fn tpmt_public(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Self::P256(point) => {
                let (x, y) = coordinates(point);
                w.u16(ALG_ECC)
                    .u16(ALG_SHA256)
                    .u32(POLICY_KEY_ATTRIBUTES)
                    .tpm2b(&[]);
                w.u16(ALG_NULL)
                    .u16(ALG_NULL)
                    .u16(ECC_NIST_P256)
                    .u16(ALG_NULL);
                w.tpm2b(&x).tpm2b(&y);
            }
            Self::Rsa { modulus, exponent } => {
                w.u16(ALG_RSA)
                    .u16(ALG_SHA256)
                    .u32(POLICY_KEY_ATTRIBUTES)
                    .tpm2b(&[]);
                // An exponent of 0 means the default, 65537; the TPM refuses
                // 65537 spelled out on some implementations.
                let exponent = if *exponent == 65537 { 0 } else { *exponent };
                w.u16(ALG_NULL).u16(ALG_NULL).u16(RSA_BITS).u32(exponent);
                w.tpm2b(modulus);
            }
        }
        w.finish()
    }

    /// The TPM Name of [`Self::tpmt_public`].
    pub fn name(&self) -> [u8; NAME_LEN] {
        sha256_name(&self.tpmt_public())
    }

    /// The authPolicy of an object that opens only under a policy this key
    /// signed: TPM2_PolicyAuthorize's digest update with an empty policyRef,
    /// `H(H(0³² ‖ TPM_CC_PolicyAuthorize ‖ Name) ‖ "")`.
    pub fn authorized_policy(&self) -> [u8; 32] {
        let first: [u8; 32] = Sha256::new()
            .chain_update([0u8; 32])
            .chain_update(TPM_CC_POLICY_AUTHORIZE.to_be_bytes())
            .chain_update(self.name())
            .finalize()
            .into();
        Sha256::digest(first).into()
    }

    /// Checks a P-256 `signature` (DER) over `policy` as TPM2_PolicyAuthorize
    /// does: the signed hash is `aHash = SHA-256(policy ‖ policyRef)`, with
    /// an empty policyRef. RSA keys are left to the TPM.
    pub fn verify(&self, policy: &[u8; 32], signature: &[u8]) -> Result<(), PolicySignatureError> {
        let Self::P256(point) = self else {
            return Err(PolicySignatureError::Rsa);
        };
        let (r, s) = ecdsa_from_der(signature)?;
        let parsed = Signature::from_scalars(r, s).map_err(|_| PolicySignatureError::Malformed)?;
        VerifyingKey::from(point)
            .verify_prehash(&approved_hash(policy), &parsed)
            .map_err(|_| PolicySignatureError::Invalid)
    }
}

/// `aHash` of TPM2_PolicyAuthorize with an empty policyRef: what a policy
/// key signs.
pub fn approved_hash(policy: &[u8; 32]) -> [u8; 32] {
    Sha256::digest(policy).into()
}

/// An ECDSA-Sig-Value's r and s, each padded to 32 bytes.
pub fn ecdsa_from_der(signature: &[u8]) -> Result<([u8; 32], [u8; 32]), PolicySignatureError> {
    let malformed = |_| PolicySignatureError::Malformed;
    let mut outer = DerReader::new(signature);
    let mut pair = DerReader::new(outer.read(der::SEQUENCE).map_err(malformed)?);
    outer.finish().map_err(malformed)?;
    let r = pair.unsigned_integer().map_err(malformed)?;
    let s = pair.unsigned_integer().map_err(malformed)?;
    pair.finish().map_err(malformed)?;
    let pad = |part: &[u8]| -> Result<[u8; 32], PolicySignatureError> {
        if part.len() > 32 {
            return Err(PolicySignatureError::Malformed);
        }
        let mut out = [0u8; 32];
        out[32 - part.len()..].copy_from_slice(part);
        Ok(out)
    };
    Ok((pad(r)?, pad(s)?))
}

/// A P-256 policy signing key: `sceau-recover policy keygen` makes it,
/// `policy sign` uses it, on the operator's offline machine.
pub struct PolicySigner {
    secret: p256::SecretKey,
}

impl PolicySigner {
    pub fn generate() -> Self {
        Self {
            secret: p256::SecretKey::random(&mut crate::random::SystemRandom),
        }
    }

    /// The key with scalar `bytes` (fixed keys keep fuzz seeds valid).
    #[cfg(any(test, feature = "test-support"))]
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        Self {
            secret: p256::SecretKey::from_slice(bytes).expect("a valid P-256 scalar"),
        }
    }

    pub fn public(&self) -> PolicyKey {
        PolicyKey::P256(self.secret.public_key())
    }

    /// The DER ECDSA signature over `aHash` of `policy`, as systemd-measure
    /// writes it for its keys (OpenSSL's EVP_DigestSign over `policy`).
    pub fn sign(&self, policy: &[u8; 32]) -> Vec<u8> {
        let signature = sign_prehash(&self.secret, &approved_hash(policy));
        der::encode(
            der::SEQUENCE,
            &[
                der::encode_unsigned(&signature[..32]),
                der::encode_unsigned(&signature[32..]),
            ]
            .concat(),
        )
    }

    /// PKCS#8 PEM (RFC 5958, the ECPrivateKey of RFC 5915 inside, with
    /// the public key): what `openssl pkey` reads.
    pub fn to_pem(&self) -> Zeroizing<String> {
        let scalar = Zeroizing::new(self.secret.to_bytes().to_vec());
        let point = self.secret.public_key().to_encoded_point(false);
        let public_bits = [&[0u8][..], point.as_bytes()].concat();
        let ec_private = Zeroizing::new(der::encode(
            der::SEQUENCE,
            &Zeroizing::new(
                [
                    der::encode_unsigned(&[1]),
                    der::encode(der::OCTET_STRING, &scalar),
                    der::encode(der::CONTEXT_1, &der::encode(der::BIT_STRING, &public_bits)),
                ]
                .concat(),
            ),
        ));
        let pkcs8 = Zeroizing::new(der::encode(
            der::SEQUENCE,
            &Zeroizing::new(
                [
                    der::encode_unsigned(&[0]),
                    der::encode(
                        der::SEQUENCE,
                        &[
                            der::encode(der::OID, OID_EC_PUBLIC_KEY),
                            der::encode(der::OID, OID_PRIME256V1),
                        ]
                        .concat(),
                    ),
                    der::encode(der::OCTET_STRING, &ec_private),
                ]
                .concat(),
            ),
        ));
        Zeroizing::new(armor::encode(
            PRIVATE_LABEL,
            &[
                "sceau PCR policy signing key (P-256), private: keep it offline;",
                "whoever holds it decides in which boot state the DEKs open",
            ],
            &[],
            &pkcs8,
        ))
    }

    /// Reads a P-256 PKCS#8 PEM private key.
    pub fn from_pem(text: &str) -> Result<Self, PolicyKeyError> {
        let armored = armor::decode(text, PRIVATE_LABEL)?;
        let mut outer = DerReader::new(&armored.bytes);
        let mut info = DerReader::new(outer.read(der::SEQUENCE)?);
        outer.finish()?;
        if info.unsigned_integer()? != [0] {
            return Err(DerError::Integer.into());
        }
        let mut algorithm = DerReader::new(info.read(der::SEQUENCE)?);
        if algorithm.read(der::OID)? != OID_EC_PUBLIC_KEY
            || algorithm.read(der::OID)? != OID_PRIME256V1
        {
            return Err(PolicyKeyError::Algorithm);
        }
        algorithm.finish()?;
        let mut ec_outer = DerReader::new(info.read(der::OCTET_STRING)?);
        // Attributes ([0]) may follow in PKCS#8; none matter here.
        let mut ec = DerReader::new(ec_outer.read(der::SEQUENCE)?);
        ec_outer.finish()?;
        if ec.unsigned_integer()? != [1] {
            return Err(DerError::Integer.into());
        }
        let scalar = ec.read(der::OCTET_STRING)?;
        let secret = p256::SecretKey::from_slice(scalar).map_err(|_| PolicyKeyError::Scalar)?;
        // The optional parameters ([0]) and public key ([1]) are not needed:
        // the public key is recomputed from the scalar.
        Ok(Self { secret })
    }
}

#[cfg(test)]
mod tests;
