//! Contract tests 1 and 2: Status, Encrypt/Decrypt round trips, size limits,
//! and key_id checking.

use crate::harness::envelope::Envelope;
use crate::harness::rpc::{self, expect_invalid_argument, is_well_formed_key_id};
use crate::harness::{Fixture, random_bytes};

/// KMS v2 DEKs are 32 bytes; sceau accepts anything from 1 to 128 bytes.
const MAX_PLAINTEXT: usize = 128;
/// 1 + 2 + 48 (TPM2B_PUBLIC) + 160 (TPM2B_PRIVATE).
const ENVELOPE_LEN_FOR_32_BYTES: usize = 211;

#[tokio::test(flavor = "multi_thread")]
async fn status_reports_v2_ok_and_the_logged_key_id() {
    let fx = Fixture::start("status", &[]);
    let mut client = fx.sceau.client().await;
    let status = rpc::status(&mut client).await;
    assert_eq!(status.version, "v2");
    assert_eq!(status.healthz, "ok");
    assert!(
        is_well_formed_key_id(&status.key_id),
        "key_id {:?}",
        status.key_id
    );
    assert_eq!(
        fx.sceau.logged_key_id().as_deref(),
        Some(status.key_id.as_str()),
        "readiness log line"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_size_from_1_to_128_round_trips() {
    let fx = Fixture::start("sizes", &[]);
    let (mut client, key_id) = fx.client().await;

    // Seal everything first, then open everything, so that each envelope is
    // opened after other objects have come and gone in the TPM.
    let mut sealed = Vec::new();
    for len in 1..=MAX_PLAINTEXT {
        let plaintext = random_bytes(len);
        let envelope = rpc::seal(&mut client, &key_id, &plaintext).await;
        Envelope::parse(&envelope); // well-formed per the documented layout
        if len == 32 {
            assert_eq!(envelope.len(), ENVELOPE_LEN_FOR_32_BYTES);
        }
        sealed.push((plaintext, envelope));
    }
    for (plaintext, envelope) in &sealed {
        rpc::open(&mut client, &key_id, envelope, plaintext).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sealing_the_same_dek_twice_gives_different_envelopes() {
    let fx = Fixture::start("fresh-seal", &[]);
    let (mut client, key_id) = fx.client().await;
    let dek = random_bytes(32);
    let first = rpc::seal(&mut client, &key_id, &dek).await;
    let second = rpc::seal(&mut client, &key_id, &dek).await;
    assert_ne!(first, second, "sealing must be randomized");
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_and_oversized_plaintexts_are_invalid_arguments() {
    let fx = Fixture::start("limits", &[]);
    let (mut client, key_id) = fx.client().await;
    for len in [0, MAX_PLAINTEXT + 1, 1024] {
        let result = rpc::encrypt(&mut client, &vec![0x5a; len]).await;
        expect_invalid_argument(result, &format!("Encrypt of {len} bytes"));
    }
    // Rejections must not have disturbed the TPM or the daemon.
    assert_eq!(rpc::status(&mut client).await.healthz, "ok");
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_key_id_is_rejected_with_the_exact_message() {
    let fx = Fixture::start("wrong-key-id", &[]);
    let (mut client, key_id) = fx.client().await;
    let envelope = rpc::seal(&mut client, &key_id, &random_bytes(32)).await;

    let upper = key_id.to_ascii_uppercase();
    let wrong = [
        "sceau-0000000000000000",
        "some-other-kms-key",
        upper.as_str(),
        &format!("{key_id} "),
    ];
    for wrong_id in wrong {
        let result = rpc::decrypt(&mut client, &envelope, wrong_id).await;
        let status = expect_invalid_argument(result, &format!("key_id {wrong_id:?}"));
        let expected = format!("unknown key_id {wrong_id}; this TPM only serves {key_id}");
        assert_eq!(status.message(), expected);
    }

    // An empty key_id is a mismatch too (its message is not pinned down).
    expect_invalid_argument(
        rpc::decrypt(&mut client, &envelope, "").await,
        "empty key_id",
    );

    // The key_id is checked before the envelope is even parsed.
    let result = rpc::decrypt(&mut client, b"not an envelope", "sceau-0000000000000000").await;
    let status = expect_invalid_argument(result, "garbage with a wrong key_id");
    assert!(
        status.message().starts_with("unknown key_id "),
        "{:?}",
        status.message()
    );

    // And the right key_id still works for the same envelope.
    let plaintext = rpc::decrypt(&mut client, &envelope, &key_id)
        .await
        .expect("right key_id");
    assert_eq!(plaintext.len(), 32);
}
