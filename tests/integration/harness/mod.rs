//! Test harness: temporary directories, a private swtpm per test, the sceau
//! process, tpm2-tools, and gRPC helpers.

pub mod bus_proxy;
pub mod envelope;
pub mod memscan;
pub mod no_landlock;
pub mod notify;
pub mod process;
pub mod rpc;
pub mod sceau;
pub mod swtpm;
pub mod tempdir;
pub mod tools;

use std::io::Read;

pub use rpc::Client;
pub use sceau::Sceau;
pub use swtpm::Swtpm;
pub use tempdir::TempDir;
pub use tools::Tpm2Tools;

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
