//! Attested membership: the operator's offline enrollment key, and the
//! endorsement it writes into a member file once enrollment has proven that
//! the file's SRK and envelope signing key live in one TPM with a given EK.
//!
//! `sceau-recover enrollment-keygen` makes the key pair (a P-256 scalar that
//! stays on the verifier's machine, and its public half). `sceau-recover
//! enroll verify --enrollment-identity` appends an endorsement block to the
//! member file it writes: the EK's Name and an ECDSA signature over
//! [`endorsement_digest`], which covers both public areas and the EK Name.
//! `sceau serve --enrollment-key` then starts only if every member file
//! carries a valid endorsement by that key, so a file written by hand, or
//! by anyone who has root on one node but not the enrollment key, admits
//! nothing.
//!
//! Files: the public key is the SEC1 uncompressed point (65 bytes), pinned by
//! a `name:` line (SHA-256 of those bytes); the identity is the 32-byte
//! scalar with the same `name:` line; the endorsement block is the EK Name
//! (34 bytes) followed by `r ‖ s` (64 bytes, low s), with an
//! `enrollment-key:` line naming the key that signed it.

use p256::{PublicKey, SecretKey};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::armor::{self, ArmorError};
use super::members::Member;
use super::signing_key::{SIGNATURE_LEN, SignatureError, sign_prehash, verify_prehash};
use super::storage_key::{COORDINATE_LEN, coordinates, point_from_coordinates};
use super::wire::NAME_LEN;
use crate::key_id::hex;
use crate::text::printable;

pub const ENROLLMENT_PUBLIC_LABEL: &str = "SCEAU ENROLLMENT PUBLIC KEY";
pub const ENROLLMENT_IDENTITY_LABEL: &str = "SCEAU ENROLLMENT IDENTITY";
pub const ENDORSEMENT_LABEL: &str = "SCEAU MEMBER ENDORSEMENT";
/// Separates endorsement signatures from every other use of a P-256 key.
const ENDORSEMENT_DOMAIN: &[u8] = b"sceau member endorsement v1\0";
/// SEC1 uncompressed: 0x04, x, y.
const POINT_LEN: usize = 1 + 2 * COORDINATE_LEN;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndorsementError {
    #[error(transparent)]
    Armor(#[from] ArmorError),
    #[error("not a P-256 {0}")]
    NotAKey(&'static str),
    #[error("the name line does not match the key")]
    PinMismatch,
    #[error(
        "not endorsed: no {ENDORSEMENT_LABEL} block; enroll the node and write its member \
         file with `sceau-recover enroll verify --enrollment-identity FILE`"
    )]
    Missing,
    #[error("endorsed by enrollment key {signer}, not by the configured {expected}")]
    OtherKey { signer: String, expected: String },
    #[error("malformed endorsement: {0} bytes, not an EK Name and a signature")]
    Malformed(usize),
    #[error("the endorsement does not cover this file's keys: {0}")]
    Signature(SignatureError),
}

/// What an endorsement signs: both public areas of the member and the Name
/// of the EK its enrollment proved them against.
pub fn endorsement_digest(member: &Member, ek_name: &[u8; NAME_LEN]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(ENDORSEMENT_DOMAIN);
    hash.update(member.srk.to_tpm2b_public());
    hash.update(member.signing.to_tpm2b_public());
    hash.update(ek_name);
    hash.finalize().into()
}

/// The enrollment key's public half, given to `sceau serve --enrollment-key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentPublic {
    point: PublicKey,
    name: [u8; 32],
}

impl EnrollmentPublic {
    fn from_point(point: PublicKey) -> Self {
        let name = Sha256::digest(sec1_uncompressed(&point)).into();
        Self { point, name }
    }

    pub fn parse(text: &str) -> Result<Self, EndorsementError> {
        let armored = armor::decode(text, ENROLLMENT_PUBLIC_LABEL)?;
        // Uncompressed only, read as the coordinates the TPM formats use:
        // one point decoder in the daemon, no square roots.
        let point = match armored.bytes.split_first() {
            Some((0x04, xy)) if armored.bytes.len() == POINT_LEN => {
                let (x, y) = xy.split_at(COORDINATE_LEN);
                point_from_coordinates(x, y).map_err(|_| EndorsementError::NotAKey("public key"))?
            }
            _ => return Err(EndorsementError::NotAKey("public key")),
        };
        let key = Self::from_point(point);
        check_pin(armored.header("name"), &key.name)?;
        Ok(key)
    }

    pub fn name(&self) -> &[u8; 32] {
        &self.name
    }

    pub fn public_file(&self) -> String {
        armor::encode(
            ENROLLMENT_PUBLIC_LABEL,
            &[
                "sceau enrollment public key: give to `sceau serve --enrollment-key`.",
                "Members start only with member files this key endorsed.",
            ],
            &[("name", hex(&self.name))],
            &sec1_uncompressed(&self.point),
        )
    }

    /// Checks the endorsement block of a member file's `text` against the
    /// member parsed from it; returns the EK Name it was enrolled against.
    pub fn verify(&self, text: &str, member: &Member) -> Result<[u8; NAME_LEN], EndorsementError> {
        let armored = match armor::decode(text, ENDORSEMENT_LABEL) {
            Err(ArmorError::MissingBegin(_)) => return Err(EndorsementError::Missing),
            other => other?,
        };
        let signer = armored.header("enrollment-key").unwrap_or_default();
        if !signer.eq_ignore_ascii_case(&hex(&self.name)) {
            return Err(EndorsementError::OtherKey {
                signer: printable(signer),
                expected: hex(&self.name),
            });
        }
        if armored.bytes.len() != NAME_LEN + SIGNATURE_LEN {
            return Err(EndorsementError::Malformed(armored.bytes.len()));
        }
        let (ek_name, signature) = armored.bytes.split_at(NAME_LEN);
        let ek_name: [u8; NAME_LEN] = ek_name.try_into().expect("split at NAME_LEN");
        verify_prehash(
            &self.point,
            &endorsement_digest(member, &ek_name),
            signature,
        )
        .map_err(EndorsementError::Signature)?;
        Ok(ek_name)
    }
}

/// The enrollment key's private half, held by the verifier only.
pub struct EnrollmentIdentity {
    /// Boxed, as the recovery identity's: each move of an inline key would
    /// leave a copy of the scalar behind that its wipe on drop never reaches
    /// (`enrollment-keygen`'s memory scan found one in its caller's frame).
    secret: Box<SecretKey>,
    public: EnrollmentPublic,
}

impl EnrollmentIdentity {
    pub fn generate() -> Self {
        Self::from_secret(SecretKey::random(&mut crate::random::SystemRandom))
    }

    fn from_secret(secret: SecretKey) -> Self {
        let public = EnrollmentPublic::from_point(secret.public_key());
        Self {
            secret: Box::new(secret),
            public,
        }
    }

    /// The key with scalar `bytes`: fixed keys for tests and fuzz seeds.
    #[cfg(any(test, feature = "test-support"))]
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        Self::from_secret(SecretKey::from_slice(bytes).expect("a valid P-256 scalar"))
    }

    pub fn parse(text: &str) -> Result<Self, EndorsementError> {
        let armored = armor::decode(text, ENROLLMENT_IDENTITY_LABEL)?;
        let secret = SecretKey::from_slice(&armored.bytes)
            .map_err(|_| EndorsementError::NotAKey("private key"))?;
        let identity = Self::from_secret(secret);
        check_pin(armored.header("name"), &identity.public.name)?;
        Ok(identity)
    }

    pub fn public(&self) -> &EnrollmentPublic {
        &self.public
    }

    pub fn identity_file(&self) -> Zeroizing<String> {
        let scalar = Zeroizing::new(self.secret.to_bytes().to_vec());
        Zeroizing::new(armor::encode(
            ENROLLMENT_IDENTITY_LABEL,
            &[
                "sceau enrollment identity: endorses member files; whoever holds it",
                "admits members. Keep it on the verifier's offline machine.",
            ],
            &[("name", hex(&self.public.name))],
            &scalar,
        ))
    }

    /// The endorsement block appended to the member file of `member`, whose
    /// keys enrollment proved to share a TPM with the EK named `ek_name`.
    pub fn endorse(&self, member: &Member, ek_name: &[u8; NAME_LEN]) -> String {
        let signature = sign_prehash(&self.secret, &endorsement_digest(member, ek_name));
        armor::encode(
            ENDORSEMENT_LABEL,
            &[
                "Enrollment proved both keys above in the TPM of this EK; signed offline",
                "by the enrollment key named below. Any edit of this file voids it.",
            ],
            &[
                ("enrollment-key", hex(&self.public.name)),
                ("ek_name", hex(ek_name)),
            ],
            &[&ek_name[..], &signature[..]].concat(),
        )
    }
}

fn sec1_uncompressed(point: &PublicKey) -> Vec<u8> {
    let (x, y) = coordinates(point);
    [&[0x04][..], &x, &y].concat()
}

fn check_pin(pinned: Option<&str>, name: &[u8; 32]) -> Result<(), EndorsementError> {
    match pinned {
        Some(pinned) if pinned.eq_ignore_ascii_case(&hex(name)) => Ok(()),
        _ => Err(EndorsementError::PinMismatch),
    }
}

#[cfg(test)]
mod tests;
