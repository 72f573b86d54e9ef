//! seccomp: the system calls sceau may make once it serves.
//!
//! Installed last, on every thread at once (TSYNC), after the runtime and
//! the TPM thread exist. Nothing here can create a namespace, load a module,
//! open a file, change credentials or capabilities, or add another filter.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{Enforcement, SandboxError};

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
    libc::SYS_sendto,
    libc::SYS_sendmsg,
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
    libc::SYS_clone,
    libc::SYS_clone3,
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
    // sd_notify opens a datagram socket per message (AF_UNIX only, below).
    libc::SYS_connect,
];

/// Builds the filter: the allowlist, with `socket` limited to AF_UNIX unless
/// the TPM is reached over TCP (swtpm's TCTI reconnects per command), and
/// `prctl` limited to thread names.
pub fn filter(allow_inet: bool, on_violation: SeccompAction) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALWAYS_ALLOWED.iter().map(|nr| (*nr, Vec::new())).collect();
    rules.insert(libc::SYS_socket, socket_rules(allow_inet)?);
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
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    SeccompFilter::new(rules, on_violation, SeccompAction::Allow, arch)
        .and_then(BpfProgram::try_from)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// Unix sockets of any type (sd_notify uses datagrams); TCP only, and only
/// for a TPM reached over TCP.
fn socket_rules(allow_inet: bool) -> Result<Vec<SeccompRule>, SandboxError> {
    let mut rules = vec![rule(vec![argument_is(0, libc::AF_UNIX as u64)?])?];
    if allow_inet {
        for domain in [libc::AF_INET, libc::AF_INET6] {
            // The type argument also carries SOCK_NONBLOCK|SOCK_CLOEXEC.
            rules.push(rule(vec![
                argument_is(0, domain as u64)?,
                argument_masked(1, 0xf, libc::SOCK_STREAM as u64)?,
            ])?);
        }
    }
    Ok(rules)
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

/// Installs the filter on every thread of the process.
pub fn install(allow_inet: bool, enforcement: Enforcement) -> Result<(), SandboxError> {
    let on_violation = match enforcement {
        Enforcement::Off => {
            log::warn!("seccomp is off (--seccomp=off)");
            return Ok(());
        }
        Enforcement::BestEffort => SeccompAction::Log,
        Enforcement::Require => SeccompAction::KillProcess,
    };
    let program = filter(allow_inet, on_violation.clone())?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    log::info!(
        "seccomp: {} allowed calls, others {on_violation:?}",
        ALWAYS_ALLOWED.len() + 5
    );
    Ok(())
}
