//! Key material. A DEK only ever lives in a page of its own that is locked
//! into RAM, left out of core dumps and wiped when the DEK is dropped; its
//! `Debug` form never shows the bytes.
#![forbid(unsafe_code)]

use zeroize::Zeroize;

use crate::sys::LockedPage;

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
    /// Takes over a buffer received from a client and wipes that buffer.
    ///
    /// The bytes are copied into an allocation of exactly their length first,
    /// so that no spare capacity of the caller's buffer is left unwiped.
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
    if !crate::hooks::enabled(crate::hooks::Protection::StackScrub) {
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
}
