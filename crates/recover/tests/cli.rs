//! The `sceau-recover` binary's command line, run for real: exit statuses
//! (0 for help and version, 2 for every usage error, a bare `sceau-recover`
//! included, with the usage line on standard error), and the man page and
//! completions it generates from its flag table.

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
