//! Cluster mode's key files: the armor (`crates/format/src/armor.rs`), storage
//! key publics (`StorageKey::from_tpm2b_public`, `crates/format/src/storage_key.rs`),
//! what `members::parse_pinned` and `members::parse_member` do with a member
//! file (its SRK and its envelope signing key), the enrollment
//! files (`Request::parse`, `parse_challenge`, `verify`,
//! `crates/format/src/enrollment.rs`) and the recovery identity file
//! (`RecoveryIdentity::parse`, `crates/format/src/recovery_key.rs`).
//!
//! Input: a mode byte (`sceau_fuzz::codec::key_file_mode`), then the file,
//! read as UTF-8 with invalid sequences replaced (the files are text; `sceau`
//! reads them with `read_to_string`). `RawKey` takes the bytes as they are.
//!
//! Invariants, besides "no panic":
//! - armor: a decoded block re-armors (`encode`) and decodes to the same
//!   bytes and `name` header;
//! - storage keys: an accepted key is a restricted, non-signing decryption
//!   key; it marshals back to exactly its input, parses again to itself, its
//!   Name is SHA-256 over its TPMT_PUBLIC; an SRK is TPM-resident; an SRK
//!   with an empty authPolicy and full-width coordinates is exactly what
//!   `StorageKey::from_point` builds for its point;
//! - member files: an accepted one names both keys by their pins, its
//!   signing key has exactly the signing template's attributes, and
//!   `member_file` writes it back to a file that parses to the same member;
//! - requests: the SRK is an SRK, the EK TPM-resident, both pinned by their
//!   name lines; written back with `request_file`, a request parses to the
//!   same keys and certificate; `check_certificate` agrees with a search for
//!   the EK's point;
//! - `parse_challenge` and `verify` accept exactly the inputs predicted from
//!   the armored blocks (pinned SRK and signing key names; for `verify`
//!   also the pinned EK Name and certificate hash; framing of the two
//!   credentials, a 64-byte answer that matches);
//! - an endorsement (the member file's third block) verifies against the
//!   pinned enrollment key only for the pinned member files, unaltered;
//! - an identity's name line matches its key, and its identity and public
//!   files read back to the same key;
//! - error messages, which `sceau` prints to a terminal, have no control
//!   characters.
#![no_main]
#![forbid(unsafe_code)]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sceau_format::armor::{self, ArmorError};
use sceau_format::endorsement::EnrollmentPublic;
use sceau_format::enrollment::{
    ANSWER_LEN, CHALLENGE_LABEL, EK_CERTIFICATE_LABEL, EK_LABEL, EXPECTED_LABEL, EnrollmentError,
    RESPONSE_LABEL, Request, parse_challenge, request_file, verify,
};
use sceau_format::key_id::KeyId;
use sceau_format::key_id::hex;
use sceau_format::members::{
    MEMBER_LABEL, RECOVERY_PUBLIC_LABEL, SIGNING_LABEL, member_file, parse_member,
};
use sceau_format::recovery_key::{IDENTITY_LABEL, RecoveryIdentity};
use sceau_format::signing_key::SIGNING_ATTRIBUTES;
use sceau_format::storage_key::{SRK_ATTRIBUTES, StorageKey, coordinates};
use sceau_format::wire::{Reader, Writer, sha256_name};
use sceau_fuzz::codec::{KEY_FILE_LABELS, KeyFileMode, key_file_mode};
use sceau_fuzz::pinned;

struct Fixture {
    request: Request,
    srk_name: String,
    signing_name: String,
    ek_name: String,
    certificate_pin: String,
    enrollment: EnrollmentPublic,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let request = pinned::request();
        Fixture {
            srk_name: hex(request.member.srk.name()),
            signing_name: hex(request.member.signing.name()),
            ek_name: hex(request.ek.name()),
            certificate_pin: request.certificate_pin(),
            enrollment: pinned::enrollment_identity().public().clone(),
            request,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, payload)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(payload);
    match key_file_mode(mode) {
        KeyFileMode::Armored(label) => {
            armored_key(&text, KEY_FILE_LABELS[label]);
            if KEY_FILE_LABELS[label] == MEMBER_LABEL {
                member(&text);
            }
        }
        KeyFileMode::RawKey => {
            if let Ok(key) = StorageKey::from_tpm2b_public(payload) {
                check_key(payload, &key);
            }
        }
        KeyFileMode::Request => request(&text),
        KeyFileMode::Challenge => challenge(&text),
        KeyFileMode::Verify => {
            let (expected, response) = text.split_once('\0').unwrap_or((&text, ""));
            verify_answer(expected, response);
        }
        KeyFileMode::Identity => identity(&text),
    }
});

/// Decodes, checks the armor round trip, and returns the block.
fn decode(text: &str, label: &'static str) -> Result<armor::Armored, ArmorError> {
    let decoded = armor::decode(text, label);
    match &decoded {
        Ok(armored) => {
            let headers: Vec<(&str, String)> = armored
                .header("name")
                .map(|name| ("name", name.to_string()))
                .into_iter()
                .collect();
            let again = armor::encode(label, &["comment"], &headers, &armored.bytes);
            let reread = armor::decode(&again, label).expect("armor re-decodes");
            assert_eq!(reread.bytes, armored.bytes);
            assert_eq!(reread.header("name"), armored.header("name"));
            let begin = format!("-----BEGIN {label}-----");
            assert!(text.lines().any(|l| l.trim() == begin));
        }
        Err(error) => assert_no_control(&error.to_string()),
    }
    decoded
}

/// What `members::parse_pinned` does with a file's text.
fn armored_key(text: &str, label: &'static str) {
    let Ok(armored) = decode(text, label) else {
        return;
    };
    match StorageKey::from_tpm2b_public(&armored.bytes) {
        Ok(key) => check_key(&armored.bytes, &key),
        Err(error) => assert_no_control(&error.to_string()),
    }
}

fn check_key(bytes: &[u8], key: &StorageKey) {
    assert_eq!(
        key.to_tpm2b_public(),
        bytes,
        "a key marshals back to its input"
    );
    assert_eq!(
        StorageKey::from_tpm2b_public(&key.to_tpm2b_public()).as_ref(),
        Ok(key)
    );
    assert_eq!(*key.name(), sha256_name(&bytes[2..]));
    let attributes = key.attributes();
    let restricted_decrypt = (1 << 16) | (1 << 17);
    assert_eq!(attributes & restricted_decrypt, restricted_decrypt);
    assert_eq!(attributes & (1 << 18), 0, "never a signing key");
    assert_eq!(key.is_srk(), attributes == SRK_ATTRIBUTES);
    if key.is_srk() {
        assert!(key.is_tpm_resident());
    }
    // The fields past the fixed ones: authPolicy, then the coordinates.
    let mut r = Reader::new(&bytes[2 + 8..]);
    let policy = r.tpm2b("authPolicy").expect("parsed once");
    r.take(12, "parameters").expect("parsed once");
    let x = r.tpm2b("x").expect("parsed once");
    let y = r.tpm2b("y").expect("parsed once");
    let (px, py) = coordinates(key.point());
    assert!(px.ends_with(x) && px[..32 - x.len()].iter().all(|&b| b == 0));
    assert!(py.ends_with(y) && py[..32 - y.len()].iter().all(|&b| b == 0));
    if key.is_srk() && policy.is_empty() && x.len() == 32 && y.len() == 32 {
        assert_eq!(StorageKey::from_point(key.point()), *key);
    }
}

/// What `--members` does with a member file.
fn member(text: &str) {
    let member = match parse_member(text) {
        Ok(member) => member,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    let signing = armor::decode(text, SIGNING_LABEL).expect("parsed once");
    assert_eq!(*signing.bytes, member.signing.to_tpm2b_public());
    let attributes = u32::from_be_bytes(signing.bytes[6..10].try_into().expect("parsed once"));
    assert_eq!(attributes, SIGNING_ATTRIBUTES);
    let pin = signing.header("signing-name").expect("pinned");
    assert!(pin.eq_ignore_ascii_case(&hex(member.signing.name())));
    assert_eq!(*member.signing.name(), sha256_name(&signing.bytes[2..]));
    let id = KeyId::from_srk_name(member.srk.name());
    let again = member_file(&member, &id);
    assert_eq!(parse_member(&again).as_ref().ok(), Some(&member));
    match fixture().enrollment.verify(text, &member) {
        Ok(ek_name) => {
            assert_eq!(ek_name, *pinned::ek().name());
            assert!(
                pinned::MEMBER_FILES
                    .iter()
                    .any(|file| parse_member(file).ok().as_ref() == Some(&member)),
                "an endorsement verified for keys never endorsed"
            );
        }
        Err(error) => assert_no_control(&error.to_string()),
    }
}

fn request(text: &str) {
    let request = match Request::parse(text) {
        Ok(request) => request,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    assert!(request.member.srk.is_srk());
    assert!(request.ek.is_tpm_resident());
    for (label, field, key) in [
        (MEMBER_LABEL, "name", &request.member.srk),
        (EK_LABEL, "ek_name", &request.ek),
    ] {
        let armored = armor::decode(text, label).expect("parsed once");
        assert_eq!(*armored.bytes, key.to_tpm2b_public());
        let pin = armored.header(field).expect("pinned");
        assert!(pin.eq_ignore_ascii_case(&hex(key.name())));
    }
    let certificate = armor::decode(text, EK_CERTIFICATE_LABEL)
        .ok()
        .map(|a| a.bytes.to_vec());
    assert_eq!(request.certificate, certificate);
    let id = KeyId::from_srk_name(request.member.srk.name());
    let again = request_file(
        &request.member,
        &id,
        &request.ek,
        request.certificate.as_deref(),
    );
    let reread = Request::parse(&again).expect("a written request parses");
    assert_eq!(reread.member, request.member);
    assert_eq!(reread.ek, request.ek);
    assert_eq!(reread.certificate, request.certificate);

    let (x, y) = coordinates(request.ek.point());
    let needle = [&[0x03, 0x42, 0x00, 0x04][..], &x, &y].concat();
    let holds_point = |der: &Vec<u8>| der.windows(needle.len()).any(|w| w == needle);
    match request.check_certificate() {
        Ok(None) => assert!(request.certificate.is_none()),
        Ok(Some(digest)) => {
            assert!(request.certificate.as_ref().is_some_and(holds_point));
            assert_eq!(digest.len(), 64);
        }
        Err(EnrollmentError::CertificateMismatch) => {
            assert!(!request.certificate.as_ref().is_some_and(holds_point));
        }
        Err(e) => panic!("unexpected certificate error: {e}"),
    }
}

fn challenge(text: &str) {
    let f = fixture();
    let result = parse_challenge(text, &f.request.member);
    let predicted = armor::decode(text, CHALLENGE_LABEL)
        .ok()
        .and_then(|armored| {
            let pinned = |field| armored.header(field).map(str::to_ascii_lowercase);
            (pinned("srk_name")? == f.srk_name).then_some(())?;
            (pinned("signing_name")? == f.signing_name).then_some(())?;
            let mut r = Reader::new(&armored.bytes);
            let mut fields = Vec::new();
            for field in ["credentialBlob", "secret", "credentialBlob", "secret"] {
                fields.push(r.tpm2b(field).ok()?.to_vec());
            }
            r.finish("challenge").ok()?;
            Some(fields)
        });
    match result {
        Ok(blobs) => {
            let fields = [&blobs.srk, &blobs.signing]
                .into_iter()
                .flat_map(|blob| [blob.duplicate.clone(), blob.in_sym_seed.clone()])
                .collect::<Vec<_>>();
            let mut w = Writer::default();
            for field in &fields {
                w.tpm2b(field);
            }
            assert_eq!(Some(fields), predicted);
            let armored = armor::decode(text, CHALLENGE_LABEL).expect("parsed once");
            assert_eq!(w.finish(), *armored.bytes);
        }
        Err(error) => {
            assert_eq!(predicted, None, "refused a valid challenge: {error}");
            assert_no_control(&error.to_string());
        }
    }
}

fn verify_answer(expected: &str, response: &str) {
    let f = fixture();
    let result = verify(&f.request, expected, response);
    let predicted = (|| {
        let expected = armor::decode(expected, EXPECTED_LABEL).ok()?;
        let response = armor::decode(response, RESPONSE_LABEL).ok()?;
        let pinned = |field| {
            expected
                .header(field)
                .unwrap_or_default()
                .to_ascii_lowercase()
        };
        Some(
            pinned("srk_name") == f.srk_name
                && pinned("signing_name") == f.signing_name
                && pinned("ek_name") == f.ek_name
                && pinned("ek_certificate_sha256") == f.certificate_pin
                && expected.bytes.len() == ANSWER_LEN
                && expected.bytes == response.bytes,
        )
    })()
    .unwrap_or(false);
    assert_eq!(result.is_ok(), predicted, "{result:?}");
    if let Err(error) = result {
        assert_no_control(&error.to_string());
    }
}

fn identity(text: &str) {
    let identity = match RecoveryIdentity::parse(text) {
        Ok(identity) => identity,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    let armored = armor::decode(text, IDENTITY_LABEL).expect("parsed once");
    let name = armored.header("name").expect("pinned");
    assert!(name.eq_ignore_ascii_case(&hex(identity.public().name())));
    let again = RecoveryIdentity::parse(&identity.identity_file()).expect("re-reads");
    assert_eq!(again.public(), identity.public());
    let public = armor::decode(&identity.public_file(), RECOVERY_PUBLIC_LABEL).expect("armored");
    assert_eq!(
        StorageKey::from_tpm2b_public(&public.bytes).as_ref(),
        Ok(identity.public())
    );
    assert!(identity.public().is_srk());
}

fn assert_no_control(message: &str) {
    assert!(!message.chars().any(char::is_control), "{message:?}");
}
