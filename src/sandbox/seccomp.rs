//! seccomp: the system calls sceau may make once it serves.
//!
//! Installed last, on every thread at once (TSYNC), after the runtime and
//! the TPM thread exist. Two filters, three without Landlock:
//!
//! * [`clone3_filter`] makes `clone3` fail with ENOSYS. seccomp cannot read
//!   `clone3`'s flags (they are behind a pointer), and glibc falls back to
//!   `clone` on ENOSYS, whose flags the main filter can check.
//! * [`filter`], the allowlist: anything else kills the process (`--seccomp
//!   kill`, the default) or is logged (`--seccomp log`).
//!
//! What it refuses (the probes named are those of `sceau selftest --sandbox`,
//! in `selftest.rs`, run by
//! `hardening::selftest_reports_every_forbidden_action_refused`; its control
//! `hardening::selftest_takes_the_daemons_sandbox_flags` shows them getting
//! through with `--seccomp=off` or `log`):
//!
//! * every call outside the allowlist: `execve`, `ptrace`, `mount`,
//!   `unshare`, `setns`, `bpf`, `landlock_*`, `capset`, `seccomp`, module
//!   and credential calls, `socketpair`, `memfd_create`… (probe: `unshare`);
//! * `clone` with any `CLONE_NEW*` flag, so no new namespace (user, mount,
//!   network, pid, ipc, uts, cgroup) can be created; `clone3` gets ENOSYS
//!   (probes: a user namespace, clone3);
//! * `socket` for AF_UNIX, and `connect`, unless the TPM is reached over TCP
//!   (then `socket` is AF_INET/AF_INET6 streams only). Accepted connections
//!   come from `accept4`, and sd_notify uses a socket connected before the
//!   sandbox (`notify::connect`), so no new unix socket can reach D-Bus or
//!   any other local service. `sendmsg` is not allowed and `sendto` only
//!   without a destination address, so the sockets sceau has cannot be
//!   pointed elsewhere either (but see `connect` with a TCP TPM, below).
//!   Probe: connect to a listening unix socket; the `sendto`/`sendmsg`
//!   rules have none;
//! * `mmap`/`mprotect` with PROT_EXEC, `ioctl` but FIONBIO/FIOCLEX, `prctl`
//!   but PR_SET_NAME/PR_GET_NAME (probe: make the process dumpable again).
//!
//! What it leaves to Landlock: `openat` (the TPM device may have to be
//! reopened) and `unlink`/`unlinkat` (sceau's own socket at exit) reach only
//! the paths Landlock grants. Landlock is required by default; when it
//! confines nothing (`--landlock=off`, or `--landlock=best-effort` on a
//! kernel without it), a third filter, [`files_filter`], makes these three
//! calls fail with EACCES (`hardening::without_landlock_seccomp_refuses_files`,
//! probes: read /etc/passwd, create a file).
//!
//! With a TCP TPM, `connect` is allowed on any fd: Landlock limits TCP to the
//! swtpm ports (when enforced, ABI ≥ 4), and the only unix socket it could
//! re-point is the notify datagram socket, which can reach datagram sockets
//! only (D-Bus is a stream socket).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{Enforcement, Files, SandboxError};

/// Calls the runtime, gRPC, std and tpm2-tss (with OpenSSL) make while
/// serving. Found by tracing the integration suite (see docs/hardening.md).
const ALWAYS_ALLOWED: &[i64] = &[
    // I/O on fds opened before the sandbox, and on accepted connections.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_accept4,
    libc::SYS_close,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_fcntl,
    libc::SYS_lseek,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    // The event loop and timers.
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_ctl,
    libc::SYS_eventfd2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    // Threads and memory.
    libc::SYS_futex,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_madvise,
    // Each DEK gets a locked page (see sys::LockedPage).
    libc::SYS_mlock,
    libc::SYS_munlock,
    libc::SYS_brk,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sigaltstack,
    libc::SYS_exit,
    libc::SYS_exit_group,
    // Signals, identity, randomness.
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_tgkill,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getrandom,
    // Reading capabilities (the selftest checks none are left); capset stays out.
    libc::SYS_capget,
    // Removing sceau's own socket file at exit, and reopening the TPM after a
    // lost connection: which files these reach is Landlock's decision (only
    // the TPM device and the socket's directory); seccomp guards the kernel.
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_openat,
];

/// Answered by [`clone3_filter`] with ENOSYS; the main filter lets it pass
/// to that answer (a kill there would take precedence over the errno).
const ANSWERED_WITH_ENOSYS: i64 = libc::SYS_clone3;

/// The file calls the allowlist leaves to Landlock. When Landlock confines
/// nothing ([`Files::NotConfined`]), [`files_filter`] answers them with
/// EACCES, as Landlock would for any path it does not grant.
const LEFT_TO_LANDLOCK: [i64; 3] = [libc::SYS_openat, libc::SYS_unlink, libc::SYS_unlinkat];

/// Every namespace flag `clone` takes. CLONE_NEWTIME is missing because
/// `clone` cannot take it: its bit is part of the exit signal there.
const CLONE_NAMESPACE_FLAGS: i64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as i64;

/// What the installed filter allows, for the log line and the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// System calls the allowlist lets through in some form (`clone3`,
    /// which always fails with ENOSYS, not included).
    pub allowed: usize,
    /// Of those, the ones allowed only with certain arguments.
    pub with_argument_checks: usize,
}

/// Builds the allowlist filter. `allow_inet`: the TPM is reached over TCP
/// (swtpm's TCTI reconnects per command), so `socket` for TCP and `connect`
/// are allowed; otherwise neither is.
pub fn filter(allow_inet: bool, on_violation: SeccompAction) -> Result<BpfProgram, SandboxError> {
    let rules = rules(allow_inet)?;
    SeccompFilter::new(rules, on_violation, SeccompAction::Allow, target_arch()?)
        .and_then(BpfProgram::try_from)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// The filter installed first: `clone3` fails with ENOSYS, everything else
/// goes on to [`filter`].
pub fn clone3_filter() -> Result<BpfProgram, SandboxError> {
    errno_filter(&[ANSWERED_WITH_ENOSYS], libc::ENOSYS)
}

/// Installed only when Landlock confines nothing: `openat`, `unlink` and
/// `unlinkat` fail with EACCES. sceau then cannot reopen a lost TPM device
/// (it exits, for systemd to restart it) nor remove its own socket file at
/// exit (the next start replaces it), but it cannot open or delete any
/// other file either.
pub fn files_filter() -> Result<BpfProgram, SandboxError> {
    errno_filter(&LEFT_TO_LANDLOCK, libc::EACCES)
}

/// A filter that answers `calls` with `errno` and lets every other call
/// through to the next filter.
fn errno_filter(calls: &[i64], errno: i32) -> Result<BpfProgram, SandboxError> {
    let rules = calls.iter().map(|nr| (*nr, Vec::new())).collect();
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        target_arch()?,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// What [`filter`] allows, counted from the same rules it is built from.
/// `clone3` is not counted: the main filter lets it through only to the
/// ENOSYS answer of [`clone3_filter`].
pub fn counts(allow_inet: bool) -> Result<Counts, SandboxError> {
    let mut rules = rules(allow_inet)?;
    rules.remove(&ANSWERED_WITH_ENOSYS);
    Ok(Counts {
        allowed: rules.len(),
        with_argument_checks: rules.values().filter(|r| !r.is_empty()).count(),
    })
}

fn target_arch() -> Result<TargetArch, SandboxError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// The allowlist: a call with no rules is allowed whatever its arguments, a
/// call with rules only when one of them matches.
fn rules(allow_inet: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALWAYS_ALLOWED.iter().map(|nr| (*nr, Vec::new())).collect();
    rules.insert(ANSWERED_WITH_ENOSYS, Vec::new());
    // New threads, but no new namespace.
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![argument_masked(0, CLONE_NAMESPACE_FLAGS, 0)?])?],
    );
    // Only on a connected socket: no destination address (argument 4 NULL).
    // std, tokio and the TCTI send with send(2), which is sendto(…, NULL, 0).
    rules.insert(libc::SYS_sendto, vec![rule(vec![argument_is_null(4)?])?]);
    if allow_inet {
        rules.insert(libc::SYS_socket, tcp_socket_rules()?);
        rules.insert(libc::SYS_connect, Vec::new());
    }
    // No new executable memory: the code sceau runs is mapped before the
    // sandbox (the TCTI library included, see sys::pin_tcti_library).
    rules.insert(
        libc::SYS_mmap,
        vec![rule(vec![argument_masked(2, libc::PROT_EXEC, 0)?])?],
    );
    rules.insert(
        libc::SYS_mprotect,
        vec![rule(vec![argument_masked(2, libc::PROT_EXEC, 0)?])?],
    );
    // Non-blocking and close-on-exec flags only: no terminal or device ioctls.
    rules.insert(
        libc::SYS_ioctl,
        [libc::FIONBIO, libc::FIOCLEX]
            .into_iter()
            .map(|request| rule(vec![argument_is(1, request)?]))
            .collect::<Result<_, _>>()?,
    );
    // Threads name themselves (PR_SET_NAME) when they start; nothing else.
    // In particular PR_SET_DUMPABLE stays out, so dumpable cannot come back.
    rules.insert(
        libc::SYS_prctl,
        [libc::PR_SET_NAME, libc::PR_GET_NAME]
            .into_iter()
            .map(|option| rule(vec![argument_is(0, option as u64)?]))
            .collect::<Result<_, _>>()?,
    );
    Ok(rules)
}

/// TCP sockets only, for a TPM reached over TCP. No unix socket is ever
/// created after the sandbox (see the module doc).
fn tcp_socket_rules() -> Result<Vec<SeccompRule>, SandboxError> {
    [libc::AF_INET, libc::AF_INET6]
        .into_iter()
        .map(|domain| {
            // The type argument also carries SOCK_NONBLOCK|SOCK_CLOEXEC.
            rule(vec![
                argument_is(0, domain as u64)?,
                argument_masked(1, 0xf, libc::SOCK_STREAM as u64)?,
            ])
        })
        .collect()
}

fn argument_is_null(index: u8) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, 0)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

fn argument_is(index: u8, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

fn argument_masked(
    index: u8,
    mask: impl Into<i64>,
    value: u64,
) -> Result<SeccompCondition, SandboxError> {
    let mask = mask.into() as u64;
    SeccompCondition::new(
        index,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// Installs the filters on every thread of the process. `files`: what
/// [`super::confine`] found Landlock to do.
pub fn install(
    allow_inet: bool,
    files: Files,
    enforcement: Enforcement,
) -> Result<(), SandboxError> {
    let on_violation = match enforcement {
        Enforcement::Off => {
            log::warn!("seccomp is off (--seccomp=off)");
            return Ok(());
        }
        Enforcement::BestEffort => SeccompAction::Log,
        Enforcement::Require => SeccompAction::KillProcess,
    };
    let counts = counts(allow_inet)?;
    let main = filter(allow_inet, on_violation)?;
    // The errno filters first: once the main filter is in, `seccomp` itself
    // is refused. A call answered by an errno filter must stay in the main
    // filter's allowlist, or its kill would win over the errno.
    let mut programs = vec![clone3_filter()?];
    if files == Files::NotConfined {
        programs.push(files_filter()?);
    }
    programs.push(main);
    for program in &programs {
        seccompiler::apply_filter_all_threads(program)
            .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    }
    if files == Files::NotConfined {
        log::warn!(
            "seccomp: openat, unlink and unlinkat fail with EACCES, since Landlock confines no \
             file; a lost TPM device cannot be reopened (sceau exits instead)"
        );
    }
    let others = match enforcement {
        Enforcement::Require => "kill the process",
        _ => "are only logged (--seccomp=log)",
    };
    let message = format!(
        "seccomp: {} system calls allowed ({} of them only with certain arguments), \
         clone3 fails with ENOSYS, all others {others}",
        counts.allowed, counts.with_argument_checks
    );
    match enforcement {
        Enforcement::Require => log::info!("{message}"),
        _ => log::warn!("{message}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a TCP TPM, neither `socket` nor `connect` is in the filter.
    #[test]
    fn socket_and_connect_only_for_a_tcp_tpm() {
        let unix = counts(false).unwrap();
        let tcp = counts(true).unwrap();
        assert_eq!(tcp.allowed, unix.allowed + 2);
        assert_eq!(tcp.with_argument_checks, unix.with_argument_checks + 1);
        // The numbers docs/hardening.md quotes from the log line.
        assert_eq!((unix.allowed, unix.with_argument_checks), (59, 6));
        assert_eq!((tcp.allowed, tcp.with_argument_checks), (61, 7));
        let unix_rules = rules(false).unwrap();
        assert!(!unix_rules.contains_key(&libc::SYS_socket));
        assert!(!unix_rules.contains_key(&libc::SYS_connect));
        assert!(!unix_rules.contains_key(&libc::SYS_sendmsg));
        assert!(filter(false, SeccompAction::KillProcess).is_ok());
        assert!(clone3_filter().is_ok());
    }
}
