//! `sceau selftest --sandbox`: proves the sandbox on this machine.
//!
//! For each forbidden action, a forked child puts itself in exactly the
//! sandbox `sceau serve` uses (with the seccomp filter in kill mode), then
//! tries the action. The parent reports PASS when the action was refused or
//! the child was killed for it, and FAIL when it went through.
//!
//! The fork is `sys::in_child`, which checks its own precondition (a single
//! thread) at run time, so this module needs no `unsafe`.
#![forbid(unsafe_code)]

use std::os::unix::process::ExitStatusExt;

use crate::sandbox::landlock::LandlockPolicy;
use crate::sandbox::{self, Enforcement, TpmAccess};
use crate::sys;

/// Child exit codes.
const REFUSED: i32 = 0;
const ALLOWED: i32 = 1;
const SANDBOX_FAILED: i32 = 2;

struct Probe {
    name: &'static str,
    attempt: fn() -> bool,
}

/// Each attempt returns whether the action succeeded.
const PROBES: [Probe; 5] = [
    Probe {
        name: "open /etc/passwd for reading",
        attempt: || std::fs::File::open("/etc/passwd").is_ok(),
    },
    Probe {
        name: "connect TCP to 127.0.0.1:9",
        attempt: || {
            let error = std::net::TcpStream::connect(("127.0.0.1", 9)).err();
            // Refused by the peer means the connect itself was allowed.
            error.is_none_or(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        },
    },
    Probe {
        name: "make a system call outside the allowlist (unshare)",
        attempt: || sys::unshare_nothing().is_ok(),
    },
    Probe {
        name: "make the process dumpable again",
        attempt: || sys::set_dumpable().is_ok(),
    },
    Probe {
        name: "hold or gain a capability",
        attempt: || {
            // Reading is allowed (capget), so a capability the drop missed
            // shows here; raising one needs capset, which seccomp refuses.
            let held = [
                caps::CapSet::Effective,
                caps::CapSet::Permitted,
                caps::CapSet::Bounding,
            ]
            .into_iter()
            .any(|set| caps::read(None, set).map_or(true, |c| !c.is_empty()));
            held || caps::raise(
                None,
                caps::CapSet::Effective,
                caps::Capability::CAP_SYS_ADMIN,
            )
            .is_ok()
        },
    },
];

/// Runs every probe; returns whether all were refused.
pub fn run(tcti: &str) -> bool {
    let tpm = TpmAccess::for_tcti(tcti);
    let mut all_refused = true;
    for probe in &PROBES {
        // `sceau selftest` never starts a thread, so in_child may fork.
        let outcome = match sys::in_child(|| probe_in_sandbox(&tpm, probe)) {
            Ok(status) => describe(status),
            Err(e) => Err(format!("could not fork: {e}")),
        };
        match outcome {
            Ok(how) => println!("PASS {}: {how}", probe.name),
            Err(why) => {
                all_refused = false;
                println!("FAIL {}: {why}", probe.name);
            }
        }
    }
    all_refused
}

fn probe_in_sandbox(tpm: &Option<TpmAccess>, probe: &Probe) -> i32 {
    if let Err(e) = apply(tpm) {
        eprintln!("sandbox: {e}");
        return SANDBOX_FAILED;
    }
    if (probe.attempt)() { ALLOWED } else { REFUSED }
}

/// The daemon's sandbox, step for step (see `sandbox`), Landlock required.
fn apply(tpm: &Option<TpmAccess>) -> Result<(), sandbox::SandboxError> {
    sandbox::forbid_core_dumps().map_err(sandbox::SandboxError::CoreDumps)?;
    let policy = LandlockPolicy {
        tpm: tpm.clone(),
        ..LandlockPolicy::default()
    };
    sandbox::confine(&policy, Enforcement::Require)?;
    let allow_inet = matches!(tpm, Some(TpmAccess::Tcp { .. }));
    sandbox::seccomp::install(allow_inet, Enforcement::Require)
}

fn describe(status: std::process::ExitStatus) -> Result<String, String> {
    match (status.code(), status.signal()) {
        (Some(REFUSED), _) => Ok("refused".into()),
        (_, Some(libc::SIGSYS)) => Ok("the process was killed by seccomp".into()),
        (Some(ALLOWED), _) => Err("the action succeeded".into()),
        (Some(SANDBOX_FAILED), _) => Err("the sandbox could not be applied".into()),
        (Some(sys::PROBE_PANICKED), _) => Err("the probe panicked".into()),
        _ => Err(format!("the probe ended unexpectedly ({status})")),
    }
}
