//! Switches that turn single protections off, so that each memory-hygiene
//! test can show it fails without the protection it tests.
//!
//! They exist only in builds with the `insecure-test-hooks` feature, are read
//! once at start from `SCEAU_INSECURE_DISABLE` (a comma-separated list), and
//! any use is logged as an error. In every other build [`enabled`] is a
//! constant `true`.
#![forbid(unsafe_code)]

/// A protection a test can switch off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// `alloc::WipeOnFree` zeroing freed Rust heap blocks.
    AllocatorWipe,
    /// The re-exec with glibc tunables that make free() overwrite C blocks.
    MallocTunables,
    /// The unsent scrub (`tpm::device`) that rewrites tpm2-tss's command
    /// buffer after Unseal.
    TssBufferScrub,
    /// The unsent scrub that overwrites tpm2-tss's stored Create input.
    TssInputScrub,
    /// Zeroizing the TPM and wrapping threads' stacks after each job.
    StackScrub,
    /// The start-up check that the TSS scrubs work (`Tpm::verify_buffer_scrub`):
    /// off only so that a control can run with a scrub switched off.
    TssScrubCheck,
}

impl Protection {
    #[cfg_attr(not(feature = "insecure-test-hooks"), allow(dead_code))]
    const ALL: [(Protection, &'static str); 6] = [
        (Protection::AllocatorWipe, "alloc-wipe"),
        (Protection::MallocTunables, "malloc-tunables"),
        (Protection::TssBufferScrub, "tss-buffer-scrub"),
        (Protection::TssInputScrub, "tss-input-scrub"),
        (Protection::StackScrub, "stack-scrub"),
        (Protection::TssScrubCheck, "tss-scrub-check"),
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

#[cfg(feature = "insecure-test-hooks")]
static DISABLED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Reads `SCEAU_INSECURE_DISABLE`; call once, first thing in `main`.
#[cfg(feature = "insecure-test-hooks")]
pub fn disable_from_environment() {
    let Ok(list) = std::env::var("SCEAU_INSECURE_DISABLE") else {
        return;
    };
    for name in list.split(',').filter(|n| !n.is_empty()) {
        match Protection::ALL.iter().find(|(_, n)| *n == name) {
            Some((protection, _)) => {
                DISABLED.fetch_or(protection.bit(), std::sync::atomic::Ordering::Relaxed);
                log::error!("INSECURE TEST BUILD: {name} is switched off");
            }
            None => log::error!("SCEAU_INSECURE_DISABLE: unknown protection {name:?}"),
        }
    }
}

/// Whether `protection` is in force (always, outside test-hook builds).
#[inline]
pub fn enabled(protection: Protection) -> bool {
    #[cfg(feature = "insecure-test-hooks")]
    return DISABLED.load(std::sync::atomic::Ordering::Relaxed) & protection.bit() == 0;
    #[cfg(not(feature = "insecure-test-hooks"))]
    {
        let _ = protection.bit();
        true
    }
}
