//! Cluster-mode material made once by sceau itself and pinned in
//! `fuzz/pinned/`, so that seeds are byte-for-byte reproducible and the
//! targets know exactly which envelopes may open. Sealing draws fresh
//! randomness (`SealedObject::new`, `wrap_for`, `make_credential`), so these
//! cannot be recomputed; `cargo run --example seeds -- --pin fuzz/pinned`
//! makes a new set (then regenerate the corpus).
//!
//! Every key here is a throwaway made for fuzzing; none protects anything.
//!
//! * `recovery.identity`: the test recovery identity (private scalar).
//! * `member-{0..3}.pub`: four member files (software P-256 keys described
//!   with the SRK template, as the recovery key is, and signing keys made
//!   by [`signer`]).
//! * `inline.ciphertext`: `Membership::seal(DEK)` for members 0 and 1 and the
//!   recovery key, signed by member 0: an inline (layout 0) envelope.
//! * `annotated.ciphertext`, `annotated.recipients`: the same for all four
//!   members and the recovery key, whose recipients no longer fit 1 KiB:
//!   layout 1, with the `recipients.sceau.io` annotation.
//! * `enroll.request`, `enroll.challenge`, `enroll.expected`: an enrollment
//!   of member 0's key as SRK with `ek.pub`'s key as EK, and a fake EK
//!   certificate that holds the EK's point.
//!
//! The recovery shares, for the `recovery_share` and `protected_file`
//! targets (a throwaway recovery key of their own, not `recovery.identity`;
//! `split` and age encryption draw fresh randomness too):
//!
//! * `{alice,bob,carol}.share`: the three plaintext share files of one
//!   2-of-3 split (`recovery_share::split`, `Share::file`).
//! * `{alice,bob,carol}.share.age`: the same, each as `recovery-keygen`
//!   writes it (`custody::protect`, armored): alice's for [`AGE_RECIPIENT`]
//!   (whose identity, [`AGE_IDENTITY`], the `protected_file` target holds),
//!   bob's for a recipient whose identity was thrown away, carol's under the
//!   passphrase [`SHARE_PASSPHRASE`] (scrypt).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use sceau_format::armor;
use sceau_format::duplicate::ImportBlob;
use sceau_format::endorsement::EnrollmentIdentity;
use sceau_format::enrollment::{EXPECTED_LABEL, Request, response_file};
use sceau_format::members::{KnownMembers, MEMBER_LABEL, parse_member};
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::recovery_share::Share;
use sceau_format::signing_key::SoftwareSigner;
use sceau_format::storage_key::{StorageKey, coordinates};
use sceau_format::wrapped::{ClusterEnvelope, RECIPIENTS_ANNOTATION, Role};
use sceau_recover::custody::AgeIdentities;
use zeroize::Zeroizing;

/// The DEK sources (base64) the kube-apiserver used for the values in
/// `tests/fixtures/recovery/vectors.json` (its `seed` and `aes_gcm_key`).
pub const VECTOR_SEED: &str = "KhuKUWHIH+/34/TPzT6opwDAbH359JZGoI4qPSvUGlQ=";
pub const VECTOR_AES_KEY: &str = "x6ntWu/E6WMoAD6k1g1yeA1it3cSbMUWtrC06Vezhh0=";

/// The DEK seed every pinned envelope seals.
pub const DEK: &[u8; 32] = b"fuzz: pinned cluster DEK seed 32";

pub const IDENTITY: &str = include_str!("../pinned/recovery.identity");
pub const MEMBER_FILES: [&str; 4] = [
    include_str!("../pinned/member-0.pub"),
    include_str!("../pinned/member-1.pub"),
    include_str!("../pinned/member-2.pub"),
    include_str!("../pinned/member-3.pub"),
];
/// The EK of the pinned enrollment, armored as a member file.
pub const EK_FILE: &str = include_str!("../pinned/ek.pub");
pub const INLINE_CIPHERTEXT: &[u8] = include_bytes!("../pinned/inline.ciphertext");
pub const ANNOTATED_CIPHERTEXT: &[u8] = include_bytes!("../pinned/annotated.ciphertext");
pub const ANNOTATED_RECIPIENTS: &[u8] = include_bytes!("../pinned/annotated.recipients");
pub const REQUEST: &str = include_str!("../pinned/enroll.request");
pub const CHALLENGE: &str = include_str!("../pinned/enroll.challenge");
pub const EXPECTED: &str = include_str!("../pinned/enroll.expected");
/// The plaintext share files of alice, bob and carol: shares 1, 2 and 3 of
/// a 2-of-3 split.
pub const SHARE_FILES: [&str; 3] = [
    include_str!("../pinned/alice.share"),
    include_str!("../pinned/bob.share"),
    include_str!("../pinned/carol.share"),
];
/// The same shares as age files: alice's for [`AGE_RECIPIENT`], bob's for
/// another recipient, carol's under [`SHARE_PASSPHRASE`].
pub const PROTECTED_SHARES: [&[u8]; 3] = [
    include_bytes!("../pinned/alice.share.age"),
    include_bytes!("../pinned/bob.share.age"),
    include_bytes!("../pinned/carol.share.age"),
];
/// A throwaway age X25519 identity (`age-keygen`, made once for fuzzing),
/// the only key the `protected_file` target opens files with.
pub const AGE_IDENTITY: &str =
    "AGE-SECRET-KEY-13FLA3K34YT4SMLSQLS4ME8LYLXNGAFC2HXLSG59QPQH5F48P9L3S0LZA05";
/// [`AGE_IDENTITY`]'s recipient (`age-keygen -y`).
pub const AGE_RECIPIENT: &str = "age10x2lkkdk87yvqm8uuj3f9hf5h6a05d438zhxqarxrgj4x7fpygusyyys3j";
/// The passphrase of `carol.share.age`.
pub const SHARE_PASSPHRASE: &str = "fuzz: carol's throwaway passphrase";

pub fn identity() -> RecoveryIdentity {
    RecoveryIdentity::parse(IDENTITY).expect("the pinned identity parses")
}

/// A key from a member file (no pin check: see `member_file_key` for that).
pub fn key_of(file: &str) -> StorageKey {
    let armored = armor::decode(file, MEMBER_LABEL).expect("a pinned member file");
    StorageKey::from_tpm2b_public(&armored.bytes).expect("a pinned storage key")
}

pub fn member(index: usize) -> StorageKey {
    key_of(MEMBER_FILES[index])
}

/// Member `index`'s envelope signing key: a fixed software key, so that
/// the pinned members can be made anew with the same signing keys.
pub fn signer(index: usize) -> SoftwareSigner {
    let seed = 0x10 + u8::try_from(index).expect("four members");
    SoftwareSigner::from_bytes(&[seed; 32])
}

/// The enrollment key that endorsed the pinned member files: fixed, so
/// that the pinned material can be made anew under the same key.
pub fn enrollment_identity() -> EnrollmentIdentity {
    EnrollmentIdentity::from_bytes(&[0x21; 32])
}

/// The four pinned members, as a cluster member knows them.
pub fn known_members() -> KnownMembers {
    KnownMembers::new(
        MEMBER_FILES
            .iter()
            .map(|file| parse_member(file).expect("a pinned member file"))
            .collect(),
    )
}

pub fn ek() -> StorageKey {
    key_of(EK_FILE)
}

/// A DER-shaped blob holding the EK's point where a certificate's
/// SubjectPublicKey BIT STRING would; `Request::check_certificate` looks
/// only for that.
pub fn fake_ek_certificate(ek: &StorageKey) -> Vec<u8> {
    let (x, y) = coordinates(ek.point());
    [
        &[0x30, 0x46, 0x03, 0x42, 0x00, 0x04][..],
        &x,
        &y,
        &[0x05, 0x00],
    ]
    .concat()
}

/// A KMS v2 EncryptResponse's annotations.
pub type Annotations = HashMap<String, Vec<u8>>;

/// The pinned envelopes: (ciphertext, annotations), as Encrypt returned them.
pub fn envelopes() -> [(Vec<u8>, Annotations); 2] {
    [
        (INLINE_CIPHERTEXT.to_vec(), HashMap::new()),
        (
            ANNOTATED_CIPHERTEXT.to_vec(),
            HashMap::from([(
                RECIPIENTS_ANNOTATION.to_string(),
                ANNOTATED_RECIPIENTS.to_vec(),
            )]),
        ),
    ]
}

/// A recovery entry that `wrap_for` made for the test identity: the only
/// entries that may open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownEntry {
    pub object_public: Vec<u8>,
    pub blob: ImportBlob,
}

/// The recovery entries of the pinned envelopes.
pub fn known_entries() -> Vec<KnownEntry> {
    let name = *identity().public().name();
    envelopes()
        .iter()
        .map(|(ciphertext, annotations)| {
            let envelope =
                ClusterEnvelope::parse(ciphertext, annotations).expect("a pinned envelope");
            let entry = envelope
                .recipients
                .iter()
                .find(|r| r.role == Role::Recovery && r.name == name)
                .expect("the pinned envelopes have a recovery entry");
            KnownEntry {
                object_public: envelope.object_public.clone(),
                blob: entry.blob.clone(),
            }
        })
        .collect()
}

/// The pinned share files, parsed: shares 1 (alice), 2 (bob) and 3 (carol)
/// of one 2-of-3 key set.
pub fn shares() -> Vec<Share> {
    SHARE_FILES
        .iter()
        .map(|file| Share::parse(file).expect("a pinned share file"))
        .collect()
}

/// [`AGE_IDENTITY`], as `--age-identity` files give identities to
/// `custody::open`.
pub fn age_identities() -> AgeIdentities {
    AgeIdentities::read(
        &[PathBuf::from("pinned-fuzz.identity")],
        |_| Ok(Zeroizing::new(format!("{AGE_IDENTITY}\n"))),
        // No SSH key: nothing is ever asked.
        &mut sceau_recover::custody::Passphrases::new(Some(u32::MAX)),
    )
    .expect("the pinned age identity parses")
}

pub fn request() -> Request {
    Request::parse(REQUEST).expect("the pinned request parses")
}

/// The answer a TPM holding the EK and the SRK would give.
pub fn response() -> String {
    let expected = armor::decode(EXPECTED, EXPECTED_LABEL).expect("the pinned expected answer");
    response_file(&expected.bytes)
}

#[cfg(test)]
mod tests {
    use sceau_format::duplicate::check_sealed_public;
    use sceau_format::enrollment::{parse_challenge, verify};

    use super::*;

    #[test]
    fn pinned_envelopes_open_to_the_dek() {
        let identity = identity();
        for (ciphertext, annotations) in envelopes() {
            let dek = identity.open(&ciphertext, &annotations).unwrap();
            assert_eq!(dek.as_slice(), DEK);
            let envelope = ClusterEnvelope::parse(&ciphertext, &annotations).unwrap();
            assert!(check_sealed_public(&envelope.object_public).is_ok());
            let members = envelope
                .recipients
                .iter()
                .filter(|r| r.role == Role::Member)
                .count();
            assert_eq!(members, if annotations.is_empty() { 2 } else { 4 });
            assert!(known_members().verify(&envelope).is_ok());
        }
        assert_eq!(known_entries().len(), 2);
    }

    #[test]
    fn pinned_enrollment_files_agree() {
        let request = request();
        assert_eq!(request.member.srk, member(0));
        assert_eq!(request.ek, ek());
        assert!(request.check_certificate().unwrap().is_some());
        parse_challenge(CHALLENGE, &request.member).unwrap();
        verify(&request, EXPECTED, &response()).unwrap();
    }

    /// The pinned shares are one 2-of-3 key set, any two of which give one
    /// key; alice's age file opens with the pinned identity to her share
    /// file, bob's is for another key, carol's is a passphrase file.
    #[test]
    fn pinned_shares_combine_and_their_age_files_open_as_described() {
        use sceau_format::recovery_share::combine;
        use sceau_recover::custody::{CustodyError, Passphrases, open};

        let shares = shares();
        let key = shares[0].recovery_key();
        for (n, share) in shares.iter().enumerate() {
            assert_eq!(
                (share.index(), share.threshold(), share.custodians()),
                (n as u8 + 1, 2, 3)
            );
            assert!(share.same_key_set(&shares[0]));
        }
        for pair in [[0, 1], [0, 2], [1, 2]] {
            let chosen: Vec<Share> = pair
                .iter()
                .map(|&i| Share::parse(SHARE_FILES[i]).unwrap())
                .collect();
            assert_eq!(combine(&chosen).ok().unwrap().public(), &key);
        }
        let identities = age_identities();
        let mut no_passphrase = Passphrases::new(None);
        let opened = open(
            PROTECTED_SHARES[0],
            "alice",
            &identities,
            &mut no_passphrase,
        )
        .unwrap();
        assert_eq!(opened.as_slice(), SHARE_FILES[0].as_bytes());
        let bob = open(PROTECTED_SHARES[1], "bob", &identities, &mut no_passphrase);
        assert!(matches!(bob, Err(CustodyError::NotForTheseKeys(_))));
        let carol =
            age::Decryptor::new_buffered(age::armor::ArmoredReader::new(PROTECTED_SHARES[2]))
                .unwrap();
        assert!(carol.is_scrypt());
        let recipient: age::x25519::Identity = AGE_IDENTITY.parse().unwrap();
        assert_eq!(recipient.to_public().to_string(), AGE_RECIPIENT);
    }

    /// Every pinned member file is endorsed by the pinned enrollment key,
    /// for the pinned EK.
    #[test]
    fn pinned_member_files_are_endorsed() {
        let key = enrollment_identity().public().clone();
        for file in MEMBER_FILES {
            let member = parse_member(file).unwrap();
            assert_eq!(key.verify(file, &member), Ok(*ek().name()));
        }
    }
}
