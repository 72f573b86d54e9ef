//! The service's validation and error mapping in both modes, with the one
//! fake TPM ([`FakeTpm`]) behind them. Claims about the real TPM are tested
//! in `tests/integration`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::Duration;

use tonic::Code;

use super::*;
use crate::kms::fake::FakeTpm;
use crate::kms::service_for;
use sceau_format::members::Membership;
use sceau_format::text::printable;
use sceau_format::wrapped::RECIPIENTS_ANNOTATION;

type Service = KmsService;

fn service(fake: FakeTpm) -> (Service, Arc<FakeTpm>) {
    let fake = Arc::new(fake);
    (
        service_for(fake.clone(), fake.served_keys(), None, false).unwrap(),
        fake,
    )
}

/// Cluster mode over the same fake: this node (the fake's signing key) and
/// another member, and a recovery key, all software keys.
fn clustered(fake: FakeTpm) -> (Service, Arc<FakeTpm>, Arc<Membership>) {
    let membership = Arc::new(FakeTpm::cluster_membership());
    let fake = Arc::new(fake);
    let service = service_for(
        fake.clone(),
        fake.served_keys(),
        Some(membership.clone()),
        false,
    )
    .unwrap();
    (service, fake, membership)
}

async fn encrypt(svc: &Service, plaintext: &[u8]) -> Result<EncryptResponse, Status> {
    let request = EncryptRequest {
        plaintext: plaintext.to_vec(),
        uid: "test".into(),
    };
    svc.encrypt(Request::new(request))
        .await
        .map(Response::into_inner)
}

async fn decrypt(svc: &Service, ciphertext: Vec<u8>, key_id: &str) -> Result<Vec<u8>, Status> {
    decrypt_with(svc, ciphertext, key_id, HashMap::new()).await
}

async fn decrypt_with(
    svc: &Service,
    ciphertext: Vec<u8>,
    key_id: &str,
    annotations: HashMap<String, Vec<u8>>,
) -> Result<Vec<u8>, Status> {
    let request = DecryptRequest {
        ciphertext,
        uid: "test".into(),
        key_id: key_id.into(),
        annotations,
    };
    svc.decrypt(Request::new(request))
        .await
        .map(|r| r.into_inner().plaintext)
}

#[tokio::test]
async fn round_trip_and_status() {
    let (svc, fake) = service(FakeTpm::default());
    let sealed = encrypt(&svc, b"0123456789abcdef0123456789abcdef")
        .await
        .unwrap();
    assert_eq!(sealed.key_id, fake.key_id().as_str());
    assert!(sealed.annotations.is_empty());
    let opened = decrypt(&svc, sealed.ciphertext, &sealed.key_id)
        .await
        .unwrap();
    assert_eq!(opened, b"0123456789abcdef0123456789abcdef");

    let status = svc
        .status(Request::new(StatusRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (status.version.as_str(), status.healthz.as_str()),
        ("v2", "ok")
    );
    assert_eq!(status.key_id, fake.key_id().as_str());
}

#[tokio::test]
async fn plaintext_sizes_outside_1_to_128_are_invalid() {
    let (svc, fake) = service(FakeTpm::default());
    for size in [0, 129, 4096] {
        let status = encrypt(&svc, &vec![1; size]).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "size {size}");
    }
    assert_eq!(fake.seals(), 0);
}

#[tokio::test]
async fn a_foreign_key_id_is_refused_before_the_tpm() {
    let (svc, fake) = service(FakeTpm::default());
    let status = decrypt(&svc, vec![1, 2, 3], "sceau-0000000000000000")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        format!(
            "unknown key_id sceau-0000000000000000; this TPM only serves {}",
            fake.key_id()
        )
    );
    assert_eq!(fake.unseals(), 0);
}

/// Found by the `kms_request` fuzz target: a key_id of 80 characters that
/// each escape to 6 or 10 bytes made a message past the 512-byte cut, which
/// then lost the key_id this TPM serves, the part that tells the operator
/// what to fix. The echo is now bounded in bytes.
#[tokio::test]
async fn the_whole_refusal_survives_a_key_id_that_escapes_long() {
    let (svc, fake) = service(FakeTpm::default());
    for c in ['\u{1a}', '\u{10ffff}'] {
        let key_id = c.to_string().repeat(300);
        let status = decrypt(&svc, vec![1, 2, 3], &key_id).await.unwrap_err();
        let message = status.message();
        assert!(message.starts_with("unknown key_id \\u{"), "{message}");
        let tail = format!("…; this TPM only serves {}", fake.key_id());
        assert!(message.ends_with(&tail), "{message}");
    }
    assert_eq!(fake.unseals(), 0);
}

#[tokio::test]
async fn malformed_envelopes_never_reach_the_tpm() {
    let (svc, fake) = service(FakeTpm::default());
    let good = encrypt(&svc, &[5; 32]).await.unwrap().ciphertext;
    let mut not_sealed_data = good.clone();
    not_sealed_data[6] ^= 0x01; // flips the nameAlg
    for bad in [
        vec![],
        vec![1],
        good[..good.len() - 1].to_vec(),
        not_sealed_data,
    ] {
        let status = decrypt(&svc, bad, fake.key_id().as_str())
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    }
    assert_eq!(fake.unseals(), 0);
}

#[tokio::test]
async fn tpm_faults_reach_the_client_as_class_words() {
    let cases = [
        (Fault::Unreachable, Code::Unavailable),
        (Fault::Busy, Code::Unavailable),
        (Fault::Timeout, Code::DeadlineExceeded),
        (Fault::Failure, Code::Internal),
        (Fault::EnvelopeRejected, Code::InvalidArgument),
    ];
    for (fault, code) in cases {
        let (svc, fake) = service(FakeTpm::default());
        let good = encrypt(&svc, &[5; 32]).await.unwrap().ciphertext;
        fake.inject(Some(fault));
        let status = decrypt(&svc, good, fake.key_id().as_str())
            .await
            .unwrap_err();
        assert_eq!(
            (status.code(), status.message()),
            (code, fault.to_string().as_str())
        );
        let health = svc
            .status(Request::new(StatusRequest {}))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(health.healthz, fault.to_string());
    }
}

#[tokio::test]
async fn concurrent_decrypts_of_one_ciphertext_share_one_unseal() {
    let (svc, fake) = service(FakeTpm::with_unseal_delay(Duration::from_millis(100)));
    let svc = Arc::new(svc);
    let ciphertext = encrypt(&svc, &[9; 32]).await.unwrap().ciphertext;
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (svc, ciphertext, key_id) =
                (svc.clone(), ciphertext.clone(), fake.key_id().to_string());
            tokio::spawn(async move { decrypt(&svc, ciphertext, &key_id).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), vec![9; 32]);
    }
    assert_eq!(fake.unseals(), 1);
}

#[test]
fn echoed_client_text_is_bounded_and_escaped() {
    assert_eq!(printable("a\nb"), "a\\nb");
    assert_eq!(
        printable(&"x".repeat(200)),
        format!("{}…", "x".repeat(sceau_format::text::SHOWN_BYTES))
    );
}

/// Found by the `envelope` fuzz target (audit/fuzzing.md): tpm2-tss decodes a
/// public blob whose unique field declares more bytes than follow as if that
/// field were empty, so without the marshal-back check sceau would send the
/// TPM an object the envelope does not hold.
#[tokio::test]
async fn a_public_blob_tpm2_tss_misreads_never_reaches_the_tpm() {
    let (svc, fake) = service(FakeTpm::default());
    let good = encrypt(&svc, &[5; 32]).await.unwrap().ciphertext;
    // Version, u16 length L, then the L-byte TPM2B_PUBLIC, whose last two
    // bytes are the (empty) unique field's size.
    let public_len = usize::from(u16::from_be_bytes([good[1], good[2]]));
    let unique_size = 1 + 2 + public_len - 2;
    let mut overlong_unique = good.clone();
    overlong_unique[unique_size..unique_size + 2].copy_from_slice(&[0x00, 0x40]);
    let status = decrypt(&svc, overlong_unique, fake.key_id().as_str())
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::InvalidArgument,
            "malformed ciphertext: the public blob is not a valid TPM2B_PUBLIC"
        )
    );
    assert_eq!(fake.unseals(), 0);
}

/// Nothing binds an annotation to a version 1 envelope, so none rides
/// along, not even sceau's own recipients annotation, in either mode; and
/// cluster mode still opens this TPM's version 1 envelopes.
#[tokio::test]
async fn version_1_envelopes_refuse_annotations_in_both_modes() {
    let (single, single_fake) = service(FakeTpm::default());
    let (cluster, cluster_fake, _) = clustered(FakeTpm::default());
    let envelope = FakeTpm::seal_bytes(&[4; 32]).encode();
    for (svc, fake) in [(&single, &single_fake), (&cluster, &cluster_fake)] {
        let key_id = fake.key_id().to_string();
        for key in [RECIPIENTS_ANNOTATION, "other.example.com"] {
            let annotations = HashMap::from([(key.to_string(), vec![1])]);
            let status = decrypt_with(svc, envelope.clone(), &key_id, annotations)
                .await
                .unwrap_err();
            assert_eq!(
                (status.code(), status.message()),
                (
                    Code::InvalidArgument,
                    "version 1 envelopes carry no annotations, but the request has some"
                )
            );
        }
        assert_eq!(fake.unseals(), 0);
        let opened = decrypt(svc, envelope.clone(), &key_id).await.unwrap();
        assert_eq!(opened, vec![4; 32]);
    }
}

/// The service does not know its mode: the cluster key_id, signed version 3
/// envelopes and the import path all come from the cluster `Sealer`.
#[tokio::test]
async fn cluster_mode_seals_for_every_member_and_imports_this_nodes_entry() {
    let (svc, fake, membership) = clustered(FakeTpm::default());
    let cluster_key_id = membership.key_id().as_str();
    let status = svc
        .status(Request::new(StatusRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.key_id, cluster_key_id);

    let sealed = encrypt(&svc, &[6; 32]).await.unwrap();
    assert_eq!(sealed.key_id, cluster_key_id);
    assert_eq!(sealed.ciphertext[0], 0x03);
    assert_eq!(
        fake.seals(),
        0,
        "cluster Encrypt creates no object in the TPM"
    );

    let status = decrypt(&svc, sealed.ciphertext.clone(), fake.key_id().as_str())
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "key-id-mismatch")
    );
    assert_eq!(fake.unseals(), 0);

    // The fake holds no storage key, so its Import refuses the entry, as a
    // TPM refuses one that was not wrapped for it.
    let status = decrypt(&svc, sealed.ciphertext, cluster_key_id)
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "envelope-not-for-this-tpm")
    );
    assert_eq!(fake.unseals(), 1);
}

/// A TPM fault during Encrypt's signature is the fault's class word, and
/// no envelope: an unsigned one would be refused by every member.
#[tokio::test]
async fn a_failed_signature_gives_no_envelope() {
    let (svc, fake, _) = clustered(FakeTpm::default());
    fake.inject(Some(sceau_tpm::Fault::Failure));
    let status = encrypt(&svc, &[6; 32]).await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::Internal, "tpm-failure")
    );
}

/// Unsigned envelopes open only while the operator allows them; the
/// refusal is a class word, before the TPM.
#[tokio::test]
async fn unsigned_envelopes_are_refused_unless_allowed() {
    let (svc, fake, membership) = clustered(FakeTpm::default());
    let sealed = encrypt(&svc, &[6; 32]).await.unwrap();
    let envelope =
        sceau_format::wrapped::ClusterEnvelope::parse(&sealed.ciphertext, &HashMap::new()).unwrap();
    let unsigned = sceau_format::wrapped::ClusterEnvelope {
        signature: None,
        ..envelope
    };
    let key_id = sceau_format::members::unsigned_envelope_key_id(&unsigned);
    let ciphertext = unsigned.encode().unwrap().ciphertext;
    let status = decrypt(&svc, ciphertext.clone(), key_id.as_str())
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "unsigned-envelope")
    );
    assert_eq!(fake.unseals(), 0);
    let allowing = service_for(fake.clone(), fake.served_keys(), Some(membership), true).unwrap();
    let status = decrypt(&allowing, ciphertext, key_id.as_str())
        .await
        .unwrap_err();
    // Past the signature check: the fake's Import refuses the entry.
    assert_eq!(status.message(), "envelope-not-for-this-tpm");
    assert_eq!(fake.unseals(), 1);
}

/// A single-node daemon given a cluster envelope under its own key_id
/// refuses it before the TPM.
#[tokio::test]
async fn single_node_mode_refuses_cluster_envelopes() {
    let (cluster, _, _) = clustered(FakeTpm::default());
    let sealed = encrypt(&cluster, &[6; 32]).await.unwrap();
    let (svc, fake) = service(FakeTpm::default());
    let status = decrypt(&svc, sealed.ciphertext, fake.key_id().as_str())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "a cluster envelope, but this node serves without --members"
    );
    assert_eq!(fake.unseals(), 0);
}
