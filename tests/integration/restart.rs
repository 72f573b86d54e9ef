//! Contract test 4: envelopes outlive the daemon (and a TPM power cycle),
//! because the SRK is re-derived from the TPM's persistent seed.

use crate::harness::rpc::{self, Client};
use crate::harness::{Fixture, Sceau, random_bytes};

/// Seals DEKs of assorted sizes; returns (plaintext, envelope) pairs.
async fn seal_some(client: &mut Client, key_id: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut sealed = Vec::new();
    for len in [1, 16, 32, 32, 32, 64, 100, 128] {
        let dek = random_bytes(len);
        let envelope = rpc::seal(client, key_id, &dek).await;
        sealed.push((dek, envelope));
    }
    sealed
}

/// SIGTERM must end sceau with exit status 0 and remove its socket.
fn stop_cleanly(fx: &mut Fixture) {
    let status = fx.sceau.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "sceau exit status after SIGTERM: {status}"
    );
    assert!(
        !fx.sceau.socket().exists(),
        "socket left behind after SIGTERM"
    );
}

async fn assert_same_key_and_all_open(fx: &Fixture, key_id: &str, sealed: &[(Vec<u8>, Vec<u8>)]) {
    let (mut client, new_key_id) = fx.client().await;
    assert_eq!(new_key_id, key_id, "key_id changed across restart");
    assert_eq!(fx.sceau.logged_key_id().as_deref(), Some(key_id));
    for (dek, envelope) in sealed {
        rpc::open(&mut client, key_id, envelope, dek).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_restart_keeps_key_id_and_opens_old_envelopes() {
    let mut fx = Fixture::start("restart", &[]);
    let (mut client, key_id) = fx.client().await;
    let sealed = seal_some(&mut client, &key_id).await;
    drop(client);

    stop_cleanly(&mut fx);
    fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &[]);
    assert_same_key_and_all_open(&fx, &key_id, &sealed).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_power_cycle_keeps_key_id_and_opens_old_envelopes() {
    let mut fx = Fixture::start("power-cycle", &[]);
    let (mut client, key_id) = fx.client().await;
    let sealed = seal_some(&mut client, &key_id).await;
    drop(client);

    stop_cleanly(&mut fx);
    fx.tpm.restart(); // TPM2_Startup(CLEAR): every transient object is gone
    fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &[]);
    assert_same_key_and_all_open(&fx, &key_id, &sealed).await;
}

/// A SIGKILLed sceau cannot flush its SRK or its salted session, and swtpm
/// (like a TPM without a resource manager) holds only three of each. Four
/// kills in a row would exhaust them unless each start flushes what the last
/// one left.
#[tokio::test(flavor = "multi_thread")]
async fn sigkilled_daemons_leave_nothing_that_blocks_the_next() {
    let mut fx = Fixture::start("sigkill-restart", &[]);
    let (mut client, key_id) = fx.client().await;
    let sealed = seal_some(&mut client, &key_id).await;
    drop(client);
    for _ in 0..4 {
        fx.sceau.signal(libc::SIGKILL);
        assert!(
            fx.sceau
                .wait_exit(std::time::Duration::from_secs(5))
                .is_some()
        );
        fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &[]);
        assert_same_key_and_all_open(&fx, &key_id, &sealed).await;
    }
    assert!(fx.sceau.stderr_text().contains("flushed a loaded session"));
}
