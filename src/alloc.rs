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
        // SAFETY: realloc's contract: `new_size` is non-zero and, rounded up
        // to the alignment (already valid in `layout`), does not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid non-zero-size layout, by the same contract. On
        // failure (null), the old block is left untouched, as realloc requires.
        let fresh = unsafe { self.alloc(new_layout) };
        if !fresh.is_null() {
            // SAFETY: both blocks are live, distinct, and at least
            // `min(old, new)` bytes long; the old one is then freed once.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        fresh
    }
}
