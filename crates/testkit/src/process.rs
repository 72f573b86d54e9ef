//! Child-process helpers shared by the swtpm, sceau and tpm2-tools wrappers,
//! and the tests' one way to run a command to completion
//! ([`run_with_timeout`]). Everything here is bounded in time: a test may
//! fail, but it must never hang.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(20);

/// What a finished short-lived command left behind.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// stdout and stderr together, for "does the output mention X" checks.
    pub fn all_output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` to completion with its output captured in files under `dir`
/// (files, unlike pipes, cannot fill up and block the child), killing it if it
/// is still running after `timeout`.
pub fn run_with_timeout(cmd: &mut Command, dir: &Path, timeout: Duration) -> Finished {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let out_path = dir.join(format!("cmd-{n}.stdout"));
    let err_path = dir.join(format!("cmd-{n}.stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(create_file(&out_path))
        .stderr(create_file(&err_path))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
    let Some(status) = wait_timeout(&mut child, timeout) else {
        kill_and_reap(&mut child);
        panic!("{cmd:?} did not finish within {timeout:?}");
    };
    Finished {
        status,
        stdout: read_lossy(&out_path),
        stderr: read_lossy(&err_path),
    }
}

/// Waits for `child` to exit, giving up (and leaving it running) after `timeout`.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait on a child we own") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// SIGKILL and reap, ignoring a child that is already gone.
pub fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `signal` to a child we spawned (and have not reaped yet, so the pid
/// cannot have been reused).
///
/// Through kill(1) rather than kill(2): std sends only SIGKILL
/// ([`Child::kill`]), and calling libc would make the kit `unsafe`. A fork
/// and exec per signal costs a millisecond, which no test here measures.
pub fn send_signal(child: &Child, signal: libc::c_int) {
    let pid = child.id().to_string();
    let finished = Command::new("kill")
        .args(["-s", &signal.to_string(), &pid])
        .stdin(Stdio::null())
        .output()
        .expect("run kill(1) (procps)");
    assert!(
        finished.status.success(),
        "kill -s {signal} {pid}: {}",
        String::from_utf8_lossy(&finished.stderr).trim()
    );
}

pub fn create_file(path: &Path) -> File {
    File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
}

pub fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Polls `condition` until it holds or `timeout` passes; returns whether it held.
pub fn poll_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}
