//! `sceau-rig`: the test kit for scripts. The interop scripts and the quick
//! start start their swtpm with it, so that one starter (`swtpm::Swtpm`)
//! serves both the Rust tests and the scripts; the integration tests run
//! sceau through its `no-landlock` subcommand.
//!
//! ```text
//! sceau-rig swtpm --state DIR [--port N]
//! sceau-rig provision --ca DIR --state DIR
//! sceau-rig no-landlock PROGRAM [ARGS...]
//! sceau-rig tpm-proxy --tpm-port P --profile FILE [--scale F] [--seed N]
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
//! `tpm-proxy` puts the TPM latency model (`tpm_proxy::TpmProxy`) in front
//! of the swtpm on P, P + 1: it listens on a free loopback pair Q, Q + 1,
//! prints `port=Q` on one line and stays in the foreground, delaying each
//! TPM command as the profile FILE says (`profiles/*.profile`), times F
//! (default 1), with the jitter seeded by N. Point a client at it with
//! `--tcti swtpm:host=127.0.0.1,port=Q`. On SIGTERM or SIGINT it prints the
//! command counts, the modelled delay and the handles still held on stderr
//! and exits 0. SIGUSR1 prints the same report and starts the counts again;
//! SIGUSR2 turns the delays off, and on again (a script compares phases of
//! one run). A profile that does not parse is reported with its line and
//! exit status 2.
//!
//! `no-landlock` installs the seccomp filter of `no_landlock` and execs
//! PROGRAM, as on a kernel without Landlock.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use sceau_testkit::no_landlock::{RIG_SUBCOMMAND, exec_without_landlock};
use sceau_testkit::tpm_proxy::{DEFAULT_SEED, Profile, TpmProxy};
use sceau_testkit::{EkCa, Swtpm};
use tokio::signal::unix::{SignalKind, signal};

const USAGE: &str = "usage: sceau-rig swtpm --state DIR [--port N]\n       \
                     sceau-rig provision --ca DIR --state DIR\n       \
                     sceau-rig no-landlock PROGRAM [ARGS...]\n       \
                     sceau-rig tpm-proxy --tpm-port P --profile FILE [--scale F] [--seed N]";

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
        Some("tpm-proxy") => match parse_tpm_proxy_args(args) {
            Ok(options) => run_tpm_proxy(options),
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
        _ => usage_error("expected a subcommand: swtpm, provision, no-landlock or tpm-proxy"),
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

struct TpmProxyOptions {
    tpm_port: u16,
    profile: Profile,
    scale: f64,
    seed: u64,
}

/// `--tpm-port P --profile FILE [--scale F] [--seed N]`, in any order.
fn parse_tpm_proxy_args(
    mut args: impl Iterator<Item = OsString>,
) -> Result<TpmProxyOptions, String> {
    let (mut tpm_port, mut profile, mut scale, mut seed) = (None, None, 1.0, DEFAULT_SEED);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{} needs a value", flag.to_string_lossy()))?;
        let text = value.to_string_lossy();
        match flag.to_str() {
            Some("--tpm-port") => {
                let parsed = text.parse::<u16>().ok().filter(|p| *p > 0 && *p < u16::MAX);
                tpm_port = Some(parsed.ok_or_else(|| {
                    format!("--tpm-port {text}: expected swtpm's command port (1-65534)")
                })?);
            }
            Some("--profile") => {
                let path = PathBuf::from(&value);
                profile = Some(Profile::load(&path).map_err(|e| e.to_string())?);
            }
            Some("--scale") => {
                scale = text
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("--scale {text}: expected a number, 0 or more"))?;
            }
            Some("--seed") => {
                seed = text
                    .parse::<u64>()
                    .map_err(|_| format!("--seed {text}: expected a whole number"))?;
            }
            _ => return Err(format!("unknown flag {}", flag.to_string_lossy())),
        }
    }
    Ok(TpmProxyOptions {
        tpm_port: tpm_port.ok_or("tpm-proxy needs --tpm-port P (swtpm's command port)")?,
        profile: profile.ok_or("tpm-proxy needs --profile FILE")?,
        scale,
        seed,
    })
}

/// Runs the proxy until SIGTERM or SIGINT, then reports what it saw.
fn run_tpm_proxy(options: TpmProxyOptions) -> ExitCode {
    let start = || {
        let proxy = TpmProxy::start_seeded(options.tpm_port, options.profile, options.seed);
        proxy.set_scale(options.scale);
        proxy
    };
    // A script measures phases of one run: SIGUSR1 reports and starts a new
    // count; SIGUSR2 turns the delays off and on again.
    let mut delays_on = true;
    let on_user_signal = |proxy: &TpmProxy, signal: UserSignal| match signal {
        UserSignal::One => {
            eprint!("{}", proxy_report(proxy));
            proxy.reset_counts();
        }
        UserSignal::Two => {
            delays_on = !delays_on;
            let scale = if delays_on { options.scale } else { 0.0 };
            proxy.set_scale(scale);
            eprintln!("sceau-rig: tpm-proxy: scale {scale}");
        }
    };
    hold_until_signalled(start, TpmProxy::port, on_user_signal, |proxy| {
        eprint!("{}", proxy_report(&proxy));
    })
}

/// `N TPM commands, modelled delay D`, one `Name count` line each, and the
/// handles still held.
fn proxy_report(proxy: &TpmProxy) -> String {
    let mut report = format!(
        "sceau-rig: tpm-proxy: {} TPM commands, modelled delay {:.3} s\n",
        proxy.total_commands(),
        proxy.modelled_delay().as_secs_f64()
    );
    for (name, count) in proxy.counts() {
        report.push_str(&format!("  {name} {count}\n"));
    }
    let held: Vec<String> = proxy
        .held_handles()
        .iter()
        .map(|h| format!("{h:#010x}"))
        .collect();
    report.push_str(&format!("  handles held: {}\n", held.len()));
    if !held.is_empty() {
        report.push_str(&format!("  ({})\n", held.join(" ")));
    }
    report
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
    hold_until_signalled(
        || Swtpm::start_preferring(&state, port),
        Swtpm::port,
        |_, _| {},
        drop,
    )
}

/// Starts what `start` makes, prints `port=P` for it and holds it until
/// SIGTERM or SIGINT, then hands it to `finish`. SIGUSR1 and SIGUSR2 in
/// between go to `on_user_signal`.
fn hold_until_signalled<T>(
    start: impl FnOnce() -> T,
    port: impl FnOnce(&T) -> u16,
    mut on_user_signal: impl FnMut(&T, UserSignal),
    finish: impl FnOnce(T),
) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        // Listening before the start: a signal that arrives meanwhile is
        // kept, and stops the rig as soon as it is up.
        let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM listener");
        let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT listener");
        let mut user1 = signal(SignalKind::user_defined1()).expect("a SIGUSR1 listener");
        let mut user2 = signal(SignalKind::user_defined2()).expect("a SIGUSR2 listener");
        let held = start();
        let mut stdout = std::io::stdout().lock();
        // The one line the scripts wait for; nothing is written after it, so
        // a reader that has gone away cannot fail the rig.
        if writeln!(stdout, "port={}", port(&held))
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
        loop {
            tokio::select! {
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
                _ = user1.recv() => on_user_signal(&held, UserSignal::One),
                _ = user2.recv() => on_user_signal(&held, UserSignal::Two),
            }
        }
        finish(held);
        ExitCode::SUCCESS
    })
}

/// SIGUSR1 or SIGUSR2.
enum UserSignal {
    One,
    Two,
}
