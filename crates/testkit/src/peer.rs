//! The TPM peer plugin, jc-lab/k8s-tpm-kms-plugin (a KMS v2 plugin in Go),
//! as a child process on a swtpm of its own: what the side-by-side benchmark
//! (`benches/peer.rs`, run by `scripts/bench-peer.sh`) compares sceau with.
//! Test-only, like the rest of the kit; the peer is never built by CI.
//!
//! What its source (v0.0.5) says, and why this module looks as it does:
//!
//! - It opens its TPM by path (`--tpm-device`, default `/dev/tpmrm0`) with
//!   go-tpm's `transport.OpenTPM`, which takes a character device *or a unix
//!   socket*; on a socket it connects anew for every command and closes after
//!   the response (go-tpm's `tpmutil.EmulatorReadWriteCloser`). swtpm serves
//!   its command channel on such a socket (`--server type=unixio`), so the
//!   peer runs unchanged against swtpm: no shim, no CUSE device, no TCP
//!   simulator. [`UnixSwtpm`] is that swtpm. It sends no TPM2_Startup, hence
//!   swtpm's `startup-clear` flag, as for the kit's TCP [`crate::Swtpm`].
//! - `--provision` creates a 32-byte "domain key", seals it under an ECC SRK
//!   it re-creates with TPM2_CreatePrimary (no persistent handle), and writes
//!   the sealed blob to `<data-dir>/tpm-object.domain-key.pb`. Serving
//!   without that file fails, so [`PeerPlugin::provision`] runs it once.
//! - At start it unseals the domain key once (CreatePrimary, a salted
//!   session, Load, Unseal, FlushContext) and keeps it in memguard enclaves.
//!   From then on Encrypt and Decrypt are AES key wrap and AES-GCM in
//!   memory: no TPM command per call.
//! - Status answers `key_id` "default" (a constant, never rotated), version
//!   "v2beta1", and runs one in-memory Encrypt of "ping" to decide healthz.
//! - It also listens for HTTP healthz and metrics, by default on 0.0.0.0:8081
//!   and :8082; [`PeerPlugin::serve_command`] puts both on 127.0.0.1 port 0
//!   (any free port) so that runs never collide and nothing leaves loopback.

use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::process::{create_file, kill_and_reap, poll_until, read_lossy, run_with_timeout};

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const PROVISION_TIMEOUT: Duration = Duration::from_secs(60);

/// A fresh swtpm whose command channel is a unix socket (`<dir>/tpm.sock`),
/// for TPM clients that open a path rather than a TCTI.
pub struct UnixSwtpm {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl UnixSwtpm {
    /// Starts a freshly manufactured TPM whose state lives in `dir` (which
    /// must not be shared with another swtpm), and waits until it accepts
    /// connections.
    pub fn start(dir: &Path) -> UnixSwtpm {
        let socket = dir.join("tpm.sock");
        let log = dir.join("swtpm.log");
        let out = create_file(&log);
        let err = out.try_clone().expect("clone swtpm log handle");
        let child = Command::new("swtpm")
            .args(["socket", "--tpm2", "--tpmstate"])
            .arg(format!("dir={}", dir.display()))
            .arg("--server")
            .arg(format!("type=unixio,path={}", socket.display()))
            .arg("--ctrl")
            .arg(format!(
                "type=unixio,path={}",
                dir.join("ctrl.sock").display()
            ))
            .args(["--flags", "not-need-init,startup-clear"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn swtpm (is the swtpm package installed?)");
        let mut tpm = UnixSwtpm { child, socket, log };
        // swtpm serves one connection at a time and takes the next after a
        // close, so probing with an empty connection costs it nothing.
        let accepting = poll_until(READY_TIMEOUT, || {
            std::fs::metadata(&tpm.socket).is_ok_and(|m| m.file_type().is_socket())
                && UnixStream::connect(&tpm.socket).is_ok()
        });
        if !accepting {
            kill_and_reap(&mut tpm.child);
            panic!(
                "swtpm did not accept on {} within {READY_TIMEOUT:?}; log:\n{}",
                tpm.socket.display(),
                read_lossy(&tpm.log)
            );
        }
        tpm
    }

    /// The path a client opens as its TPM device.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for UnixSwtpm {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

/// The peer's binary, its TPM and its data directory, provisioned.
pub struct PeerPlugin {
    binary: PathBuf,
    tpm_device: PathBuf,
    data_dir: PathBuf,
}

impl PeerPlugin {
    /// Runs `binary --provision` against `tpm`, which seals a new domain key
    /// into `data_dir`; panics with the peer's output if that fails.
    pub fn provision(binary: &Path, tpm: &UnixSwtpm, data_dir: &Path) -> PeerPlugin {
        let peer = PeerPlugin {
            binary: binary.to_path_buf(),
            tpm_device: tpm.socket().to_path_buf(),
            data_dir: data_dir.to_path_buf(),
        };
        let mut provision = Command::new(&peer.binary);
        // Every mode checks that --unix-socket's directory exists before
        // anything else, so provisioning names one it never creates.
        provision
            .arg("--provision")
            .arg("--unix-socket")
            .arg(data_dir.join("unused.sock"))
            .args(peer.tpm_args());
        let finished = run_with_timeout(&mut provision, data_dir, PROVISION_TIMEOUT);
        assert!(
            finished.status.success() && data_dir.join("tpm-object.domain-key.pb").is_file(),
            "{} --provision failed ({}):\n{}",
            peer.binary.display(),
            finished.status,
            finished.all_output()
        );
        peer
    }

    /// The command that serves KMS v2 on `socket` (its directory must exist),
    /// with healthz and metrics on loopback ports the kernel picks. Output
    /// (glog, to stderr) is the caller's to redirect.
    pub fn serve_command(&self, socket: &Path) -> Command {
        let mut serve = Command::new(&self.binary);
        serve
            .arg("--unix-socket")
            .arg(socket)
            .args(["--kms", "v2"])
            .args(self.tpm_args())
            .args(["--healthz-addr", "127.0.0.1", "--healthz-port", "0"])
            .args(["--metrics-addr", "127.0.0.1", "--metrics-port", "0"]);
        serve
    }

    fn tpm_args(&self) -> [&std::ffi::OsStr; 4] {
        [
            "--tpm-device".as_ref(),
            self.tpm_device.as_os_str(),
            "--data-dir".as_ref(),
            self.data_dir.as_os_str(),
        ]
    }
}
