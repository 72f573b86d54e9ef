//! Muting tss-esapi's log lines around a TSS call that is meant to fail
//! (`device`'s unsent scrub): the crate says when, the daemon's logger asks.
//! A leaf, so that `device` need not reach up to the crate root.
#![forbid(unsafe_code)]

std::thread_local! {
    /// Set while this thread runs a TSS call whose failure is planned.
    static TSS_LOG_MUTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `call` with tss-esapi's log lines from this thread to be dropped at
/// every level: for a call that is meant to fail, whose error line would
/// mislead whoever reads a debug log. The daemon's logger asks
/// [`tss_log_muted`].
pub fn without_tss_log<T>(call: impl FnOnce() -> T) -> T {
    TSS_LOG_MUTED.set(true);
    let result = call();
    TSS_LOG_MUTED.set(false);
    result
}

/// Whether this thread is inside [`without_tss_log`].
pub fn tss_log_muted() -> bool {
    TSS_LOG_MUTED.get()
}
