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

/// Zeroes `len` bytes at `ptr` with one `memset`, which the compiler must
/// keep: `black_box` stands for an unknown reader of the memory, so the
/// stores are not dead even though `free` follows. (Zeroize's per-byte
/// volatile writes would do too, at a tenth of the speed on large buffers.)
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes.
unsafe fn wipe(ptr: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe { std::ptr::write_bytes(ptr, 0, len) };
    std::hint::black_box(ptr);
}

#[cfg(feature = "insecure-test-hooks")]
static WIPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Test hook: turns wiping off, so that the memory-scan test can show that
/// its scan finds the DEKs this allocator removes. Only in builds with the
/// `insecure-test-hooks` feature.
#[cfg(feature = "insecure-test-hooks")]
pub fn disable_wiping_for_tests() {
    WIPING.store(false, std::sync::atomic::Ordering::Relaxed);
}

fn wiping() -> bool {
    #[cfg(feature = "insecure-test-hooks")]
    return WIPING.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "insecure-test-hooks"))]
    true
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
        // SAFETY: the caller guarantees `new_size`, rounded up to the
        // alignment, does not overflow isize (realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid non-zero-size layout, as just established.
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
