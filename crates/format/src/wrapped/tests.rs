use crate::random::SystemRandom;
use p256::SecretKey;

use super::*;
use crate::duplicate::{SealedObject, import_in_software};
use crate::storage_key::StorageKey;

struct Party {
    secret: SecretKey,
    key: StorageKey,
}

fn parties(n: usize) -> Vec<Party> {
    (0..n)
        .map(|_| {
            let secret = SecretKey::random(&mut SystemRandom);
            let key = StorageKey::from_point(&secret.public_key());
            Party { secret, key }
        })
        .collect()
}

fn envelope_for(members: &[Party], recovery: Option<&Party>, dek: &[u8]) -> ClusterEnvelope {
    let object = SealedObject::new(dek);
    let entry = |role, p: &Party| Recipient {
        role,
        name: *p.key.name(),
        blob: object.wrap_for(&p.key),
    };
    let mut recipients: Vec<Recipient> = members.iter().map(|p| entry(Role::Member, p)).collect();
    recipients.extend(recovery.map(|p| entry(Role::Recovery, p)));
    ClusterEnvelope {
        object_public: object.tpmt_public().to_vec(),
        recipients,
        signature: None,
    }
}

/// Total bytes a KMS v2 EncryptResponse carries for this envelope.
fn sizes(encoded: &Encoded) -> (usize, usize) {
    let annotations = encoded
        .annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    (encoded.ciphertext.len(), annotations)
}

#[test]
fn every_recipient_opens_an_inline_envelope() {
    let members = parties(3);
    let recovery = parties(1);
    let encoded = envelope_for(&members, recovery.first(), &[7; 32])
        .encode()
        .unwrap();
    assert!(
        encoded.annotations.is_empty(),
        "3 members + recovery fit 1 KiB"
    );
    let parsed = ClusterEnvelope::parse(&encoded.ciphertext, &encoded.annotations).unwrap();
    for party in members.iter().chain(&recovery) {
        let entry = parsed.entry_for(party.key.name()).unwrap();
        let dek = import_in_software(&party.secret, &parsed.object_public, &entry.blob).unwrap();
        assert_eq!(dek.as_slice(), &[7; 32]);
    }
}

#[test]
fn five_members_and_recovery_move_to_the_annotation() {
    let members = parties(5);
    let recovery = parties(1);
    let encoded = envelope_for(&members, recovery.first(), &[1; 32])
        .encode()
        .unwrap();
    assert_eq!(encoded.ciphertext.len(), 2 + 2 + 46 + 32);
    assert!(encoded.annotations.contains_key(RECIPIENTS_ANNOTATION));
    let parsed = ClusterEnvelope::parse(&encoded.ciphertext, &encoded.annotations).unwrap();
    assert_eq!(parsed.recipients.len(), 6);

    let mut forged = encoded.annotations.clone();
    forged.get_mut(RECIPIENTS_ANNOTATION).unwrap()[40] ^= 1;
    assert_eq!(
        ClusterEnvelope::parse(&encoded.ciphertext, &forged),
        Err(ClusterEnvelopeError::AnnotationDigest)
    );
    assert_eq!(
        ClusterEnvelope::parse(&encoded.ciphertext, &HashMap::new()),
        Err(ClusterEnvelopeError::MissingAnnotation)
    );
    let mut extra = encoded.annotations.clone();
    extra.insert("other.example.com".into(), vec![]);
    assert!(matches!(
        ClusterEnvelope::parse(&encoded.ciphertext, &extra),
        Err(ClusterEnvelopeError::UnexpectedAnnotation(_))
    ));
}

#[test]
fn inline_envelopes_refuse_annotations_and_unsorted_entries() {
    let members = parties(2);
    let envelope = envelope_for(&members, None, &[3; 32]);
    let encoded = envelope.clone().encode().unwrap();
    let stray = HashMap::from([(RECIPIENTS_ANNOTATION.to_string(), vec![1])]);
    assert!(ClusterEnvelope::parse(&encoded.ciphertext, &stray).is_err());
    // Swap the two entries in place: same bytes, wrong order.
    let mut parsed = ClusterEnvelope::parse(&encoded.ciphertext, &HashMap::new()).unwrap();
    parsed.recipients.swap(0, 1);
    let mut bytes = vec![VERSION_CLUSTER, LAYOUT_INLINE];
    bytes.extend_from_slice(&(parsed.object_public.len() as u16).to_be_bytes());
    bytes.extend_from_slice(&parsed.object_public);
    bytes.extend_from_slice(&encode_recipients(&parsed.recipients));
    assert_eq!(
        ClusterEnvelope::parse(&bytes, &HashMap::new()),
        Err(ClusterEnvelopeError::RecipientOrder)
    );
}

/// Bytes of an envelope with exactly these recipients, in this order,
/// written without `encode`'s checks: what a splicing attacker can send.
fn raw_inline(object_public: &[u8], recipients: &[Recipient]) -> Vec<u8> {
    let mut bytes = vec![VERSION_CLUSTER, LAYOUT_INLINE];
    bytes.extend_from_slice(&(object_public.len() as u16).to_be_bytes());
    bytes.extend_from_slice(object_public);
    bytes.extend_from_slice(&encode_recipients(recipients));
    bytes
}

/// The key_id must stand for the whole recipient set.
/// A second recovery entry spliced into an envelope, or one Name given two
/// roles, is refused; and the key_id changes with every (role, Name) pair.
/// Before the fix, parse accepted both splices and the spliced envelope
/// hashed to the original key_id (only the first recovery Name was hashed),
/// so this test failed on its first assertion.
#[test]
fn splices_that_hide_a_recipient_from_the_key_id_are_refused() {
    let members = parties(1);
    let recoveries = parties(2);
    let envelope = envelope_for(&members, recoveries.first(), &[5; 32]);
    let mut spliced = envelope.recipients.clone();
    let mut extra = spliced[1].clone();
    extra.name = *recoveries[1].key.name();
    spliced.push(extra);
    spliced.sort_by_key(|r| (r.role, r.name));
    assert_eq!(
        ClusterEnvelope::parse(
            &raw_inline(&envelope.object_public, &spliced),
            &HashMap::new()
        ),
        Err(ClusterEnvelopeError::SecondRecovery)
    );

    let mut two_roles = envelope.recipients.clone();
    two_roles[1].name = two_roles[0].name;
    assert_eq!(
        ClusterEnvelope::parse(
            &raw_inline(&envelope.object_public, &two_roles),
            &HashMap::new()
        ),
        Err(ClusterEnvelopeError::NameInTwoRoles)
    );
    let mut encode_too = envelope.clone();
    encode_too.recipients = two_roles;
    assert_eq!(
        encode_too.encode(),
        Err(ClusterEnvelopeError::NameInTwoRoles)
    );

    use crate::members::{Member, cluster_key_id};
    let member = |p: &Party| Member {
        srk: p.key.clone(),
        signing: crate::signing_key::SigningKey::from_point(&p.secret.public_key()),
    };
    let (a, r) = (member(&members[0]), member(&recoveries[0]));
    let as_recovery = cluster_key_id([&a].into_iter(), Some(r.srk.name()), None);
    let as_member = cluster_key_id([&a, &r].into_iter(), None, None);
    let alone = cluster_key_id([&a].into_iter(), None, None);
    assert_ne!(
        as_recovery, as_member,
        "a role change must change the key_id"
    );
    assert_ne!(as_recovery, alone);
    assert_ne!(as_member, alone);
}

#[test]
fn truncations_and_trailing_bytes_are_errors_not_panics() {
    let encoded = envelope_for(&parties(2), None, &[5; 32]).encode().unwrap();
    for len in 0..encoded.ciphertext.len() {
        assert!(ClusterEnvelope::parse(&encoded.ciphertext[..len], &HashMap::new()).is_err());
    }
    let mut long = encoded.ciphertext.clone();
    long.push(0);
    assert!(ClusterEnvelope::parse(&long, &HashMap::new()).is_err());
}

/// Found by the `cluster_envelope` fuzz target (audit/fuzzing.md, «The too-long
/// layout-1 ciphertext»): with a public area over 952 bytes, encode returned a
/// layout-1 ciphertext above 1 KiB, which parse (and the apiserver) refuse.
#[test]
fn encode_refuses_a_ciphertext_parse_would_refuse() {
    let mut envelope = envelope_for(&parties(1), None, &[4; 32]);
    envelope.object_public = vec![0; 1000];
    assert_eq!(
        envelope.encode(),
        Err(ClusterEnvelopeError::CiphertextTooLong(2 + 2 + 1000 + 32))
    );
}

/// Found while writing the `cluster_envelope` fuzz target's oracle
/// (audit/fuzzing.md, «The annotation layout for recipients that fit inline»):
/// parse took the recipients from the annotation even when they fit the
/// ciphertext, or when they exceed what encode writes, so one envelope had
/// several encodings.
#[test]
fn parse_takes_the_annotation_layout_only_as_encode_writes_it() {
    let annotated = |envelope: &ClusterEnvelope| {
        let block = encode_recipients(&envelope.recipients);
        let ciphertext =
            envelope.header(VERSION_CLUSTER, LAYOUT_ANNOTATION, &Sha256::digest(&block));
        (
            ciphertext,
            HashMap::from([(RECIPIENTS_ANNOTATION.to_string(), block)]),
        )
    };
    let fits = envelope_for(&parties(2), None, &[6; 32]);
    let (ciphertext, annotations) = annotated(&fits);
    assert_eq!(
        ClusterEnvelope::parse(&ciphertext, &annotations),
        Err(ClusterEnvelopeError::AnnotationNotNeeded)
    );
    let mut huge = fits.clone();
    huge.recipients.truncate(1);
    huge.recipients[0].blob.duplicate = vec![0; MAX_ANNOTATIONS_LEN];
    assert_eq!(
        huge.clone().encode(),
        Err(ClusterEnvelopeError::AnnotationTooLong)
    );
    let (ciphertext, annotations) = annotated(&huge);
    assert_eq!(
        ClusterEnvelope::parse(&ciphertext, &annotations),
        Err(ClusterEnvelopeError::AnnotationTooLong)
    );
}

/// Prints the size table kept in docs/envelope.md, and fails if the document
/// disagrees with what the code produces today.
#[test]
fn size_table_matches_docs_envelope_md() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/envelope.md"
    ))
    .expect("docs/envelope.md");
    let recovery = parties(1);
    println!("| members | recovery | ciphertext (B) | annotations (B) |");
    println!("|---|---|---|---|");
    for n in 1..=5 {
        let members = parties(n);
        for with_recovery in [false, true] {
            let recovery = if with_recovery {
                recovery.first()
            } else {
                None
            };
            // Signed by the first member; only the signature's size matters.
            let encoded = envelope_for(&members, recovery, &[0x5c; 32])
                .encode_for_signing(members[0].key.name())
                .unwrap()
                .finish(&[0x11; SIGNATURE_LEN]);
            let (ciphertext, annotations) = sizes(&encoded);
            let row = format!(
                "| {n} | {} | {ciphertext} | {annotations} |",
                if with_recovery { "yes" } else { "no" }
            );
            println!("{row}");
            assert!(doc.contains(&row), "docs/envelope.md lacks the row {row}");
        }
    }
}
