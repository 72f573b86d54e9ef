//! sceau's test kit: everything the integration tests (`tests/integration`)
//! and the benchmarks (`benches/`) need to run the real daemon
//! against a software TPM, and `sceau-rig`, the binary through which the
//! scripts start their swtpm the same way.
//!
//! - [`tempdir`]: private, self-removing directories (`SCEAU_IT_KEEP` keeps them);
//! - [`swtpm`]: one swtpm per test on its own loopback port pair, which a test
//!   can kill, freeze or restart; a TPM that never answers;
//! - [`launch`]: the daemon started with sockets passed as systemd passes
//!   them, bound by a launcher (any names, a socket that is not listening);
//! - [`sceau`]: the daemon as a child process, its log and readiness line, and
//!   where the binaries under test are;
//! - [`process`]: bounded waits, signals, and [`process::run_with_timeout`],
//!   the one helper that runs a command to completion;
//! - [`tools`]: tpm2-tools as an independent second implementation;
//! - [`ek_ca`]: a local TPM manufacturer: a CA and swtpm states holding RSA
//!   and ECC EK certificates it issued (the SPIRE attestor's tests);
//! - [`rpc`]: the gRPC client (`sceau_kms_api`) and the checks every test
//!   applies to sceau's answers;
//! - [`envelope`]: the tests' own reading of the version-1 envelope;
//! - [`bus_proxy`]: a TCP proxy that records the TPM bus;
//! - [`tpm_proxy`]: a TPM latency model and fault injector: a proxy that
//!   delays each command as a profile says (`profiles/`), counts commands,
//!   follows held handles and answers with injected return codes;
//! - [`memscan`]: a scan of a live process's memory for secrets;
//! - [`footprint`]: a live process's RSS (smaps_rollup), open fds and threads;
//! - [`notify`]: a stand-in for systemd's notification socket;
//! - [`no_landlock`]: a command run as on a kernel without Landlock;
//! - [`peer`]: the TPM peer plugin (jc-lab/k8s-tpm-kms-plugin) on a swtpm
//!   of its own, for the side-by-side benchmark (`benches/peer.rs`).
//!
//! The kit is a dev-dependency of `sceau` only; it has no unsafe code
//! (`[workspace.lints]` forbids it).

pub mod bus_proxy;
pub mod ek_ca;
pub mod envelope;
pub mod footprint;
pub mod launch;
pub mod memscan;
pub mod no_landlock;
pub mod notify;
pub mod peer;
pub mod process;
pub mod rpc;
pub mod sceau;
pub mod swtpm;
pub mod tempdir;
pub mod tools;
pub mod tpm_proxy;

use std::io::Read;

pub use ek_ca::EkCa;
pub use rpc::Client;
pub use sceau::Sceau;
pub use swtpm::Swtpm;
pub use tempdir::TempDir;
pub use tools::Tpm2Tools;
pub use tpm_proxy::TpmProxy;

/// `n` bytes from the kernel CSPRNG, so DEKs look like real ones.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes
}

/// The usual fixture: a private directory, a fresh swtpm in it, and a sceau
/// serving that TPM on `<dir>/sceau.sock`.
pub struct Fixture {
    // Field order is drop order: stop sceau before its TPM, and both before
    // their directory is removed.
    pub sceau: Sceau,
    pub tpm: Swtpm,
    pub tmp: TempDir,
}

impl Fixture {
    pub fn start(label: &str, extra_args: &[&str]) -> Fixture {
        let tmp = TempDir::new(label);
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let sceau = Sceau::start(&tmp, &tpm, extra_args);
        Fixture { sceau, tpm, tmp }
    }

    /// A connected client and the key_id sceau reports in Status.
    pub async fn client(&self) -> (Client, String) {
        let mut client = self.sceau.client().await;
        let key_id = rpc::status(&mut client).await.key_id;
        (client, key_id)
    }
}

/// The fixture on a modelled TPM: a private directory, a fresh swtpm, the
/// TPM proxy in front of it (`tpm_proxy`: latency from `profile`, counts,
/// injected faults) and a sceau serving through the proxy on
/// `<dir>/sceau.sock`. The fault matrix, the soak and the benchmark share it.
pub struct ProxiedFixture {
    // Field order is drop order: sceau, then the proxy and the TPM behind
    // it, then their directory.
    pub sceau: Sceau,
    pub proxy: TpmProxy,
    pub tpm: Swtpm,
    pub tmp: TempDir,
    starts: usize,
}

impl ProxiedFixture {
    pub fn start(label: &str, profile: tpm_proxy::Profile, extra_args: &[&str]) -> Self {
        let tmp = TempDir::new(label);
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let proxy = TpmProxy::start(tpm.port(), profile);
        let sceau =
            Sceau::start_on_socket(&tmp, &tmp.join("sceau.sock"), &proxy.tcti(), extra_args);
        ProxiedFixture {
            sceau,
            proxy,
            tpm,
            tmp,
            starts: 1,
        }
    }

    /// A connected client and the key_id sceau reports in Status.
    pub async fn client(&self) -> (Client, String) {
        let mut client = self.sceau.client().await;
        let key_id = rpc::status(&mut client).await.key_id;
        (client, key_id)
    }

    /// A new sceau on the same TPM and proxy, once the last one has exited,
    /// on a socket of its own (`<dir>/sceau-N.sock`), as systemd would
    /// start the next process.
    pub fn restart_sceau(&mut self, extra_args: &[&str]) {
        self.starts += 1;
        let socket = self.tmp.join(&format!("sceau-{}.sock", self.starts));
        // The first start's state directory: the same node, restarted.
        let state = self.tmp.join("sceau.sock").with_extension("state");
        let mut args = extra_args.to_vec();
        let state = state.to_string_lossy();
        if !args.iter().any(|a| a.starts_with("--state-dir")) {
            args.extend(["--state-dir", &state]);
        }
        self.sceau = Sceau::start_on_socket(&self.tmp, &socket, &self.proxy.tcti(), &args);
    }
}
