//! Every start-up failure is one line naming the cause and the fix, with no TPM
//! return code and no TSS text. Each test runs the real `sceau` binary into one
//! failure and reads what it printed.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::harness::no_landlock::deny_landlock;
use crate::harness::process::{Finished, run_with_timeout};
use crate::harness::sceau::BIN;
use crate::harness::{Swtpm, TempDir};

/// Every failure here happens before anything slow: at most a TPM start-up.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// What must never reach the operator's line.
const TSS_WORDS: [&str; 4] = ["0x", "Esys", "TSS2", "response code"];
/// The general exit status of a failed start (usage errors have their own).
const FAILURE: i32 = 1;

/// `sceau ARGS`, without the developer's own SCEAU_TCTI, after `prepare`.
fn run(tmp: &TempDir, args: &[&str], prepare: impl FnOnce(&mut Command)) -> Finished {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("SCEAU_TCTI");
    prepare(&mut command);
    run_with_timeout(&mut command, tmp.path(), RUN_TIMEOUT)
}

/// The run failed with `code` and printed exactly one line starting with
/// `marker`; that line holds every word of `words` and nothing of the TSS.
fn the_one_line(done: &Finished, code: i32, marker: &str, words: &[&str]) -> String {
    let output = done.all_output();
    assert_eq!(done.status.code(), Some(code), "{output}");
    let lines: Vec<&str> = output.lines().filter(|l| l.contains(marker)).collect();
    assert_eq!(lines.len(), 1, "not one {marker:?} line:\n{output}");
    let line = lines[0];
    for word in words {
        assert!(line.contains(word), "{word:?} missing from:\n{line}");
    }
    for word in TSS_WORDS {
        assert!(
            !line.contains(word),
            "{word:?} reached the operator:\n{line}"
        );
    }
    line.to_string()
}

fn error_line(done: &Finished, words: &[&str]) -> String {
    the_one_line(done, FAILURE, "ERROR", words)
}

fn socket_in(tmp: &TempDir) -> String {
    tmp.join("kms.sock").to_str().unwrap().to_string()
}

fn device_tcti(path: &Path) -> String {
    format!("device:{}", path.display())
}

/// No TPM device: `serve`, and `srk-public` on the same path, say that the
/// device does not exist, what provides one, and how to choose another.
#[test]
fn a_missing_tpm_device_is_named_with_the_driver_and_the_way_to_choose_another() {
    let tmp = TempDir::new("no-device");
    let tcti = device_tcti(&tmp.join("tpmrm0"));
    let socket = socket_in(&tmp);
    let words = [
        "the TPM device",
        "does not exist",
        "kernel's TPM driver",
        "vTPM",
        "--tcti",
        "SCEAU_TCTI",
    ];
    let serve = run(
        &tmp,
        &["serve", "--socket", &socket, "--tcti", &tcti],
        |_| {},
    );
    error_line(&serve, &words);
    let srk_public = run(&tmp, &["srk-public", "--tcti", &tcti], |_| {});
    error_line(&srk_public, &words);
}

/// Permission denied on the device. Root bypasses file permissions, so the
/// daemon runs as uid 65534 (`setpriv`), against a root-owned 0600 file
/// standing for /dev/tpmrm0: the kernel refuses the open exactly as it
/// refuses a user outside the `tss` group. The control: the same file,
/// opened by root, is not called a permission problem.
#[test]
fn permission_denied_on_the_device_says_root_or_the_tss_group() {
    let tmp = TempDir::new("tpm-eacces");
    // uid 65534 must reach the directory (for the socket's preflight) but
    // not open the device.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let device = tmp.join("tpmrm0");
    std::fs::write(&device, b"").unwrap();
    std::fs::set_permissions(&device, std::fs::Permissions::from_mode(0o600)).unwrap();
    let tcti = device_tcti(&device);
    let socket = socket_in(&tmp);
    let args = ["serve", "--socket", &socket, "--tcti", &tcti];

    let mut unprivileged = Command::new("setpriv");
    unprivileged
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(args)
        .env_remove("SCEAU_TCTI");
    let done = run_with_timeout(&mut unprivileged, tmp.path(), RUN_TIMEOUT);
    error_line(
        &done,
        &["permission denied on", "tpmrm0", "run sceau as root", "tss"],
    );

    let as_root = run(&tmp, &args, |_| {});
    let line = error_line(&as_root, &["tpmrm0"]);
    assert!(!line.contains("permission denied"), "{line}");
}

/// The library file tpm2-tss would load for `kind`, if the loader knows it.
fn installed_tcti_library(kind: &str) -> Option<PathBuf> {
    let cache = Command::new("ldconfig").arg("-p").output().ok()?;
    let name = format!("libtss2-tcti-{kind}.so.0 ");
    String::from_utf8_lossy(&cache.stdout)
        .lines()
        .find(|line| line.trim_start().starts_with(&name))
        .and_then(|line| line.rsplit(" => ").next())
        .map(PathBuf::from)
}

/// The TCTI library missing: the line names the library and the Debian
/// package that ships it. tpm2-tss loads `libtss2-tcti-<kind>.so.0` by
/// name. Where the tabrmd TCTI is not installed (as on the CI image) the
/// test uses it as it is; elsewhere it hides the mssim library by mounting
/// an empty file over it in a private mount namespace of sceau's own.
#[test]
fn a_missing_tcti_library_names_its_debian_package() {
    let tmp = TempDir::new("no-tcti-lib");
    let socket = socket_in(&tmp);
    let done = match installed_tcti_library("tabrmd") {
        None => run(
            &tmp,
            &["serve", "--socket", &socket, "--tcti", "tabrmd"],
            |_| {},
        ),
        Some(_) => {
            let library = installed_tcti_library("mssim").expect("the mssim TCTI is installed");
            let empty = tmp.join("empty.so");
            std::fs::write(&empty, b"").unwrap();
            let mut hidden = Command::new("unshare");
            hidden
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(r#"mount --bind "$1" "$2" && shift 2 && exec "$@""#)
                .arg("sh")
                .args([empty.as_path(), library.as_path(), Path::new(BIN)])
                .args(["serve", "--socket", &socket, "--tcti", "mssim:port=1"])
                .env_remove("SCEAU_TCTI");
            run_with_timeout(&mut hidden, tmp.path(), RUN_TIMEOUT)
        }
    };
    error_line(
        &done,
        &[
            "the TCTI library libtss2-tcti-",
            ".so.0 cannot be loaded",
            "install the Debian package libtss2-tcti-",
            "apt install libtss2-tcti-",
        ],
    );
}

/// A TCTI string that does not parse is a usage error that lists the forms
/// that do, in sceau's words (tss-esapi's would be "the provided parameter
/// is invalid for that type.").
#[test]
fn a_tcti_that_does_not_parse_lists_the_expected_forms() {
    let tmp = TempDir::new("bad-tcti");
    let socket = socket_in(&tmp);
    for (tcti, says) in [
        (
            "swtpm:host=-bad-",
            "host \"-bad-\" is neither an IP address nor a host name",
        ),
        ("tmp:/dev/tpmrm0", "unknown TPM connection \"tmp\""),
    ] {
        let done = run(
            &tmp,
            &["serve", "--socket", &socket, "--tcti", tcti],
            |_| {},
        );
        let line = the_one_line(
            &done,
            2,
            "sceau: ",
            &[
                says,
                "expected device:/dev/tpmrm0",
                "swtpm:host=HOST,port=PORT",
                "mssim:host=HOST,port=PORT",
                "tabrmd",
            ],
        );
        assert!(!line.contains("provided parameter"), "{line}");
    }
}

/// A socket directory that does not exist is reported before the TPM is
/// touched: the TCTI points at a port the test listens on, and no
/// connection ever arrives there.
#[test]
fn a_missing_socket_directory_is_reported_before_the_tpm_is_touched() {
    let tmp = TempDir::new("no-sock-dir");
    let tpm_port = TcpListener::bind("127.0.0.1:0").unwrap();
    tpm_port.set_nonblocking(true).unwrap();
    let port = tpm_port.local_addr().unwrap().port();
    let missing = tmp.join("missing");
    let socket = missing.join("kms.sock");
    let done = run(
        &tmp,
        &[
            "serve",
            "--socket",
            socket.to_str().unwrap(),
            "--tcti",
            &format!("swtpm:host=127.0.0.1,port={port}"),
        ],
        |_| {},
    );
    error_line(
        &done,
        &[
            &format!("the socket directory {} does not exist", missing.display()),
            "install -d",
            "--socket",
            "sceau.socket",
        ],
    );
    assert!(
        !done.all_output().contains("opening the TPM"),
        "{}",
        done.all_output()
    );
    match tpm_port.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("sceau reached for the TPM before checking its socket: {other:?}"),
    }
}

/// A node whose SRK is in none of the member files: the line names the
/// directory, how many files it read, and the steps that add the node.
#[test]
fn a_node_outside_the_members_says_which_directory_and_how_to_join() {
    let tmp = TempDir::new("non-member");
    let this_node = Swtpm::start(&tmp.subdir("tpm-a"));
    let other_node = Swtpm::start(&tmp.subdir("tpm-b"));
    let member_file = run(&tmp, &["srk-public", "--tcti", &other_node.tcti()], |_| {});
    assert!(member_file.status.success(), "{}", member_file.all_output());
    let members = tmp.subdir("members");
    std::fs::write(members.join("node-b.pub"), &member_file.stdout).unwrap();
    let socket = socket_in(&tmp);
    let done = run(
        &tmp,
        &[
            "serve",
            "--socket",
            &socket,
            "--tcti",
            &this_node.tcti(),
            "--members",
            members.to_str().unwrap(),
        ],
        |_| {},
    );
    error_line(
        &done,
        &[
            &format!("is in none of the 1 member files in {}", members.display()),
            "sceau srk-public >",
            "copy that file into",
            "restart sceau on every node",
        ],
    );
}

/// Landlock required but missing (the kernel simulated by the rig's
/// seccomp filter): the line names the kernel version and configuration
/// Landlock needs, and the flag that starts sceau anyway.
#[test]
fn landlock_unavailable_names_the_kernel_it_needs_and_the_flag() {
    let tmp = TempDir::new("no-landlock-msg");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let socket = socket_in(&tmp);
    let done = run(
        &tmp,
        &["serve", "--socket", &socket, "--tcti", &tpm.tcti()],
        deny_landlock,
    );
    error_line(
        &done,
        &[
            "this kernel has no Landlock",
            "Linux 5.13",
            "CONFIG_SECURITY_LANDLOCK=y",
            "lsm=",
            "--landlock=best-effort",
        ],
    );
}

/// `selftest --sandbox` without a TPM device cannot build the sandbox (it
/// grants the device by path): it says so once, runs no probe, and does
/// not claim that the sandbox has a hole.
#[test]
fn selftest_without_a_tpm_says_the_sandbox_was_not_applied() {
    let tmp = TempDir::new("selftest-no-tpm");
    let tcti = device_tcti(&tmp.join("tpmrm0"));
    let done = run(&tmp, &["selftest", "--sandbox", "--tcti", &tcti], |_| {});
    error_line(
        &done,
        &[
            "the sandbox could not be applied",
            "nothing was tested",
            "does not exist",
            "--tcti",
        ],
    );
    let output = done.all_output();
    assert!(!output.contains("FAIL"), "{output}");
    assert!(!output.contains("PASS"), "{output}");
    assert!(!output.contains("forbidden action"), "{output}");
}

/// The selftest's usage error says what is missing, once (it once read
/// "selftest needs --sandbox needs a value").
#[test]
fn selftest_without_sandbox_says_what_is_missing_once() {
    let tmp = TempDir::new("selftest-usage");
    let done = run(&tmp, &["selftest"], |_| {});
    let line = the_one_line(&done, 2, "sceau: ", &["selftest needs --sandbox"]);
    assert_eq!(line, "sceau: selftest needs --sandbox");
}

/// `sceau check` with no socket says sceau is not running and how to start
/// it, instead of repeating "No such file or directory".
#[test]
fn check_without_a_socket_says_sceau_is_not_running() {
    let tmp = TempDir::new("check-no-sock");
    let socket = socket_in(&tmp);
    let done = run(&tmp, &["check", "--socket", &socket], |_| {});
    let line = error_line(
        &done,
        &[
            "no sceau socket at",
            "systemctl start",
            "journalctl -u sceau",
        ],
    );
    assert!(!line.contains("os error"), "{line}");
}
