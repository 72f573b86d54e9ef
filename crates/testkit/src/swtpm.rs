//! One software TPM (swtpm) per test, on its own loopback TCP port pair. The
//! scripts start theirs through `sceau-rig swtpm`, which uses this too.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::process::{kill_and_reap, read_lossy, send_signal};

/// Test ports live below Linux's default ephemeral range (32768+), so the
/// outgoing connections of sceau and tpm2-tools can never be handed one of them.
const PORT_BASE: u16 = 20_000;
const PORT_PAIRS: u32 = 6_000;
const START_ATTEMPTS: usize = 25;
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Swtpm {
    child: Option<Child>,
    port: u16,
    state_dir: PathBuf,
    log: PathBuf,
}

impl Swtpm {
    /// Starts a freshly manufactured TPM whose state lives in `dir` (which must
    /// not be shared with another swtpm).
    pub fn start(dir: &Path) -> Swtpm {
        Self::start_preferring(dir, None)
    }

    /// As [`Swtpm::start`], trying the pair `port`, `port` + 1 first when it
    /// is given and free (the quick start asks for swtpm's usual 2321).
    pub fn start_preferring(dir: &Path, port: Option<u16>) -> Swtpm {
        let mut tpm = Swtpm {
            child: None,
            port: 0,
            state_dir: dir.to_path_buf(),
            log: dir.join("swtpm.log"),
        };
        tpm.launch(port);
        tpm
    }

    /// The TCTI string for both sceau and tpm2-tools. The swtpm TCTI finds the
    /// control channel at port + 1 by itself.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    /// The command port; the control channel is on port + 1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pulls the plug: SIGKILL, as if the TPM vanished.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// SIGSTOP: the TPM keeps its connections open but stops answering.
    pub fn freeze(&self) {
        send_signal(self.child.as_ref().expect("swtpm running"), libc::SIGSTOP);
    }

    /// SIGCONT: undoes `freeze`.
    pub fn thaw(&self) {
        send_signal(self.child.as_ref().expect("swtpm running"), libc::SIGCONT);
    }

    /// Brings the same TPM (same seeds, same persistent objects) back up after
    /// `kill`, on the same ports when they are still free.
    pub fn restart(&mut self) {
        self.kill();
        self.launch(Some(self.port));
    }

    pub fn log_text(&self) -> String {
        read_lossy(&self.log)
    }

    /// Spawns swtpm on `preferred` or else on fresh candidate pairs, retrying
    /// while the pair turns out to be taken (another process may grab a port
    /// between our probe and swtpm's bind).
    fn launch(&mut self, preferred: Option<u16>) {
        let candidates = preferred
            .into_iter()
            .chain(std::iter::repeat_with(next_candidate_port));
        for port in candidates.take(START_ATTEMPTS) {
            if !pair_is_free(port) {
                continue;
            }
            let mut child = self.spawn_on(port);
            if wait_listening(&mut child, port) {
                self.child = Some(child);
                self.port = port;
                return;
            }
            kill_and_reap(&mut child);
        }
        panic!(
            "could not start swtpm on any port pair; log:\n{}",
            self.log_text()
        );
    }

    fn spawn_on(&self, port: u16) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open swtpm log");
        let log_err = log.try_clone().expect("clone swtpm log handle");
        Command::new("swtpm")
            .arg("socket")
            .arg("--tpm2")
            .arg("--tpmstate")
            .arg(format!("dir={}", self.state_dir.display()))
            .arg("--server")
            .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
            .arg("--ctrl")
            .arg(format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1))
            .arg("--flags")
            .arg("not-need-init,startup-clear")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .expect("spawn swtpm (is the swtpm package installed?)")
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        self.kill();
        let log = self.log_text();
        if std::thread::panicking() && !log.trim().is_empty() {
            eprintln!("----- swtpm log ({}) -----\n{log}", self.log.display());
        }
    }
}

/// Hands out distinct even ports to the tests of this process, starting at a
/// pid-dependent offset so concurrent test processes rarely collide either.
fn next_candidate_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pair = (std::process::id().wrapping_mul(7919).wrapping_add(n)) % PORT_PAIRS;
    PORT_BASE + u16::try_from(pair * 2).expect("port offset fits u16")
}

fn pair_is_free(port: u16) -> bool {
    let bind = |p| TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p));
    // A probe only: both listeners are closed again before swtpm binds.
    bind(port).is_ok() && bind(port + 1).is_ok()
}

/// True once both swtpm ports accept connections; false if swtpm exited first
/// (typically "Address already in use") or never came up.
fn wait_listening(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + READY_TIMEOUT;
    let accepts = |p| TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)).is_ok();
    while Instant::now() < deadline {
        if child.try_wait().expect("try_wait on swtpm").is_some() {
            return false;
        }
        if accepts(port) && accepts(port + 1) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A "TPM" that accepts connections on a port pair and never answers, to make
/// sceau wait on its TPM for as long as a test needs.
pub struct SilentTpm {
    port: u16,
    _listeners: [TcpListener; 2],
}

impl SilentTpm {
    pub fn bind() -> SilentTpm {
        let bind = |p| TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p));
        for port in std::iter::repeat_with(next_candidate_port).take(START_ATTEMPTS) {
            // Connections queue in the kernel backlog; nobody ever reads them.
            if let (Ok(server), Ok(ctrl)) = (bind(port), bind(port + 1)) {
                return SilentTpm {
                    port,
                    _listeners: [server, ctrl],
                };
            }
        }
        panic!("no free port pair for a silent TPM");
    }

    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }
}
