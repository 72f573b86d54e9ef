//! Contract test 9: command line, socket file handling and signals.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sceau_cli::check::mentions_flag;

use crate::harness::process::{Finished, poll_until, run_with_timeout};
use crate::harness::rpc;
use crate::harness::sceau::{self, BIN, EXIT_TIMEOUT, START_TIMEOUT};
use crate::harness::swtpm::SilentTpm;
use crate::harness::{Fixture, Sceau, Swtpm, TempDir, random_bytes};

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("stat socket")
        .permissions()
        .mode()
        & 0o7777
}

fn assert_help_mentions_every_flag(args: &[&str]) {
    let tmp = TempDir::new("help");
    let done = run_with_timeout(
        Command::new(BIN).args(args),
        tmp.path(),
        Duration::from_secs(10),
    );
    let text = done.all_output();
    assert!(
        done.status.success(),
        "sceau {args:?}: {}\n{text}",
        done.status
    );
    // The table in src/cli.rs is the list.
    for flag in ::sceau::cli::SERVE.flags.iter().map(|flag| flag.name) {
        assert!(
            mentions_flag(&text, flag),
            "sceau {args:?} does not mention {flag}:\n{text}"
        );
    }
}

#[test]
fn top_level_help_mentions_every_flag() {
    assert_help_mentions_every_flag(&["--help"]);
}

#[test]
fn serve_help_mentions_every_flag() {
    assert_help_mentions_every_flag(&["serve", "--help"]);
}

/// Runs a binary that must finish at once (help, usage errors).
fn run_quick(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let tmp = TempDir::new("quick");
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().copied());
    run_with_timeout(&mut command, tmp.path(), Duration::from_secs(10))
}

/// `sceau help CMD` prints what `sceau CMD --help` prints, for every command,
/// and so does `sceau-recover`.
#[test]
fn help_command_prints_each_commands_help() {
    let sceau = Path::new(BIN);
    let recover = sceau::recover_bin();
    for (program, command) in [
        (sceau, "serve"),
        (sceau, "check"),
        (sceau, "selftest"),
        (sceau, "srk-public"),
        (sceau, "enroll"),
        (recover.as_path(), "recover"),
        (recover.as_path(), "recovery-keygen"),
        (recover.as_path(), "enroll"),
    ] {
        let by_help = run_quick(program, &["help", command], &[]);
        let by_flag = run_quick(program, &[command, "--help"], &[]);
        assert!(
            by_help.status.success(),
            "help {command}: {}",
            by_help.all_output()
        );
        assert!(
            by_help.stdout.contains(&format!(" {command} ")),
            "{}",
            by_help.stdout
        );
        assert_eq!(by_help.stdout, by_flag.stdout, "help {command}");
    }
}

/// A usage error exits 2 with one line saying what is wrong and the usage
/// line of the command, before anything starts (an invalid TCTI included,
/// whether from --tcti or $SCEAU_TCTI); commands that moved point to
/// `sceau-recover`.
#[test]
fn usage_errors_exit_2_with_the_usage_line() {
    let sceau = Path::new(BIN);
    let recover = sceau::recover_bin();
    // (program, arguments, environment, what the error says, usage line)
    type Case<'a> = (
        &'a Path,
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        &'a str,
        &'a str,
    );
    let cases: [Case; 10] = [
        (
            sceau,
            &[],
            &[],
            "no command given",
            "Usage: sceau <COMMAND>",
        ),
        (
            &recover,
            &[],
            &[],
            "no command given",
            "Usage: sceau-recover <COMMAND>",
        ),
        (
            sceau,
            &["serve", "--bogus"],
            &[],
            "\"--bogus\"",
            "Usage: sceau serve ",
        ),
        (
            sceau,
            &["serve", "--tcti", "swtpm:port=http"],
            &[],
            "--tcti",
            "Usage: sceau serve ",
        ),
        (
            sceau,
            &["srk-public"],
            &[("SCEAU_TCTI", "nonsense")],
            "SCEAU_TCTI",
            "Usage: sceau srk-public ",
        ),
        (
            sceau,
            &["frobnicate"],
            &[],
            "frobnicate",
            "Usage: sceau <COMMAND>",
        ),
        (
            sceau,
            &["recover", "--identity", "x"],
            &[],
            "run `sceau-recover recover`",
            "Usage: sceau <COMMAND>",
        ),
        (
            sceau,
            &["enroll", "verify"],
            &[],
            "run `sceau-recover enroll verify`",
            "Usage: sceau <COMMAND>",
        ),
        (
            &recover,
            &["recover"],
            &[],
            "--identity",
            "Usage: sceau-recover recover ",
        ),
        (
            &recover,
            &["enroll", "challenge", "--bogus"],
            &[],
            "--bogus",
            "Usage: sceau-recover enroll ",
        ),
    ];
    for (program, args, env, says, usage) in cases {
        let done = run_quick(program, args, env);
        let lines: Vec<&str> = done.stderr.lines().collect();
        assert_eq!(
            done.status.code(),
            Some(2),
            "{args:?}: {}",
            done.all_output()
        );
        assert_eq!(lines.len(), 2, "{args:?}: {}", done.stderr);
        assert!(done.stdout.is_empty(), "{args:?}: {}", done.stdout);
        assert!(lines[0].contains(says), "{args:?}: {}", done.stderr);
        assert!(lines[1].starts_with(usage), "{args:?}: {}", done.stderr);
    }
}

/// `--help` and `--version` still exit 0, in both binaries; `--version`
/// names the commit this tree is at (the build script reads git), the
/// build profile, the features and the tss2-esys version pkg-config gives.
#[test]
fn help_and_version_exit_0_and_version_names_the_build() {
    let sceau = Path::new(BIN);
    let recover = sceau::recover_bin();
    for program in [sceau, recover.as_path()] {
        for flag in ["--help", "-h", "--version", "-V"] {
            let done = run_quick(program, &[flag], &[]);
            assert!(done.status.success(), "{flag}: {}", done.all_output());
            assert!(done.stderr.is_empty(), "{flag}: {}", done.stderr);
        }
    }
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let tss = Command::new("pkg-config")
        .args(["--modversion", "tss2-esys"])
        .output()
        .expect("pkg-config");
    let tss = String::from_utf8_lossy(&tss.stdout).trim().to_string();
    for (program, name) in [(sceau, "sceau"), (recover.as_path(), "sceau-recover")] {
        let text = run_quick(program, &["--version"], &[]).stdout;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("{name} {}", env!("CARGO_PKG_VERSION")));
        let commit = lines[1].strip_prefix("commit: ").expect("a commit line");
        assert!(
            commit == head || commit == format!("{head}-dirty"),
            "{name} says {commit}, git says {head}"
        );
        assert_eq!(lines[2], format!("profile: {profile}"), "{text}");
        // scripts/test.sh builds sceau with its test hooks, and --version
        // must say so; sceau-recover has no features.
        let features = if name == "sceau" && cfg!(feature = "insecure-test-hooks") {
            "features: insecure-test-hooks"
        } else {
            "features: none"
        };
        assert_eq!(lines[3], features, "{text}");
        let tss_line = lines.get(4).copied();
        match name {
            "sceau" => assert_eq!(
                tss_line,
                Some(format!("tpm2-tss: built against tss2-esys {tss}").as_str())
            ),
            _ => assert_eq!(tss_line, None, "sceau-recover links no tpm2-tss"),
        }
    }
    assert_eq!(
        run_quick(sceau, &["--version"], &[]).stdout,
        ::sceau::build_info::BUILD.version_text()
    );
}

/// The man page and the completions come from the flag table: the page,
/// rendered by `man`, names every flag of every command and draws no
/// warning; the scripts pass `bash -n` and `zsh -n`; bash completes every
/// command and flag (sceau_cli::check has the details).
#[test]
fn man_page_and_completions_follow_the_table() {
    sceau_cli::check::generated(&::sceau::cli::PROGRAM, Path::new(BIN));
    let dir = TempDir::new("completion");
    let script = dir.join("sceau.bash");
    std::fs::write(
        &script,
        sceau_cli::check::generate(Path::new(BIN), "complete-bash"),
    )
    .unwrap();
    let complete = |words: &[&str]| sceau_cli::check::complete_bash(&script, words);
    assert_eq!(complete(&["sceau", "se"]), ["serve", "selftest"]);
    assert_eq!(
        complete(&["sceau", "serve", "--request"]),
        ["--request-deadline"]
    );
    assert_eq!(complete(&["sceau", "enroll", "re"]), ["request", "respond"]);
    assert_eq!(complete(&["sceau", "help", "sr"]), ["srk-public"]);
    // A flag's value: a directory for --members, nothing for a TCTI.
    let members = complete(&[
        "sceau",
        "serve",
        "--members",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(members, [dir.path().display().to_string()]);
    assert!(complete(&["sceau", "serve", "--tcti", ""]).is_empty());
    // What the Debian package runs.
    for kind in ["man", "complete-bash", "complete-zsh"] {
        let by_equals = run_quick(Path::new(BIN), &[&format!("--generate={kind}")], &[]);
        assert!(by_equals.status.success(), "{}", by_equals.all_output());
    }
    let bad = run_quick(Path::new(BIN), &["--generate", "fish"], &[]);
    assert_eq!(bad.status.code(), Some(2), "{}", bad.all_output());
}

/// The daemon logs its build once at start-up (once: not again after it
/// re-executes itself to turn on glibc's free() wiping).
#[test]
fn serve_logs_its_build_once() {
    let fx = Fixture::start("build-log", &[]);
    let log = fx.sceau.stderr_text();
    let summary = ::sceau::build_info::BUILD.summary();
    assert_eq!(log.matches(&summary).count(), 1, "{summary}\n{log}");
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
    let status = fx.sceau.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status}"
    );

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
    let status = fx.sceau.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status}"
    );

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
    use std::os::unix::fs::MetadataExt as _;
    // /proc/self belongs to this process's effective uid and gid.
    let own = std::fs::metadata("/proc/self").expect("stat /proc/self");
    let (egid, euid) = (own.gid(), own.uid());
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

/// The same protection must hold when the path is a symlink: sceau must not
/// remove or write through it.
#[test]
fn symlink_at_socket_path_is_refused_and_left_untouched() {
    let tmp = TempDir::new("symlink");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let target = tmp.join("precious.txt");
    let precious = b"sceau must not touch this file\n";
    std::fs::write(&target, precious).unwrap();
    let path = tmp.join("sceau.sock");
    std::os::unix::fs::symlink(&target, &path).unwrap();

    let mut sceau = Sceau::spawn(
        &tmp,
        &path,
        sceau::serve_args(&path, Some(&tpm.tcti()), &[]),
        &[],
    );
    let status = sceau
        .wait_exit(START_TIMEOUT)
        .unwrap_or_else(|| panic!("sceau kept running over a symlink\n{}", sceau.stderr_text()));
    assert!(!status.success(), "exit status {status}");
    assert_eq!(
        std::fs::read_link(&path).unwrap(),
        target,
        "symlink replaced"
    );
    assert_eq!(
        std::fs::read(&target).unwrap(),
        precious,
        "symlink target changed"
    );
}

/// A socket someone is still serving on is not stale: a second sceau must
/// neither take it over nor remove it on its way out.
#[tokio::test(flavor = "multi_thread")]
async fn live_socket_is_not_taken_over() {
    let fx = Fixture::start("live-socket", &[]);
    let other_tpm = Swtpm::start(&fx.tmp.subdir("other-tpm"));
    let path = fx.sceau.socket();
    let args = sceau::serve_args(path, Some(&other_tpm.tcti()), &[]);
    let mut intruder = Sceau::spawn(&fx.tmp, path, args, &[]);
    let status = intruder.wait_exit(START_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "second sceau kept running on a live socket\n{}",
            intruder.stderr_text()
        )
    });
    assert!(!status.success(), "second sceau exit status {status}");

    let (mut client, key_id) = fx.client().await;
    assert_eq!(
        fx.sceau.logged_key_id().as_deref(),
        Some(key_id.as_str()),
        "the first sceau still answers"
    );
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
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

/// While the TPM is still opening, no socket exists (so no client can queue
/// up on a daemon that is not serving), and SIGTERM ends sceau at once with
/// nothing left behind. Under systemd, a SIGTERM death counts as a clean stop.
#[test]
fn sigterm_during_startup_leaves_no_socket() {
    let tmp = TempDir::new("sigterm-startup");
    let tpm = SilentTpm::bind();
    let socket = tmp.join("sceau.sock");
    let mut sceau = Sceau::spawn(
        &tmp,
        &socket,
        sceau::serve_args(&socket, Some(&tpm.tcti()), &[]),
        &[],
    );
    // Let it get as far as it can: into the TPM, which never answers.
    poll_until(Duration::from_secs(5), || {
        sceau.stderr_text().contains("opening the TPM")
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        sceau.try_exit().is_none(),
        "sceau gave up on the silent TPM by itself\n{}",
        sceau.stderr_text()
    );
    assert!(!socket.exists(), "the socket exists before sceau can serve");

    sceau.signal(libc::SIGTERM);
    let status = sceau.wait_exit(EXIT_TIMEOUT).unwrap_or_else(|| {
        panic!("sceau still running {EXIT_TIMEOUT:?} after SIGTERM during startup")
    });
    let clean = status.code() == Some(0) || status.signal() == Some(libc::SIGTERM);
    assert!(
        clean && !socket.exists(),
        "after SIGTERM during startup: exit status {status}, socket left behind: {}",
        socket.exists()
    );
}

/// Calls already received when SIGTERM arrives are completed, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_in_flight_calls() {
    // As many as sceau lets one connection have open at once: further calls
    // would wait in the client, unsent, and GOAWAY fails those.
    const IN_FLIGHT: usize = ::sceau::server::MAX_CONCURRENT_STREAMS as usize;
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
    let answered_before_signal = 1 + done_rx.len();
    println!("{answered_before_signal} of {IN_FLIGHT} calls answered before SIGTERM");
    assert!(
        answered_before_signal < IN_FLIGHT,
        "no call was in flight at SIGTERM; the test proved nothing"
    );
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
