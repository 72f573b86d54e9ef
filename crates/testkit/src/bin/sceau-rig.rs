//! `sceau-rig`: the test kit for scripts. The interop scripts and the quick
//! start start their swtpm with it, so that one starter (`swtpm::Swtpm`)
//! serves both the Rust tests and the scripts; the integration tests run
//! sceau through its `no-landlock` subcommand.
//!
//! ```text
//! sceau-rig swtpm --state DIR [--port N]
//! sceau-rig provision --ca DIR --state DIR
//! sceau-rig no-landlock PROGRAM [ARGS...]
//! ```
//!
//! `swtpm` starts a throwaway swtpm with its state (and `swtpm.log`) in DIR,
//! on a free loopback port pair below the kernel's ephemeral range (N, N + 1
//! first if given and free), waits until both ports answer, prints
//! `port=P` on one line and stays in the foreground. On SIGTERM or SIGINT it
//! stops swtpm, reaps it and exits 0, so a script holds one pid, its own
//! child, for the pair (a swtpm left to itself would outlive the rig). If
//! swtpm cannot be started it prints why, with swtpm's log, and exits
//! non-zero without printing a port.
//!
//! `provision` manufactures a TPM in the (new or empty) state DIR whose NV
//! holds an RSA 2048 EK certificate (0x01C00002) and an ECC P-256 one
//! (0x01C0000A) issued by the manufacturer CA in `--ca` DIR, which it creates
//! first if DIR holds none (`ek_ca::EkCa`); the CA's `roots.pem` and
//! `intermediates.pem` are what a verifier trusts. It prints one line saying
//! what it made, or why it could not and exits 1.
//!
//! `no-landlock` installs the seccomp filter of `no_landlock` and execs
//! PROGRAM, as on a kernel without Landlock.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use sceau_testkit::no_landlock::{RIG_SUBCOMMAND, exec_without_landlock};
use sceau_testkit::{EkCa, Swtpm};
use tokio::signal::unix::{SignalKind, signal};

const USAGE: &str = "usage: sceau-rig swtpm --state DIR [--port N]\n       \
                     sceau-rig provision --ca DIR --state DIR\n       \
                     sceau-rig no-landlock PROGRAM [ARGS...]";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let command = args.next();
    match command.as_ref().and_then(|c| c.to_str()) {
        Some("swtpm") => match parse_swtpm_args(args) {
            Ok((state, port)) => run_swtpm(state, port),
            Err(why) => usage_error(&why),
        },
        Some("provision") => match parse_provision_args(args) {
            Ok((ca, state)) => provision(&ca, &state),
            Err(why) => usage_error(&why),
        },
        Some(c) if c == RIG_SUBCOMMAND => {
            let rest: Vec<OsString> = args.collect();
            let Some((program, program_args)) = rest.split_first() else {
                return usage_error("no-landlock needs a PROGRAM to run");
            };
            let error = exec_without_landlock(program, program_args);
            eprintln!(
                "sceau-rig: cannot run {}: {error}",
                program.to_string_lossy()
            );
            ExitCode::from(127)
        }
        _ => usage_error("expected a subcommand: swtpm, provision or no-landlock"),
    }
}

fn usage_error(why: &str) -> ExitCode {
    eprintln!("sceau-rig: {why}\n{USAGE}");
    ExitCode::from(2)
}

/// `--state DIR [--port N]`, in either order.
fn parse_swtpm_args(
    mut args: impl Iterator<Item = OsString>,
) -> Result<(PathBuf, Option<u16>), String> {
    let (mut state, mut port) = (None, None);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{} needs a value", flag.to_string_lossy()))?;
        match flag.to_str() {
            Some("--state") => state = Some(PathBuf::from(value)),
            Some("--port") => {
                let text = value.to_string_lossy();
                let parsed = text
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p < u16::MAX)
                    .ok_or_else(|| format!("--port {text}: expected a port below 65535"))?;
                port = Some(parsed);
            }
            _ => return Err(format!("unknown flag {}", flag.to_string_lossy())),
        }
    }
    let state = state.ok_or("swtpm needs --state DIR")?;
    Ok((state, port))
}

/// `--ca DIR --state DIR`, in either order.
fn parse_provision_args(
    mut args: impl Iterator<Item = OsString>,
) -> Result<(PathBuf, PathBuf), String> {
    let (mut ca, mut state) = (None, None);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{} needs a value", flag.to_string_lossy()))?;
        match flag.to_str() {
            Some("--ca") => ca = Some(PathBuf::from(value)),
            Some("--state") => state = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {}", flag.to_string_lossy())),
        }
    }
    Ok((
        ca.ok_or("provision needs --ca DIR")?,
        state.ok_or("provision needs --state DIR")?,
    ))
}

/// Opens or creates the CA, then manufactures the TPM.
fn provision(ca: &std::path::Path, state: &std::path::Path) -> ExitCode {
    match EkCa::open_or_create(ca).and_then(|ca| ca.provision_tpm(state).map(|()| ca)) {
        Ok(ca) => {
            println!(
                "provisioned {}: EK certificates at 0x01c00002 (RSA 2048) and 0x01c0000a \
                 (ECC P-256) from the CA in {} (roots.pem, intermediates.pem)",
                state.display(),
                ca.dir().display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sceau-rig: provision {}: {e}", state.display());
            ExitCode::FAILURE
        }
    }
}

/// Starts swtpm, reports its port, and holds it until SIGTERM or SIGINT.
fn run_swtpm(state: PathBuf, port: Option<u16>) -> ExitCode {
    if let Err(e) = std::fs::create_dir_all(&state) {
        eprintln!("sceau-rig: cannot create {}: {e}", state.display());
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        // Listening before swtpm exists: a signal that arrives while it
        // starts is kept, and stops it as soon as it answers.
        let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM listener");
        let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT listener");
        let tpm = Swtpm::start_preferring(&state, port);
        let mut stdout = std::io::stdout().lock();
        // The one line the scripts wait for; nothing is written after it, so
        // a reader that has gone away cannot fail the rig.
        if writeln!(stdout, "port={}", tpm.port())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        drop(tpm);
        ExitCode::SUCCESS
    })
}
