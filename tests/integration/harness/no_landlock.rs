//! Runs a command as on a kernel without Landlock: a seccomp filter,
//! installed in the child between fork and exec, answers the three Landlock
//! system calls with ENOSYS, as a kernel built without Landlock does. The
//! filter survives sceau's re-exec of itself (filters are inherited).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::Command;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

pub fn deny_landlock(command: &mut Command) {
    let rules = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ]
    .into_iter()
    .map(|nr| (nr, Vec::new()))
    .collect::<BTreeMap<_, _>>();
    let arch = TargetArch::try_from(std::env::consts::ARCH).expect("a seccomp architecture");
    // Built here, in the parent: the child between fork and exec must not
    // allocate.
    let program: BpfProgram = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .expect("the no-Landlock filter");
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe work is allowed. apply_filter makes two system calls
    // (prctl(PR_SET_NO_NEW_PRIVS), seccomp) on the program built above and
    // allocates nothing; on failure the error is the errno, without allocation.
    unsafe {
        command.pre_exec(move || {
            seccompiler::apply_filter(&program).map_err(|_| std::io::Error::last_os_error())
        });
    }
}
