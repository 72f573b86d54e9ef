//! No copy of a DEK survives in sceau's memory once its calls are done.
//!
//! Each test runs a workload with a marker DEK against a fresh daemon, then
//! reads every readable mapping of the daemon through /proc/PID/mem (the
//! test runs as root) and looks for any 16-byte run of the marker.
//!
//! Every protection has a control: with `insecure-test-hooks` builds,
//! `SCEAU_INSECURE_DISABLE` switches single protections off, and the same
//! scan must then find the marker. That shows each protection is needed and
//! that the scan can see what it looks for.

use std::time::Duration;

use sceau::server::idle::IDLE_LIMIT;

use crate::harness::memscan::{Hit, find_in_process};
use crate::harness::sceau::serve_args;
use crate::harness::{Client, Sceau, Swtpm, TempDir, rpc};

/// 32 bytes that occur nowhere else.
const MARKER_DEK: &[u8; 32] = b"sceau-memscan-marker-DEK-0xC0FFE";
const CALLS: usize = 20;
/// Any 16 bytes of the marker count as a copy: half a 32-byte seed.
const WINDOW: usize = 16;

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    /// Encrypt then Decrypt, repeatedly.
    RoundTrips,
    /// Encrypt only: nothing after Create overwrites what it left.
    EncryptOnly,
}

/// What happens between the workload and the scan.
#[derive(Clone, Copy, PartialEq)]
enum Connection {
    /// Closed, and the daemon given a moment to free its buffers.
    Closed,
    /// Kept open, as the apiserver does, past the daemon's idle limit.
    KeptOpenPastIdleLimit,
}

struct Run {
    workload: Workload,
    connection: Connection,
    /// Protections to switch off (`SCEAU_INSECURE_DISABLE`).
    disabled: &'static str,
    /// GLIBC_TUNABLES in sceau's environment, as the unit sets it (then
    /// sceau does not re-execute itself); None: sceau sets them itself.
    glibc_tunables: Option<&'static str>,
}

async fn scan_after(label: &str, run: Run) -> Vec<Hit> {
    let tmp = TempDir::new(label);
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let socket = tmp.join("sceau.sock");
    let mut env = vec![("SCEAU_INSECURE_DISABLE", run.disabled)];
    if let Some(tunables) = run.glibc_tunables {
        env.extend([("GLIBC_TUNABLES", tunables), ("SCEAU_LOG", "debug")]);
    }
    let args = serve_args(&socket, Some(&tpm.tcti()), &[]);
    let mut sceau = Sceau::spawn(&tmp, &socket, args, &env);
    sceau
        .wait_serving()
        .unwrap_or_else(|why| panic!("{why}\n{}", sceau.stderr_text()));
    let client = workload(&sceau, run.workload).await;
    // Held until the scan is done, so a kept connection really stays open.
    let _kept = match run.connection {
        Connection::Closed => {
            drop(client);
            tokio::time::sleep(Duration::from_millis(500)).await;
            None
        }
        Connection::KeptOpenPastIdleLimit => {
            tokio::time::sleep(IDLE_LIMIT + Duration::from_millis(500)).await;
            Some(client)
        }
    };
    if run.glibc_tunables.is_some() {
        assert!(
            sceau.stderr_text().contains("no re-exec"),
            "with the unit's GLIBC_TUNABLES sceau must not re-execute itself:\n{}",
            sceau.stderr_text()
        );
    }
    let hits = find_in_process(sceau.pid(), MARKER_DEK, WINDOW);
    // The scan is a snapshot; make sure the daemon was alive for all of it.
    assert!(
        sceau.try_exit().is_none(),
        "sceau died: {}",
        sceau.stderr_text()
    );
    hits
}

async fn workload(sceau: &Sceau, workload: Workload) -> Client {
    let mut client = sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    for _ in 0..CALLS {
        match workload {
            Workload::RoundTrips => rpc::round_trip(&mut client, &key_id, MARKER_DEK).await,
            Workload::EncryptOnly => drop(rpc::seal(&mut client, &key_id, MARKER_DEK).await),
        }
    }
    client
}

fn assert_clean(hits: &[Hit]) {
    assert!(
        hits.is_empty(),
        "marker DEK found in sceau's memory: {hits:#x?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_dek_copy_survives_round_trips() {
    let run = Run {
        workload: Workload::RoundTrips,
        connection: Connection::Closed,
        disabled: "",
        glibc_tunables: None,
    };
    assert_clean(&scan_after("memscan", run).await);
}

/// The same with GLIBC_TUNABLES set as `systemd/sceau.service` sets it:
/// sceau takes them as in force and does not re-execute itself, and glibc's
/// free() still wipes. (With the unit's line minus the wiping tunables,
/// sceau would re-execute: `commands::serve` unit tests.)
#[tokio::test(flavor = "multi_thread")]
async fn no_dek_copy_survives_round_trips_with_the_units_tunables() {
    let tunables = crate::harness::sceau::unit_glibc_tunables();
    let run = Run {
        workload: Workload::RoundTrips,
        connection: Connection::Closed,
        disabled: "",
        glibc_tunables: Some(tunables),
    };
    assert_clean(&scan_after("memscan-unit-tunables", run).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn no_dek_copy_survives_encrypts() {
    let run = Run {
        workload: Workload::EncryptOnly,
        connection: Connection::Closed,
        disabled: "",
        glibc_tunables: None,
    };
    assert_clean(&scan_after("memscan-encrypt", run).await);
}

/// The apiserver keeps its connection open; sceau ends a connection after
/// IDLE_LIMIT of silence, which bounds how long hyper's live buffers may hold
/// the last frames. This one has no control in the suite: whether a live
/// buffer still holds the last Encrypt's DEK depends on how the frames that
/// follow it are read (scanned at once, it was found in two of three runs,
/// and a reviewer found 38 copies scanning 1 s after the calls), so a
/// control would be flaky.
#[tokio::test(flavor = "multi_thread")]
async fn no_dek_copy_survives_past_the_idle_limit() {
    let run = Run {
        workload: Workload::EncryptOnly,
        connection: Connection::KeptOpenPastIdleLimit,
        disabled: "",
        glibc_tunables: None,
    };
    assert_clean(&scan_after("memscan-open", run).await);
}

#[cfg(feature = "insecure-test-hooks")]
mod controls {
    use super::*;

    /// With `disabled` switched off, the same scan must find the marker.
    async fn assert_found(label: &str, workload: Workload, disabled: &'static str) {
        let run = Run {
            workload,
            connection: Connection::Closed,
            disabled,
            glibc_tunables: None,
        };
        let hits = scan_after(label, run).await;
        assert!(
            !hits.is_empty(),
            "with {disabled:?} off the scan found nothing"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_heap_wiping() {
        assert_found(
            "control-heap",
            Workload::RoundTrips,
            "alloc-wipe,malloc-tunables",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_malloc_tunables() {
        assert_found("control-tunables", Workload::RoundTrips, "malloc-tunables").await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_tss_buffer_scrub() {
        assert_found(
            "control-tss-buffer",
            Workload::RoundTrips,
            "tss-buffer-scrub",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_tss_input_scrub() {
        assert_found(
            "control-tss-input",
            Workload::EncryptOnly,
            "tss-input-scrub",
        )
        .await;
    }

    // No end-to-end control for `stack-scrub`: since the unsent scrub
    // Create ends every TPM job (`tpm::device`), it rewrites the frames that
    // Unseal and Create used, and with the stack scrub off this scan finds
    // nothing (tried with round trips and with Encrypts only). The stack
    // scrub's control is `secret::tests::scrub_stack_clears_what_a_deeper_frame_left`.
}
