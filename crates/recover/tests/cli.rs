//! The `sceau-recover` binary's command line, run for real: exit statuses
//! (0 for help and version, 2 for every usage error, a bare `sceau-recover`
//! included, with the usage line on standard error), and the man page and
//! completions it generates from its flag table; and `inventory` on the
//! etcd v3.7.0 snapshot and the `etcdctl get -w json` output of the
//! recovery vectors (tests/fixtures/recovery): the same counts from both,
//! JSON that parses, and `--require-current` exiting 0 only for the key_id
//! every Secret is under.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sceau-recover");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run sceau-recover")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn usage_errors_exit_2_with_the_usage_line_on_stderr() {
    for (args, says, usage) in [
        (
            &[][..],
            "no command given",
            "Usage: sceau-recover <COMMAND>",
        ),
        (
            &["frobnicate"][..],
            "frobnicate",
            "Usage: sceau-recover <COMMAND>",
        ),
        (
            &["recover"][..],
            "--identity",
            "Usage: sceau-recover recover ",
        ),
        (
            &["recover", "--identity", "i", "--bogus"][..],
            "--bogus",
            "Usage: sceau-recover recover ",
        ),
        (
            &["enroll", "nonsense"][..],
            "enroll nonsense",
            "Usage: sceau-recover enroll ",
        ),
        (
            &["--generate", "fish"][..],
            "--generate",
            "Usage: sceau-recover <COMMAND>",
        ),
    ] {
        let out = run(args);
        let stderr = text(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
        assert_eq!(lines.len(), 2, "{args:?}: {stderr}");
        assert!(lines[0].starts_with("sceau-recover: "), "{stderr}");
        assert!(lines[0].contains(says), "{args:?}: {stderr}");
        assert!(lines[1].starts_with(usage), "{args:?}: {stderr}");
    }
}

#[test]
fn help_and_version_exit_0() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["help", "recover"],
        &["recover", "--help"],
        &["enroll"],
        &["--version"],
        &["-V"],
    ] {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    let version = text(&run(&["--version"]).stdout);
    assert_eq!(version, sceau_recover::cli::BUILD.version_text());
    assert!(version.starts_with(&format!(
        "sceau-recover {}\ncommit: ",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(!version.contains("tpm2-tss"), "{version}");
}

/// `sceau_cli::check` has the details: every flag of every command on the
/// rendered page, no warning from `man` or `groff`, `bash -n`, `zsh -n`,
/// and bash completing every command and flag.
#[test]
fn man_page_and_completions_follow_the_table() {
    sceau_cli::check::generated(&sceau_recover::cli::PROGRAM, Path::new(BIN));
    let page = sceau_cli::check::generate(Path::new(BIN), "man");
    assert!(page.contains("\n.TH \"SCEAU\\-RECOVER\" 1 "), "{page}");
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/recovery");
/// The key_id the vectors' apiserver stored.
const KEY_ID: &str = "recovery-vectors-key";

fn inventory(args: &[&str]) -> Output {
    run(&[&["inventory"], args].concat())
}

#[test]
fn a_snapshot_is_counted_by_resource_and_key_id() {
    let snapshot = format!("{FIXTURES}/snapshot.db");
    let out = inventory(&["--etcd-snapshot", &snapshot]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains(&format!(
            "       45  secrets                  kms-v2 sceau {KEY_ID}"
        )),
        "{table}"
    );
    assert!(
        table.contains("       47  values; 45 KMS v2 under 1 key_id(s), 2 otherwise"),
        "{table}"
    );

    let out = inventory(&["--etcd-snapshot", &snapshot, "--json"]);
    let json = sceau_recover::json::parse(&text(&out.stdout)).expect("JSON");
    assert_eq!(json.get("values").and_then(|v| v.as_i64()), Some(47));

    // Finished under the vectors' key_id; not under another.
    let out = inventory(&["--etcd-snapshot", &snapshot, "--require-current", KEY_ID]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = inventory(&[
        "--etcd-snapshot",
        &snapshot,
        "--require-current",
        "sceau-new",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("45 value(s) of encrypted resources are not KMS v2 values under sceau-new"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn etcdctl_json_gives_the_secrets_counts() {
    let json = format!("{FIXTURES}/etcdctl-get.json");
    let out = inventory(&["--etcd-json", &json, "--require-current", KEY_ID]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("secrets                  kms-v2 sceau {KEY_ID}")),
        "{}",
        text(&out.stdout)
    );
    let both = inventory(&["--etcd-json", &json, "--etcd-snapshot", &json]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
}
