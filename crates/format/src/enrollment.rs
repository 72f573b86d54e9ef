//! The files of `sceau enroll`, which proves that a member's SRK and its
//! envelope signing key live in the same TPM as its endorsement key (EK), by
//! credential activation:
//!
//! 1. `enroll request` (member): the member file (SRK and signing key
//!    publics), EK public, EK certificate if the TPM has one.
//! 2. `enroll challenge` (verifier, offline): checks the certificate names the
//!    EK, makes two credentials for the EK, one bound to the SRK's Name and
//!    one to the signing key's (`credential::make_credential`), keeps the
//!    expected answers with the Names they were made for and the
//!    certificate's SHA-256.
//! 3. `enroll respond` (member): TPM2_ActivateCredential answers each; a TPM
//!    can only do so if it holds the EK and loaded keys with both Names.
//! 4. `enroll verify` (verifier): checks the request is the challenge's (the
//!    same four pins), compares, then writes the member file,
//!    endorsed by the enrollment key when one is given (`endorsement`).

use sha2::{Digest as _, Sha256};
use subtle_free::constant_time_eq;
use zeroize::Zeroizing;

use super::armor::{self, ArmorError};
use super::credential::{CREDENTIAL_LEN, Challenge, make_credential};
use super::duplicate::ImportBlob;
use super::storage_key::{StorageKey, StorageKeyError, coordinates};
use super::wire::{Reader, WireError, Writer};
use crate::key_id::KeyId;
use crate::key_id::hex;
use crate::members::{Member, PinnedKeyError, member_file, parse_member};

pub const EK_LABEL: &str = "EK TPM2B_PUBLIC";
pub const EK_CERTIFICATE_LABEL: &str = "EK CERTIFICATE";
pub const CHALLENGE_LABEL: &str = "SCEAU ENROLLMENT CHALLENGE";
pub const EXPECTED_LABEL: &str = "SCEAU ENROLLMENT EXPECTED ANSWER";
pub const RESPONSE_LABEL: &str = "SCEAU ENROLLMENT RESPONSE";

#[derive(Debug, thiserror::Error)]
pub enum EnrollmentError {
    // Transparent: the tools print each error's chain of sources, and a
    // "{0}" message with the same error as its source printed it twice.
    #[error(transparent)]
    Armor(#[from] ArmorError),
    #[error(transparent)]
    Key(#[from] StorageKeyError),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Member(#[from] PinnedKeyError),
    #[error("the {0} block has no pinned name line, or it does not match the key")]
    Pin(&'static str),
    #[error(
        "the {0} is not a key its TPM generated and keeps (fixedTPM, fixedParent, sensitiveDataOrigin)"
    )]
    NotTpmResident(&'static str),
    #[error("the EK certificate does not contain this EK's public key")]
    CertificateMismatch,
    /// `expected` comes from the file: quoted and escaped (`{:?}`).
    #[error("the challenge was made for SRK {expected:?}, but this TPM's SRK is {actual}")]
    WrongSrk { expected: String, actual: String },
    /// `expected` comes from the file: quoted and escaped (`{:?}`).
    #[error(
        "the challenge was made for signing key {expected:?}, but this TPM's signing key is {actual}"
    )]
    WrongSigningKey { expected: String, actual: String },
    #[error(
        "the answer does not match: this SRK, signing key and EK are not proven to share a TPM"
    )]
    WrongAnswer,
    /// An expected-answer file written before it named the EK.
    #[error(
        "the expected-answer file names no EK (written by an older sceau-recover): run `enroll challenge` again and have the member answer the new challenge"
    )]
    UnpinnedEk,
    /// `expected` comes from the file: quoted and escaped (`{:?}`).
    #[error(
        "the challenge was made for EK {expected:?}, but this request's EK is {actual}: the request changed since `enroll challenge`; verify with the request the challenge was made from"
    )]
    WrongEk { expected: String, actual: String },
    /// `expected` comes from the file: quoted and escaped (`{:?}`).
    #[error(
        "the challenge was made for EK certificate {expected:?}, but this request's is {actual}: the request changed since `enroll challenge`; verify with the request the challenge was made from"
    )]
    WrongCertificate { expected: String, actual: String },
}

/// A member's enrollment request, parsed and checked for internal consistency.
pub struct Request {
    /// The member file's keys, both proven by credential activation.
    pub member: Member,
    pub ek: StorageKey,
    pub certificate: Option<Vec<u8>>,
}

/// `enroll request`: the member file followed by the EK blocks.
pub fn request_file(
    member: &Member,
    node_key_id: &KeyId,
    ek: &StorageKey,
    certificate: Option<&[u8]>,
) -> String {
    let mut text = member_file(member, node_key_id);
    text.push_str(&armor::encode(
        EK_LABEL,
        &["The endorsement key (TCG default ECC template) of the same TPM."],
        &[("ek_name", hex(ek.name()))],
        &ek.to_tpm2b_public(),
    ));
    if let Some(der) = certificate {
        text.push_str(&armor::encode(
            EK_CERTIFICATE_LABEL,
            &["DER, from the TCG NV index"],
            &[],
            der,
        ));
    }
    text
}

impl Request {
    pub fn parse(text: &str) -> Result<Self, EnrollmentError> {
        let member = parse_member(text)?;
        let srk = &member.srk;
        let ek = pinned_key(text, EK_LABEL, "ek_name")?;
        // Without this, a key made in software and imported into the TPM
        // (fixedTPM clear) answers the challenge as well as a real SRK, and
        // its maker keeps a copy that opens every DEK wrapped for it.
        if !srk.is_srk() {
            return Err(EnrollmentError::NotTpmResident("SRK"));
        }
        if !ek.is_tpm_resident() {
            return Err(EnrollmentError::NotTpmResident("EK"));
        }
        let certificate = match armor::decode(text, EK_CERTIFICATE_LABEL) {
            Ok(armored) => Some(armored.bytes.to_vec()),
            Err(ArmorError::MissingBegin(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Self {
            member,
            ek,
            certificate,
        })
    }

    /// A certificate must name this EK: its SubjectPublicKey BIT STRING is the
    /// uncompressed point (`03 42 00 04 ‖ x ‖ y`). Whether its issuer is a
    /// manufacturer CA you trust is checked with that CA (docs/ha.md).
    pub fn check_certificate(&self) -> Result<Option<String>, EnrollmentError> {
        let Some(der) = &self.certificate else {
            return Ok(None);
        };
        let (x, y) = coordinates(self.ek.point());
        let needle = [&[0x03, 0x42, 0x00, 0x04][..], &x, &y].concat();
        if !der.windows(needle.len()).any(|w| w == needle) {
            return Err(EnrollmentError::CertificateMismatch);
        }
        Ok(Some(hex(&Sha256::digest(der))))
    }

    /// What the expected-answer file pins of the certificate: its SHA-256,
    /// or `none`.
    pub fn certificate_pin(&self) -> String {
        match &self.certificate {
            Some(der) => hex(&Sha256::digest(der)),
            None => NO_CERTIFICATE.into(),
        }
    }
}

/// The `ek_certificate_sha256` of a request without a certificate.
const NO_CERTIFICATE: &str = "none";

fn pinned_key(text: &str, label: &'static str, field: &str) -> Result<StorageKey, EnrollmentError> {
    let armored = armor::decode(text, label)?;
    let key = StorageKey::from_tpm2b_public(&armored.bytes)?;
    match armored.header(field) {
        Some(pinned) if pinned.eq_ignore_ascii_case(&hex(key.name())) => Ok(key),
        _ => Err(EnrollmentError::Pin(label)),
    }
}

/// The length of an answer: the SRK's credential, then the signing key's.
pub const ANSWER_LEN: usize = 2 * CREDENTIAL_LEN;

/// `enroll challenge`: the challenge text for the member and the expected
/// answer, which stays with the verifier.
pub fn challenge_files(request: &Request) -> (String, Zeroizing<String>) {
    let member = &request.member;
    let srk = make_credential(&request.ek, member.srk.name());
    let signing = make_credential(&request.ek, member.signing.name());
    let mut w = Writer::default();
    for Challenge { blob, .. } in [&srk, &signing] {
        w.tpm2b(&blob.duplicate).tpm2b(&blob.in_sym_seed);
    }
    let pins = [
        ("srk_name", hex(member.srk.name())),
        ("signing_name", hex(member.signing.name())),
    ];
    let challenge = armor::encode(
        CHALLENGE_LABEL,
        &["Answer on the member with: sceau enroll respond --challenge FILE"],
        &[
            pins[0].clone(),
            pins[1].clone(),
            ("ek_name", hex(request.ek.name())),
        ],
        &w.finish(),
    );
    let answer = Zeroizing::new([&srk.expected[..], &signing.expected[..]].concat());
    // The EK and its certificate are what `verify` reports and endorses:
    // pinned here, so that a request swapped after the challenge (same SRK
    // and signing key, another TPM's EK or another certificate) is refused.
    let [srk_pin, signing_pin] = pins;
    let expected = Zeroizing::new(armor::encode(
        EXPECTED_LABEL,
        &["Keep with the verifier; compared by sceau-recover enroll verify."],
        &[
            srk_pin,
            signing_pin,
            ("ek_name", hex(request.ek.name())),
            ("ek_certificate_sha256", request.certificate_pin()),
        ],
        &answer,
    ));
    (challenge, expected)
}

/// The two credentials of a challenge, as TPM2_ActivateCredential takes
/// them: one for the SRK, one for the envelope signing key.
#[derive(Debug)]
pub struct ChallengeBlobs {
    pub srk: ImportBlob,
    pub signing: ImportBlob,
}

/// The challenge's credentials, after checking it was made for this TPM's
/// SRK and signing key.
pub fn parse_challenge(text: &str, own: &Member) -> Result<ChallengeBlobs, EnrollmentError> {
    let armored = armor::decode(text, CHALLENGE_LABEL)?;
    check_pins(&armored, own)?;
    let mut r = Reader::new(&armored.bytes);
    let mut blob = || -> Result<ImportBlob, EnrollmentError> {
        Ok(ImportBlob {
            duplicate: r.tpm2b("credentialBlob")?.to_vec(),
            in_sym_seed: r.tpm2b("secret")?.to_vec(),
        })
    };
    let blobs = ChallengeBlobs {
        srk: blob()?,
        signing: blob()?,
    };
    r.finish("challenge")?;
    Ok(blobs)
}

/// A challenge or expected answer names the keys it was made for; both must
/// be `own`'s.
fn check_pins(armored: &armor::Armored, own: &Member) -> Result<(), EnrollmentError> {
    let pinned = |field| {
        armored
            .header(field)
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    let srk = pinned("srk_name");
    if srk != hex(own.srk.name()) {
        return Err(EnrollmentError::WrongSrk {
            expected: srk,
            actual: hex(own.srk.name()),
        });
    }
    let signing = pinned("signing_name");
    if signing != hex(own.signing.name()) {
        return Err(EnrollmentError::WrongSigningKey {
            expected: signing,
            actual: hex(own.signing.name()),
        });
    }
    Ok(())
}

pub fn response_file(credential: &[u8]) -> String {
    armor::encode(
        RESPONSE_LABEL,
        &["Return to the verifier: sceau-recover enroll verify"],
        &[],
        credential,
    )
}

/// `enroll verify`: the member file of a proven member.
pub fn verify(request: &Request, expected: &str, response: &str) -> Result<(), EnrollmentError> {
    let expected = armor::decode(expected, EXPECTED_LABEL)?;
    let response = armor::decode(response, RESPONSE_LABEL)?;
    check_pins(&expected, &request.member)?;
    check_ek_pins(&expected, request)?;
    if expected.bytes.len() != ANSWER_LEN || !constant_time_eq(&expected.bytes, &response.bytes) {
        return Err(EnrollmentError::WrongAnswer);
    }
    Ok(())
}

/// The expected answer names the EK and the certificate the challenge was
/// made for; both must be the request's.
fn check_ek_pins(expected: &armor::Armored, request: &Request) -> Result<(), EnrollmentError> {
    let (Some(ek), Some(certificate)) = (
        expected.header("ek_name"),
        expected.header("ek_certificate_sha256"),
    ) else {
        return Err(EnrollmentError::UnpinnedEk);
    };
    let actual = hex(request.ek.name());
    if !ek.eq_ignore_ascii_case(&actual) {
        return Err(EnrollmentError::WrongEk {
            expected: ek.to_string(),
            actual,
        });
    }
    let actual = request.certificate_pin();
    if !certificate.eq_ignore_ascii_case(&actual) {
        return Err(EnrollmentError::WrongCertificate {
            expected: certificate.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Comparison whose time does not depend on where the inputs differ.
mod subtle_free {
    pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests;
