//! Cluster mode's envelope, versions 2 and 3 (`crates/format/src/wrapped.rs`,
//! read by the one parser `Envelope::parse` through its cluster view
//! `ClusterEnvelope::parse`), its signature checked against the pinned
//! members (`KnownMembers::verify`), and what opens it: the software TPM2_Import of
//! `crates/format/src/duplicate.rs` (`check_sealed_public`,
//! `import_in_software`) reached through `RecoveryIdentity::open`
//! (`crates/format/src/recovery_key.rs`) with the pinned test identity.
//!
//! Input (`sceau_fuzz::codec::ClusterInput`): a flags byte, a u16-framed
//! ciphertext, then (u8-framed key, u16-framed value) annotations. Flag
//! `FIX_DIGEST` rewrites the ciphertext's digest (the last 32 bytes of a
//! version 2 envelope, the 32 before the signer and signature of a version
//! 3 one) to match the recipients annotation, so annotation-layout
//! recipients can be mutated;
//! flag `RAW_ENTRY` reads three u16-framed fields (sealed object public,
//! duplicate, in_sym_seed) and wraps them into a recovery entry for the test
//! identity instead.
//!
//! Invariants, besides "no panic":
//! - an accepted envelope re-encodes (`encode`, or `encode_for_signing`
//!   and its signature) to exactly the input ciphertext and annotations, so
//!   no two inputs parse to the same envelope; what `encode` returns,
//!   `parse` accepts as the same envelope;
//! - a signature the pinned members' keys verify stands for a pinned
//!   envelope only, byte for byte: no mutation keeps a signature valid;
//! - each rejection names a reason the input really has, and its message
//!   has no control characters;
//! - `check_sealed_public` accepts only the public areas `SealedObject`
//!   builds (46 bytes unbound, 78 bound to a boot policy key), and returns
//!   their unique and authPolicy;
//! - `open` fails with exactly `parse`'s error for a malformed envelope,
//!   `NotARecipient` (with the envelope's recovery Name) when there is no recovery
//!   entry for the identity, and succeeds only for an entry that
//!   `SealedObject::wrap_for` made for it (the pinned envelopes' entries),
//!   returning the pinned DEK; those entries always open.
#![no_main]
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sceau_format::duplicate::{
    BOUND_IMPORTED_OBJECT_ATTRIBUTES, ImportBlob, ImportError, check_sealed_public,
};
use sceau_format::envelope::MAX_CIPHERTEXT_LEN;
use sceau_format::key_id::hex;
use sceau_format::members::KnownMembers;
use sceau_format::recovery_key::{RecoveryIdentity, RecoveryKeyError};
use sceau_format::wire::{NAME_LEN, WireError, sha256_name};
use sceau_format::wrapped::{
    ClusterEnvelope, ClusterEnvelopeError, Encoded, MAX_RECIPIENTS, RECIPIENTS_ANNOTATION,
    Recipient, Role, VERSION_CLUSTER, VERSION_SIGNED,
};
use sceau_fuzz::codec::{ClusterInput, Cursor, FIX_DIGEST, RAW_ENTRY};
use sceau_fuzz::pinned::{self, KnownEntry};

struct Fixture {
    identity: RecoveryIdentity,
    name: [u8; NAME_LEN],
    known: Vec<KnownEntry>,
    /// The pinned members, whose keys signed the pinned envelopes.
    members: KnownMembers,
    /// The first 14 bytes of every sealed object's TPMT_PUBLIC: type,
    /// nameAlg, attributes, empty authPolicy, null scheme, unique size 32.
    public_prefix: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let identity = pinned::identity();
        let known = pinned::known_entries();
        Fixture {
            name: *identity.public().name(),
            members: pinned::known_members(),
            identity,
            public_prefix: known[0].object_public[..14].to_vec(),
            known,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if data.first().is_some_and(|f| f & RAW_ENTRY != 0) {
        return raw_entry(&data[1..]);
    }
    let mut input = ClusterInput::decode(data);
    if input.flags & FIX_DIGEST != 0 {
        fix_digest(&mut input);
    }
    let annotations = input.annotation_map();
    let parsed = ClusterEnvelope::parse(&input.ciphertext, &annotations);
    match &parsed {
        Ok(envelope) => check_accepted(&input.ciphertext, &annotations, envelope),
        Err(error) => check_rejected(&input.ciphertext, &annotations, error),
    }
    check_open(&input.ciphertext, &annotations, &parsed);
});

/// Makes a layout-1 ciphertext's digest match its recipients annotation.
fn fix_digest(input: &mut ClusterInput) {
    let Some((_, block)) = input
        .annotations
        .iter()
        .rev()
        .find(|(k, _)| k == RECIPIENTS_ANNOTATION)
    else {
        return;
    };
    let digest = sha256_name(block);
    let end = digest_end(&input.ciphertext);
    if end >= 32 {
        input.ciphertext[end - 32..end].copy_from_slice(&digest[2..]);
    }
}

/// Where a layout-1 ciphertext's digest ends: at its end (version 2), or
/// before the signer's index and the signature (version 3).
fn digest_end(ciphertext: &[u8]) -> usize {
    match ciphertext.first() {
        Some(&VERSION_SIGNED) => ciphertext.len().saturating_sub(1 + 64),
        _ => ciphertext.len(),
    }
}

fn check_accepted(
    ciphertext: &[u8],
    annotations: &HashMap<String, Vec<u8>>,
    envelope: &ClusterEnvelope,
) {
    assert!(ciphertext.len() <= MAX_CIPHERTEXT_LEN);
    assert!([VERSION_CLUSTER, VERSION_SIGNED].contains(&ciphertext[0]));
    assert_eq!(
        ciphertext[0] == VERSION_SIGNED,
        envelope.signature.is_some()
    );
    assert!((1..=MAX_RECIPIENTS).contains(&envelope.recipients.len()));
    assert!(
        envelope
            .recipients
            .windows(2)
            .all(|w| (w[0].role, w[0].name) < (w[1].role, w[1].name))
    );
    let encoded = envelope
        .clone()
        .encode()
        .expect("an accepted envelope encodes");
    if let Some(signed) = &envelope.signature {
        // The digest `parse` kept is the one a signer would have signed.
        let unsigned = ClusterEnvelope {
            signature: None,
            ..envelope.clone()
        };
        let signer = envelope.recipients[signed.signer].name;
        let to_sign = unsigned
            .encode_for_signing(&signer)
            .expect("an accepted envelope encodes");
        assert_eq!(to_sign.digest(), &signed.digest);
    }
    assert_eq!(
        encoded,
        Encoded {
            ciphertext: ciphertext.to_vec(),
            annotations: annotations.clone(),
        },
        "an envelope has one encoding"
    );
    check_sealed(&envelope.object_public);
    if fixture().members.verify(envelope).is_ok() {
        let pinned = pinned::envelopes()
            .iter()
            .any(|(c, a)| c == ciphertext && a == annotations);
        assert!(
            pinned,
            "a signature stood for an envelope its signer never signed"
        );
    }
}

/// `check_sealed_public` accepts exactly SealedObject's public areas: the
/// unbound one (46 bytes: the pinned prefix, then the unique) and the one
/// bound to a boot policy key (78 bytes: noDA alone and a 32-byte
/// authPolicy), and returns what they hold.
fn check_sealed(object_public: &[u8]) {
    let f = fixture();
    let bound_prefix = |policy: &[u8]| {
        let mut prefix = f.public_prefix[..4].to_vec();
        prefix.extend_from_slice(&BOUND_IMPORTED_OBJECT_ATTRIBUTES.to_be_bytes());
        prefix.extend_from_slice(&[0, 32]);
        prefix.extend_from_slice(policy);
        prefix.extend_from_slice(&f.public_prefix[10..]);
        prefix
    };
    let unbound = object_public.len() == 46 && object_public[..14] == f.public_prefix[..];
    let bound = object_public.len() == 78
        && object_public[..46] == bound_prefix(&object_public[10..42])[..];
    match check_sealed_public(object_public) {
        Ok(area) if unbound => {
            assert_eq!(area.auth_policy, None);
            assert_eq!(object_public[14..], area.unique);
        }
        Ok(area) => {
            assert!(bound, "accepted another public area");
            assert_eq!(
                area.auth_policy.as_ref().map(|p| &p[..]),
                Some(&object_public[10..42])
            );
            assert_eq!(object_public[46..], area.unique);
        }
        Err(error) => {
            assert!(
                !unbound && !bound,
                "refused a sealed object's public area: {error}"
            );
            assert_no_control(&error.to_string());
        }
    }
}

fn check_rejected(
    ciphertext: &[u8],
    annotations: &HashMap<String, Vec<u8>>,
    error: &ClusterEnvelopeError,
) {
    let layout = ciphertext.get(1).copied();
    match error {
        ClusterEnvelopeError::CiphertextTooLong(len) => {
            assert!(*len == ciphertext.len() && *len > MAX_CIPHERTEXT_LEN);
        }
        ClusterEnvelopeError::NotVersion2 => {
            let version = ciphertext.first();
            assert!(version != Some(&VERSION_CLUSTER) && version != Some(&VERSION_SIGNED));
        }
        ClusterEnvelopeError::Wire(WireError::Truncated("version")) => {
            assert!(ciphertext.is_empty());
        }
        ClusterEnvelopeError::UnknownLayout(l) => {
            assert_eq!(layout, Some(*l));
            assert!(*l > 1);
        }
        ClusterEnvelopeError::UnexpectedAnnotation(shown) => {
            // The key is the client's text: the error holds it cut and
            // escaped, never longer than that.
            let key = annotations
                .keys()
                .find(|key| sceau_format::text::printable(key) == *shown)
                .expect("the refused key is one of the annotations");
            assert!(shown.len() <= sceau_format::text::PRINTABLE_MAX_BYTES);
            assert!(key != RECIPIENTS_ANNOTATION || layout == Some(0));
        }
        ClusterEnvelopeError::MissingAnnotation => {
            assert_eq!(layout, Some(1));
            assert!(!annotations.contains_key(RECIPIENTS_ANNOTATION));
        }
        ClusterEnvelopeError::AnnotationNotNeeded | ClusterEnvelopeError::AnnotationTooLong => {
            assert_eq!(layout, Some(1));
            assert!(annotations.contains_key(RECIPIENTS_ANNOTATION));
        }
        ClusterEnvelopeError::AnnotationDigest => {
            assert_eq!(layout, Some(1));
            let block = &annotations[RECIPIENTS_ANNOTATION];
            let end = digest_end(ciphertext);
            assert_ne!(ciphertext[end - 32..end], sha256_name(block)[2..]);
        }
        ClusterEnvelopeError::RecipientCount(n) => {
            assert!(*n == 0 || *n > MAX_RECIPIENTS);
        }
        _ => {}
    }
    if !matches!(error, ClusterEnvelopeError::CiphertextTooLong(_)) {
        assert!(ciphertext.len() <= MAX_CIPHERTEXT_LEN);
    }
    assert_no_control(&error.to_string());
}

/// The recovery tool's open: refused exactly as parse refuses, and opened
/// only for what `wrap_for` made for the identity.
fn check_open(
    ciphertext: &[u8],
    annotations: &HashMap<String, Vec<u8>>,
    parsed: &Result<ClusterEnvelope, ClusterEnvelopeError>,
) {
    let f = fixture();
    let opened = f.identity.open(ciphertext, annotations);
    let envelope = match (parsed, &opened) {
        (Err(parse_error), Err(RecoveryKeyError::Envelope(open_error))) => {
            assert_eq!(parse_error, open_error);
            return;
        }
        (Err(e), _) => panic!("parse refused ({e}) but open did not: {opened:?}"),
        (Ok(envelope), _) => envelope,
    };
    let entry = envelope
        .recipients
        .iter()
        .find(|r| r.role == Role::Recovery && r.name == f.name);
    let known = entry.and_then(|entry| {
        f.known
            .iter()
            .find(|k| k.object_public == envelope.object_public && k.blob == entry.blob)
    });
    match (&opened, entry, known) {
        (Ok(dek), Some(_), Some(_)) => assert_eq!(dek.as_slice(), pinned::DEK),
        (Ok(_), _, _) => panic!("an entry wrap_for did not make opened"),
        (Err(RecoveryKeyError::NotARecipient(theirs)), None, _) => {
            let recovery = envelope
                .recipients
                .iter()
                .find(|r| r.role == Role::Recovery);
            assert_eq!(
                *theirs,
                recovery.map_or("none".to_string(), |r| hex(&r.name))
            );
        }
        (Err(RecoveryKeyError::Import(error)), Some(_), None) => check_import_error(error),
        (Err(e), _, _) => panic!("unexpected open result: {e}"),
    }
}

fn check_import_error(error: &ImportError) {
    assert_no_control(&error.to_string());
}

/// Wraps three raw fields into a recovery entry for the test identity.
fn raw_entry(data: &[u8]) {
    let f = fixture();
    let mut c = Cursor::new(data);
    let field = |c: &mut Cursor<'_>| c.field16().unwrap_or_default().to_vec();
    let object_public = field(&mut c);
    let blob = ImportBlob {
        duplicate: field(&mut c),
        in_sym_seed: field(&mut c),
    };
    check_sealed(&object_public);
    let envelope = ClusterEnvelope {
        object_public,
        recipients: vec![Recipient {
            role: Role::Recovery,
            name: f.name,
            blob,
        }],
        signature: None,
    };
    let Ok(encoded) = envelope.clone().encode() else {
        return;
    };
    // What encode returns, parse accepts as the same envelope.
    let reparsed = ClusterEnvelope::parse(&encoded.ciphertext, &encoded.annotations);
    assert_eq!(
        reparsed.as_ref(),
        Ok(&envelope),
        "encode made what parse refuses"
    );
    check_open(&encoded.ciphertext, &encoded.annotations, &reparsed);
}

fn assert_no_control(message: &str) {
    assert!(!message.chars().any(char::is_control), "{message:?}");
}
