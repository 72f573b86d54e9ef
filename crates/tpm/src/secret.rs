//! Key material. A DEK only ever lives in a page of its own that is locked
//! into RAM, left out of core dumps and wiped when the DEK is dropped; its
//! `Debug` form never shows the bytes.
#![forbid(unsafe_code)]

use zeroize::Zeroize;

use sceau_sys::LockedPage;

/// The largest DEK sceau seals. A Kubernetes DEK seed is 32 bytes; 128 is the
/// sealed-data limit that TPM implementations are required to support.
pub const MAX_DEK_LEN: usize = 128;

/// A data-encryption key (for KMS v2, the apiserver's DEK seed).
pub struct Dek {
    page: LockedPage,
    len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("plaintext must be 1 to {MAX_DEK_LEN} bytes, got {0}")]
pub struct DekLengthError(pub usize);

impl Dek {
    /// Takes over a buffer received from a client: the bytes are copied into
    /// a locked page of their own, then the whole buffer is wiped (its spare
    /// capacity held nothing the client sent).
    pub fn take_from(mut bytes: Vec<u8>) -> Result<Self, DekLengthError> {
        let len = bytes.len();
        let result = if (1..=MAX_DEK_LEN).contains(&len) {
            Ok(Self::copy_from(&bytes))
        } else {
            Err(DekLengthError(len))
        };
        bytes.zeroize();
        result
    }

    /// Copies borrowed key bytes (for example from a zeroizing TSS buffer).
    ///
    /// # Panics
    /// If the kernel refuses to map a page (out of memory).
    pub fn copy_from(bytes: &[u8]) -> Self {
        let page = LockedPage::with_contents(bytes).expect("mapping a page for a DEK");
        Self {
            page,
            len: bytes.len(),
        }
    }

    /// The key bytes. Every call site is a place where a DEK leaves sceau's
    /// protected page, so keep them few.
    pub fn expose(&self) -> &[u8] {
        self.page.bytes(self.len)
    }

    pub fn len(&self) -> usize {
        self.expose().len()
    }

    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }
}

impl std::fmt::Debug for Dek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dek([redacted; {} bytes])", self.len())
    }
}

/// Overwrites the stack below the caller's frame with zeros. Threads that
/// handle key material in frames nothing wipes (tss-esapi's TPM2B copies on
/// the TPM thread, sha2's hash states on the wrapping thread) call this from
/// their outermost loop after every job: the job ran in frames below that
/// loop's, so this much zeroed stack covers what it left.
#[inline(never)]
pub fn scrub_stack() {
    const STACK_SCRUB: usize = 64 * 1024;
    if !sceau_sys::hooks::enabled(sceau_sys::hooks::Protection::StackScrub) {
        return;
    }
    let mut area = [0u8; STACK_SCRUB];
    area.zeroize();
    std::hint::black_box(&area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_1_to_128_bytes() {
        assert!(Dek::take_from(vec![7; 1]).is_ok());
        assert!(Dek::take_from(vec![7; MAX_DEK_LEN]).is_ok());
        assert_eq!(Dek::take_from(Vec::new()).unwrap_err(), DekLengthError(0));
        assert_eq!(
            Dek::take_from(vec![7; MAX_DEK_LEN + 1]).unwrap_err(),
            DekLengthError(MAX_DEK_LEN + 1)
        );
    }

    #[test]
    fn debug_never_shows_the_bytes() {
        let dek = Dek::take_from(b"very-secret-marker".to_vec()).unwrap();
        let shown = format!("{dek:?}");
        assert!(!shown.contains("very-secret-marker"));
        assert_eq!(shown, "Dek([redacted; 18 bytes])");
    }

    /// The stack scrub's own control. End to end, `memory_scan` no longer
    /// needs it in single-node mode: the unsent scrub Create that ends each
    /// TPM job (`tpm::device`) happens to rewrite the frames Unseal and
    /// Create used, so `SCEAU_INSECURE_DISABLE=stack-scrub` leaves nothing
    /// the scan can find. The scrub stays for what that does not reach (the
    /// wrapping thread, error paths), and this shows it clears what a frame
    /// deeper than its caller's left: without the scrub the marker is found.
    #[test]
    fn scrub_stack_clears_what_a_deeper_frame_left() {
        assert!(marker_left_on_the_stack(false), "the control must see it");
        assert!(!marker_left_on_the_stack(true));
    }

    /// Leaves a marker in a frame ~16 KiB below the caller's, returns, maybe
    /// scrubs, then reads the thread's stack through /proc/self/mem.
    fn marker_left_on_the_stack(scrub: bool) -> bool {
        std::thread::spawn(move || {
            // Made at run time and kept on the heap, so the only copy below
            // this frame is the one `leave_deep` puts there.
            let marker: Vec<u8> = (0u8..32).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            leave_deep(&marker);
            if scrub {
                scrub_stack();
            }
            let here = 0u8;
            let top = std::hint::black_box(&here) as *const u8 as u64;
            let below = read_own_memory(top - 60 * 1024, 56 * 1024);
            below.windows(marker.len()).any(|w| w == marker.as_slice())
        })
        .join()
        .unwrap()
    }

    #[inline(never)]
    fn leave_deep(marker: &[u8]) {
        let padding = [0u8; 16 * 1024];
        std::hint::black_box(&padding);
        copy_into_frame(marker);
    }

    #[inline(never)]
    fn copy_into_frame(marker: &[u8]) {
        let mut frame = [0u8; 32];
        frame.copy_from_slice(marker);
        std::hint::black_box(&frame);
    }

    fn read_own_memory(start: u64, len: usize) -> Vec<u8> {
        use std::io::{Read, Seek, SeekFrom};
        let mut mem = std::fs::File::open("/proc/self/mem").unwrap();
        mem.seek(SeekFrom::Start(start)).unwrap();
        let mut bytes = vec![0u8; len];
        mem.read_exact(&mut bytes).unwrap();
        bytes
    }
}
