//! sceau started with sockets passed as systemd passes them, from a small
//! launcher (`LAUNCHER`, Python) that binds them, sets `LISTEN_FDS`,
//! `LISTEN_PID` and `LISTEN_FDNAMES`, and executes sceau in its own process:
//! systemd-socket-activate can pass neither a socket that is not listening
//! nor two sockets of one name with a third of another. The metrics tests
//! and the scrape-flood benchmark start sceau this way.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::process::{kill_and_reap, poll_until};
use crate::rpc;
use crate::sceau::serve_args;
use crate::swtpm::Swtpm;
use crate::tempdir::TempDir;

/// Binds the sockets named in argv[1] (`NAME=unix:PATH`, `NAME=tcp:PORT` or
/// `NAME=pair`, the last a connected socket that is not listening, joined
/// by `;`), moves them to fds 3, 4, … and executes argv[2:] with the
/// variables systemd sets for socket activation.
const LAUNCHER: &str = r#"
import os, socket, sys
held, names = [], []
for spec in sys.argv[1].split(";"):
    name, kind = spec.split("=", 1)
    if kind.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(kind[5:])
        os.chmod(kind[5:], 0o666)
        s.listen(128)
    elif kind.startswith("tcp:"):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", int(kind[4:])))
        s.listen(128)
    else:
        s, peer = socket.socketpair()
        held.append(peer)
    held.append(s)
    names.append((name, os.dup(s.fileno())))
for i, (name, fd) in enumerate(names):
    os.dup2(fd, 3 + i, inheritable=True)
os.environ["LISTEN_FDS"] = str(len(names))
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDNAMES"] = ":".join(n for n, _ in names)
os.execv(sys.argv[2], sys.argv[2:])
"#;

/// The sceau these tests start: this build's, or the one named by
/// `SCEAU_MEASURE_BIN`, which is how docs/performance.md compares the scrape
/// flood against an earlier build (only benches/scrape_flood.rs is meant to
/// run so).
fn binary_under_test() -> String {
    std::env::var("SCEAU_MEASURE_BIN").unwrap_or_else(|_| crate::sceau::bin().display().to_string())
}

/// sceau started by [`LAUNCHER`] with `sockets`, serving once Status says so.
pub struct Launched {
    sceau: Child,
    /// The KMS socket.
    pub kms: PathBuf,
    log: PathBuf,
    _tpm: Swtpm,
    _tmp: TempDir,
}

impl Launched {
    /// `sockets` after the KMS socket, which comes first.
    pub async fn start(label: &str, sockets: &[String], extra: &[&str]) -> Self {
        let tmp = TempDir::new(label);
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let kms = tmp.join("kms.sock");
        let log = tmp.join("sceau.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut specs = vec![format!("kms=unix:{}", kms.display())];
        specs.extend(sockets.iter().cloned());
        let sceau = Command::new("python3")
            .args(["-c", LAUNCHER, &specs.join(";"), &binary_under_test()])
            .args(serve_args(
                &tmp.join("unused.sock"),
                Some(&tpm.tcti()),
                extra,
            ))
            .env_remove("SCEAU_TCTI")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3");
        let launched = Launched {
            sceau,
            kms,
            log,
            _tpm: tpm,
            _tmp: tmp,
        };
        assert!(
            poll_until(Duration::from_secs(30), || launched
                .log_text()
                .contains("serving key_id=")),
            "sceau did not serve:\n{}",
            launched.log_text()
        );
        let mut client = rpc::connect(&launched.kms).await;
        assert_eq!(rpc::status(&mut client).await.healthz, "ok");
        launched
    }

    /// sceau's process id (the launcher executes it in its own process).
    pub fn pid(&self) -> u32 {
        self.sceau.id()
    }

    /// What sceau has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        kill_and_reap(&mut self.sceau);
        if std::thread::panicking() {
            eprintln!("----- sceau log -----\n{}", self.log_text());
        }
    }
}

/// A loopback TCP port nothing listens on at the moment of the call, for a
/// `metrics=tcp:PORT` socket the launcher binds.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a loopback port")
        .local_addr()
        .expect("its address")
        .port()
}
