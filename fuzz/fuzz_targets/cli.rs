//! Command-line parsing (`src/cli.rs`): `utf8_args` and `parse`.
//!
//! Input: NUL-separated strings. The first is `$SCEAU_TCTI` (empty: unset),
//! the rest are the arguments after the program name, as raw bytes (so not
//! necessarily UTF-8, as argv on Linux).
//!
//! Invariants, besides "no panic":
//! - `utf8_args` accepts exactly the all-UTF-8 argument lists, unchanged;
//! - `parse` is deterministic, and what it accepts is within the documented
//!   ranges (mode, SRK handle, deadline), with the TCTI from the flag, else
//!   the environment, else the default;
//! - accepted options, written back as arguments, parse to the same options;
//! - error messages carry no control characters (they reach a terminal).
#![no_main]
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sceau::cli::{
    CHECK_HELP, Command, DEFAULT_TCTI, ENROLL_HELP, EnrollStep, MAIN_HELP, SELFTEST_HELP,
    SERVE_HELP, SRK_PUBLIC_HELP, ServeOptions, SrkPublicOptions, parse, utf8_args,
};
use sceau::sandbox::Enforcement;

fuzz_target!(|data: &[u8]| {
    let mut fields = data.split(|&b| b == 0);
    let env = fields.next().unwrap_or_default();
    let env = (!env.is_empty()).then(|| String::from_utf8_lossy(env).into_owned());
    let raw: Vec<&[u8]> = fields.collect();

    let converted = utf8_args(raw.iter().map(|a| OsString::from_vec(a.to_vec())));
    let strict: Option<Vec<String>> = raw
        .iter()
        .map(|a| String::from_utf8(a.to_vec()).ok())
        .collect();
    assert_eq!(converted.ok(), strict);

    // Lossy, so that non-UTF-8 inputs still exercise the parser.
    let args: Vec<String> = raw
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let parsed = parse(&args, env.as_deref());
    assert_eq!(parsed, parse(&args, env.as_deref()));
    match parsed {
        Ok(command) => check_command(&command, &args, env.as_deref()),
        Err(error) => {
            let message = error.to_string();
            assert!(!message.chars().any(char::is_control), "{message:?}");
        }
    }
});

fn check_command(command: &Command, args: &[String], env: Option<&str>) {
    let again = match command {
        Command::Serve(options) => {
            check_serve(options, args, env);
            serve_args(options)
        }
        Command::Check(options) => vec!["check".into(), "--socket".into(), path(&options.socket)],
        Command::SelfTest(options) => vec![
            "selftest".into(),
            "--sandbox".into(),
            "--tcti".into(),
            options.tcti.clone(),
            "--landlock".into(),
            enforcement(options.landlock, ["require", "best-effort", "off"]),
            "--seccomp".into(),
            enforcement(options.seccomp, ["kill", "log", "off"]),
        ],
        Command::SrkPublic(options) => {
            check_tpm(options, args, env);
            [vec!["srk-public".into()], tpm_args(options)].concat()
        }
        Command::Enroll(step) => enroll_args(step, args, env),
        Command::Help(text) => {
            let texts = [
                MAIN_HELP,
                SERVE_HELP,
                CHECK_HELP,
                SELFTEST_HELP,
                SRK_PUBLIC_HELP,
                ENROLL_HELP,
            ];
            assert!(texts.contains(text));
            return;
        }
        Command::Version => return,
    };
    match (command, parse(&again, None)) {
        (Command::Serve(a), Ok(Command::Serve(b))) => assert_same_serve(a, &b),
        (a, b) => assert_eq!(Ok(a.clone()), b, "{again:?}"),
    }
}

fn path(path: &Path) -> String {
    path.to_str().expect("from a String").into()
}

/// The TPM options of `srk-public` and `enroll request|respond`.
fn check_tpm(options: &SrkPublicOptions, args: &[String], env: Option<&str>) {
    if let Some(handle) = options.srk_handle {
        assert!((0x8100_0000..=0x81FF_FFFF).contains(&handle), "{handle:#x}");
    }
    if !args.iter().any(|a| a.starts_with("--tcti")) {
        assert_eq!(options.tcti, env.unwrap_or(DEFAULT_TCTI));
    }
}

fn tpm_args(options: &SrkPublicOptions) -> Vec<String> {
    let mut args = vec!["--tcti".into(), options.tcti.clone()];
    if let Some(handle) = options.srk_handle {
        args.extend(["--srk-handle".into(), format!("{handle:#x}")]);
    }
    args
}

fn enroll_args(step: &EnrollStep, args: &[String], env: Option<&str>) -> Vec<String> {
    let flags = |step: &str, pairs: &[(&str, &Path)]| -> Vec<String> {
        let mut out = vec!["enroll".to_string(), step.into()];
        for (flag, file) in pairs {
            out.extend([flag.to_string(), path(file)]);
        }
        out
    };
    match step {
        EnrollStep::Request(tpm) => {
            check_tpm(tpm, args, env);
            [flags("request", &[]), tpm_args(tpm)].concat()
        }
        EnrollStep::Respond { tpm, challenge } => {
            check_tpm(tpm, args, env);
            [
                flags("respond", &[("--challenge", challenge)]),
                tpm_args(tpm),
            ]
            .concat()
        }
    }
}

fn check_serve(options: &ServeOptions, args: &[String], env: Option<&str>) {
    assert!(options.socket_mode <= 0o777);
    if let Some(handle) = options.srk_handle {
        assert!((0x8100_0000..=0x81FF_FFFF).contains(&handle), "{handle:#x}");
    }
    let deadline = options.request_deadline;
    assert!((Duration::from_millis(100)..=Duration::from_secs(60)).contains(&deadline));
    let tcti_flag = args.iter().any(|a| a.starts_with("--tcti"));
    if !tcti_flag {
        assert_eq!(options.tcti, env.unwrap_or(DEFAULT_TCTI));
    }
}

/// `options` as the arguments that should produce it, every flag explicit.
fn serve_args(options: &ServeOptions) -> Vec<String> {
    let mut args: Vec<String> = vec!["serve".into()];
    let mut flag = |name: &str, value: String| args.extend([name.to_string(), value]);
    flag(
        "--socket",
        options.socket.to_str().expect("from a String").into(),
    );
    flag("--tcti", options.tcti.clone());
    flag("--socket-mode", format!("{:o}", options.socket_mode));
    if let Some(group) = &options.socket_group {
        flag("--socket-group", group.clone());
    }
    if let Some(handle) = options.srk_handle {
        flag("--srk-handle", format!("{handle:#x}"));
    }
    flag("--request-deadline", deadline_arg(options.request_deadline));
    for uid in &options.allowed_uids {
        flag("--allow-uid", uid.to_string());
    }
    flag(
        "--landlock",
        enforcement(options.landlock, ["require", "best-effort", "off"]),
    );
    flag(
        "--seccomp",
        enforcement(options.seccomp, ["kill", "log", "off"]),
    );
    if let Some(members) = &options.members {
        flag("--members", path(members));
    }
    if let Some(recovery_key) = &options.recovery_key {
        flag("--recovery-key", path(recovery_key));
    }
    args
}

fn deadline_arg(deadline: Duration) -> String {
    if deadline.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", deadline.as_millis())
    } else {
        format!("{}.{:09}s", deadline.as_secs(), deadline.subsec_nanos())
    }
}

fn enforcement(mode: Enforcement, [require, best_effort, off]: [&str; 3]) -> String {
    match mode {
        Enforcement::Require => require,
        Enforcement::BestEffort => best_effort,
        Enforcement::Off => off,
    }
    .into()
}

/// Equal, except that a fractional-second deadline goes through an f64 and
/// may come back a nanosecond off.
fn assert_same_serve(a: &ServeOptions, b: &ServeOptions) {
    let close = a.request_deadline.abs_diff(b.request_deadline) <= Duration::from_nanos(1);
    assert!(close, "{a:?} vs {b:?}");
    let b = ServeOptions {
        request_deadline: a.request_deadline,
        ..b.clone()
    };
    assert_eq!(*a, b);
}
