//! The hardened daemon, checked from outside as a reviewer would: process
//! state in /proc, the selftest, caller uids, socket activation and sd_notify.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::no_landlock::deny_landlock;
use crate::harness::notify::NotifyReceiver;
use crate::harness::process::{
    Finished, kill_and_reap, run_with_timeout, send_signal, wait_timeout,
};
use crate::harness::sceau::{BIN, serve_args};
use crate::harness::{Fixture, Sceau, Swtpm, TempDir, rpc};

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|v| v.strip_prefix(':')))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// Run as root, sceau starts with every capability; serving, it must hold
/// none, with no_new_privs set, a seccomp filter, and no core dumps.
#[tokio::test(flavor = "multi_thread")]
async fn the_serving_daemon_holds_no_privileges() {
    // The baseline the daemon starts from: this test process (root) does
    // hold capabilities, so the zeros below are sceau's own doing.
    assert_ne!(
        status_field(std::process::id(), "CapEff"),
        "0000000000000000"
    );

    let fx = Fixture::start("proc-status", &[]);
    let pid = fx.sceau.pid();
    for set in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"] {
        assert_eq!(status_field(pid, set), "0000000000000000", "{set}");
    }
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    // Landlock leaves no trace in /proc; the daemon logs what the kernel
    // enforced, in words (ABI 7 here: "partially", as a warning).
    let log = fx.sceau.stderr_text();
    assert!(
        log.contains("WARN  landlock: partially enforced (kernel Landlock ABI")
            || log.contains("INFO  landlock: fully enforced (kernel Landlock ABI"),
        "{log}"
    );
    assert_eq!(status_field(pid, "Seccomp"), "2");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    assert_eq!(
        core.split_whitespace().collect::<Vec<_>>()[4..6],
        ["0", "0"],
        "{core}"
    );

    // The same check tells an unfiltered daemon apart.
    let unfiltered = Fixture::start("proc-status-off", &["--seccomp", "off"]);
    assert_eq!(status_field(unfiltered.sceau.pid(), "Seccomp"), "0");
}

/// The probes `sceau selftest --sandbox` runs, one PASS line each.
const PROBES: [&str; 9] = [
    "open /etc/passwd for reading",
    "create a file outside the sandbox (in a temporary directory)",
    "connect TCP to 127.0.0.1:9",
    "connect to a listening unix socket (as to D-Bus)",
    "make a system call outside the allowlist (unshare)",
    "create a user namespace (clone with CLONE_NEWUSER)",
    "reach clone3, whose flags seccomp cannot check",
    "make the process dumpable again",
    "hold or gain a capability",
];

fn selftest(tmp: &TempDir, tpm: &Swtpm, extra: &[&str]) -> Finished {
    let mut cmd = Command::new(BIN);
    cmd.args(["selftest", "--sandbox", "--tcti", &tpm.tcti()])
        .args(extra)
        .env("TMPDIR", tmp.path());
    run_with_timeout(&mut cmd, tmp.path(), Duration::from_secs(30))
}

/// `sceau selftest --sandbox` tries nine forbidden actions in the daemon's
/// default sandbox, and every one is refused.
///
/// Without the fixes an outside review prompted (with the old allowlist:
/// `clone` with any flags, `clone3` and `socket(AF_UNIX)` allowed, restored in
/// src/sandbox/seccomp.rs for one run), this fails with three FAIL lines:
/// "FAIL connect to a listening unix socket (as to D-Bus): the action
/// succeeded", the same for "create a user namespace" and "reach clone3".
#[test]
fn selftest_reports_every_forbidden_action_refused() {
    let tmp = TempDir::new("selftest");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let finished = selftest(&tmp, &tpm, &[]);
    for probe in PROBES {
        assert!(
            finished
                .stdout
                .lines()
                .any(|l| l.starts_with(&format!("PASS {probe}: "))),
            "no PASS for {probe}:\n{}",
            finished.all_output()
        );
    }
    assert!(
        finished.status.success() && !finished.stdout.contains("FAIL"),
        "selftest: {}\n{}",
        finished.status,
        finished.all_output()
    );
    // The probes' private directory is gone again.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("sceau-selftest-")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The selftest runs the sandbox of the flags it is given, so a weaker
/// sandbox shows as FAIL lines: this is also the control showing that the
/// probes can see an action go through.
///
/// Without `--landlock`/`--seccomp` in selftest (it always applied the
/// strictest modes), this fails with "unknown option \"--landlock\"".
#[test]
fn selftest_takes_the_daemons_sandbox_flags() {
    let tmp = TempDir::new("selftest-weak");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let line = |finished: &Finished, probe: &str| {
        finished
            .stdout
            .lines()
            .find(|l| l.get(5..).is_some_and(|rest| rest.starts_with(probe)))
            .unwrap_or_else(|| panic!("no line for {probe}:\n{}", finished.all_output()))
            .to_string()
    };

    // No sandbox but the capability drop: every other probe gets through.
    let none = selftest(&tmp, &tpm, &["--landlock=off", "--seccomp=off"]);
    assert!(!none.status.success(), "{}", none.all_output());
    for probe in PROBES.iter().filter(|p| !p.starts_with("hold or gain")) {
        assert!(
            line(&none, probe).starts_with("FAIL "),
            "{probe}:\n{}",
            none.all_output()
        );
    }

    // seccomp only logs: what its allowlist alone refuses gets through,
    // while its errno answers (clone3; file calls without Landlock) stand.
    let logged = selftest(&tmp, &tpm, &["--landlock=off", "--seccomp=log"]);
    assert!(!logged.status.success(), "{}", logged.all_output());
    for probe in [
        "connect to a listening unix socket (as to D-Bus)",
        "create a user namespace (clone with CLONE_NEWUSER)",
        "make a system call outside the allowlist (unshare)",
    ] {
        assert_eq!(
            line(&logged, probe),
            format!("FAIL {probe}: the action succeeded"),
            "{}",
            logged.all_output()
        );
    }
    for probe in [
        "open /etc/passwd for reading",
        "create a file outside the sandbox (in a temporary directory)",
        "reach clone3, whose flags seccomp cannot check",
    ] {
        assert_eq!(
            line(&logged, probe),
            format!("PASS {probe}: refused"),
            "{}",
            logged.all_output()
        );
    }
}

/// On a kernel without Landlock (simulated: the Landlock system calls get
/// ENOSYS from a seccomp filter the test installs before exec), sceau
/// refuses to start by default, with one error line naming the way out;
/// with `--landlock=best-effort` it starts and says, as a warning, that
/// Landlock is not enforced.
///
/// Without the fix (best-effort was the default, NotEnforced logged at
/// INFO), this fails with "sceau served without Landlock by default".
#[test]
fn landlock_missing_is_refused_by_default_and_warned_with_best_effort() {
    let tmp = TempDir::new("no-landlock");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let socket = tmp.join("sceau.sock");

    let mut refused = Sceau::spawn_with(
        &tmp,
        &socket,
        serve_args(&socket, Some(&tpm.tcti()), &[]),
        &[],
        deny_landlock,
    );
    let exit = refused.wait_exit(Duration::from_secs(30));
    let log = refused.stderr_text();
    assert!(
        exit.is_some_and(|s| !s.success()),
        "sceau served without Landlock by default: {exit:?}\n{log}"
    );
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(
        errors[0].contains("landlock: not enforced (this kernel has no Landlock)")
            && errors[0].contains("pass --landlock=best-effort"),
        "{log}"
    );
    assert!(!log.contains("serving key_id="), "{log}");

    let mut allowed = Sceau::spawn_with(
        &tmp,
        &socket,
        serve_args(&socket, Some(&tpm.tcti()), &["--landlock=best-effort"]),
        &[],
        deny_landlock,
    );
    allowed
        .wait_serving()
        .unwrap_or_else(|why| panic!("{why}\n{}", allowed.stderr_text()));
    let log = allowed.stderr_text();
    assert!(
        log.contains("WARN  landlock: not enforced (this kernel has no Landlock)"),
        "{log}"
    );
}

/// Only root (and uids given with --allow-uid) may call, even when the
/// socket's mode lets anyone connect.
#[test]
fn a_non_root_caller_is_refused_unless_allowed() {
    let check_as_nobody = |fx: &Fixture| {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "check",
            "--socket",
        ])
        .arg(fx.sceau.socket());
        run_with_timeout(&mut cmd, fx.tmp.path(), Duration::from_secs(30))
    };
    let open_up = |fx: &Fixture| {
        std::fs::set_permissions(fx.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    };

    let refused = Fixture::start("peer-refused", &["--socket-mode", "0666"]);
    open_up(&refused);
    let finished = check_as_nobody(&refused);
    // The connection is closed at accept, before any call (see
    // server_limits::a_refused_uid_is_closed_at_accept).
    assert!(!finished.status.success(), "{}", finished.all_output());
    assert!(
        refused
            .sceau
            .stderr_text()
            .contains("refused a connection from uid 65534")
    );

    // Control: the same caller, allowed by uid, gets through.
    let allowed = Fixture::start(
        "peer-allowed",
        &["--socket-mode", "0666", "--allow-uid", "65534"],
    );
    open_up(&allowed);
    let finished = check_as_nobody(&allowed);
    assert!(finished.status.success(), "{}", finished.all_output());
}

/// Under `systemd-socket-activate` (systemd's own fd-passing code): the
/// first client's connection starts sceau and is served; READY=1 arrives
/// with the key_id, so only after the SRK exists; no socket file appears
/// besides the passed one, and sceau leaves that one alone when it stops.
#[tokio::test(flavor = "multi_thread")]
async fn socket_activation_and_readiness() {
    let tmp = TempDir::new("activation");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let passed_socket = tmp.join("kms.sock");
    let unused_socket = tmp.join("not-created.sock");
    let mut notify = NotifyReceiver::bind(&tmp.join("notify.sock"));
    let log = std::fs::File::create(tmp.join("activate.log")).unwrap();
    let mut activator = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&passed_socket)
        .arg("--fdname=kms")
        .arg(format!("-ENOTIFY_SOCKET={}", notify.path().display()))
        .arg(BIN)
        .args(serve_args(&unused_socket, Some(&tpm.tcti()), &[]))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("systemd-socket-activate (package systemd)");
    let log_text = || std::fs::read_to_string(tmp.join("activate.log")).unwrap_or_default();
    assert!(
        crate::harness::process::poll_until(Duration::from_secs(10), || passed_socket.exists()),
        "no socket: {}",
        log_text()
    );

    // This connection exists before sceau does; it triggers the exec.
    let mut client = rpc::connect(&passed_socket).await;
    let status = rpc::status(&mut client).await;
    assert_eq!(status.healthz, "ok");
    assert!(
        notify.wait_for("READY=1", Duration::from_secs(10)),
        "no READY=1; got: {}\n{}",
        notify.all_text(),
        log_text()
    );
    let ready = notify
        .received
        .iter()
        .rev()
        .find(|(_, m)| m.contains("READY=1"))
        .unwrap();
    assert!(
        ready
            .1
            .contains(&format!("STATUS=serving key_id={}", status.key_id)),
        "{}",
        ready.1
    );
    rpc::round_trip(&mut client, &status.key_id, &[7; 32]).await;
    drop(client);

    assert!(!unused_socket.exists(), "sceau bound a socket of its own");
    send_signal(&activator, libc::SIGTERM);
    let exit = wait_timeout(&mut activator, Duration::from_secs(10));
    kill_and_reap(&mut activator);
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "{}", log_text());
    assert!(
        notify.wait_for("STOPPING=1", Duration::from_secs(2)),
        "{}\n{}",
        notify.all_text(),
        log_text()
    );
    assert!(passed_socket.exists(), "sceau removed systemd's socket");
}

/// WATCHDOG=1 keeps coming while the TPM answers, and stops once it does
/// not: a frozen TPM (swtpm stopped with SIGSTOP) becomes a watchdog restart.
#[tokio::test(flavor = "multi_thread")]
async fn watchdog_pings_stop_when_the_tpm_stops() {
    let tmp = TempDir::new("watchdog");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let mut notify = NotifyReceiver::bind(&tmp.join("notify.sock"));
    let socket = tmp.join("sceau.sock");
    let notify_path = notify.path().display().to_string();
    let env = [
        ("NOTIFY_SOCKET", notify_path.as_str()),
        ("WATCHDOG_USEC", "1000000"),
    ];
    let mut sceau = Sceau::spawn(
        &tmp,
        &socket,
        serve_args(&socket, Some(&tpm.tcti()), &[]),
        &env,
    );
    sceau
        .wait_serving()
        .unwrap_or_else(|why| panic!("{why}\n{}", sceau.stderr_text()));

    let started = Instant::now();
    notify.collect_for(Duration::from_secs(3));
    assert!(
        notify.count_since("WATCHDOG=1", started) >= 3,
        "{}",
        notify.all_text()
    );

    tpm.freeze();
    // The last answer stays fresh for 5 s, then the probe needs its 2.5 s
    // deadline to fail: after that no ping may come.
    notify.collect_for(Duration::from_secs(8));
    let quiet_from = Instant::now();
    notify.collect_for(Duration::from_secs(3));
    let late = notify.count_since("WATCHDOG=1", quiet_from);
    tpm.thaw();
    assert_eq!(
        late,
        0,
        "pings went on with the TPM frozen:\n{}",
        sceau.stderr_text()
    );
}

/// With `--landlock=best-effort` on a kernel without Landlock (simulated as
/// above), seccomp makes `openat` and `unlink` fail instead, so no file can
/// be read or created even then; the rest of the sandbox is unchanged.
///
/// Without `seccomp::files_filter`, this fails with "FAIL open /etc/passwd
/// for reading: the action succeeded".
#[test]
fn without_landlock_seccomp_refuses_files() {
    let tmp = TempDir::new("selftest-no-landlock");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let mut cmd = Command::new(BIN);
    cmd.args(["selftest", "--sandbox", "--tcti", &tpm.tcti()])
        .arg("--landlock=best-effort")
        .env("TMPDIR", tmp.path());
    deny_landlock(&mut cmd);
    let finished = run_with_timeout(&mut cmd, tmp.path(), Duration::from_secs(30));
    // Landlock's TCP rule is gone too: the TCP probe may get through.
    let expected_fail = "FAIL connect TCP to 127.0.0.1:9";
    for probe in PROBES.iter().filter(|p| !expected_fail.contains(*p)) {
        assert!(
            finished
                .stdout
                .lines()
                .any(|l| l.starts_with(&format!("PASS {probe}: "))),
            "no PASS for {probe}:\n{}",
            finished.all_output()
        );
    }
    assert!(
        finished
            .stderr
            .contains("openat, unlink and unlinkat fail with EACCES"),
        "{}",
        finished.all_output()
    );
}

/// sd_notify over an abstract socket (NOTIFY_SOCKET=@name), connected once
/// before the sandbox: every kind of message sceau sends arrives, the ones
/// sent after seccomp forbids new unix sockets included (READY, WATCHDOG,
/// STOPPING).
///
/// Without `notify::connect` (sd-notify 0.5 connects per message and takes
/// `@name` for a path), this fails with "no READY=1; got: " and nothing.
#[test]
fn every_notify_message_reaches_an_abstract_socket() {
    let tmp = TempDir::new("notify-abstract");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let name = format!("sceau-test-notify-{}", std::process::id());
    let mut notify = NotifyReceiver::bind_abstract(&name);
    let socket = tmp.join("sceau.sock");
    let address = format!("@{name}");
    let env = [
        ("NOTIFY_SOCKET", address.as_str()),
        ("WATCHDOG_USEC", "1000000"),
    ];
    let mut sceau = Sceau::spawn(
        &tmp,
        &socket,
        serve_args(&socket, Some(&tpm.tcti()), &[]),
        &env,
    );
    assert!(
        notify.wait_for("READY=1", Duration::from_secs(30)),
        "no READY=1; got: {}\n{}",
        notify.all_text(),
        sceau.stderr_text()
    );
    assert!(
        notify.wait_for("WATCHDOG=1", Duration::from_secs(3)),
        "{}",
        notify.all_text()
    );
    assert_eq!(sceau.terminate().code(), Some(0), "{}", sceau.stderr_text());
    assert!(
        notify.wait_for("STOPPING=1", Duration::from_secs(2)),
        "{}",
        notify.all_text()
    );
    let all = notify.all_text();
    for message in [
        "EXTEND_TIMEOUT_USEC=30000000",
        "STATUS=opening the TPM",
        "STATUS=serving key_id=sceau-",
    ] {
        assert!(all.contains(message), "no {message} in:\n{all}");
    }
    assert!(!sceau.stderr_text().contains("sd_notify failed"));
}

/// Under its unit sceau runs as a dynamic uid, not root. Everything it does
/// before serving must work so: the scrub proof reads /proc/self/mem, which
/// a non-dumpable process that is not root cannot open (the kernel hands the
/// file to root), so it is opened while the process is still dumpable. Run
/// as uid 65534 here; with the open moved after `forbid_core_dumps`, sceau
/// exited with "reading this process's memory to check the scrub:
/// Permission denied".
#[tokio::test(flavor = "multi_thread")]
async fn serve_starts_as_an_unprivileged_user() {
    let tmp = TempDir::new("unprivileged-serve");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    // The test's directory is 0700 and root's; uid 65534 must reach its own.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.subdir("run");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.join("kms.sock");
    // Its state directory is its own, as StateDirectory= makes it.
    let state = tmp.subdir("state");
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let state_arg = state.to_string_lossy().into_owned();
    let mut sceau = Sceau::spawn_with(
        &tmp,
        &socket,
        serve_args(&socket, Some(&tpm.tcti()), &["--state-dir", &state_arg]),
        &[],
        |command| {
            let program = command.get_program().to_owned();
            let args: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
            let mut unprivileged = Command::new("setpriv");
            // As the unit runs it: another uid, and an empty bounding set
            // (CapabilityBoundingSet=), which sceau then finds empty.
            unprivileged
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg("--bounding-set=-all")
                .arg(program)
                .args(args)
                .env_remove("SCEAU_TCTI");
            *command = unprivileged;
        },
    );
    sceau
        .wait_serving()
        .unwrap_or_else(|why| panic!("{why}\n{}", sceau.stderr_text()));
    assert_eq!(
        status_field(sceau.pid(), "Uid").split_whitespace().next(),
        Some("65534")
    );
    let mut client = rpc::connect(&socket).await;
    let key_id = rpc::status(&mut client).await.key_id;
    assert!(rpc::is_well_formed_key_id(&key_id));
}
