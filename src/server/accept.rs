//! Accepting connections: the peer's uid is checked at accept, the number of
//! connections is capped, and accept errors back off instead of spinning.
//!
//! A connection from a uid sceau does not serve, or one past
//! [`MAX_CONNECTIONS`](super::MAX_CONNECTIONS), is closed at once, before
//! hyper reads a byte of it. When accept fails for want of a resource
//! (EMFILE, ENFILE, ENOBUFS, ENOMEM) the pending connection stays queued and
//! the listener stays readable, so retrying at once would spin at full CPU;
//! sceau waits, doubling the pause up to [`MAX_BACKOFF`], and retries.
#![forbid(unsafe_code)]

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use super::idle::IdleClosingStream;
use super::log_budget::LogBudget;
use super::peer::AllowedCallers;

/// The first pause after a failed accept.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause: a freed descriptor is used within this.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Refused connections handled in one poll before yielding to other tasks.
const REFUSALS_PER_POLL: usize = 64;

static REFUSED_LOG: LogBudget = LogBudget::new();
static OVER_CAP_LOG: LogBudget = LogBudget::new();
static ACCEPT_ERROR_LOG: LogBudget = LogBudget::new();

/// The accepted connections sceau serves, as a stream. The server drops it
/// when it stops accepting, which closes the listener.
pub struct Connections {
    listener: UnixListener,
    callers: AllowedCallers,
    slots: Arc<Semaphore>,
    call_limit: Duration,
    pause: Option<Pin<Box<Sleep>>>,
    next_pause: Duration,
}

impl Connections {
    pub fn new(
        listener: UnixListener,
        callers: AllowedCallers,
        max_connections: usize,
        call_limit: Duration,
    ) -> Self {
        Self {
            listener,
            callers,
            slots: Arc::new(Semaphore::new(max_connections)),
            call_limit,
            pause: None,
            next_pause: MIN_BACKOFF,
        }
    }

    /// The connection wrapped for serving, or `None` if it was refused (and
    /// so closed, by dropping it).
    fn admit(&self, stream: UnixStream) -> Option<IdleClosingStream> {
        let (uid, pid) = match stream.peer_cred() {
            Ok(cred) => (cred.uid(), cred.pid()),
            Err(e) => {
                if let Some(suppressed) = REFUSED_LOG.allow() {
                    log::warn!(
                        "refused a connection whose peer credentials are unknown ({e}){suppressed}"
                    );
                }
                return None;
            }
        };
        if !self.callers.allows(uid) {
            if let Some(suppressed) = REFUSED_LOG.allow() {
                log::warn!(
                    "refused a connection from uid {uid} (pid {pid:?}); allowed uids: \
                     {}{suppressed}",
                    self.callers
                );
            }
            return None;
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            if let Some(suppressed) = OVER_CAP_LOG.allow() {
                log::warn!(
                    "refused a connection from uid {uid}: {} connections already open{suppressed}",
                    super::MAX_CONNECTIONS
                );
            }
            return None;
        };
        Some(IdleClosingStream::new(stream, slot, self.call_limit))
    }
}

/// Errors that concern one connection only (it went away before accept);
/// the next accept may succeed at once.
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted
    ) || error.raw_os_error() == Some(libc::EPROTO)
}

impl tokio_stream::Stream for Connections {
    /// Accept errors are handled here (retried, or waited out), so the
    /// stream yields only admitted connections, and never ends.
    type Item = IdleClosingStream;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut refused = 0;
        loop {
            if let Some(pause) = &mut this.pause {
                ready!(pause.as_mut().poll(cx));
                this.pause = None;
            }
            match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => {
                    this.next_pause = MIN_BACKOFF;
                    if let Some(connection) = this.admit(stream) {
                        return Poll::Ready(Some(connection));
                    }
                    refused += 1;
                    if refused == REFUSALS_PER_POLL {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                Err(e) if is_per_connection(&e) => {}
                Err(e) => {
                    if let Some(suppressed) = ACCEPT_ERROR_LOG.allow() {
                        log::warn!(
                            "accept failed ({e}); retrying in {:?}{suppressed}",
                            this.next_pause
                        );
                    }
                    this.pause = Some(Box::pin(tokio::time::sleep(this.next_pause)));
                    this.next_pause = (this.next_pause * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}
