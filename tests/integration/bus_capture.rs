//! Parameter encryption: a recording proxy between sceau and swtpm must never
//! see a DEK in the clear.
//!
//! The control case proves the capture would catch it: the same Create and
//! Unseal without the salted session put the marker on the wire (twice: in
//! Create's inSensitive and in Unseal's outData).

use crate::harness::bus_proxy::{RecordingProxy, occurrences};
use crate::harness::{Sceau, Swtpm, TempDir, rpc};

/// 32 bytes no TPM exchange would contain by chance.
const MARKER_DEK: &[u8; 32] = b"sceau-bus-marker-DEK-0123456789!";

/// A sceau whose TPM traffic passes through a recording proxy. Field order
/// is drop order: sceau stops before its TPM goes away.
struct TappedDaemon {
    sceau: Sceau,
    proxy: RecordingProxy,
    socket: std::path::PathBuf,
    _swtpm: Swtpm,
    _tmp: TempDir,
}

fn tapped_daemon(label: &str) -> TappedDaemon {
    let tmp = TempDir::new(label);
    let swtpm = Swtpm::start(&tmp.subdir("tpm"));
    let proxy = RecordingProxy::start(swtpm.port());
    let socket = tmp.join("sceau.sock");
    let sceau = Sceau::start_on_socket(&tmp, &socket, &proxy.tcti(), &[]);
    TappedDaemon {
        sceau,
        proxy,
        socket,
        _swtpm: swtpm,
        _tmp: tmp,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_never_puts_a_dek_on_the_tpm_bus() {
    let mut daemon = tapped_daemon("bus-salted");
    let mut client = daemon.sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;

    let envelope = rpc::seal(&mut client, &key_id, MARKER_DEK).await;
    rpc::open(&mut client, &key_id, &envelope, MARKER_DEK).await;
    drop(client);
    assert!(daemon.sceau.terminate().success());

    assert_eq!(
        occurrences(&daemon.proxy.recorded(), MARKER_DEK),
        0,
        "the DEK crossed the bus in the clear"
    );
    // Nor any 8-byte window of it, in case it was split across reads.
    daemon.proxy.assert_never_carried(MARKER_DEK);
}

/// The control case needs the library's `insecure-test-hooks` feature
/// (`scripts/test.sh` enables it); the daemon binary never turns the session off.
#[cfg(feature = "insecure-test-hooks")]
mod clear_bus_control {
    use sceau_tpm::sealed::LoadableObject;
    use sceau_tpm::secret::Dek;
    use sceau_tpm::{Observer, ParameterEncryption, Tpm, TpmConfig};

    use super::MARKER_DEK;
    use crate::harness::bus_proxy::{RecordingProxy, occurrences};
    use crate::harness::{Swtpm, TempDir};

    #[test]
    fn without_the_salted_session_the_capture_sees_the_dek() {
        let tmp = TempDir::new("bus-clear");
        let swtpm = Swtpm::start(&tmp.subdir("tpm"));
        let proxy = RecordingProxy::start(swtpm.port());
        let config = TpmConfig {
            tcti: proxy.tcti().parse().unwrap(),
            srk_handle: None,
            parameter_encryption: ParameterEncryption::Off,
            observer: Observer::none(),
            envelope_signing_key: false,
            boot_policy: None,
            owner_auth: None,
            pinned_srk_name: None,
        };
        let mut tpm = Tpm::open(&config).expect("open the TPM through the proxy");
        let blobs = tpm.seal(&Dek::copy_from(MARKER_DEK), 0).unwrap();
        let opened = tpm
            .unseal(&LoadableObject::from_blobs(&blobs).unwrap(), 0)
            .unwrap();
        assert_eq!(opened.expose(), MARKER_DEK);
        drop(tpm);

        assert_eq!(occurrences(&proxy.recorded(), MARKER_DEK), 2);
    }
}

/// TPM2_ReadPublic of one handle without sessions: tag 0x8001, size 14,
/// command code 0x173. sceau's health probe is exactly this command.
const READ_PUBLIC_COMMAND: [u8; 10] = [0x80, 0x01, 0, 0, 0, 0x0e, 0, 0, 0x01, 0x73];

#[tokio::test(flavor = "multi_thread")]
async fn status_probes_the_tpm_at_most_once_per_interval() {
    let daemon = tapped_daemon("bus-status");
    let mut client = daemon.sceau.client().await;
    let probes = || occurrences(&daemon.proxy.recorded(), &READ_PUBLIC_COMMAND);

    // Right after a TPM operation, Status answers from what it just learned.
    let key_id = rpc::status(&mut client).await.key_id;
    rpc::seal(&mut client, &key_id, &[1; 32]).await;
    let before = probes();
    for _ in 0..50 {
        assert_eq!(rpc::status(&mut client).await.healthz, "ok");
    }
    assert_eq!(
        probes(),
        before,
        "Status touched the TPM despite a fresh answer"
    );

    // Once that answer is stale, a burst of Status calls shares one probe.
    tokio::time::sleep(sceau_tpm::health::PROBE_INTERVAL + std::time::Duration::from_millis(500))
        .await;
    let burst: Vec<_> = (0..50)
        .map(|_| {
            let socket = daemon.socket.clone();
            tokio::spawn(async move {
                let mut client = rpc::connect(&socket).await;
                rpc::status(&mut client).await.healthz
            })
        })
        .collect();
    for call in burst {
        assert_eq!(call.await.unwrap(), "ok");
    }
    assert_eq!(
        probes(),
        before + 1,
        "a burst of Status calls probed more than once"
    );
}
