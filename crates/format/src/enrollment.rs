//! The files of `sceau enroll`, which proves that a member's SRK lives in the
//! same TPM as its endorsement key (EK), by credential activation:
//!
//! 1. `enroll request` (member): SRK public (a member file), EK public, EK
//!    certificate if the TPM has one.
//! 2. `enroll challenge` (verifier, offline): checks the certificate names the
//!    EK, makes a credential for the EK bound to the SRK's Name
//!    (`credential::make_credential`), keeps the expected answer.
//! 3. `enroll respond` (member): TPM2_ActivateCredential answers it; a TPM
//!    can only do so if it holds the EK and a loaded key with the SRK's Name.
//! 4. `enroll verify` (verifier): compares, then writes the member file.

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
    #[error("{0}")]
    Armor(#[from] ArmorError),
    #[error("{0}")]
    Key(#[from] StorageKeyError),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
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
    #[error("the answer does not match: this SRK and EK are not proven to share a TPM")]
    WrongAnswer,
}

/// A member's enrollment request, parsed and checked for internal consistency.
pub struct Request {
    /// The member file's keys. Credential activation proves the SRK; the
    /// signing key rides along as the member's own file states it.
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
}

fn pinned_key(text: &str, label: &'static str, field: &str) -> Result<StorageKey, EnrollmentError> {
    let armored = armor::decode(text, label)?;
    let key = StorageKey::from_tpm2b_public(&armored.bytes)?;
    match armored.header(field) {
        Some(pinned) if pinned.eq_ignore_ascii_case(&hex(key.name())) => Ok(key),
        _ => Err(EnrollmentError::Pin(label)),
    }
}

/// `enroll challenge`: the challenge text for the member and the expected
/// answer, which stays with the verifier.
pub fn challenge_files(request: &Request) -> (String, Zeroizing<String>) {
    let Challenge { blob, expected } = make_credential(&request.ek, request.member.srk.name());
    let mut w = Writer::default();
    w.tpm2b(&blob.duplicate).tpm2b(&blob.in_sym_seed);
    let challenge = armor::encode(
        CHALLENGE_LABEL,
        &["Answer on the member with: sceau enroll respond --challenge FILE"],
        &[
            ("srk_name", hex(request.member.srk.name())),
            ("ek_name", hex(request.ek.name())),
        ],
        &w.finish(),
    );
    let expected = Zeroizing::new(armor::encode(
        EXPECTED_LABEL,
        &["Keep with the verifier; compared by sceau-recover enroll verify."],
        &[("srk_name", hex(request.member.srk.name()))],
        expected.as_ref(),
    ));
    (challenge, expected)
}

/// The challenge as TPM2_ActivateCredential takes it, after checking it was
/// made for this TPM's SRK.
pub fn parse_challenge(text: &str, own_srk_name: &[u8]) -> Result<ImportBlob, EnrollmentError> {
    let armored = armor::decode(text, CHALLENGE_LABEL)?;
    let expected = armored
        .header("srk_name")
        .unwrap_or_default()
        .to_ascii_lowercase();
    if expected != hex(own_srk_name) {
        return Err(EnrollmentError::WrongSrk {
            expected,
            actual: hex(own_srk_name),
        });
    }
    let mut r = Reader::new(&armored.bytes);
    let duplicate = r.tpm2b("credentialBlob")?.to_vec();
    let in_sym_seed = r.tpm2b("secret")?.to_vec();
    r.finish("challenge")?;
    Ok(ImportBlob {
        duplicate,
        in_sym_seed,
    })
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
    let pinned = expected
        .header("srk_name")
        .unwrap_or_default()
        .to_ascii_lowercase();
    if pinned != hex(request.member.srk.name()) {
        return Err(EnrollmentError::WrongSrk {
            expected: pinned,
            actual: hex(request.member.srk.name()),
        });
    }
    if expected.bytes.len() != CREDENTIAL_LEN || !constant_time_eq(&expected.bytes, &response.bytes)
    {
        return Err(EnrollmentError::WrongAnswer);
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
mod tests {
    use super::*;
    use crate::duplicate::ImportBlob;
    use crate::signing_key::SigningKey;

    /// A member whose signing key is its SRK's point: only the SRK matters
    /// to enrollment's checks.
    fn member_of(srk: &StorageKey) -> Member {
        Member {
            srk: srk.clone(),
            signing: SigningKey::from_point(srk.point()),
        }
    }

    /// A request whose SRK and EK are one software key: enough for the
    /// parsing and comparison steps, which never touch a TPM.
    fn software_request() -> (StorageKey, Request) {
        let secret = p256::SecretKey::random(&mut crate::random::SystemRandom);
        let key = StorageKey::from_point(&secret.public_key());
        let request = Request {
            member: member_of(&key),
            ek: key.clone(),
            certificate: None,
        };
        (key, request)
    }

    #[test]
    fn a_challenge_for_another_srk_is_refused_before_the_tpm() {
        let (key, request) = software_request();
        let (challenge, _) = challenge_files(&request);
        let parsed: ImportBlob = parse_challenge(&challenge, key.name()).unwrap();
        assert_eq!(parsed.in_sym_seed.len(), 68);
        assert!(matches!(
            parse_challenge(&challenge, &[0u8; 34]),
            Err(EnrollmentError::WrongSrk { .. })
        ));
    }

    /// Found by the `key_files` fuzz target (audit/fuzzing.md, «The challenge's
    /// srk_name on the terminal»): the `srk_name` line of a challenge reached
    /// the terminal with its control characters in the error message.
    #[test]
    fn a_wrong_srk_name_is_escaped_in_the_error() {
        let (key, request) = software_request();
        let (challenge, expected) = challenge_files(&request);
        let pin = format!("srk_name: {}", hex(key.name()));
        let hostile = "srk_name: \x1b]0;x\x07";
        let error = parse_challenge(&challenge.replace(&pin, hostile), key.name()).unwrap_err();
        let response = response_file(&[0; CREDENTIAL_LEN]);
        let error2 = verify(&request, &expected.replace(&pin, hostile), &response).unwrap_err();
        for error in [error, error2] {
            let message = error.to_string();
            assert!(matches!(error, EnrollmentError::WrongSrk { .. }));
            assert!(!message.chars().any(char::is_control), "{message:?}");
            assert!(message.contains(r#""\u{1b}]0;x\u{7}""#), "{message}");
        }
    }

    /// Found in review and reproduced on swtpm before this check existed: a
    /// P-256 key made with OpenSSL, loaded with `tpm2_import` as
    /// restricted|decrypt|userwithauth|noda, answered `enroll challenge` via
    /// `tpm2_activatecredential` next to the TPM's genuine EK, and `verify`
    /// wrote its member file. Such a key lacks fixedTPM, so it is refused now.
    #[test]
    fn an_imported_key_posing_as_an_srk_is_refused() {
        let secret = p256::SecretKey::random(&mut crate::random::SystemRandom);
        let genuine = StorageKey::from_point(&secret.public_key());
        let imported = crate::storage_key::imported_lookalike(genuine.point());
        let id = KeyId::from_srk_name(imported.name());
        let forged = request_file(&member_of(&imported), &id, &genuine, None);
        assert!(matches!(
            Request::parse(&forged),
            Err(EnrollmentError::NotTpmResident("SRK"))
        ));
        let honest = request_file(&member_of(&genuine), &id, &genuine, None);
        assert!(Request::parse(&honest).is_ok());
        let fake_ek = request_file(&member_of(&genuine), &id, &imported, None);
        assert!(matches!(
            Request::parse(&fake_ek),
            Err(EnrollmentError::NotTpmResident("EK"))
        ));
    }

    #[test]
    fn a_certificate_must_contain_the_ek_point() {
        let secret = p256::SecretKey::random(&mut crate::random::SystemRandom);
        let ek = StorageKey::from_point(&secret.public_key());
        let (x, y) = coordinates(ek.point());
        let fake_der = [
            &[0x30, 0x00, 0x03, 0x42, 0x00, 0x04][..],
            &x,
            &y,
            &[0x05, 0x00],
        ]
        .concat();
        let mut request = Request {
            member: member_of(&ek),
            ek,
            certificate: Some(fake_der),
        };
        assert!(request.check_certificate().unwrap().is_some());
        request.certificate.as_mut().unwrap()[10] ^= 1;
        assert!(matches!(
            request.check_certificate(),
            Err(EnrollmentError::CertificateMismatch)
        ));
    }
}
