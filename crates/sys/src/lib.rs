//! All of sceau's `unsafe`: the libc calls std does not wrap, the
//! environment writes of the start-up sequence, the OpenSSL initialisation
//! flag, and (in [`alloc`]) the wiping global allocator. Each block states why
//! it is sound, and audit/unsafe.md lists every one (scripts/check-unsafe.sh
//! keeps that list in step with these files). Everything this crate exports
//! is safe to call: where soundness needs a single thread, the function
//! checks it. The daemon, the TPM layer and every other crate of the
//! workspace forbid unsafe code, so a reviewer reads this crate and only it.
//!
//! [`hooks`] lives here because the lowest layer it switches (the allocator's
//! wipe) does: the daemon and the TPM layer read the same switches.

pub mod alloc;
pub mod hooks;

use std::ffi::CString;
use std::mem::MaybeUninit;

/// Sets the process umask and restores the previous one on drop.
///
/// The umask is process-wide. sceau binds its socket before it starts any
/// thread, so nothing else can create a file while the guard is alive.
pub struct UmaskGuard {
    previous: libc::mode_t,
}

impl UmaskGuard {
    pub fn set(mask: libc::mode_t) -> Self {
        // SAFETY: umask(2) has no failure mode and touches no memory.
        let previous = unsafe { libc::umask(mask) };
        Self { previous }
    }
}

impl Drop for UmaskGuard {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe { libc::umask(self.previous) };
    }
}

/// Holds SIGTERM, SIGINT and SIGHUP pending from just before the socket is
/// bound until the async runtime's handlers exist; dropping it releases them.
///
/// Without it, a stop request in that window would kill sceau with the
/// default action and leave its socket file behind, and so would a reload
/// (SIGHUP's default action is to end the process). Threads started while it
/// is held inherit the blocked mask, so a held signal is delivered to the
/// thread that drops the guard, once the handlers are installed.
pub struct DeferredStopSignals {
    set: libc::sigset_t,
}

impl DeferredStopSignals {
    pub fn hold() -> std::io::Result<Self> {
        Self::hold_these(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
    }

    /// Holds `signals` pending in the calling thread until the guard is
    /// dropped.
    fn hold_these(signals: &[libc::c_int]) -> std::io::Result<Self> {
        let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: the pointer is to writable storage for one sigset_t, owned
        // by this frame; sigemptyset writes only there.
        if unsafe { libc::sigemptyset(empty.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: sigemptyset returned 0, so it initialised the whole set.
        let mut set = unsafe { empty.assume_init() };
        for &signal in signals {
            // SAFETY: `set` is an initialised sigset_t owned by this frame,
            // and sigaddset writes only into it.
            if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Self::mask(libc::SIG_BLOCK, &set)?;
        Ok(Self { set })
    }

    fn mask(how: libc::c_int, set: &libc::sigset_t) -> std::io::Result<()> {
        // SAFETY: `set` is an initialised sigset_t and the old-mask pointer
        // is null, which pthread_sigmask accepts; it changes only this
        // thread's signal mask.
        let rc = unsafe { libc::pthread_sigmask(how, set, std::ptr::null_mut()) };
        match rc {
            0 => Ok(()),
            errno => Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}

impl Drop for DeferredStopSignals {
    fn drop(&mut self) {
        if let Err(e) = Self::mask(libc::SIG_UNBLOCK, &self.set) {
            log::error!("could not unblock the held signals: {e}");
        }
    }
}

/// Resolves a group name through NSS (files, sssd, …) as `chgrp` would.
pub fn group_id(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    let mut buffer_len = 1024;
    loop {
        let mut buffer = vec![0 as libc::c_char; buffer_len];
        let mut group = MaybeUninit::<libc::group>::uninit();
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer refers to live memory owned by this frame:
        // `name` is NUL-terminated, `group` is writable storage for one
        // `struct group`, `buffer` is `buffer_len` bytes, and `found` is a
        // writable pointer. getgrnam_r writes only within these.
        let rc = unsafe {
            libc::getgrnam_r(
                name.as_ptr(),
                group.as_mut_ptr(),
                buffer.as_mut_ptr(),
                buffer.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buffer_len < 1 << 20 {
            buffer_len *= 4;
            continue;
        }
        if rc != 0 || found.is_null() {
            return None;
        }
        // SAFETY: getgrnam_r returned 0 with `found` non-null, so it filled
        // `group` (and `found` points at it); gr_gid is a plain integer.
        return Some(unsafe { group.assume_init() }.gr_gid);
    }
}

/// Makes the process non-dumpable (no core file, no ptrace by non-root, and
/// /proc/PID/mem readable only by root) and sets RLIMIT_CORE to 0.
pub fn forbid_core_dumps() -> std::io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes an integer argument and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `no_core` is a valid rlimit that setrlimit only reads.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the process dumpable again: what an attacker inside sceau would
/// try first to read its memory; `sceau selftest` checks it is refused.
pub fn set_dumpable() -> std::io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes an integer argument and touches no memory.
    match unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Sets PR_SET_NO_NEW_PRIVS: no execve can grant privileges from now on.
pub fn set_no_new_privs() -> std::io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments and touches no memory.
    match unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Takes the fds systemd passed (`LISTEN_FDS`, checked against `LISTEN_PID`)
/// with their `LISTEN_FDNAMES`, and clears those variables so that no child
/// inherits them.
///
/// Refused unless the process has a single thread: it writes the
/// environment, which another thread could be reading.
pub fn take_passed_fds() -> std::io::Result<Vec<(std::os::fd::OwnedFd, String)>> {
    use std::os::fd::FromRawFd;
    require_single_thread("take the passed sockets")?;
    // SAFETY: the process has one thread (checked just above; only this
    // thread could have started another since), so nothing reads the
    // environment while std::env::remove_var (called by sd_notify) writes it.
    let passed = unsafe { sd_notify::listen_fds_with_names_and_unset_env() }?;
    Ok(passed
        .map(|(fd, name)| {
            // SAFETY: sd_notify returns only fds 3..3+LISTEN_FDS, only when
            // LISTEN_PID is our pid, and only after fcntl(F_GETFD) found each
            // one open. Nothing else in sceau owns them: no code opens an fd
            // before this call, and the variables are unset, so a second call
            // returns no fd and cannot make a second owner.
            (unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }, name)
        })
        .collect())
}

/// Sets an environment variable for the C libraries sceau loads (tpm2-tss
/// reads `TSS2_LOG` only from there). Refused unless the process has a
/// single thread, as for [`take_passed_fds`].
pub fn set_env(key: &str, value: &str) -> std::io::Result<()> {
    require_single_thread("write the environment")?;
    // SAFETY: the process has one thread (checked just above), so nothing
    // can read the environment while it is written; C code reading it later
    // (tpm2-tss's getenv) sees a finished write.
    unsafe { std::env::set_var(key, value) };
    Ok(())
}

/// Fails unless this process has exactly one thread. The answer cannot go
/// stale before the caller acts: with one thread, the only thread that could
/// start another is the caller.
fn require_single_thread(what: &str) -> std::io::Result<()> {
    match thread_count()? {
        1 => Ok(()),
        n => Err(std::io::Error::other(format!(
            "refusing to {what} in a process with {n} threads"
        ))),
    }
}

/// An integer socket option, such as SO_TYPE or SO_ACCEPTCONN.
pub fn socket_option(
    fd: std::os::fd::BorrowedFd<'_>,
    option: libc::c_int,
) -> std::io::Result<libc::c_int> {
    use std::os::fd::AsRawFd;
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals of the sizes getsockopt is
    // told; the fd is borrowed, so it stays open for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    match rc {
        0 => Ok(value),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Loads tpm2-tss's library for a TCTI (`device`, `swtpm`, `mssim`,
/// `tabrmd`) and keeps it loaded for the life of the process.
///
/// tpm2-tss loads its TCTI library with dlopen each time a context is made.
/// Once Landlock forbids reading /usr/lib, only an already-loaded library
/// can be found again (by its name, without touching the filesystem), so a
/// lost TPM connection can still be reopened inside the sandbox.
pub fn pin_tcti_library(kind: &str) -> std::io::Result<()> {
    if !["device", "swtpm", "mssim", "tabrmd"].contains(&kind) {
        return Err(std::io::Error::other(format!("unknown TCTI {kind:?}")));
    }
    let name = CString::new(format!("libtss2-tcti-{kind}.so.0")).map_err(std::io::Error::other)?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call and
    // names one of tpm2-tss's own TCTI libraries, which tpm2-tss would load
    // anyway. The handle is deliberately never passed to dlclose, so the
    // library's code stays mapped for as long as tpm2-tss may call into it.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NODELETE) };
    if handle.is_null() {
        return Err(std::io::Error::other(format!("dlopen {name:?} failed")));
    }
    Ok(())
}

/// Hands the C heap's free pages back to the kernel (`malloc_trim(0)`).
///
/// Start-up allocates and frees far more than serving does (OpenSSL's
/// initialisation, tss-esapi's TCTI parsing); with glibc's `perturb` every
/// freed byte has been written, so the holes those frees leave stay
/// resident until trimmed; so do the holes a burst of calls leaves. `sceau
/// serve` calls this when start-up is done, then every 10 s. glibc madvises
/// the free pages away; nothing in use moves.
pub fn release_free_heap() {
    // SAFETY: malloc_trim takes an integer and works only on the
    // allocator's own free memory, under each arena's lock, so it is safe
    // from any thread at any time.
    unsafe { libc::malloc_trim(0) };
}

/// Moves the calling thread to the `SCHED_IDLE` policy: it then runs only
/// when no other thread of the machine wants the CPU. The metrics endpoint's
/// thread does this, so that a flood of scrapes takes CPU time from nothing
/// but idle time, the KMS threads' least of all. Needs no privilege (only
/// raising a thread's priority does).
pub fn run_this_thread_when_idle() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that the call only reads; pid 0
    // is the calling thread, whose policy is all that changes.
    match unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The block size of the probe in [`malloc_wipes_with`]: above glibc's
/// fastbin limit (128 bytes by default), so that a freed block goes through
/// the path that perturbs it, and small enough never to be mmapped.
const MALLOC_PROBE_SIZE: usize = 200;
/// The first bytes of a free block, where glibc writes its list pointers
/// over whatever perturb wrote.
const MALLOC_PROBE_HEADER: usize = 16;

/// Whether glibc's allocator, as this process runs it, wipes freed blocks
/// with `perturb`, checked by its effect rather than by reading
/// GLIBC_TUNABLES (glibc may ignore a value that reads right, or apply one
/// that reads wrong):
///
/// - a fresh block holds `perturb ^ 0xff` in every byte (glibc's
///   `alloc_perturb`): the tunable is in force;
/// - after it is filled with zeros and freed, the next block of that size
///   holds `perturb ^ 0xff` again: the freed block was not kept in the
///   per-thread cache, which skips perturb both ways (`tcache_count=0`).
///
/// Call it while the process has one thread, before anything else
/// allocates between the free and the second malloc.
pub fn malloc_wipes_with(perturb: u8) -> bool {
    let expected = perturb ^ 0xff;
    let Some(first) = MallocProbe::new() else {
        return false;
    };
    let fresh_perturbed = first.holds_only(expected);
    first.fill_with_zeros();
    drop(first);
    let Some(second) = MallocProbe::new() else {
        return false;
    };
    fresh_perturbed && second.holds_only(expected)
}

/// A block from glibc's malloc, freed on drop.
struct MallocProbe(std::ptr::NonNull<u8>);

impl MallocProbe {
    fn new() -> Option<Self> {
        // SAFETY: malloc takes a size and returns a new block or null; it
        // touches no memory of the caller's.
        let block = unsafe { libc::malloc(MALLOC_PROBE_SIZE) };
        std::ptr::NonNull::new(block.cast()).map(Self)
    }

    /// Whether every byte past the header is `value`. The bytes of a fresh
    /// malloc block are indeterminate to C; to the machine they are what
    /// glibc (its perturb) or an earlier owner wrote, or the kernel's
    /// zeros. They are read as plain bytes through volatile reads of a raw
    /// pointer into a foreign allocation, which the compiler cannot reason
    /// about, so it cannot assume them uninitialised.
    fn holds_only(&self, value: u8) -> bool {
        (MALLOC_PROBE_HEADER..MALLOC_PROBE_SIZE).all(|offset| {
            let byte = self.0.as_ptr().wrapping_add(offset);
            // SAFETY: `byte` lies inside the MALLOC_PROBE_SIZE bytes of the
            // live block this probe owns; u8 has no invalid values.
            unsafe { std::ptr::read_volatile(byte) == value }
        })
    }

    fn fill_with_zeros(&self) {
        // SAFETY: the block is live, owned by this probe and
        // MALLOC_PROBE_SIZE bytes long; nothing else refers to it.
        unsafe { std::ptr::write_bytes(self.0.as_ptr(), 0, MALLOC_PROBE_SIZE) };
    }
}

impl Drop for MallocProbe {
    fn drop(&mut self) {
        // SAFETY: the block came from malloc and is freed exactly once, here;
        // the probe is gone after this.
        unsafe { libc::free(self.0.as_ptr().cast()) };
    }
}

/// How much of this process's memory [`OwnMemory::holds`] reads at a time.
const SCAN_CHUNK: usize = 64 * 1024;

/// This process's own memory, `/proc/self/mem`, opened for reading.
///
/// Open it before the process is made non-dumpable (`forbid_core_dumps`):
/// the kernel then gives /proc/self/mem to root, mode 0600, and a process
/// running as any other uid (the unit's user, sceau) can no longer open it,
/// while an open descriptor keeps working (the kernel checks access once,
/// at open). `serve` drops it before the sandbox closes the filesystem.
pub struct OwnMemory(std::fs::File);

impl OwnMemory {
    pub fn open() -> std::io::Result<Self> {
        std::fs::File::open("/proc/self/mem").map(Self)
    }

    /// Whether any of `needles` (each at most [`SCAN_CHUNK`] bytes)
    /// occurs in this process's readable, writable, private anonymous
    /// mappings: the C and Rust heaps, and any block malloc mapped on its
    /// own. The main thread's stack is not read (its frames hold what the
    /// caller itself just used); call it while the process has one thread.
    /// It writes nothing but its own buffer, which is zeroed before it
    /// returns.
    pub fn holds(&self, needles: &[&[u8]]) -> std::io::Result<bool> {
        use std::os::unix::fs::FileExt;
        let maps = std::fs::read_to_string("/proc/self/maps")?;
        let longest = needles.iter().map(|n| n.len()).max().unwrap_or(0);
        assert!(longest <= SCAN_CHUNK, "a needle longer than a scan chunk");
        let finders: Vec<memchr::memmem::Finder<'_>> =
            needles.iter().map(memchr::memmem::Finder::new).collect();
        let mut chunk = zeroize::Zeroizing::new(vec![0u8; SCAN_CHUNK]);
        for (start, end) in maps.lines().filter_map(anonymous_private_writable) {
            let mut at = start;
            while at < end {
                let len = usize::try_from(end - at).map_or(SCAN_CHUNK, |left| left.min(SCAN_CHUNK));
                let read = self.0.read_at(&mut chunk[..len], at)?;
                let seen = &chunk[..read];
                if finders.iter().any(|finder| finder.find(seen).is_some()) {
                    return Ok(true);
                }
                if read < len || at + read as u64 >= end {
                    break;
                }
                // The next chunk overlaps this one by a needle's length less
                // one byte, so that a needle across the boundary is seen whole.
                let overlap = longest.saturating_sub(1).min(read - 1);
                at += (read - overlap) as u64;
            }
        }
        Ok(false)
    }
}

/// The address range of one /proc/self/maps line, if it is readable,
/// writable, private and anonymous (no path, or the `[heap]`).
fn anonymous_private_writable(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let permissions = fields.next()?.as_bytes();
    let path = fields.nth(3);
    let private_rw = permissions.starts_with(b"rw") && permissions.get(3) == Some(&b'p');
    if !private_rw || !matches!(path, None | Some("[heap]")) {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some((
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
    ))
}

/// OpenSSL's `OPENSSL_INIT_NO_ADD_ALL_CIPHERS` and
/// `OPENSSL_INIT_NO_ADD_ALL_DIGESTS` (openssl/crypto.h).
const OPENSSL_INIT_NO_ADD_ALL_CIPHERS_AND_DIGESTS: u64 = 0x10 | 0x20;

#[link(name = "crypto")]
unsafe extern "C" {
    fn OPENSSL_init_crypto(opts: u64, settings: *const libc::c_void) -> libc::c_int;
}

/// Tells OpenSSL, before tpm2-tss first uses it, not to build its legacy
/// tables of every cipher and digest name. Returns whether OpenSSL took it.
///
/// Why: the first time tpm2-tss needs a hash (the SRK's name, right after
/// CreatePrimary), OpenSSL 3.0 registers about 200 ciphers and digests by
/// name and then copies every such name into its provider name map. That was
/// the largest single cost of `sceau serve`'s start-up on swtpm
/// (docs/performance.md, "Start-up and memory"). tpm2-tss reaches its
/// algorithms through OpenSSL's built-in objects (`EVP_sha256()`, …) or by
/// their canonical names ("SHA256", "AES-128-CFB"), which the default
/// provider registers itself, so it needs none of these aliases; every test
/// of the TPM path (sessions, sealing, cluster import, enrolment) runs with
/// them off. OpenSSL's configuration (`openssl.cnf`, where a site turns on
/// its FIPS provider) is still loaded as before.
///
/// It must run before anything in the process initialises OpenSSL, or it
/// does nothing (OpenSSL runs each initialisation step once); `Tpm::open`
/// calls it first.
pub fn openssl_without_legacy_name_tables() -> bool {
    // SAFETY: OPENSSL_init_crypto takes a bit mask and an optional settings
    // pointer, here null, which it accepts (it then uses its defaults). It
    // is thread-safe (each step runs once, under OpenSSL's own lock) and
    // touches only OpenSSL's global state.
    let accepted = unsafe {
        OPENSSL_init_crypto(
            OPENSSL_INIT_NO_ADD_ALL_CIPHERS_AND_DIGESTS,
            std::ptr::null(),
        )
    };
    accepted == 1
}

/// The exit code of an [`in_child`] child whose probe panicked.
pub const PROBE_PANICKED: i32 = 101;

/// Runs `probe` in a forked child and returns how the child ended. Used by
/// `sceau selftest` to try actions the sandbox may punish by killing the
/// process, without losing the parent.
///
/// Forking is only sound while the process has one thread: a fork of a
/// multi-threaded process may find a lock (malloc's, stdout's) held by a
/// thread that does not exist in the child. So this checks the thread count
/// first and refuses otherwise. The check cannot go stale before the fork:
/// with one thread, the only thread that could start another is this one.
pub fn in_child(probe: impl FnOnce() -> i32) -> std::io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    require_single_thread("fork")?;
    // SAFETY: the process has exactly one thread (checked just above, and
    // only this thread could have started another since), so the child's
    // copy of the heap and of every lock is consistent.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // A panic must not unwind out of here: the child would go on
            // running the parent's code (the rest of the selftest, the
            // destructors of the parent's values) with the parent's state.
            let probe = std::panic::AssertUnwindSafe(probe);
            let code = std::panic::catch_unwind(probe).unwrap_or(PROBE_PANICKED);
            // SAFETY: _exit(2) takes an integer, touches no memory and does
            // not return; it ends the child without running the parent's
            // atexit handlers or flushing the parent's stdio buffers again.
            unsafe { libc::_exit(code) }
        }
        child => {
            let mut status = 0;
            // SAFETY: `status` is a live, writable local; `child` is our own
            // child, so waitpid reaps only it.
            if unsafe { libc::waitpid(child, &mut status, 0) } == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(std::process::ExitStatus::from_raw(status))
        }
    }
}

/// How many threads this process has (`Threads:` in /proc/self/status).
fn thread_count() -> std::io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no thread count in /proc/self/status"))
}

/// `unshare(0)`: a no-op if allowed, so a harmless probe of the seccomp
/// filter (which does not allow it).
pub fn unshare_nothing() -> std::io::Result<()> {
    // SAFETY: unshare with no flags changes nothing and touches no memory.
    match unsafe { libc::unshare(0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `clone(CLONE_NEWUSER | SIGCHLD)`: the selftest's probe of namespace
/// creation. The new process, if the call is allowed, is in a new user
/// namespace and exits at once; it is not waited for (the probe's own
/// process exits right after, and `wait4` is outside the seccomp allowlist).
pub fn clone_into_new_user_namespace() -> std::io::Result<()> {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: without CLONE_VM and with no new stack (0), clone works as
    // fork does: the child runs on its own copy of the address space. It
    // runs nothing but _exit below, so no lock or allocator state is touched,
    // whatever other threads the parent has. No pointer arguments are passed.
    match unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // SAFETY: _exit(2) takes an integer, touches no memory and does
            // not return; the child runs none of the parent's code.
            unsafe { libc::_exit(0) }
        }
        _ => Ok(()),
    }
}

/// `clone3(NULL, 0)`: the selftest's probe of `clone3`. A kernel that sees
/// the call answers EINVAL (the size is below the smallest `clone_args`);
/// sceau's seccomp filter answers ENOSYS before the kernel does.
pub fn clone3_without_arguments() -> std::io::Error {
    // SAFETY: a NULL pointer with size 0: the kernel rejects the size before
    // it would read anything, and no process is created.
    match unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) } {
        -1 => std::io::Error::last_os_error(),
        other => std::io::Error::other(format!("clone3(NULL, 0) returned {other}")),
    }
}

/// Locks every page the process has mapped, and every page it maps from
/// now on, into RAM (mlockall): `sceau-recover` does so before it touches a
/// private key, so that the key and its temporaries on the heap and the
/// stack are never written to swap. Done only with CAP_IPC_LOCK in the
/// effective set or an unlimited RLIMIT_MEMLOCK: under a finite limit,
/// MCL_FUTURE would make a later allocation past it fail (scrypt's 256 MiB)
/// and the tool abort halfway; root in a container without CAP_IPC_LOCK is
/// such a case, so the capability is read, not the uid. The error then
/// says so, and nothing is locked.
pub fn lock_all_memory() -> std::io::Result<()> {
    const CAP_IPC_LOCK: u32 = 14;
    let status = std::fs::read_to_string("/proc/self/status")?;
    let may_lock = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|caps| u64::from_str_radix(caps.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
    let limits = std::fs::read_to_string("/proc/self/limits")?;
    let unlimited = limits
        .lines()
        .find(|line| line.starts_with("Max locked memory"))
        .is_some_and(|line| line.split_whitespace().nth(3) == Some("unlimited"));
    if !may_lock && !unlimited {
        return Err(std::io::Error::other(
            "RLIMIT_MEMLOCK is finite and the process lacks CAP_IPC_LOCK",
        ));
    }
    // SAFETY: mlockall takes flags only and reads or writes no memory of ours.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Undoes [`lock_all_memory`] once the key is gone.
pub fn unlock_all_memory() {
    // SAFETY: munlockall takes no arguments; failing leaves pages locked.
    unsafe { libc::munlockall() };
}

/// The longest passphrase [`read_passphrase`] takes, in bytes; a longer
/// line is refused rather than cut.
pub const MAX_PASSPHRASE: usize = 1024;

/// Asks for a passphrase on the controlling terminal (`/dev/tty`) as
/// readpassphrase(3) does: echo is turned off first, then the prompt is
/// written, the line read and the terminal restored. In the other order a
/// passphrase typed as soon as the prompt shows is echoed. Input typed
/// before the prompt is discarded (TCSAFLUSH): it was echoed. The line is
/// read into one buffer of [`MAX_PASSPHRASE`] bytes allocated up front and
/// returned without its newline; the terminal is restored on every return,
/// and after the line a newline is written, which the terminal did not echo.
///
/// The signals that would end or stop the process with echo off (INT,
/// TERM, HUP, QUIT, TSTP) are held pending while echo is off and delivered
/// once the terminal is restored: a Ctrl-C discards the line typed so far
/// and takes effect at the next Enter, with echo back on. (readpassphrase
/// catches them instead; holding them needs no handler and no global state.)
/// `sceau-recover` asks with no other thread running, so none receives them
/// meanwhile.
pub fn read_passphrase(prompt: &str) -> std::io::Result<zeroize::Zeroizing<String>> {
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open("/dev/tty")?;
    let fd = tty.as_raw_fd();
    // Declared before the restore guard, so released after it.
    let _held = DeferredStopSignals::hold_these(&[
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGTSTP,
    ])?;
    let mut saved = MaybeUninit::<libc::termios>::uninit();
    // SAFETY: `saved` is writable storage for one termios, which tcgetattr
    // fills on success; `fd` is the open terminal owned by `tty`.
    if unsafe { libc::tcgetattr(fd, saved.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: tcgetattr returned 0, which means it wrote the whole struct.
    let saved = unsafe { saved.assume_init() };
    let mut quiet = saved;
    quiet.c_lflag &= !(libc::ECHO | libc::ECHONL);
    quiet.c_lflag |= libc::ICANON;
    // SAFETY: `quiet` is an initialised termios that tcsetattr only reads;
    // `fd` is open (owned by `tty`, alive until the end of the function).
    if unsafe { libc::tcsetattr(fd, libc::TCSAFLUSH, &quiet) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let restore = EchoRestore { fd, saved };
    tty.write_all(prompt.as_bytes())?;
    let mut line = zeroize::Zeroizing::new(Vec::with_capacity(MAX_PASSPHRASE));
    let mut too_long = false;
    let mut byte = [0u8; 1];
    loop {
        match tty.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if line.len() < MAX_PASSPHRASE => line.push(byte[0]),
            Ok(_) => too_long = true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    zeroize::Zeroize::zeroize(&mut byte);
    drop(restore);
    // The newline the user typed was not echoed.
    tty.write_all(b"\n")?;
    if too_long {
        return Err(std::io::Error::other(format!(
            "the passphrase is longer than {MAX_PASSPHRASE} bytes"
        )));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let bytes = std::mem::take(&mut *line);
    match String::from_utf8(bytes) {
        Ok(text) => Ok(zeroize::Zeroizing::new(text)),
        Err(error) => {
            drop(zeroize::Zeroizing::new(error.into_bytes()));
            Err(std::io::Error::other("the passphrase is not UTF-8"))
        }
    }
}

/// Puts a terminal's settings back as they were, whichever way
/// [`read_passphrase`] returns.
struct EchoRestore {
    fd: libc::c_int,
    saved: libc::termios,
}

impl Drop for EchoRestore {
    fn drop(&mut self) {
        // SAFETY: `saved` is the initialised termios tcgetattr gave for
        // `fd`, which the caller's `tty` keeps open until after this drop;
        // a failure leaves echo off, which nothing here can repair.
        unsafe { libc::tcsetattr(self.fd, libc::TCSAFLUSH, &self.saved) };
    }
}

/// One page of memory for key material: locked into RAM (never swapped),
/// excluded from core dumps, and wiped before it is unmapped.
pub struct LockedPage {
    start: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the page is exclusively owned by this value; moving it between
// threads moves that ownership, and `&LockedPage` only allows reads.
unsafe impl Send for LockedPage {}
// SAFETY: see Send; shared references only read the bytes.
unsafe impl Sync for LockedPage {}

impl LockedPage {
    /// Maps a fresh page and copies `bytes` (at most one page) into it.
    /// mlock failing (RLIMIT_MEMLOCK reached) is tolerated: the page is then
    /// only kept out of core dumps, and sceau's unit sets MemorySwapMax=0.
    pub fn with_contents(bytes: &[u8]) -> std::io::Result<Self> {
        // SAFETY: sysconf has no memory preconditions.
        let len = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        assert!(bytes.len() <= len, "key material larger than a page");
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing touches no existing memory.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let page = Self {
            start: std::ptr::NonNull::new(start.cast())
                .expect("mmap never returns null on success"),
            len,
        };
        // SAFETY: [start, start+len) is the mapping just created, owned by
        // `page`; madvise changes only its dump flag (a failure, which only
        // leaves the page in dumps, is tolerated: the process is non-dumpable).
        unsafe { libc::madvise(start, len, libc::MADV_DONTDUMP) };
        // SAFETY: the same mapping; mlock only pins it (failure tolerated,
        // see above).
        unsafe { libc::mlock(start, len) };
        // SAFETY: the source is `bytes`, readable for bytes.len() bytes; the
        // destination is the fresh writable mapping, at least that long
        // (asserted above); a new mapping cannot overlap a live borrow.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), page.start.as_ptr(), bytes.len()) };
        Ok(page)
    }

    /// The first `len` bytes of the page.
    pub fn bytes(&self, len: usize) -> &[u8] {
        assert!(len <= self.len);
        // SAFETY: the page is mapped, initialised (zero-filled by the kernel,
        // then written), and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), len) }
    }
}

impl Drop for LockedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping is `self.len` bytes, writable and initialised;
        // `&mut self` means no slice from `bytes` is alive.
        let contents = unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) };
        // Volatile writes: not optimised away although munmap follows.
        zeroize::Zeroize::zeroize(contents);
        // SAFETY: the mapping is ours; munlock only unpins it.
        unsafe { libc::munlock(self.start.as_ptr().cast(), self.len) };
        // SAFETY: the mapping is ours and nothing refers to it any more
        // (`contents` is dead); after munmap the value is gone with it.
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary runs without sceau's tunables, so the probe must say
    /// no; `tests/integration/memory_scan.rs` shows the other answer (sceau
    /// runs it under the unit's tunables and logs that it needs no re-exec).
    #[test]
    fn the_malloc_probe_sees_no_wiping_without_the_tunables() {
        if std::env::var_os("GLIBC_TUNABLES").is_some() {
            return;
        }
        assert!(!malloc_wipes_with(165));
    }

    #[test]
    fn the_heap_scan_finds_a_live_heap_block_and_reads_only_anonymous_mappings() {
        let mut needle = [0u8; 16];
        sceau_format::random::fill(&mut needle);
        let on_heap = needle.to_vec();
        assert!(OwnMemory::open().unwrap().holds(&[&needle]).unwrap());
        drop(on_heap);
        assert!(anonymous_private_writable("7f00-7f10 rw-p 00000000 00:00 0 ").is_some());
        assert!(anonymous_private_writable("7f00-7f10 rw-p 00000000 00:00 0 [heap]").is_some());
        assert!(anonymous_private_writable("7f00-7f10 rw-p 00000000 00:00 0 [stack]").is_none());
        assert!(
            anonymous_private_writable("7f00-7f10 r--p 00000000 08:01 12 /usr/lib/x").is_none()
        );
        assert!(anonymous_private_writable("7f00-7f10 rw-s 00000000 00:05 9 /dev/zero").is_none());
    }

    #[test]
    fn a_locked_page_holds_its_bytes_out_of_dumps() {
        let page = LockedPage::with_contents(b"key bytes").unwrap();
        assert_eq!(page.bytes(9), b"key bytes");
        let address = format!("{:x}-", page.start.as_ptr() as usize);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let entry = smaps.split_once(&address).expect("the page is mapped").1;
        let flags = entry.lines().find(|l| l.starts_with("VmFlags:")).unwrap();
        assert!(flags.contains(" dd"), "not excluded from dumps: {flags}");
    }

    /// The harness runs tests on threads, and this one holds another thread
    /// alive, so the process is multi-threaded: in_child must not fork.
    /// (`tests/integration/hardening.rs::selftest_reports_every_forbidden_action_refused`
    /// runs the forking path, in the single-threaded `sceau selftest`.)
    #[test]
    fn in_child_refuses_a_process_with_threads() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || wait.recv());
        assert!(thread_count().unwrap() >= 2);
        let refused = in_child(|| 0).expect_err("forked a multi-threaded process");
        assert!(refused.to_string().contains("threads"), "{refused}");
        let refused = set_env("SCEAU_NEVER_SET", "1").expect_err("wrote the environment");
        assert!(refused.to_string().contains("threads"), "{refused}");
        assert!(std::env::var_os("SCEAU_NEVER_SET").is_none());
        let refused = take_passed_fds().expect_err("took fds in a threaded process");
        assert!(refused.to_string().contains("threads"), "{refused}");
        release.send(()).unwrap();
        other.join().unwrap().unwrap();
    }

    /// Freed heap pages leave the resident set: 2 MiB of 4 KiB blocks
    /// (below glibc's mmap threshold, so on the heap), freed behind a block
    /// that stays, so that only trimming inside the heap can return them.
    #[test]
    fn releasing_the_free_heap_shrinks_the_resident_set() {
        let anonymous_kib = || {
            let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
            rollup
                .lines()
                .find_map(|l| l.strip_prefix("Anonymous:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap()
        };
        let blocks: Vec<Vec<u8>> = (0..512).map(|i| vec![i as u8 | 1; 4096]).collect();
        let kept = vec![1u8; 64];
        let before = anonymous_kib();
        drop(blocks);
        release_free_heap();
        let after = anonymous_kib();
        assert!(
            after + 1024 <= before,
            "Anonymous {before} KiB before, {after} KiB after"
        );
        drop(kept);
    }

    #[test]
    fn resolves_root_and_rejects_unknown_groups() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-sceau"), None);
        assert_eq!(group_id("bad\0name"), None);
    }
}
