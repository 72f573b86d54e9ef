//! The system's random numbers (the kernel's getrandom(2)), for import-blob
//! seeds, credentials and P-256 keys.
//!
//! Drawn through `getrandom` 0.4, the version the daemon's TPM stack already
//! brings. `rand_core`'s `OsRng` would bring a second copy (`getrandom` 0.2)
//! for the same system call; [`SystemRandom`] gives p256's key generation,
//! which takes a `rand_core` 0.6 generator, the same source instead.

use std::num::NonZeroU32;

/// Fills `dest` with random bytes from the kernel.
///
/// # Panics
///
/// If the kernel's generator fails, which on Linux means getrandom(2) is
/// missing or forbidden: no key or seed can be made safely then, and
/// `rand_core::OsRng` panicked the same way.
pub fn fill(dest: &mut [u8]) {
    if let Err(e) = getrandom::fill(dest) {
        panic!("the system's random number generator failed: {e}");
    }
}

/// The kernel's generator as a `rand_core` 0.6 generator, for
/// `p256::SecretKey::random`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemRandom;

impl rand_core::RngCore for SystemRandom {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }

    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        fill(dest);
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        getrandom::fill(dest).map_err(|e| {
            // rand_core 0.6 without `std` carries only a code: the errno
            // when there is one.
            let code = e
                .raw_os_error()
                .and_then(|errno| u32::try_from(errno).ok())
                .and_then(NonZeroU32::new)
                .unwrap_or(GENERATOR_FAILED);
            rand_core::Error::from(code)
        })
    }
}

/// Kernel generators are cryptographically secure.
impl rand_core::CryptoRng for SystemRandom {}

/// The code of a failure getrandom gives no errno for.
const GENERATOR_FAILED: NonZeroU32 = NonZeroU32::new(rand_core::Error::CUSTOM_START).unwrap();

#[cfg(test)]
mod tests {
    use rand_core::RngCore as _;

    use super::*;

    #[test]
    fn fills_every_byte_and_differs_between_calls() {
        // 64 bytes all zero, or twice equal, happen with probability 2^-512.
        let mut first = [0u8; 64];
        let mut second = [0u8; 64];
        fill(&mut first);
        SystemRandom.fill_bytes(&mut second);
        assert_ne!(first, [0u8; 64]);
        assert_ne!(first, second);
        let mut third = [0u8; 64];
        SystemRandom.try_fill_bytes(&mut third).unwrap();
        assert_ne!(third, second);
    }

    #[test]
    fn makes_distinct_p256_keys() {
        let a = p256::SecretKey::random(&mut SystemRandom);
        let b = p256::SecretKey::random(&mut SystemRandom);
        assert_ne!(a.to_bytes(), b.to_bytes());
    }
}
