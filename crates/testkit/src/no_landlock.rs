//! Runs a command as on a kernel without Landlock: a seccomp filter answers
//! the three Landlock system calls with ENOSYS, as a kernel built without
//! Landlock does. The filter survives sceau's re-exec of itself (filters are
//! inherited across exec).
//!
//! The filter is installed by `sceau-rig no-landlock PROGRAM ARGS...` in its
//! own process, which then execs PROGRAM: the pid, the environment and the
//! open files stay those of the command the test built. Installing it in the
//! test's child between fork and exec instead would need
//! `CommandExt::pre_exec`, which is `unsafe`; going through the rig keeps the
//! kit free of unsafe code, at the cost of one exec.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::Command;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// The `sceau-rig` subcommand that applies [`filter`] and execs its arguments.
pub const RIG_SUBCOMMAND: &str = "no-landlock";

/// Rebuilds `command` to run through `sceau-rig no-landlock`. Call it before
/// redirecting the command's standard streams: those cannot be read back from
/// a `Command`, so they are not carried over (its program, arguments,
/// environment changes and working directory are).
pub fn deny_landlock(command: &mut Command) {
    let mut wrapped = Command::new(crate::sceau::rig_bin());
    wrapped
        .arg(RIG_SUBCOMMAND)
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    *command = wrapped;
}

/// The filter: every system call allowed but the three Landlock ones, which
/// fail with ENOSYS.
pub fn filter() -> BpfProgram {
    let rules = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ]
    .into_iter()
    .map(|nr| (nr, Vec::new()))
    .collect::<BTreeMap<_, _>>();
    let arch = TargetArch::try_from(std::env::consts::ARCH).expect("a seccomp architecture");
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .expect("the no-Landlock filter")
}

/// What `sceau-rig no-landlock` does: installs [`filter`] in this process
/// (with no_new_privs, which seccomp requires) and execs `program`. Returns
/// only on failure.
pub fn exec_without_landlock(program: &OsString, args: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    if let Err(e) = seccompiler::apply_filter(&filter()) {
        return std::io::Error::other(format!("installing the no-Landlock filter: {e}"));
    }
    Command::new(program).args(args).exec()
}
