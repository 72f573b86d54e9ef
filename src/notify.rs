//! Telling systemd how start-up, serving and stopping go (`sd_notify`).
//!
//! Every message is a no-op when `NOTIFY_SOCKET` is unset, so the same code
//! runs under systemd and by hand. A failed send is logged, never fatal: the
//! service manager's timeouts already cover a daemon that cannot report.
//!
//! The socket is connected once, by [`connect`], before the sandbox; every
//! message goes through it. After the sandbox seccomp refuses `socket(AF_UNIX)`
//! and `connect`, which sd-notify's own `notify` would need for every message
//! (it opens a new socket each time), and Landlock ABI ≥ 9 would need a rule
//! for the socket's directory. A pathname (`/run/systemd/notify`) and an
//! abstract (`@name`) address both work. systemd keeps the same socket across
//! `daemon-reexec`, so the connection stays valid.
#![forbid(unsafe_code)]

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::OnceLock;
use std::time::Duration;

use sd_notify::NotifyState;

use sceau_tpm::KeyId;

/// How much more start-up time each EXTEND_TIMEOUT_USEC asks for. Hardware
/// RSA-2048 CreatePrimary takes seconds, slow firmware TPMs tens of seconds.
pub const START_EXTENSION: Duration = Duration::from_secs(30);
/// How often the extension is renewed while the TPM is still opening.
const EXTENSION_RENEWAL: Duration = Duration::from_secs(10);
/// No renewal after this much start-up time: a TPM that has not answered by
/// then is not going to, and systemd's own timeout should end the attempt.
const MAX_START_TIME: Duration = Duration::from_secs(300);

/// The connected notify socket; `None` when `NOTIFY_SOCKET` is unset or the
/// connect failed (logged once, by [`connect`]).
static SOCKET: OnceLock<Option<UnixDatagram>> = OnceLock::new();

/// Connects to `$NOTIFY_SOCKET`, once. `serve` calls it first thing, before
/// the sandbox; a later call reuses the result.
pub fn connect() {
    SOCKET.get_or_init(|| {
        let address = std::env::var_os("NOTIFY_SOCKET")?;
        match connect_to(&address) {
            Ok(socket) => Some(socket),
            Err(e) => {
                log::warn!(
                    "cannot connect to NOTIFY_SOCKET {}: {e}; systemd will get no status",
                    address.to_string_lossy()
                );
                None
            }
        }
    });
}

/// sd_notify(3): an absolute path, or `@` and an abstract name.
fn connect_to(address: &std::ffi::OsStr) -> std::io::Result<UnixDatagram> {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = address.as_bytes();
    let address = match bytes.split_first() {
        Some((b'@', name)) => SocketAddr::from_abstract_name(name)?,
        Some((b'/', _)) => SocketAddr::from_pathname(address)?,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "expected an absolute path or @abstract-name",
            ));
        }
    };
    let socket = UnixDatagram::unbound()?;
    socket.connect_addr(&address)?;
    Ok(socket)
}

/// Sends nothing unless [`connect`] ran: connecting here, after the
/// sandbox, would be a `socket` call seccomp kills the process for.
fn send(states: &[NotifyState]) {
    let Some(Some(socket)) = SOCKET.get() else {
        return;
    };
    // sd-notify's own message format: one KEY=VALUE line per state.
    let message: String = states.iter().map(|state| format!("{state}\n")).collect();
    match socket.send(message.as_bytes()) {
        Ok(sent) if sent == message.len() => {}
        Ok(_) => log::warn!("sd_notify: the message was cut short"),
        Err(e) => log::warn!("sd_notify failed: {e}"),
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

/// RELOADING=1 while a reload (SIGHUP) runs; [`ready`] ends it.
pub fn reloading() {
    send(&[NotifyState::Reloading, NotifyState::Status("reloading")]);
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
        let extender = scope.spawn(move || {
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
        // Joined, not left to the scope: the scope returns once the
        // thread's closure has ended, while the thread itself may still be
        // exiting and unmapping its stack. The next start-up step reads
        // this process's memory map by map and must find it as it was
        // listed (a stack unmapped in between made that read fail with EIO,
        // now and then, and sceau refused to start).
        let _ = extender.join();
        result
    })
}

/// The interval systemd expects WATCHDOG=1 at, if it set a watchdog for
/// this process (WATCHDOG_USEC, and WATCHDOG_PID naming us if present).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}
