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
mod tests {
    use super::*;
    use crate::signing_key::SigningKey;

    /// A member whose signing key is its SRK's point: the two Names still
    /// differ (the templates do), which is all enrollment's checks see.
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

    /// A challenge names both keys it was made for, and the TPM gets it
    /// only when both are this TPM's.
    #[test]
    fn a_challenge_for_another_srk_or_signing_key_is_refused_before_the_tpm() {
        let (_, request) = software_request();
        let (challenge, _) = challenge_files(&request);
        let parsed = parse_challenge(&challenge, &request.member).unwrap();
        for blob in [&parsed.srk, &parsed.signing] {
            assert_eq!(blob.in_sym_seed.len(), 68);
        }
        assert_ne!(parsed.srk.duplicate, parsed.signing.duplicate);
        let (_, other) = software_request();
        let mut foreign_srk = request.member.clone();
        foreign_srk.srk = other.member.srk.clone();
        assert!(matches!(
            parse_challenge(&challenge, &foreign_srk),
            Err(EnrollmentError::WrongSrk { .. })
        ));
        let mut foreign_signing = request.member.clone();
        foreign_signing.signing = other.member.signing.clone();
        assert!(matches!(
            parse_challenge(&challenge, &foreign_signing),
            Err(EnrollmentError::WrongSigningKey { .. })
        ));
    }

    /// Found while checking a refused enrollment by hand: `verify` with an
    /// empty response printed "no '-----BEGIN …' line" twice.
    #[test]
    fn errors_name_their_cause_once() {
        let (_, request) = software_request();
        let (challenge, expected) = challenge_files(&request);
        let errors = [
            verify(&request, &expected, "").unwrap_err(),
            parse_challenge(&challenge[..challenge.len() / 2], &request.member).unwrap_err(),
            Request::parse("no armor").err().unwrap(),
        ];
        for error in errors {
            let printed = crate::as_printed(&error);
            assert_eq!(printed, error.to_string(), "{printed}");
        }
    }

    /// The answer is both credentials: the SRK's alone, or either one
    /// twice, does not verify.
    #[test]
    fn the_answer_needs_both_credentials() {
        let (_, request) = software_request();
        let (_, expected) = challenge_files(&request);
        let answer = armor::decode(&expected, EXPECTED_LABEL).unwrap().bytes;
        assert_eq!(answer.len(), ANSWER_LEN);
        assert!(verify(&request, &expected, &response_file(&answer)).is_ok());
        let (srk, signing) = answer.split_at(CREDENTIAL_LEN);
        for wrong in [
            srk.to_vec(),
            [srk, srk].concat(),
            [signing, signing].concat(),
            [signing, srk].concat(),
        ] {
            assert!(matches!(
                verify(&request, &expected, &response_file(&wrong)),
                Err(EnrollmentError::WrongAnswer)
            ));
        }
    }

    /// The expected answer pins the EK and the certificate: the same SRK
    /// and signing key with another EK, or with a certificate added,
    /// removed or changed, are refused at verify although the answer is
    /// right; an expected-answer file without the pins is refused too.
    #[test]
    fn verify_refuses_a_request_whose_ek_or_certificate_changed() {
        let (_, request) = software_request();
        let (_, expected) = challenge_files(&request);
        let answer = armor::decode(&expected, EXPECTED_LABEL).unwrap().bytes;
        let response = response_file(&answer);
        assert!(verify(&request, &expected, &response).is_ok());
        let (_, other) = software_request();
        let swapped_ek = Request {
            member: request.member.clone(),
            ek: other.ek.clone(),
            certificate: None,
        };
        assert!(matches!(
            verify(&swapped_ek, &expected, &response),
            Err(EnrollmentError::WrongEk { .. })
        ));
        let with_certificate = Request {
            member: request.member.clone(),
            ek: request.ek.clone(),
            certificate: Some(vec![0x30, 0x00]),
        };
        let error = verify(&with_certificate, &expected, &response).unwrap_err();
        assert!(
            matches!(error, EnrollmentError::WrongCertificate { .. }),
            "{error}"
        );
        assert!(!error.to_string().contains('\n'));
        let (_, certified_expected) = challenge_files(&with_certificate);
        let certified_response = response_file(
            &armor::decode(&certified_expected, EXPECTED_LABEL)
                .unwrap()
                .bytes,
        );
        assert!(verify(&with_certificate, &certified_expected, &certified_response).is_ok());
        let other_certificate = Request {
            certificate: Some(vec![0x30, 0x01]),
            ..with_certificate
        };
        for changed in [&request, &other_certificate] {
            assert!(matches!(
                verify(changed, &certified_expected, &certified_response),
                Err(EnrollmentError::WrongCertificate { .. })
            ));
        }
        let unpinned: String = expected
            .lines()
            .filter(|l| !l.starts_with("ek_"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(matches!(
            verify(&request, &unpinned, &response),
            Err(EnrollmentError::UnpinnedEk)
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
        let error =
            parse_challenge(&challenge.replace(&pin, hostile), &request.member).unwrap_err();
        let response = response_file(&[0; ANSWER_LEN]);
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
