//! Telling systemd how start-up, serving and stopping go (`sd_notify`).
//!
//! Every message is a no-op when `NOTIFY_SOCKET` is unset, so the same code
//! runs under systemd and by hand. A failed send is logged, never fatal: the
//! service manager's timeouts already cover a daemon that cannot report.
#![forbid(unsafe_code)]

use std::time::Duration;

use sd_notify::NotifyState;

use crate::tpm::KeyId;

/// How much more start-up time each EXTEND_TIMEOUT_USEC asks for. Hardware
/// RSA-2048 CreatePrimary takes seconds, slow firmware TPMs tens of seconds.
pub const START_EXTENSION: Duration = Duration::from_secs(30);
/// How often the extension is renewed while the TPM is still opening.
const EXTENSION_RENEWAL: Duration = Duration::from_secs(10);
/// No renewal after this much start-up time: a TPM that has not answered by
/// then is not going to, and systemd's own timeout should end the attempt.
const MAX_START_TIME: Duration = Duration::from_secs(300);

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        log::warn!("sd_notify failed: {e}");
    }
}

pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// READY=1 with the key_id in the unit's status line.
pub fn ready(key_id: &KeyId) {
    let status = format!("serving key_id={key_id}");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// Runs `start` (the TPM open, whose CreatePrimary may be slow) while asking
/// systemd for more start-up time every few seconds. The helper thread ends
/// before this returns, so no thread outlives start-up into the sandbox.
pub fn extending_start_timeout<T>(start: impl FnOnce() -> T) -> T {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return start();
    }
    let micros = u32::try_from(START_EXTENSION.as_micros()).unwrap_or(u32::MAX);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let started = std::time::Instant::now();
            while started.elapsed() < MAX_START_TIME {
                send(&[NotifyState::ExtendTimeoutUsec(micros)]);
                // Done, or the sender is gone (start() panicked): stop.
                if !matches!(
                    finished.recv_timeout(EXTENSION_RENEWAL),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                ) {
                    return;
                }
            }
        });
        let result = start();
        let _ = done.send(());
        result
    })
}

/// The interval systemd expects WATCHDOG=1 at, if it set a watchdog for
/// this process (WATCHDOG_USEC, and WATCHDOG_PID naming us if present).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}
