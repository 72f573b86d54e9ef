//! Contract test 9: command line, socket file handling and signals.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::process::run_with_timeout;
use crate::harness::rpc::{self, expect_invalid_argument};
use crate::harness::sceau::{self, BIN, EXIT_TIMEOUT, START_TIMEOUT};
use crate::harness::{Fixture, Sceau, Swtpm, TempDir, random_bytes};

const SERVE_FLAGS: [&str; 6] = [
    "--socket",
    "--tcti",
    "--socket-mode",
    "--socket-group",
    "--srk-handle",
    "--request-deadline",
];

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("stat socket")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn help_mentions_every_flag() {
    let tmp = TempDir::new("help");
    for args in [&["--help"][..], &["serve", "--help"][..]] {
        let done = run_with_timeout(
            Command::new(BIN).args(args),
            tmp.path(),
            Duration::from_secs(10),
        );
        assert!(
            done.status.success(),
            "sceau {args:?}: {}\n{}",
            done.status,
            done.all_output()
        );
        let text = done.all_output();
        for flag in SERVE_FLAGS {
            assert!(
                text.contains(flag),
                "sceau {args:?} does not mention {flag}:\n{text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tcti_can_come_from_the_environment() {
    let tmp = TempDir::new("env-tcti");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let socket = tmp.join("sceau.sock");
    let args = sceau::serve_args(&socket, None, &[]);
    let mut sceau = Sceau::spawn(&tmp, &socket, args, &[("SCEAU_TCTI", &tpm.tcti())]);
    if let Err(why) = sceau.wait_serving() {
        panic!("sceau with SCEAU_TCTI did not start: {why}");
    }
    let mut client = sceau.client().await;
    assert_eq!(rpc::status(&mut client).await.healthz, "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_is_0600_by_default_and_socket_mode_is_honoured() {
    let mut fx = Fixture::start("socket-mode", &[]);
    assert_eq!(mode_of(fx.sceau.socket()), 0o600, "default socket mode");
    assert!(fx.sceau.terminate().success());

    fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &["--socket-mode", "0660"]);
    assert_eq!(mode_of(fx.sceau.socket()), 0o660, "--socket-mode 0660");
    let (mut client, key_id) = fx.client().await;
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_group_is_honoured_by_name_and_by_gid() {
    let (group_name, gid) = group_we_may_chown_to();
    let mut fx = Fixture::start(
        "socket-group",
        &["--socket-group", &group_name, "--socket-mode", "0660"],
    );
    let meta = std::fs::metadata(fx.sceau.socket()).expect("stat socket");
    assert_eq!(meta.gid(), gid, "--socket-group {group_name}");
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert!(fx.sceau.terminate().success());

    fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &["--socket-group", &gid.to_string()]);
    assert_eq!(
        std::fs::metadata(fx.sceau.socket()).unwrap().gid(),
        gid,
        "--socket-group {gid}"
    );
}

/// As root, a group other than our own (so a no-op chown cannot pass the
/// test), preferably `nogroup`; otherwise our own effective group.
fn group_we_may_chown_to() -> (String, u32) {
    // SAFETY: getegid/geteuid cannot fail and have no preconditions.
    let (egid, euid) = unsafe { (libc::getegid(), libc::geteuid()) };
    let groups = std::fs::read_to_string("/etc/group").expect("read /etc/group");
    let entries: Vec<(String, u32)> = groups
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?.to_string();
            let gid = fields.nth(1)?.parse().ok()?;
            Some((name, gid))
        })
        .collect();
    let wanted = |(name, gid): &&(String, u32)| {
        if euid == 0 {
            *gid != egid && name == "nogroup"
        } else {
            *gid == egid
        }
    };
    let fallback = |(_, gid): &&(String, u32)| euid == 0 && *gid != egid && *gid != 0;
    let found = entries
        .iter()
        .find(wanted)
        .or_else(|| entries.iter().find(fallback));
    found.cloned().expect("a usable group in /etc/group")
}

#[test]
fn regular_file_at_socket_path_is_refused_and_left_untouched() {
    let tmp = TempDir::new("regular-file");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let path = tmp.join("sceau.sock");
    let precious = b"this is not a socket; sceau must not delete it\n";
    std::fs::write(&path, precious).unwrap();

    let mut sceau = Sceau::spawn(
        &tmp,
        &path,
        sceau::serve_args(&path, Some(&tpm.tcti()), &[]),
        &[],
    );
    let status = sceau.wait_exit(START_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "sceau kept running over a regular file\n{}",
            sceau.stderr_text()
        )
    });
    assert!(!status.success(), "exit status {status}");
    assert!(std::fs::metadata(&path).unwrap().file_type().is_file());
    assert_eq!(std::fs::read(&path).unwrap(), precious);
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_socket_is_replaced_and_served() {
    let tmp = TempDir::new("stale-socket");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let path = tmp.join("sceau.sock");
    // A socket file nobody listens on any more, as a crashed daemon leaves it.
    drop(UnixListener::bind(&path).unwrap());
    assert!(std::fs::metadata(&path).unwrap().file_type().is_socket());

    let sceau = Sceau::start(&tmp, &tpm, &[]);
    let mut client = sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_and_sigint_exit_zero_and_remove_the_socket() {
    let mut fx = Fixture::start("signals", &[]);
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // Like the API server, keep a connection open across the shutdown:
        // an idle client must not keep sceau alive.
        let (mut idle_client, key_id) = fx.client().await;
        rpc::round_trip(&mut idle_client, &key_id, &random_bytes(32)).await;

        fx.sceau.signal(signal);
        let status = fx.sceau.wait_exit(EXIT_TIMEOUT).unwrap_or_else(|| {
            panic!("sceau still running {EXIT_TIMEOUT:?} after signal {signal}")
        });
        assert_eq!(
            status.code(),
            Some(0),
            "exit after signal {signal}: {status}"
        );
        assert!(
            !fx.sceau.socket().exists(),
            "socket left behind after signal {signal}"
        );
        drop(idle_client);
        fx.sceau = Sceau::start(&fx.tmp, &fx.tpm, &[]);
    }
}

/// Calls already received when SIGTERM arrives are completed, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_in_flight_calls() {
    const IN_FLIGHT: usize = 64;
    let mut fx = Fixture::start("in-flight", &[]);
    let (client, key_id) = fx.client().await;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..IN_FLIGHT {
        // Clones share one HTTP/2 connection, so all requests go out at once.
        let (mut client, key_id, done_tx) = (client.clone(), key_id.clone(), done_tx.clone());
        tokio::spawn(async move {
            let dek = random_bytes(32);
            let result = rpc::encrypt(&mut client, &dek)
                .await
                .map(|reply| (reply, key_id));
            let _ = done_tx.send(result);
        });
    }
    drop(done_tx);

    // The first answer means the requests sent alongside it have reached
    // sceau too; now ask it to stop while the rest are still being served.
    let first = done_rx.recv().await.expect("at least one answer");
    fx.sceau.signal(libc::SIGTERM);
    let mut results = vec![first];
    while let Some(result) = done_rx.recv().await {
        results.push(result);
    }
    for result in results {
        let (reply, key_id) =
            result.unwrap_or_else(|s| panic!("in-flight call failed after SIGTERM: {s:?}"));
        assert_eq!(reply.key_id, key_id);
    }
    drop(client);

    let status = fx
        .sceau
        .wait_exit(EXIT_TIMEOUT)
        .expect("sceau exits after draining");
    assert_eq!(status.code(), Some(0), "exit status {status}");
    assert!(!fx.sceau.socket().exists(), "socket left behind");
}

/// The request deadline flag is accepted and does not disturb normal calls.
#[tokio::test(flavor = "multi_thread")]
async fn request_deadline_flag_is_accepted() {
    let fx = Fixture::start("deadline-flag", &["--request-deadline", "5s"]);
    let (mut client, key_id) = fx.client().await;
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    expect_invalid_argument(rpc::encrypt(&mut client, &[]).await, "empty plaintext");
}
