//! No copy of a DEK survives in sceau's memory once its calls are done.
//!
//! The test seals and opens a marker DEK many times, closes its connection,
//! then reads every readable mapping of the daemon through /proc/PID/mem
//! (it runs as root) and counts the marker. The control case runs the same
//! workload with the wiping allocator switched off (a hook that exists only
//! in `insecure-test-hooks` builds) and must find the marker: the scan works.

use std::time::Duration;

use sceau::server::idle::IDLE_LIMIT;

use crate::harness::memscan::{Hit, find_in_process};
use crate::harness::sceau::serve_args;
use crate::harness::{Sceau, Swtpm, TempDir, rpc};

/// 32 bytes that occur nowhere else.
const MARKER_DEK: &[u8; 32] = b"sceau-memscan-marker-DEK-0xC0FFE";
const ROUND_TRIPS: usize = 20;
/// Any 16 bytes of the marker count as a copy: half a 32-byte seed.
const WINDOW: usize = 16;

/// Whether the client keeps its connection open while the daemon is scanned,
/// as the apiserver does between calls.
#[derive(Clone, Copy, PartialEq)]
enum Connection {
    Closed,
    KeptOpen,
}

/// Runs the workload against a fresh daemon and returns the scan's hits.
async fn hits_after_round_trips(
    label: &str,
    env: &[(&str, &str)],
    connection: Connection,
) -> Vec<Hit> {
    let tmp = TempDir::new(label);
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let socket = tmp.join("sceau.sock");
    let mut sceau = Sceau::spawn(
        &tmp,
        &socket,
        serve_args(&socket, Some(&tpm.tcti()), &[]),
        env,
    );
    sceau
        .wait_serving()
        .unwrap_or_else(|why| panic!("{why}\n{}", sceau.stderr_text()));
    let mut client = sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    for _ in 0..ROUND_TRIPS {
        rpc::round_trip(&mut client, &key_id, MARKER_DEK).await;
    }
    // Held until the scan is done, so a kept connection really stays open.
    let _kept = match connection {
        Connection::Closed => {
            drop(client);
            None
        }
        Connection::KeptOpen => Some(client),
    };
    // Let the daemon finish the calls and notice a closed connection; an
    // open one it ends after IDLE_LIMIT of silence.
    tokio::time::sleep(match connection {
        Connection::Closed => Duration::from_millis(500),
        Connection::KeptOpen => IDLE_LIMIT + Duration::from_millis(500),
    })
    .await;
    let hits = find_in_process(sceau.pid(), MARKER_DEK, WINDOW);
    // The scan is a snapshot; make sure the daemon was alive for all of it.
    assert!(
        sceau.try_exit().is_none(),
        "sceau died: {}",
        sceau.stderr_text()
    );
    hits
}

#[tokio::test(flavor = "multi_thread")]
async fn no_dek_copy_survives_in_daemon_memory() {
    let hits = hits_after_round_trips("memscan", &[], Connection::Closed).await;
    assert!(
        hits.is_empty(),
        "marker DEK found in sceau's memory: {hits:#x?}"
    );
}

/// The apiserver keeps its connection open; sceau ends a connection after
/// IDLE_LIMIT of silence, which bounds how long hyper's live buffers may hold
/// the last frames. Without that, this test finds the marker in those
/// buffers (seen: an h2 DATA frame header, then the DEK).
#[tokio::test(flavor = "multi_thread")]
async fn no_dek_copy_survives_while_the_connection_stays_open() {
    let hits = hits_after_round_trips("memscan-open", &[], Connection::KeptOpen).await;
    assert!(
        hits.is_empty(),
        "marker DEK found in sceau's memory: {hits:#x?}"
    );
}

#[cfg(feature = "insecure-test-hooks")]
#[tokio::test(flavor = "multi_thread")]
async fn without_wiping_the_scan_finds_the_dek() {
    let hits = hits_after_round_trips(
        "memscan-control",
        &[("SCEAU_INSECURE_NO_WIPE", "1")],
        Connection::Closed,
    )
    .await;
    assert!(
        !hits.is_empty(),
        "the scan found nothing even without wiping"
    );
}
