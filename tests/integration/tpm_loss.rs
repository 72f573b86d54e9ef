//! Contract test 8: when the TPM disappears under load, every call still ends
//! within the request deadline with a clean error, and sceau, having lost its
//! TPM for good, exits with a non-zero status.

use std::error::Error as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tonic::{Code, Status};

use crate::harness::rpc::{self, Client, assert_clean_message};
use crate::harness::{Fixture, random_bytes};

const CLIENTS: usize = 8;
/// sceau's default --request-deadline plus the margin the contract allows.
const CALL_LIMIT: Duration = Duration::from_millis(2_500 + 2_000);
/// How long sceau may take to notice the TPM is gone for good and exit.
const EXIT_LIMIT: Duration = Duration::from_secs(15);
/// Successful round trips to see before pulling the plug, so the kill lands
/// mid-run.
const WARM_UP_ROUND_TRIPS: usize = 2 * CLIENTS;
/// Hard stop for the client loops, whatever sceau does.
const CLIENT_BUDGET: Duration = Duration::from_secs(40);

/// What one call ended with and how long it took.
struct CallRecord {
    what: &'static str,
    elapsed: Duration,
    /// None when the call hung past CALL_LIMIT * 2 and was abandoned.
    result: Option<Result<(), Status>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_the_tpm_fails_calls_cleanly_and_ends_the_daemon() {
    let mut fx = Fixture::start("tpm-loss", &[]);
    let (_, key_id) = fx.client().await;
    let stop = Arc::new(AtomicBool::new(false));
    let successes = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let socket = fx.sceau.socket().to_path_buf();
            tokio::spawn(client_loop(
                socket,
                key_id.clone(),
                stop.clone(),
                successes.clone(),
            ))
        })
        .collect();

    let warmed_up = wait_for(Duration::from_secs(30), || {
        successes.load(Ordering::Relaxed) >= WARM_UP_ROUND_TRIPS
    })
    .await;
    assert!(warmed_up, "no steady traffic before the TPM was killed");
    fx.tpm.kill();
    let killed_at = Instant::now();

    let exited = wait_for(EXIT_LIMIT, || fx.sceau.try_exit().is_some()).await;
    let exit_after = killed_at.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut records = Vec::new();
    for worker in workers {
        records.extend(worker.await.expect("client task panicked"));
    }

    check_calls(&records, exited);
    let status = fx
        .sceau
        .try_exit()
        .unwrap_or_else(|| panic!("sceau still running {EXIT_LIMIT:?} after TPM loss"));
    assert!(
        matches!(status.code(), Some(code) if code != 0),
        "after TPM loss sceau must exit with a non-zero code, got {status} after {exit_after:?}"
    );
}

/// Every call ended in time; failures are clean server errors, or transport
/// errors once sceau is gone.
fn check_calls(records: &[CallRecord], sceau_exited: bool) {
    for record in records {
        let CallRecord {
            what,
            elapsed,
            result,
        } = record;
        let Some(result) = result else {
            panic!("{what} hung for more than {:?}", CALL_LIMIT * 2);
        };
        assert!(
            *elapsed <= CALL_LIMIT,
            "{what} took {elapsed:?} (limit {CALL_LIMIT:?}): {result:?}"
        );
        let Err(status) = result else { continue };
        if status.source().is_some() {
            // Synthesized by the client from a broken connection.
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
/// a hang) after twice the allowed time so the test itself cannot hang.
async fn timed<T>(
    what: &'static str,
    call: impl Future<Output = Result<T, Status>>,
) -> (CallRecord, Option<T>) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(CALL_LIMIT * 2, call).await;
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
