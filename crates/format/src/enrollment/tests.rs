//! The unit tests of `enrollment` (enrollment.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

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
    let error = parse_challenge(&challenge.replace(&pin, hostile), &request.member).unwrap_err();
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
