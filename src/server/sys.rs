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
