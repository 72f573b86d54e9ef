//! Command-line parsing of both binaries: `sceau::cli` (the daemon) and
//! `sceau_recover::cli` (the offline tool), both built on `sceau_cli`'s table.
//!
//! Input: NUL-separated strings. The first is `$SCEAU_TCTI` (empty: unset),
//! the rest are the arguments after the program name, as raw bytes (so not
//! necessarily UTF-8, as argv on Linux). Both parsers get the same arguments.
//!
//! Invariants, besides "no panic":
//! - `utf8_args` accepts exactly the all-UTF-8 argument lists, unchanged;
//! - `parse` is deterministic, and what it accepts is within the documented
//!   ranges (mode, SRK handle, deadline), with the TCTI from the flag, else
//!   the environment, else the default;
//! - accepted options, written back as arguments by the table's inverse
//!   (`Command::to_args`), parse to the same options;
//! - help is one of the texts the table derives;
//! - error messages carry no control characters (they reach a terminal),
//!   and each names a command that exists, for its usage line.
#![no_main]
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sceau::cli::{Command, DEFAULT_TCTI, PROGRAM, ServeOptions, SrkPublicOptions, parse};
use sceau_tpm::Tcti;

fuzz_target!(|data: &[u8]| {
    let mut fields = data.split(|&b| b == 0);
    let env = fields.next().unwrap_or_default();
    let env = (!env.is_empty()).then(|| String::from_utf8_lossy(env).into_owned());
    let raw: Vec<&[u8]> = fields.collect();

    let converted = sceau_cli::utf8_args(raw.iter().map(|a| OsString::from_vec(a.to_vec())));
    let strict: Option<Vec<String>> = raw
        .iter()
        .map(|a| String::from_utf8(a.to_vec()).ok())
        .collect();
    assert_eq!(converted.ok(), strict);

    // Lossy, so that non-UTF-8 inputs still exercise the parsers.
    let args: Vec<String> = raw
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    check_daemon(&args, env.as_deref());
    check_recover(&args);
});

fn check_daemon(args: &[String], env: Option<&str>) {
    let parsed = parse(args, env);
    assert_eq!(parsed, parse(args, env));
    let command = match parsed {
        Ok(command) => command,
        Err(error) => return check_error(&error, &PROGRAM),
    };
    match &command {
        Command::Serve(options) => check_serve(options, args, env),
        Command::SrkPublic(options) => check_tpm(options, args, env),
        Command::Enroll(sceau::cli::EnrollStep::Request(options)) => check_tpm(options, args, env),
        Command::Enroll(sceau::cli::EnrollStep::Respond { tpm, .. }) => check_tpm(tpm, args, env),
        Command::Help(text) => assert!(PROGRAM.help_texts().contains(text)),
        _ => {}
    }
    let Some(again) = command.to_args() else {
        return;
    };
    // No environment: the inverse names the TCTI itself.
    match (&command, parse(&again, None)) {
        (Command::Serve(a), Ok(Command::Serve(b))) => assert_same_serve(a, &b),
        (a, b) => assert_eq!(Ok(a.clone()), b, "{again:?}"),
    }
}

fn check_recover(args: &[String]) {
    use sceau_recover::cli::{self, Command};
    let parsed = cli::parse(args);
    assert_eq!(parsed, cli::parse(args));
    let command = match parsed {
        Ok(command) => command,
        Err(error) => return check_error(&error, &cli::PROGRAM),
    };
    if let Command::Help(text) = &command {
        assert!(cli::PROGRAM.help_texts().contains(text));
    }
    if let Some(again) = command.to_args() {
        assert_eq!(Ok(command), cli::parse(&again), "{again:?}");
    }
}

fn check_error(error: &sceau_cli::UsageError, program: &sceau_cli::Program) {
    let message = error.to_string();
    assert!(!message.chars().any(char::is_control), "{message:?}");
    if let Some(command) = error.command {
        assert!(program.command(command).is_some(), "{command}");
    }
}

/// The TCTI of a command: the flag's, else the environment's, else the
/// default.
fn check_tcti(tcti: &Tcti, args: &[String], env: Option<&str>) {
    if !args.iter().any(|a| a.starts_with("--tcti")) {
        let expected: Tcti = env.unwrap_or(DEFAULT_TCTI).parse().expect("accepted");
        assert_eq!(*tcti, expected);
    }
}

/// The TPM options of `srk-public` and `enroll request|respond`.
fn check_tpm(options: &SrkPublicOptions, args: &[String], env: Option<&str>) {
    if let Some(handle) = options.srk_handle {
        assert!((0x8100_0000..=0x81FF_FFFF).contains(&handle), "{handle:#x}");
    }
    check_tcti(&options.tcti, args, env);
}

fn check_serve(options: &ServeOptions, args: &[String], env: Option<&str>) {
    assert!(options.socket_mode <= 0o777);
    if let Some(handle) = options.srk_handle {
        assert!((0x8100_0000..=0x81FF_FFFF).contains(&handle), "{handle:#x}");
    }
    let deadline = options.request_deadline;
    assert!((Duration::from_millis(100)..=Duration::from_secs(60)).contains(&deadline));
    check_tcti(&options.tcti, args, env);
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
