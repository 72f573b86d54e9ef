//! The sandbox sceau puts itself in once the TPM is open.
//!
//! The steps run in this order, each a function of its own, called one by
//! one from the start-up sequence in `commands/serve.rs`:
//!
//! 1. [`forbid_core_dumps`]: non-dumpable, RLIMIT_CORE 0 (first thing).
//! 2. [`landlock::restrict`]: no filesystem access but the TPM device, no TCP
//!    but the software TPM's ports. Per thread, so before any other thread.
//! 3. [`capabilities::drop_all`]: every set emptied, then checked empty.
//! 4. [`no_new_privs`]: no execve can ever grant privileges again.
//! 5. [`seccomp::install`]: a syscall allowlist on every thread (TSYNC), last,
//!    so that the filter needs neither `landlock_*` nor `capset` nor `seccomp`
//!    (and, before it, a filter answering `clone3` with ENOSYS).
//!
//! Before step 2, `serve` connects its sd_notify socket (`notify::connect`):
//! after step 5 no unix socket can be created or connected.
#![forbid(unsafe_code)]

pub mod capabilities;
pub mod landlock;
pub mod seccomp;

use std::path::PathBuf;

pub use sceau_sys::forbid_core_dumps;
use sceau_tpm::tcti::{Tcti, Transport};

/// What the TPM connection needs to keep working inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpmAccess {
    /// A character device (`device:/dev/tpmrm0`): read and write that path.
    Device(PathBuf),
    /// A network TPM (`swtpm:`/`mssim:`): TCP connect to its command and
    /// control ports.
    Tcp { ports: [u16; 2] },
}

impl TpmAccess {
    /// The access a TCTI needs; `None` for a TCTI sceau cannot confine
    /// (tabrmd, over D-Bus).
    pub fn for_tcti(tcti: &Tcti) -> Option<Self> {
        match tcti.transport() {
            Transport::Device { path } => Some(Self::Device(path.clone())),
            Transport::Swtpm { .. } | Transport::Mssim { .. } => {
                tcti.tcp_ports().map(|ports| Self::Tcp { ports })
            }
            Transport::Tabrmd { .. } => None,
        }
    }
}

/// How strictly a sandbox layer is applied (`--landlock`, `--seccomp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Fail to start unless the layer is in force.
    Require,
    /// Apply what the kernel supports and log what that was.
    BestEffort,
    /// Skip the layer (for debugging; logged as a warning).
    Off,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("making the process non-dumpable: {0}")]
    CoreDumps(std::io::Error),
    #[error("landlock: {0}")]
    Landlock(String),
    #[error("capabilities: {0}")]
    Capabilities(String),
    #[error("setting no_new_privs: {0}")]
    NoNewPrivs(std::io::Error),
    #[error("seccomp: {0}")]
    Seccomp(String),
}

pub fn no_new_privs() -> Result<(), SandboxError> {
    sceau_sys::set_no_new_privs().map_err(SandboxError::NoNewPrivs)
}

/// Whether Landlock confines file access, as [`confine`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    /// Landlock is (fully or partially) enforced: files are its business.
    ConfinedByLandlock,
    /// `--landlock=off`, or best-effort on a kernel that enforces none:
    /// seccomp then refuses the file calls it would leave to Landlock.
    NotConfined,
}

/// Steps 2 to 4, which must run while the process has one thread. `serve`
/// and `selftest` both call exactly this, and pass the result to
/// [`seccomp::install`].
pub fn confine(
    policy: &landlock::LandlockPolicy,
    enforcement: Enforcement,
) -> Result<Files, SandboxError> {
    let status = landlock::restrict(policy, enforcement)?;
    capabilities::drop_all()?;
    no_new_privs()?;
    Ok(match status {
        Some(status) if status.ruleset != ::landlock::RulesetStatus::NotEnforced => {
            Files::ConfinedByLandlock
        }
        _ => Files::NotConfined,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_tpm_access_from_the_tcti() {
        let access = |text: &str| TpmAccess::for_tcti(&text.parse().unwrap());
        assert_eq!(
            access("device:/dev/tpmrm0"),
            Some(TpmAccess::Device("/dev/tpmrm0".into()))
        );
        assert_eq!(
            access("swtpm:host=127.0.0.1,port=2421"),
            Some(TpmAccess::Tcp {
                ports: [2421, 2422]
            })
        );
        assert_eq!(
            access("mssim"),
            Some(TpmAccess::Tcp {
                ports: [2321, 2322]
            })
        );
        assert_eq!(access("tabrmd:bus_type=system"), None);
    }
}
