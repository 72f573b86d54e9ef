//! A global allocator that wipes every heap block before it is freed.
//!
//! `zeroize` and `secrecy` wipe sceau's own DEK buffers. The gRPC stack
//! (h2 frames, prost messages, hyper buffers) also holds DEK bytes in
//! buffers sceau never sees; they are freed when a call ends, and this
//! allocator makes sure that what they held is gone by then. It costs one
//! pass of volatile writes per freed byte, negligible next to a TPM command.
//!
//! Memory the C libraries (tpm2-tss, OpenSSL) allocate with malloc is not
//! covered; see docs/hardening.md for what stays and why.
//!
//! `sceau-recover` installs it too: key files, shares and passphrases pass
//! through buffers that grow by reallocation (read_to_end, armor, age's
//! stream buffer), and each old block would otherwise keep its bytes.
//!
//! A global allocator cannot be written without `unsafe` (`GlobalAlloc` is
//! an unsafe trait), so it lives in `sys`, the one module allowed `unsafe`;
//! audit/unsafe.md lists each block here.

use std::alloc::{GlobalAlloc, Layout, System};

pub struct WipeOnFree;

/// Zeroes `len` bytes at `ptr` with glibc's `explicit_bzero`: memset speed,
/// and guaranteed not to be optimised away although `free` follows.
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes.
unsafe fn wipe(ptr: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller; explicit_bzero writes only there.
    unsafe { libc::explicit_bzero(ptr.cast(), len) };
}

fn wiping() -> bool {
    crate::hooks::enabled(crate::hooks::Protection::AllocatorWipe)
}

// SAFETY: every method forwards to `System` with the caller's own arguments,
// which the GlobalAlloc contract already requires to be valid; wiping writes
// only within the `layout.size()` bytes of a block the caller is freeing.
unsafe impl GlobalAlloc for WipeOnFree {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds alloc's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if wiping() {
            // SAFETY: the caller guarantees `ptr` is a live block of
            // `layout.size()` bytes from this allocator, which nothing else
            // uses any more.
            unsafe { wipe(ptr, layout.size()) };
        }
        // SAFETY: forwarded unchanged; the caller upholds dealloc's contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    /// Never grows in place: the old block is copied, wiped and freed, so no
    /// reallocation leaves a stale copy behind.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // realloc's contract makes this layout valid; checking costs nothing
        // next to the copy, and failing (null) is what realloc may do anyway.
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `new_layout` has a non-zero size (realloc's contract:
        // `new_size` > 0). On failure (null), the old block is left
        // untouched, as realloc requires.
        let fresh = unsafe { self.alloc(new_layout) };
        if !fresh.is_null() {
            // SAFETY: `ptr` is a live block of `layout.size()` bytes (the
            // caller's contract) and `fresh` a new one of `new_size` bytes;
            // two live blocks cannot overlap.
            unsafe { std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size)) };
            // SAFETY: `ptr` came from this allocator with `layout` (the
            // caller's contract), and is freed exactly once, here; the caller
            // uses only `fresh` from now on.
            unsafe { self.dealloc(ptr, layout) };
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wipe_zeroes_exactly_the_given_range() {
        let mut buffer = [0xA5_u8; 32];
        let middle = buffer[8..24].as_mut_ptr();
        // SAFETY: `middle` points at 16 writable bytes of `buffer`.
        unsafe { wipe(middle, 16) };
        assert_eq!(buffer[..8], [0xA5; 8]);
        assert_eq!(buffer[8..24], [0; 16]);
        assert_eq!(buffer[24..], [0xA5; 8]);
    }

    /// realloc never grows in place, so it must copy: the contents survive
    /// growing and shrinking, and the alignment is kept.
    #[test]
    fn realloc_keeps_contents_and_alignment() {
        let layout = Layout::from_size_align(24, 16).unwrap();
        let pattern: Vec<u8> = (1..=24).collect();
        // SAFETY: `layout` has a non-zero size.
        let block = unsafe { WipeOnFree.alloc(layout) };
        assert!(!block.is_null());
        // SAFETY: `block` is a fresh block of 24 writable bytes, distinct
        // from `pattern`'s.
        unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), block, 24) };

        // SAFETY: `block` is live, from this allocator with `layout`; 4096
        // is non-zero and far from overflowing isize.
        let grown = unsafe { WipeOnFree.realloc(block, layout, 4096) };
        assert!(!grown.is_null());
        assert_eq!(grown as usize % 16, 0);
        // SAFETY: `grown` is live and its first 24 bytes were copied in.
        let kept = unsafe { std::slice::from_raw_parts(grown, 24) };
        assert_eq!(kept, &pattern[..]);

        let grown_layout = Layout::from_size_align(4096, 16).unwrap();
        // SAFETY: `grown` is live, from this allocator with `grown_layout`;
        // 8 is non-zero.
        let shrunk = unsafe { WipeOnFree.realloc(grown, grown_layout, 8) };
        assert!(!shrunk.is_null());
        // SAFETY: `shrunk` is live and 8 bytes long, all copied in.
        let kept = unsafe { std::slice::from_raw_parts(shrunk, 8) };
        assert_eq!(kept, &pattern[..8]);
        // SAFETY: `shrunk` is live, from this allocator with this layout, and
        // not used again.
        unsafe { WipeOnFree.dealloc(shrunk, Layout::from_size_align(8, 16).unwrap()) };
    }
}
