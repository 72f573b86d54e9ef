//! Contract test 5: an envelope is bound to the TPM that sealed it. Another
//! machine's sceau must refuse it even when asked with its own key_id.

use crate::harness::rpc::{self, expect_invalid_argument};
use crate::harness::{Sceau, Swtpm, TempDir, random_bytes};

#[tokio::test(flavor = "multi_thread")]
async fn envelope_from_another_tpm_is_refused() {
    let tmp = TempDir::new("foreign");
    let tpm_a = Swtpm::start(&tmp.subdir("tpm-a"));
    let tpm_b = Swtpm::start(&tmp.subdir("tpm-b"));
    let sceau_a = Sceau::start_on_socket(&tmp, &tmp.join("a.sock"), &tpm_a.tcti(), &[]);
    let sceau_b = Sceau::start_on_socket(&tmp, &tmp.join("b.sock"), &tpm_b.tcti(), &[]);
    let mut a = sceau_a.client().await;
    let mut b = sceau_b.client().await;
    let key_a = rpc::status(&mut a).await.key_id;
    let key_b = rpc::status(&mut b).await.key_id;
    assert_ne!(key_a, key_b, "two TPMs must have two SRKs");

    let dek = random_bytes(32);
    let from_a = rpc::seal(&mut a, &key_a, &dek).await;

    // With B's own key_id the envelope passes the key_id check and parses,
    // but B's SRK cannot load it.
    let status = expect_invalid_argument(
        rpc::decrypt(&mut b, &from_a, &key_b).await,
        "A's envelope at B",
    );
    assert!(
        status.message().contains("envelope-not-for-this-tpm"),
        "message: {:?}",
        status.message()
    );

    // With A's key_id, B refuses on the key_id alone.
    let status = expect_invalid_argument(
        rpc::decrypt(&mut b, &from_a, &key_a).await,
        "A's key_id at B",
    );
    assert_eq!(
        status.message(),
        format!("unknown key_id {key_a}; this TPM only serves {key_b}")
    );

    // Neither refusal harmed B, and A still opens its own envelope.
    assert_eq!(rpc::status(&mut b).await.healthz, "ok");
    rpc::round_trip(&mut b, &key_b, &random_bytes(32)).await;
    rpc::open(&mut a, &key_a, &from_a, &dek).await;
}
