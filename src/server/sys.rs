//! The two libc calls std does not wrap. This is one of the few modules that
//! may use `unsafe`; each block states why it is sound.

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

/// Holds SIGTERM and SIGINT pending from just before the socket is bound
/// until the async runtime's handlers exist; dropping it releases them.
///
/// Without it, a stop request in that window would kill sceau with the
/// default action and leave its socket file behind. Threads started while it
/// is held inherit the blocked mask, so a held signal is delivered to the
/// thread that drops the guard, once the handlers are installed.
pub struct DeferredStopSignals {
    set: libc::sigset_t,
}

impl DeferredStopSignals {
    pub fn hold() -> std::io::Result<Self> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set it is given; sigaddset
        // then only writes into that initialised set.
        let set = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            libc::sigaddset(set.as_mut_ptr(), libc::SIGTERM);
            libc::sigaddset(set.as_mut_ptr(), libc::SIGINT);
            set.assume_init()
        };
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
            log::error!("could not unblock SIGTERM and SIGINT: {e}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_root_and_rejects_unknown_groups() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-sceau"), None);
        assert_eq!(group_id("bad\0name"), None);
    }
}
