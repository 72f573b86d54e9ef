//! `sceau-rig` as the scripts use it: `swtpm` reports a port that answers and
//! takes swtpm down with it on SIGTERM; `provision` makes a TPM with EK
//! certificates once and refuses to overwrite it; bad usage exits 2. Being an
//! integration test also makes `cargo test --workspace` build the binary,
//! which the root package's tests run (`no_landlock::deny_landlock`).

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use sceau_testkit::TempDir;
use sceau_testkit::process::{kill_and_reap, poll_until, send_signal, wait_timeout};

const RIG: &str = env!("CARGO_BIN_EXE_sceau-rig");

fn answers(port: u16) -> bool {
    TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
}

#[test]
fn swtpm_reports_a_live_port_and_stops_with_the_rig() {
    let tmp = TempDir::new("rig-swtpm");
    let mut rig = Command::new(RIG)
        .arg("swtpm")
        .arg("--state")
        .arg(tmp.join("tpm"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn sceau-rig");
    let mut line = String::new();
    BufReader::new(rig.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the rig's line");
    let port: u16 = line
        .trim_end()
        .strip_prefix("port=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("expected `port=P`, got {line:?}"));
    assert!(answers(port) && answers(port + 1), "swtpm is not on {port}");

    send_signal(&rig, libc::SIGTERM);
    let status = wait_timeout(&mut rig, Duration::from_secs(10));
    if status.is_none() {
        kill_and_reap(&mut rig);
    }
    assert!(status.is_some_and(|s| s.success()), "rig exit: {status:?}");
    assert!(
        poll_until(Duration::from_secs(5), || !answers(port)),
        "swtpm outlived the rig on port {port}"
    );
}

#[test]
fn bad_usage_exits_2_with_the_usage_line() {
    for args in [
        &[][..],
        &["swtpm"],
        &["swtpm", "--port", "x"],
        &["no-landlock"],
        &["provision"],
        &["provision", "--ca"],
        &["provision", "--ca", "ca"],
        &["provision", "--state", "tpm", "--port", "1"],
    ] {
        let output = Command::new(RIG)
            .args(args)
            .output()
            .expect("run sceau-rig");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("usage: sceau-rig swtpm"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn provision_makes_a_tpm_once_and_says_why_not_twice() {
    let tmp = TempDir::new("rig-provision");
    let provision = || {
        Command::new(RIG)
            .arg("provision")
            .arg("--ca")
            .arg(tmp.join("ca"))
            .arg("--state")
            .arg(tmp.join("tpm"))
            .output()
            .expect("run sceau-rig provision")
    };
    let first = provision();
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{first:?}");
    assert!(
        stdout.contains("0x01c00002") && stdout.contains("0x01c0000a"),
        "{stdout}"
    );
    assert!(tmp.join("ca/roots.pem").is_file() && tmp.join("ca/intermediates.pem").is_file());
    assert!(tmp.join("tpm/tpm2-00.permall").is_file());

    let second = provision();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("already holds a TPM"), "{stderr}");
}
