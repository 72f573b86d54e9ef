//! Landlock: the filesystem and network rights sceau keeps after start-up.
//!
//! Every right the kernel knows is handled, and only what the TPM connection
//! needs is granted back. Files opened before (the TPM device, the listening
//! socket, stderr) keep working: Landlock checks rights when a file is opened.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use super::{Enforcement, SandboxError, TpmAccess};

/// The newest ABI this build knows; older kernels get what they support.
const ABI_REQUESTED: ABI = ABI::V10;

/// What Landlock must still allow.
#[derive(Debug, Default)]
pub struct LandlockPolicy {
    pub tpm: Option<TpmAccess>,
    /// A directory where sceau may delete its own socket at exit (only when
    /// it bound the socket itself).
    pub removable_socket_dir: Option<PathBuf>,
    // No right for `$NOTIFY_SOCKET`: sceau connects to it before the sandbox
    // (`notify::connect`), so no pathname unix socket is ever resolved after.
}

/// Applies the policy to the calling thread and the threads it creates later.
///
/// Anything short of full enforcement is logged as a warning. With
/// [`Enforcement::Require`] (the default) a kernel that enforces no Landlock
/// rule at all is an error: seccomp allows `openat` (the TPM may have to be
/// reopened), so without Landlock the daemon could open any file.
pub fn restrict(
    policy: &LandlockPolicy,
    enforcement: Enforcement,
) -> Result<Option<RestrictionStatus>, SandboxError> {
    if enforcement == Enforcement::Off {
        log::warn!(
            "landlock is off (--landlock=off): no filesystem or network confinement beyond seccomp"
        );
        return Ok(None);
    }
    let status = build(policy)
        .and_then(|ruleset| ruleset.restrict_self().map_err(|e| e.to_string()))
        .map_err(SandboxError::Landlock)?;
    let words = describe(&status.ruleset, status.landlock);
    match status.ruleset {
        RulesetStatus::FullyEnforced => log::info!("landlock: {words}"),
        RulesetStatus::PartiallyEnforced | RulesetStatus::NotEnforced => {
            log::warn!("landlock: {words}")
        }
    }
    if enforcement == Enforcement::Require && status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::Landlock(format!(
            "{words}, and sceau does not serve without it: {}; to start anyway, with no \
             filesystem confinement, pass --landlock=best-effort",
            kernel_fix(&status.landlock)
        )));
    }
    Ok(Some(status))
}

/// What an operator changes so that the kernel enforces Landlock.
fn kernel_fix(landlock: &LandlockStatus) -> &'static str {
    match landlock {
        LandlockStatus::NotEnabled => {
            "enable it at boot by adding landlock to the lsm= kernel parameter (for example \
             lsm=landlock,lockdown,yama,apparmor,bpf)"
        }
        _ => {
            "Landlock needs Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK=y and \
             enabled at boot (landlock in CONFIG_LSM or in the lsm= kernel parameter)"
        }
    }
}

/// What the kernel did with the ruleset, in words for the log: never the
/// crate's Debug form (`Available { effective_abi: V7, kernel_abi: None }`).
fn describe(ruleset: &RulesetStatus, landlock: LandlockStatus) -> String {
    let kernel = match landlock {
        LandlockStatus::NotImplemented => "this kernel has no Landlock".to_string(),
        LandlockStatus::NotEnabled => "Landlock is disabled on this kernel".to_string(),
        LandlockStatus::Available { effective_abi, .. } => {
            format!("kernel Landlock ABI {effective_abi}, sceau asks for up to {ABI_REQUESTED}")
        }
    };
    match ruleset {
        RulesetStatus::FullyEnforced => format!("fully enforced ({kernel})"),
        RulesetStatus::PartiallyEnforced => format!(
            "partially enforced ({kernel}; rights newer than the kernel's ABI are not restricted)"
        ),
        RulesetStatus::NotEnforced => format!("not enforced ({kernel})"),
    }
}

fn build(policy: &LandlockPolicy) -> Result<landlock::RulesetCreated, String> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_REQUESTED))
        .and_then(|r| r.handle_access(AccessNet::from_all(ABI_REQUESTED)))
        .and_then(|r| r.scope(Scope::from_all(ABI_REQUESTED)))
        .and_then(|r| r.create())
        .map_err(|e| e.to_string())?;
    match &policy.tpm {
        Some(TpmAccess::Device(path)) => {
            ruleset = with_path(ruleset, path, AccessFs::ReadFile | AccessFs::WriteFile)?;
        }
        Some(TpmAccess::Tcp { ports }) => {
            for port in ports {
                ruleset = ruleset
                    .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                    .map_err(|e| e.to_string())?;
            }
        }
        None => {}
    }
    if let Some(dir) = &policy.removable_socket_dir {
        ruleset = with_path(ruleset, dir, AccessFs::RemoveFile.into())?;
    }
    Ok(ruleset)
}

fn with_path(
    ruleset: landlock::RulesetCreated,
    path: &Path,
    access: landlock::BitFlags<AccessFs>,
) -> Result<landlock::RulesetCreated, String> {
    let fd = PathFd::new(path).map_err(|e| match e {
        landlock::PathFdError::OpenCall { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            format!("{} does not exist, so no rule can grant it", path.display())
        }
        e => format!("{}: {e}", path.display()),
    })?;
    ruleset
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log line is words and numbers, not a Debug structure.
    #[test]
    fn the_status_is_described_in_words() {
        let available = LandlockStatus::Available {
            effective_abi: ABI::V7,
            kernel_abi: None,
        };
        assert_eq!(
            describe(&RulesetStatus::FullyEnforced, available),
            "fully enforced (kernel Landlock ABI 7, sceau asks for up to 10)"
        );
        assert_eq!(
            describe(&RulesetStatus::NotEnforced, LandlockStatus::NotImplemented),
            "not enforced (this kernel has no Landlock)"
        );
        let partial = describe(&RulesetStatus::PartiallyEnforced, available);
        for debug in ["{", "V7", "None", "Available"] {
            assert!(!partial.contains(debug), "{partial}");
        }
    }
}
