//! The unit tests of `cli` (cli.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use super::*;
use sceau_tpm::worker::DEFAULT_DEADLINE;

use sceau_cli::words as args;

fn serve(line: &str, env: Option<&str>) -> ServeOptions {
    match parse(&args(line), env).unwrap() {
        Command::Serve(options) => *options,
        other => panic!("{other:?}"),
    }
}

fn tcti(text: &str) -> Tcti {
    text.parse().unwrap()
}

#[test]
fn serve_defaults() {
    let options = serve("serve", None);
    assert_eq!(options.socket, PathBuf::from(DEFAULT_SOCKET));
    assert_eq!(options.tcti, tcti(DEFAULT_TCTI));
    assert_eq!(options.socket_mode, 0o600);
    assert_eq!(options.request_deadline, Duration::from_millis(2500));
    // The default the help shows is the one the TPM worker uses.
    assert_eq!(options.request_deadline, DEFAULT_DEADLINE);
}

#[test]
fn serve_flags_in_both_spellings() {
    let options = serve(
        "serve --socket=/tmp/k.sock --tcti swtpm:host=127.0.0.1,port=2321 --socket-mode 0660 \
             --socket-group kube --srk-handle 0x81000001 --request-deadline 800ms",
        Some("device:/dev/tpm0"),
    );
    assert_eq!(options.socket, PathBuf::from("/tmp/k.sock"));
    assert_eq!(options.tcti, tcti("swtpm:host=127.0.0.1,port=2321"));
    assert_eq!(options.socket_mode, 0o660);
    assert_eq!(options.socket_group.as_deref(), Some("kube"));
    assert_eq!(options.srk_handle, Some(0x8100_0001));
    assert_eq!(options.request_deadline, Duration::from_millis(800));
}

#[test]
fn sandbox_flags() {
    let options = serve(
        "serve --allow-uid 1000 --allow-uid=1001 --landlock require --seccomp log",
        None,
    );
    assert_eq!(options.allowed_uids, vec![1000, 1001]);
    assert_eq!(options.landlock, Enforcement::Require);
    assert_eq!(options.seccomp, Enforcement::BestEffort);
    let defaults = serve("serve", None);
    assert_eq!(
        (defaults.landlock, defaults.seccomp),
        (DEFAULT_LANDLOCK, DEFAULT_SECCOMP)
    );
    assert_eq!(
        serve("serve --landlock=best-effort", None).landlock,
        Enforcement::BestEffort
    );
}

/// The selftest takes the daemon's sandbox flags, with the same defaults.
#[test]
fn selftest_sandbox_flags_default_to_the_daemons() {
    let Ok(Command::SelfTest(defaults)) = parse(&args("selftest --sandbox"), None) else {
        panic!("selftest --sandbox");
    };
    let daemon = serve("serve", None);
    assert_eq!(
        (defaults.landlock, defaults.seccomp),
        (daemon.landlock, daemon.seccomp)
    );
    let Ok(Command::SelfTest(options)) = parse(
        &args("selftest --sandbox --landlock=best-effort --seccomp log"),
        None,
    ) else {
        panic!("selftest with flags");
    };
    assert_eq!(
        (options.landlock, options.seccomp),
        (Enforcement::BestEffort, Enforcement::BestEffort)
    );
    assert!(parse(&args("selftest --sandbox --landlock maybe"), None).is_err());
    assert!(parse(&args("selftest"), None).is_err());
}

#[test]
fn env_tcti_applies_when_the_flag_is_absent() {
    assert_eq!(
        serve("serve", Some("device:/dev/tpm0")).tcti,
        tcti("device:/dev/tpm0")
    );
    assert_eq!(
        serve("serve --tcti device:/dev/tpm1", Some("device:/dev/tpm0")).tcti,
        tcti("device:/dev/tpm1")
    );
}

/// A TCTI that tpm2-tss (or the sandbox) would refuse later is a usage
/// error now, whether it comes from the flag or the environment.
#[test]
fn an_invalid_tcti_is_a_usage_error() {
    let error = parse(&args("serve --tcti swtpm:port=http"), None).unwrap_err();
    assert_eq!(error.command, Some("serve"));
    assert!(error.to_string().contains("--tcti"), "{error}");
    let error = parse(&args("srk-public"), Some("nonsense")).unwrap_err();
    assert!(error.to_string().contains("SCEAU_TCTI"), "{error}");
}

#[test]
fn rejects_bad_values() {
    for line in [
        "serve --socket-mode 0999",
        "serve --socket-mode 01777",
        "serve --srk-handle 0x80000001",
        "serve --srk-handle nonsense",
        "serve --request-deadline 2.5",
        "serve --request-deadline 5ms",
        "serve --request-deadline 10m",
        "serve --request-deadline 2.s",
        "serve --request-deadline .5s",
        "serve --request-deadline 1e1s",
        "serve --request-deadline +2s",
        "serve --request-deadline 0.1234567891s",
        "serve --allow-uid kube",
        "serve --landlock maybe",
        "serve --seccomp strict",
        "serve --socket-mode 0999 --socket-mode 0600",
        "serve --tcti",
        "serve --bogus",
        "serve stray",
        "selftest --sandbox=yes",
        "frobnicate",
        "help frobnicate",
        "enroll --tcti device:/dev/tpm0 request",
        "enroll nonsense",
    ] {
        let error = parse(&args(line), None).unwrap_err();
        let usage = PROGRAM.usage_line(error.command);
        if line.starts_with("serve") {
            assert_eq!(usage, "Usage: sceau serve [OPTIONS]", "{line}");
        }
    }
}

/// The table is the list: every flag of every command is in its help and
/// in the inverse, and `sceau help CMD` is `sceau CMD --help`.
#[test]
fn check_reads_the_tpm_only_when_asked() {
    let Ok(Command::Check(plain)) = parse(&args("check"), Some("device:/dev/tpm0")) else {
        panic!("check parses");
    };
    assert_eq!(plain.tpm_identity, None);
    let Ok(Command::Check(asked)) = parse(&args("check --tpm-identity"), None) else {
        panic!("check --tpm-identity parses");
    };
    assert_eq!(
        asked.tpm_identity.map(|t| t.to_string()),
        Some(DEFAULT_TCTI.to_string())
    );
    let error = parse(&args("check --tcti device:/dev/tpm0"), None)
        .map(|_| ())
        .expect_err("--tcti alone is refused")
        .to_string();
    assert!(error.contains("add --tpm-identity"), "{error}");
}

#[test]
fn every_flag_is_in_the_help_and_the_inverse() {
    let serve_all = Command::Serve(Box::new(serve(
        "serve --socket-group g --srk-handle 0x81000001 --allow-uid 7 --members m \
             --expect-srk-name 000b0000000000000000000000000000000000000000000000000000000000000000 \
             --recovery-key r --former-members f --enrollment-key k --accept-unsigned-envelopes \
             --policy-key pk --policy p1 --policy d2 --former-policy-key old1 \
             --former-policy-key old2 --accept-policies-another-os-can-meet \
             --metrics-allow-uid 998 --tss-log-reveals-secrets --state-dir sd \
             --tpm-advisories refuse --tpm-advisories-file adv",
        None,
    )));
    let respond = parse(
        &args("enroll respond --challenge c --srk-handle 0x81000002"),
        None,
    );
    let examples = [
        serve_all,
        parse(&args("check"), None).unwrap(),
        parse(&args("check --status-only"), None).unwrap(),
        parse(&args("check --tpm-identity"), None).unwrap(),
        parse(&args("selftest --sandbox"), None).unwrap(),
        parse(&args("srk-public --srk-handle 0x81000001"), None).unwrap(),
        parse(&args("pcrs --pcrs 7,11"), None).unwrap(),
        parse(&args("revoke-policy --serial 65535"), None).unwrap(),
        parse(&args("kek rotate --state-dir /s"), None).unwrap(),
        parse(&args("kek list --json"), None).unwrap(),
        parse(
            &args("kek retire --generation 2 --srk-handle 0x81000001"),
            None,
        )
        .unwrap(),
        respond.unwrap(),
    ];
    let inverses: Vec<Vec<String>> = examples.iter().filter_map(Command::to_args).collect();
    sceau_cli::check_table(
        &PROGRAM,
        |a| match parse(a, None) {
            Ok(Command::Help(text)) => Some(text),
            _ => None,
        },
        &inverses,
    );
    let main = PROGRAM.main_help();
    for flag in SERVE.flags.iter().chain(CHECK.flags) {
        assert!(main.contains(flag.name), "{}", flag.name);
    }
    for example in examples {
        let again = example.to_args().unwrap();
        assert_eq!(
            parse(&again, Some("device:/dev/tpm9")),
            Ok(example),
            "{again:?}"
        );
    }
}

/// Found by the `cli` fuzz target (audit/fuzzing.md, «The enroll error that
/// changed between runs»): with flags another step takes, the one the error
/// named depended on a HashMap's random order, so the same arguments gave
/// different errors.
#[test]
fn enroll_names_the_same_extra_flag_every_time() {
    let line = args("enroll request --challenge c");
    let error = parse(&line, None).unwrap_err();
    assert_eq!(
        error.problem,
        Problem::UnknownOption {
            program: "sceau",
            command: "enroll",
            option: "--challenge".into()
        }
    );
    assert_eq!(parse(&line, None), Err(error));
}

#[test]
fn moved_commands_point_to_sceau_recover() {
    for (line, moved) in [
        ("recover --identity x", "recover"),
        ("recovery-keygen", "recovery-keygen"),
        ("enroll verify --request q", "enroll verify"),
        ("enroll challenge", "enroll challenge"),
        ("help recover", "recover"),
    ] {
        let error = parse(&args(line), None).unwrap_err();
        assert_eq!(
            error.problem,
            Problem::Moved {
                program: "sceau-recover",
                command: moved.into()
            },
            "{line}"
        );
        assert!(error.to_string().contains("run `sceau-recover "), "{error}");
    }
}

#[test]
fn deadlines_in_seconds_are_read_exactly() {
    for (text, millis, nanos) in [
        ("0.1s", 100, 0),
        ("2.5s", 2500, 0),
        ("60s", 60_000, 0),
        ("1.000000001s", 1000, 1),
        ("0.25s", 250, 0),
    ] {
        let options = serve(&format!("serve --request-deadline {text}"), None);
        let expected = Duration::from_millis(millis) + Duration::from_nanos(nanos);
        assert_eq!(options.request_deadline, expected, "{text}");
        // What the re-exec passes on reads back the same.
        assert_eq!(parse_deadline(&deadline_arg(expected)).unwrap(), expected);
    }
}
