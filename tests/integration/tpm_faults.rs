//! Contract test 8 and its sibling: when the TPM disappears or stops
//! answering under load, every call still ends within the request deadline
//! (plus a margin) with a clean error, never a hang; and sceau, having lost
//! its TPM for good, exits with a non-zero status.

use std::error::Error as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tonic::{Code, Status};

use crate::harness::rpc::{self, Client, assert_clean_message};
use crate::harness::{Fixture, Sceau, random_bytes};

/// What the contract allows beyond the request deadline.
const MARGIN: Duration = Duration::from_secs(2);
/// sceau's default --request-deadline.
const DEFAULT_DEADLINE: Duration = Duration::from_millis(2_500);
/// A call still running after this long is abandoned and counted as a hang
/// (below rpc::CALL_TIMEOUT, which would abort the whole test).
const HANG_LIMIT: Duration = Duration::from_secs(9);
/// How long sceau may take to notice the TPM is gone for good and exit.
const EXIT_LIMIT: Duration = Duration::from_secs(15);
/// Hard stop for the client loops, whatever sceau does.
const CLIENT_BUDGET: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_the_tpm_fails_calls_cleanly_and_ends_the_daemon() {
    let mut fx = Fixture::start("tpm-loss", &[]);
    let (mut client, key_id) = fx.client().await;
    let dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &dek).await;
    drop(client);
    let load = Load::start(&fx, &key_id, 8);
    load.warm_up().await;

    fx.tpm.kill();
    let killed_at = Instant::now();
    let exited = wait_for(EXIT_LIMIT, || fx.sceau.try_exit().is_some()).await;
    let exit_after = killed_at.elapsed();
    let records = load.stop().await;

    println!(
        "{}; sceau exit seen after {exit_after:?}",
        summarize(&records)
    );
    check_calls(&records, DEFAULT_DEADLINE + MARGIN, exited);
    let status = fx
        .sceau
        .try_exit()
        .unwrap_or_else(|| panic!("sceau still running {EXIT_LIMIT:?} after TPM loss"));
    assert!(
        matches!(status.code(), Some(code) if code != 0),
        "after TPM loss sceau must exit with a non-zero code, got {status} after {exit_after:?}"
    );

    // No lost DEK: the TPM comes back on its state, systemd starts a new
    // sceau, and what was sealed before the loss opens.
    fx.tpm.restart();
    fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &[]);
    let (mut client, key_id_after) = fx.client().await;
    assert_eq!(key_id_after, key_id);
    rpc::open(&mut client, &key_id, &before, &dek).await;
}

/// A TPM that stops answering (SIGSTOP: its connection stays open, nothing
/// comes back) is the case a deadline exists for. The short deadline also
/// shows that --request-deadline is honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frozen_tpm_calls_end_within_the_request_deadline() {
    const DEADLINE: Duration = Duration::from_secs(1);
    const FROZEN_FOR: Duration = Duration::from_secs(5);
    let mut fx = Fixture::start("tpm-frozen", &["--request-deadline", "1s"]);
    let (mut client, key_id) = fx.client().await;
    let dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &dek).await;
    let load = Load::start(&fx, &key_id, 4);
    load.warm_up().await;

    fx.tpm.freeze();
    tokio::time::sleep(FROZEN_FOR).await;
    let records = load.stop().await;
    fx.tpm.thaw();

    println!("{}", summarize(&records));
    let sceau_exited = fx.sceau.try_exit().is_some();
    check_calls(&records, DEADLINE + MARGIN, sceau_exited);
    let failures = records
        .iter()
        .filter(|r| !matches!(r.result, Some(Ok(()))))
        .count();
    assert!(
        failures > 0,
        "no call failed while the TPM was frozen for {FROZEN_FOR:?}"
    );

    // The TPM comes back: sceau serves again, and what was sealed before the
    // freeze opens (the commands stuck in the frozen TPM drain first).
    let (sceau, envelope, id) = (&fx.sceau, &before, &key_id);
    let recovered = wait_for_async(Duration::from_secs(15), || async move {
        rpc::decrypt(&mut sceau.client().await, envelope, id)
            .await
            .ok()
    })
    .await;
    assert_eq!(
        recovered.as_deref(),
        Some(dek.as_slice()),
        "{}",
        fx.sceau.stderr_text()
    );
    assert!(fx.sceau.try_exit().is_none(), "sceau exited after the thaw");
    drop(client);
}

/// Calls `attempt` until it gives Some, for at most `limit`.
async fn wait_for_async<T, F: std::future::Future<Output = Option<T>>>(
    limit: Duration,
    mut attempt: impl FnMut() -> F,
) -> Option<T> {
    let started = Instant::now();
    loop {
        if let Some(value) = attempt().await {
            return Some(value);
        }
        if started.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What one call ended with and how long it took.
struct CallRecord {
    what: &'static str,
    elapsed: Duration,
    /// None when the call hung past HANG_LIMIT and was abandoned.
    result: Option<Result<(), Status>>,
}

/// Clients, each on its own connection, looping round trips until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    successes: Arc<AtomicUsize>,
    workers: Vec<JoinHandle<Vec<CallRecord>>>,
}

impl Load {
    fn start(fx: &Fixture, key_id: &str, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let successes = Arc::new(AtomicUsize::new(0));
        let workers = (0..clients)
            .map(|_| {
                let socket = fx.sceau.socket().to_path_buf();
                tokio::spawn(client_loop(
                    socket,
                    key_id.to_string(),
                    stop.clone(),
                    successes.clone(),
                ))
            })
            .collect();
        Load {
            stop,
            successes,
            workers,
        }
    }

    /// Waits for two successful round trips per client, so that the fault
    /// lands mid-run rather than before the traffic started.
    async fn warm_up(&self) {
        let wanted = 2 * self.workers.len();
        let warmed = wait_for(Duration::from_secs(30), || {
            self.successes.load(Ordering::Relaxed) >= wanted
        })
        .await;
        assert!(warmed, "no steady traffic before the fault");
    }

    async fn stop(self) -> Vec<CallRecord> {
        self.stop.store(true, Ordering::Relaxed);
        let mut records = Vec::new();
        for worker in self.workers {
            records.extend(worker.await.expect("client task panicked"));
        }
        records
    }
}

/// Every call ended within `limit`; failures are clean server errors, or
/// transport errors once sceau is gone.
fn check_calls(records: &[CallRecord], limit: Duration, sceau_exited: bool) {
    for CallRecord {
        what,
        elapsed,
        result,
    } in records
    {
        let Some(result) = result else {
            panic!("{what} hung for more than {HANG_LIMIT:?}");
        };
        assert!(
            *elapsed <= limit,
            "{what} took {elapsed:?} (limit {limit:?}): {result:?}"
        );
        let Err(status) = result else { continue };
        // Synthesized by the client from a broken or refused connection:
        // with the error as its source, or, when tonic's channel was not
        // ready to send at all, as Unknown "Service was not ready: …" with
        // no source (seen on a loaded machine as sceau exits).
        let transport = status.source().is_some()
            || (status.code() == Code::Unknown
                && status.message().starts_with("Service was not ready"));
        if transport {
            assert!(
                sceau_exited,
                "{what}: transport error while sceau was still running: {status:?}"
            );
        } else {
            let clean_codes = [Code::Unavailable, Code::DeadlineExceeded, Code::Internal];
            assert!(
                clean_codes.contains(&status.code()),
                "{what}: unexpected {status:?}"
            );
            assert_clean_message(status, what);
        }
    }
}

/// E.g. "412 calls: 30 Unavailable, 380 ok; slowest 2.51s", printed so that
/// a failure report shows what the clients saw.
fn summarize(records: &[CallRecord]) -> String {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for record in records {
        let outcome = match &record.result {
            None => "hung".to_string(),
            Some(Ok(())) => "ok".to_string(),
            Some(Err(status)) => format!("{:?}", status.code()),
        };
        *counts.entry(outcome).or_default() += 1;
    }
    let slowest = records.iter().map(|r| r.elapsed).max().unwrap_or_default();
    let counts: Vec<String> = counts
        .iter()
        .map(|(outcome, n)| format!("{n} {outcome}"))
        .collect();
    format!(
        "{} calls: {}; slowest {slowest:?}",
        records.len(),
        counts.join(", ")
    )
}

/// Round trips until told to stop or the budget runs out. After a failure it
/// backs off briefly, so a dead daemon is not hammered in a tight loop.
async fn client_loop(
    socket: PathBuf,
    key_id: String,
    stop: Arc<AtomicBool>,
    successes: Arc<AtomicUsize>,
) -> Vec<CallRecord> {
    let mut client = rpc::connect(&socket).await;
    let mut records = Vec::new();
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < CLIENT_BUDGET {
        if round_trip(&mut client, &key_id, &mut records).await {
            successes.fetch_add(1, Ordering::Relaxed);
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    records
}

/// One Encrypt and, if it succeeded, the matching Decrypt; records both calls.
/// A successful Decrypt must of course return the DEK.
async fn round_trip(client: &mut Client, key_id: &str, records: &mut Vec<CallRecord>) -> bool {
    let dek = random_bytes(32);
    let (record, sealed) = timed("Encrypt", rpc::encrypt(client, &dek)).await;
    records.push(record);
    let Some(sealed) = sealed else { return false };
    let (record, opened) = timed("Decrypt", rpc::decrypt(client, &sealed.ciphertext, key_id)).await;
    records.push(record);
    let Some(plaintext) = opened else {
        return false;
    };
    assert!(
        plaintext == dek,
        "Decrypt returned other bytes than were sealed"
    );
    true
}

/// Runs one call, recording its duration and outcome; abandons it (recording
/// a hang) after HANG_LIMIT so the test itself cannot hang.
async fn timed<T>(
    what: &'static str,
    call: impl Future<Output = Result<T, Status>>,
) -> (CallRecord, Option<T>) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(HANG_LIMIT, call).await;
    let elapsed = started.elapsed();
    let (result, value) = match outcome {
        Err(_hung) => (None, None),
        Ok(Ok(value)) => (Some(Ok(())), Some(value)),
        Ok(Err(status)) => (Some(Err(status)), None),
    };
    (
        CallRecord {
            what,
            elapsed,
            result,
        },
        value,
    )
}

/// Polls `condition` without blocking the runtime's workers.
async fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

/// A TPM reset under a running daemon (swtpm restarted on its state: every
/// transient object and session is gone) costs nothing but a reopen: the
/// TPM thread reconnects inside the sandbox (the TCTI library stays loaded),
/// recreates the same SRK and carries on. Without the pinned library, the
/// reopen would be refused by Landlock and sceau would exit instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_tpm_reset_is_survived_inside_the_sandbox() {
    let mut fx = Fixture::start("tpm-reset", &[]);
    let (mut client, key_id) = fx.client().await;
    let dek = random_bytes(32);
    let envelope = rpc::seal(&mut client, &key_id, &dek).await;

    fx.tpm.restart();
    rpc::open(&mut client, &key_id, &envelope, &dek).await;
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    assert_eq!(rpc::status(&mut client).await.healthz, "ok");
    assert!(
        fx.sceau
            .stderr_text()
            .contains("TPM reopened; SRK unchanged"),
        "{}",
        fx.sceau.stderr_text()
    );
}
