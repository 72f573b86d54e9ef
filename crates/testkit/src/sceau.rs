//! The sceau daemon under test, run as a real child process, and where the
//! binaries under test are.

use std::ffi::OsString;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::process::{
    create_file, kill_and_reap, poll_until, read_lossy, send_signal, wait_timeout,
};
use crate::rpc::{self, Client};
use crate::swtpm::Swtpm;
use crate::tempdir::TempDir;

/// The `sceau` binary under test. Cargo names it (`CARGO_BIN_EXE_sceau`) for
/// the root package's own tests only, so the kit finds it where Cargo puts
/// it: in the profile directory (`target/debug`, `target/release`) above the
/// `deps` directory that holds the running test or bench executable.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| beside_test_executable("sceau", "cargo build --bin sceau"))
}

/// `sceau-recover`, the offline tools' binary, found beside `sceau`. Cargo
/// builds a package's binaries for `cargo test` only when that package has
/// integration tests; `cargo build` at the top always does.
pub fn recover_bin() -> PathBuf {
    beside_test_executable("sceau-recover", "cargo build -p sceau-recover")
}

/// The kit's own `sceau-rig` (src/bin/sceau-rig.rs), found beside `sceau`;
/// the kit's integration test (tests/rig.rs) makes `cargo test --workspace`
/// build it.
pub fn rig_bin() -> PathBuf {
    beside_test_executable("sceau-rig", "cargo build -p sceau-testkit")
}

/// `name` in Cargo's profile directory of the running executable; panics,
/// saying how to build it, if it is not there.
fn beside_test_executable(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let mut dir = exe.parent().expect("the test executable's directory");
    if dir.file_name().is_some_and(|d| d == "deps") {
        dir = dir.parent().expect("the profile directory above deps");
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `{build}` (or `cargo build` at the top)",
        path.display()
    );
    path
}

/// Generous: the first start in a debug build also creates the primary key.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a SIGTERM'd or failing sceau gets to exit on its own.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// The log line sceau prints once it serves: `serving key_id=` and the
/// key_id ([`rpc::is_well_formed_key_id`]).
const READY_MARKER: &str = "serving key_id=";

pub struct Sceau {
    child: Child,
    socket: PathBuf,
    stderr_path: PathBuf,
    exit: Option<ExitStatus>,
}

impl Sceau {
    /// `sceau serve --socket <tmp>/sceau.sock --tcti <tpm> <extra...>`, waiting
    /// until it serves; panics with its stderr if it does not.
    pub fn start(tmp: &TempDir, tpm: &Swtpm, extra: &[&str]) -> Sceau {
        Self::start_on_socket(tmp, &tmp.join("sceau.sock"), &tpm.tcti(), extra)
    }

    pub fn start_on_socket(tmp: &TempDir, socket: &Path, tcti: &str, extra: &[&str]) -> Sceau {
        let mut sceau = Self::spawn(tmp, socket, serve_args(socket, Some(tcti), extra), &[]);
        if let Err(why) = sceau.wait_serving() {
            panic!(
                "sceau did not start: {why}\n----- sceau stderr -----\n{}",
                sceau.stderr_text()
            );
        }
        sceau
    }

    /// Spawns sceau with exactly `args` (and extra `env`) without waiting for it.
    /// `socket` is only where the helpers look for it. stdout and stderr go to a
    /// file so that a chatty daemon can never block on a full pipe.
    pub fn spawn(tmp: &TempDir, socket: &Path, args: Vec<OsString>, env: &[(&str, &str)]) -> Sceau {
        Self::spawn_with(tmp, socket, args, env, |_| {})
    }

    /// As `spawn`, with `prepare` applied to the command before its output
    /// is redirected (e.g. `no_landlock::deny_landlock`, which rebuilds it).
    pub fn spawn_with(
        tmp: &TempDir,
        socket: &Path,
        args: Vec<OsString>,
        env: &[(&str, &str)],
        prepare: impl FnOnce(&mut Command),
    ) -> Sceau {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let args = with_own_state_dir(args, socket);
        let stderr_path = tmp.join(&format!(
            "sceau-{}.stderr",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let log = create_file(&stderr_path);
        let mut command = Command::new(bin());
        command
            .args(args)
            // A developer's own SCEAU_TCTI must not leak into the tests; a test
            // that wants one passes it in `env`, which is applied afterwards.
            .env_remove("SCEAU_TCTI")
            .envs(env.iter().copied());
        prepare(&mut command);
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone sceau log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin().display()));
        Sceau {
            child,
            socket: socket.to_path_buf(),
            stderr_path,
            exit: None,
        }
    }

    /// Waits until sceau is ready: it has logged its `serving key_id=` line
    /// and its socket accepts connections. The socket alone is not enough: it
    /// may be bound (and accept into the kernel backlog) before the TPM is open
    /// and the signal handlers are installed. Fails early, with the reason, if
    /// the process exits first.
    pub fn wait_serving(&mut self) -> Result<(), String> {
        let mut exited = None;
        let ready = poll_until(START_TIMEOUT, || {
            exited = self.try_exit();
            exited.is_none()
                && self.logged_key_id().is_some()
                && UnixStream::connect(&self.socket).is_ok()
        });
        match (ready, exited) {
            (true, _) => Ok(()),
            (false, Some(status)) => Err(format!("sceau exited early with {status}")),
            (false, None) => Err(format!(
                "no `{READY_MARKER}` log line with a connectable {} after {START_TIMEOUT:?}",
                self.socket.display()
            )),
        }
    }

    /// The key_id from the readiness log line, if it has been written.
    pub fn logged_key_id(&self) -> Option<String> {
        parse_logged_key_id(&self.stderr_text())
    }

    pub async fn client(&self) -> Client {
        rpc::connect(&self.socket).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn stderr_text(&self) -> String {
        read_lossy(&self.stderr_path)
    }

    pub fn signal(&self, signal: libc::c_int) {
        assert!(
            self.exit.is_none(),
            "signalling a sceau that already exited"
        );
        send_signal(&self.child, signal);
    }

    /// SIGTERM, then the exit status; panics if sceau does not exit in time.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(EXIT_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "sceau ignored SIGTERM for {EXIT_TIMEOUT:?}\n{}",
                self.stderr_text()
            )
        })
    }

    /// The exit status, once the process has exited within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = wait_timeout(&mut self.child, timeout);
        }
        self.exit
    }

    /// Non-blocking: the exit status if the process has already exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait on sceau");
        }
        self.exit
    }
}

impl Drop for Sceau {
    fn drop(&mut self) {
        if self.exit.is_none() {
            kill_and_reap(&mut self.child);
        }
        if std::thread::panicking() {
            eprintln!(
                "----- sceau stderr ({}) -----\n{}",
                self.stderr_path.display(),
                self.stderr_text()
            );
        }
    }
}

/// `serve --socket S [--tcti T] extra...`
pub fn serve_args(socket: &Path, tcti: Option<&str>, extra: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["serve".into(), "--socket".into(), socket.into()];
    if let Some(tcti) = tcti {
        args.extend(["--tcti".into(), tcti.into()]);
    }
    args.extend(extra.iter().map(OsString::from));
    args
}

/// `serve` without `--state-dir` gets one beside its socket
/// (`<socket>.state`): a test's restarts of one node share its ledger, and
/// no test touches the machine's /var/lib/sceau or another node's ledger.
fn with_own_state_dir(mut args: Vec<OsString>, socket: &Path) -> Vec<OsString> {
    let serve = args.first().is_some_and(|a| a == "serve");
    let given = args
        .iter()
        .any(|a| a.to_string_lossy().starts_with("--state-dir"));
    if serve && !given {
        args.extend(["--state-dir".into(), socket.with_extension("state").into()]);
    }
    args
}

fn parse_logged_key_id(log: &str) -> Option<String> {
    log.lines().find_map(|line| {
        let rest = &line[line.find(READY_MARKER)? + READY_MARKER.len()..];
        let candidate = rest.split_whitespace().next()?;
        rpc::is_well_formed_key_id(candidate).then(|| candidate.to_string())
    })
}

/// GLIBC_TUNABLES as `systemd/sceau.service` sets it (`Environment=`), so
/// that a test or a benchmark starts sceau as the unit does: with the
/// tunables in force from the first exec, and no re-exec.
/// `binary serve` on `socket` for the TPM at `tcti`, as a benchmark runs
/// it: its own state directory beside the socket, warnings only, and the
/// unit's malloc tunables (so no re-exec), ready to spawn.
pub fn bench_serve_command(binary: &Path, tcti: &str, socket: &Path) -> std::process::Command {
    let mut serve = std::process::Command::new(binary);
    serve
        .args(["serve", "--tcti", tcti, "--socket"])
        .arg(socket)
        .arg("--state-dir")
        .arg(socket.with_extension("state"))
        .env("SCEAU_LOG", "warn")
        .env("GLIBC_TUNABLES", unit_glibc_tunables());
    serve
}

pub fn unit_glibc_tunables() -> &'static str {
    include_str!("../../../systemd/sceau.service")
        .lines()
        .find_map(|line| line.strip_prefix("Environment=GLIBC_TUNABLES="))
        .expect("systemd/sceau.service sets GLIBC_TUNABLES")
}
