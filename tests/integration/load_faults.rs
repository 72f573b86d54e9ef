//! The fault matrix's rows on the client and process side
//! (docs/reliability.md): a client that disconnects mid-call, SIGTERM under
//! load, and the apiserver's reconnect storm. Each runs sceau on a real swtpm
//! behind the test kit's TPM proxy (crates/testkit/src/tpm_proxy.rs), which
//! holds the TPM's answers when a call must be caught in flight and counts the
//! TPM handles sceau holds. Every row checks that the envelopes sealed before
//! the fault still open after it. The TPM-side rows are in fault_matrix.rs and
//! tpm_faults.rs; docs/reliability.md is the table of all of them.

use std::time::{Duration, Instant};

use crate::harness::footprint::footprint;
use crate::harness::tpm_proxy::{Fault, Profile, TpmProxy};
use crate::harness::{ProxiedFixture, Sceau, random_bytes, rpc};

/// sceau's default --request-deadline, and what a loaded machine may add.
const DEADLINE: Duration = Duration::from_millis(2500);
const MARGIN: Duration = Duration::from_secs(2);

/// sceau on a swtpm behind a proxy that adds no delay.
fn rig(label: &str) -> ProxiedFixture {
    ProxiedFixture::start(label, Profile::instant(), &[])
}

/// Envelopes sealed now, with their DEKs, to open after the fault.
async fn seal_some(rig: &ProxiedFixture, count: usize) -> (String, Vec<(Vec<u8>, Vec<u8>)>) {
    let (mut client, key_id) = rig.client().await;
    let mut sealed = Vec::new();
    for _ in 0..count {
        let dek = random_bytes(32);
        sealed.push((rpc::seal(&mut client, &key_id, &dek).await, dek));
    }
    (key_id, sealed)
}

/// Waits (up to the deadline) until the TPM has seen a command more than
/// `seen`: the call under test is in the TPM's hands.
async fn wait_for_a_command_after(proxy: &TpmProxy, seen: u64) {
    let started = Instant::now();
    while proxy.total_commands() == seen {
        assert!(
            started.elapsed() < DEADLINE,
            "the call never reached the TPM"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn all_open(sceau: &Sceau, key_id: &str, sealed: &[(Vec<u8>, Vec<u8>)]) {
    let mut client = sceau.client().await;
    for (envelope, dek) in sealed {
        rpc::open(&mut client, key_id, envelope, dek).await;
    }
}

/// A client gives up on its Decrypt while the TPM is working on it (the
/// apiserver's own 3 s timeout does this): the TPM thread finishes the
/// command sequence and flushes what it loaded, the answer is dropped, and
/// sceau serves the next call at once. Nothing leaks: the TPM handles held
/// return to what they were, and the daemon's fds too.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_disconnects_mid_call_leaks_nothing() {
    let mut rig = rig("disconnect-mid-call");
    let (key_id, sealed) = seal_some(&rig, 3).await;
    let handles_before = rig.proxy.held_handles().len();
    let fds_before = footprint(rig.sceau.pid()).unwrap().open_fds;

    rig.proxy.inject(Fault::Hang);
    let seen = rig.proxy.total_commands();
    let (socket, envelope, id) = (
        rig.sceau.socket().to_path_buf(),
        sealed[0].0.clone(),
        key_id.clone(),
    );
    let caller = tokio::spawn(async move {
        let mut client = rpc::connect(&socket).await;
        rpc::decrypt(&mut client, &envelope, &id).await
    });
    wait_for_a_command_after(&rig.proxy, seen).await;
    // The client goes away: its task, connection and all.
    caller.abort();
    let _ = caller.await;
    rig.proxy.release();

    let started = Instant::now();
    all_open(&rig.sceau, &key_id, &sealed).await;
    let next_call = started.elapsed();
    assert!(next_call < DEADLINE, "the next calls took {next_call:?}");
    assert_eq!(
        rig.proxy.held_handles().len(),
        handles_before,
        "TPM handles held after the abandoned call: {:x?}",
        rig.proxy.held_handles()
    );
    let fds_after = settled_fds(&rig.sceau, fds_before).await;
    assert!(
        fds_after <= fds_before,
        "fds {fds_before} before, {fds_after} after"
    );
    assert!(rig.sceau.try_exit().is_none(), "sceau exited");
    println!(
        "client gone mid-Decrypt: sceau kept serving ({next_call:?} for the next {} opens), \
         handles {handles_before} → {}, fds {fds_before} → {fds_after}",
        sealed.len(),
        rig.proxy.held_handles().len()
    );
}

/// systemd stops sceau (SIGTERM) while 16 clients are calling: it exits 0
/// within its grace period; every call ends, either answered or refused by a
/// closed connection (none hangs); and every envelope it answered before or
/// during the stop opens in the next sceau on the same TPM.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_under_load_exits_cleanly_and_loses_no_envelope() {
    const CLIENTS: usize = 16;
    let mut rig = rig("sigterm-under-load");
    let key_id = rig.client().await.1;

    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let socket = rig.sceau.socket().to_path_buf();
            tokio::spawn(async move {
                let mut sealed = Vec::new();
                let mut failures = Vec::new();
                let Ok(mut client) = tokio::time::timeout(DEADLINE, rpc::connect(&socket)).await
                else {
                    return (sealed, vec!["connect timed out".to_string()]);
                };
                // Until the daemon stops answering: the test kit's calls are
                // bounded, so a hang would fail the test, not stall it.
                loop {
                    let dek = random_bytes(32);
                    match rpc::encrypt(&mut client, &dek).await {
                        Ok(response) => sealed.push((response.ciphertext, dek)),
                        Err(status) => {
                            failures.push(format!("{:?} {}", status.code(), status.message()));
                            break;
                        }
                    }
                }
                (sealed, failures)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = Instant::now();
    let status = rig.sceau.terminate();
    let took = stopped.elapsed();
    assert!(status.success(), "sceau's exit status: {status:?}");
    let mut sealed = Vec::new();
    let mut endings = std::collections::BTreeMap::<String, usize>::new();
    for client in clients {
        let (answered, failures) = tokio::time::timeout(DEADLINE + MARGIN, client)
            .await
            .expect("a client's call hung past the stop")
            .expect("a client panicked");
        sealed.extend(answered);
        for failure in failures {
            *endings.entry(failure).or_default() += 1;
        }
    }
    assert!(
        !sealed.is_empty(),
        "no Encrypt was answered before the stop"
    );

    rig.restart_sceau(&[]);
    all_open(&rig.sceau, &key_id, &sealed).await;
    println!(
        "SIGTERM under {CLIENTS} clients: exit 0 in {took:?}; the clients' last calls ended \
         {endings:?}; all {} envelopes answered before the stop open in the next sceau",
        sealed.len()
    );
}

/// The apiserver's reconnect storm: its gRPC client redials at once after
/// a connection ends, and many apiserver goroutines may do so together. 500
/// connections opened, each asking Status once and closing, 50 at a time:
/// every Status is answered or (past the connection cap) the connection is
/// closed, sceau stays up, and once the storm is over its fds are what
/// they were and a round trip works.
#[tokio::test(flavor = "multi_thread")]
async fn a_reconnect_storm_is_absorbed() {
    const CONNECTIONS: usize = 500;
    const AT_ONCE: usize = 50;
    let mut rig = rig("reconnect-storm");
    let (key_id, sealed) = seal_some(&rig, 2).await;
    let fds_before = footprint(rig.sceau.pid()).unwrap().open_fds;

    let started = Instant::now();
    let mut answered = 0;
    for _ in 0..CONNECTIONS / AT_ONCE {
        let wave: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                let socket = rig.sceau.socket().to_path_buf();
                tokio::spawn(async move {
                    // Past the connection cap sceau closes at accept, so the
                    // handshake itself may fail: that is not an answer.
                    let call = async {
                        let mut client = sceau_kms_api::connect(&socket).await.ok()?;
                        client
                            .status(sceau_kms_api::pb::StatusRequest {})
                            .await
                            .ok()
                    };
                    matches!(tokio::time::timeout(DEADLINE, call).await, Ok(Some(_)))
                })
            })
            .collect();
        for call in wave {
            answered += usize::from(call.await.expect("a storm client panicked"));
        }
    }
    let took = started.elapsed();
    assert!(
        rig.sceau.try_exit().is_none(),
        "sceau exited during the storm"
    );
    assert!(answered > 0, "no Status was answered during the storm");
    let fds_after = settled_fds(&rig.sceau, fds_before).await;
    assert!(
        fds_after <= fds_before,
        "fds {fds_before} before the storm, {fds_after} after"
    );
    all_open(&rig.sceau, &key_id, &sealed).await;
    rpc::round_trip(&mut rig.sceau.client().await, &key_id, &random_bytes(32)).await;
    println!(
        "reconnect storm: {CONNECTIONS} connections ({AT_ONCE} at once) in {took:?}, \
         {answered} Status answered; fds {fds_before} → {fds_after}; sceau serving"
    );
}

/// The daemon's fd count once closed connections are reaped (up to 10 s).
async fn settled_fds(sceau: &Sceau, target: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = footprint(sceau.pid()).unwrap().open_fds;
        if now <= target || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
