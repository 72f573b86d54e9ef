//! `sceau selftest --sandbox`: proves the sandbox on this machine.
//!
//! For each forbidden action, a forked child puts itself in the sandbox
//! `sceau serve` would use, with the same `--landlock` and `--seccomp` modes
//! and the same defaults, then tries the action. The parent reports PASS when
//! the action was refused or the child was killed for it, and FAIL when it
//! went through. So `--seccomp=log` or `--landlock=off` show, as FAIL lines,
//! what the weaker sandbox lets through.
//!
//! Some probes need something to aim at that exists whatever the machine
//! runs: the parent makes a private directory with a listening unix socket in
//! it before any sandbox, and removes both at the end.
//!
//! The fork is `sys::in_child`, which checks its own precondition (a single
//! thread) at run time, so this module needs no `unsafe`.
#![forbid(unsafe_code)]

use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

use crate::cli::SelfTestOptions;
use crate::sandbox::landlock::LandlockPolicy;
use crate::sandbox::{self, TpmAccess};
use sceau_sys as sys;

/// Child exit codes.
const REFUSED: i32 = 0;
const ALLOWED: i32 = 1;
const SANDBOX_FAILED: i32 = 2;

/// Targets made before the sandbox, outside anything it grants.
struct Targets {
    /// A private directory (mode 0700) under `$TMPDIR` or /tmp.
    dir: PathBuf,
    /// A unix socket listening in `dir`: stands for D-Bus, or any local
    /// service, without depending on one being there.
    listening: PathBuf,
}

struct Probe {
    name: &'static str,
    attempt: fn(&Targets) -> bool,
}

/// Each attempt returns whether the action succeeded.
const PROBES: [Probe; 9] = [
    Probe {
        name: "open /etc/passwd for reading",
        attempt: |_| std::fs::File::open("/etc/passwd").is_ok(),
    },
    Probe {
        name: "create a file outside the sandbox (in a temporary directory)",
        attempt: |targets| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(targets.dir.join("created-inside-the-sandbox"))
                .is_ok()
        },
    },
    Probe {
        name: "connect TCP to 127.0.0.1:9",
        attempt: |_| {
            let error = std::net::TcpStream::connect(("127.0.0.1", 9)).err();
            // Refused by the peer means the connect itself was allowed.
            error.is_none_or(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        },
    },
    Probe {
        name: "connect to a listening unix socket (as to D-Bus)",
        attempt: |targets| UnixStream::connect(&targets.listening).is_ok(),
    },
    Probe {
        name: "make a system call outside the allowlist (unshare)",
        attempt: |_| sys::unshare_nothing().is_ok(),
    },
    Probe {
        name: "create a user namespace (clone with CLONE_NEWUSER)",
        attempt: |_| sys::clone_into_new_user_namespace().is_ok(),
    },
    Probe {
        name: "reach clone3, whose flags seccomp cannot check",
        // ENOSYS is the filter's answer (glibc then falls back to clone);
        // any other answer came from the kernel.
        attempt: |_| sys::clone3_without_arguments().raw_os_error() != Some(libc::ENOSYS),
    },
    Probe {
        name: "make the process dumpable again",
        attempt: |_| sys::set_dumpable().is_ok(),
    },
    Probe {
        name: "hold or gain a capability",
        attempt: |_| {
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

/// What the selftest found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every forbidden action was refused.
    AllRefused,
    /// At least one went through (its FAIL line says which).
    SomeAllowed,
    /// The sandbox could not be put in place, so no probe ran and nothing
    /// is known about it: not a hole, and not a pass. Says why and what to do.
    NotApplied(String),
}

/// Applies the sandbox once on its own, then runs every probe. Fails only
/// when the targets cannot be made.
pub fn run(options: &SelfTestOptions) -> std::io::Result<Verdict> {
    let tpm = TpmAccess::for_tcti(&options.tcti);
    // The sandbox grants the TPM device by path, so a machine without it
    // cannot build the sandbox at all; `serve` would have stopped earlier,
    // at the TPM, with this same line.
    if let Some(TpmAccess::Device(path)) = &tpm
        && let Some(failure) = sceau_tpm::device::diagnose_device(path)
    {
        return Ok(Verdict::NotApplied(failure.to_string()));
    }
    if !sandbox_applies(options, &tpm) {
        return Ok(Verdict::NotApplied(
            "the line above, from a child process that tried it, says why".into(),
        ));
    }
    let dir = private_directory()?;
    let outcome = UnixListener::bind(dir.join("listening.sock")).map(|listener| {
        let targets = Targets {
            listening: dir.join("listening.sock"),
            dir: dir.clone(),
        };
        let verdict = run_probes(options, &tpm, &targets);
        drop(listener);
        verdict
    });
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

/// Whether a child can put itself in the sandbox; it prints why not.
fn sandbox_applies(options: &SelfTestOptions, tpm: &Option<TpmAccess>) -> bool {
    let status = sys::in_child(|| match apply(options, tpm) {
        Ok(()) => REFUSED,
        Err(e) => {
            eprintln!("sceau: the sandbox could not be applied: {e}");
            SANDBOX_FAILED
        }
    });
    matches!(status.map(|s| s.code()), Ok(Some(REFUSED)))
}

fn run_probes(options: &SelfTestOptions, tpm: &Option<TpmAccess>, targets: &Targets) -> Verdict {
    let mut verdict = Verdict::AllRefused;
    for probe in &PROBES {
        // `sceau selftest` never starts a thread, so in_child may fork.
        let outcome = match sys::in_child(|| probe_in_sandbox(options, tpm, targets, probe)) {
            Ok(status) if status.code() == Some(SANDBOX_FAILED) => {
                return Verdict::NotApplied(format!(
                    "it failed in the probe \"{}\" after working once (the line above says why)",
                    probe.name
                ));
            }
            Ok(status) => describe(status),
            Err(e) => Err(format!("could not fork: {e}")),
        };
        match outcome {
            Ok(how) => println!("PASS {}: {how}", probe.name),
            Err(why) => {
                verdict = Verdict::SomeAllowed;
                println!("FAIL {}: {why}", probe.name);
            }
        }
    }
    verdict
}

/// A new directory only this run uses; `create` (not `create_dir_all`)
/// fails on anything already there, a planted symlink included.
fn private_directory() -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("sceau-selftest-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

fn probe_in_sandbox(
    options: &SelfTestOptions,
    tpm: &Option<TpmAccess>,
    targets: &Targets,
    probe: &Probe,
) -> i32 {
    if let Err(e) = apply(options, tpm) {
        eprintln!("sceau: the sandbox could not be applied: {e}");
        return SANDBOX_FAILED;
    }
    if (probe.attempt)(targets) {
        ALLOWED
    } else {
        REFUSED
    }
}

/// The daemon's sandbox, step for step (see `sandbox`), in the modes given.
fn apply(options: &SelfTestOptions, tpm: &Option<TpmAccess>) -> Result<(), sandbox::SandboxError> {
    sandbox::forbid_core_dumps().map_err(sandbox::SandboxError::CoreDumps)?;
    let policy = LandlockPolicy {
        tpm: tpm.clone(),
        ..LandlockPolicy::default()
    };
    let files = sandbox::confine(&policy, options.landlock)?;
    let allow_inet = matches!(tpm, Some(TpmAccess::Tcp { .. }));
    sandbox::seccomp::install(allow_inet, files, options.seccomp)
}

fn describe(status: std::process::ExitStatus) -> Result<String, String> {
    match (status.code(), status.signal()) {
        (Some(REFUSED), _) => Ok("refused".into()),
        (_, Some(libc::SIGSYS)) => Ok("the process was killed by seccomp".into()),
        (Some(ALLOWED), _) => Err("the action succeeded".into()),
        (Some(sys::PROBE_PANICKED), _) => Err("the probe panicked".into()),
        _ => Err(format!("the probe ended unexpectedly ({status})")),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_private_directory_is_new_and_0700() {
        let dir = private_directory().unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
