//! Client connections that end after a quiet spell, and calls that end after
//! a time limit.
//!
//! hyper and h2 keep a live connection's read and write buffers, which still
//! hold its last frames (an Encrypt request's DEK, a Decrypt response's DEK)
//! until later traffic overwrites them. The apiserver keeps its connection
//! open and mostly idle, so those bytes could linger indefinitely. A
//! connection with no call open and none completed for [`IDLE_LIMIT`] reads
//! as closed by its peer: hyper drops it, its buffers are freed, and the
//! wiping allocator clears them. gRPC clients reconnect on their next call.
//!
//! Only calls count, not bytes: a client that trickles a byte every few
//! seconds (or sends HTTP/2 PINGs) without completing a call is closed like
//! a silent one. A connection is never closed while a call is open, so a
//! call may run for its whole `--request-deadline`, however long. A call
//! whose request never completes is ended by [`CallLimit`], a little after
//! the request deadline, and a call ended that way does not count as
//! activity, so a client cannot chain such calls to hold a connection: past
//! [`IDLE_LIMIT`] plus the call limit without a completed call, the
//! connection is closed even with calls open.
#![forbid(unsafe_code)]

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::net::unix::UCred;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tonic::Status;
use tonic::codegen::http;

use super::log_budget::LogBudget;

/// How long a connection may go without an open or completed call before
/// sceau ends it.
pub const IDLE_LIMIT: Duration = Duration::from_secs(10);

/// The calls of one connection: how many are open, and when the last one
/// completed. Shared by the connection's stream and its calls.
#[derive(Debug)]
pub struct Activity {
    state: Mutex<State>,
    call_limit: Duration,
}

#[derive(Debug)]
struct State {
    open_calls: usize,
    last_completed: Instant,
    /// The connection's reader, woken when a call ends so that it re-arms
    /// its timer for the new idle deadline.
    reader: Option<Waker>,
}

impl Activity {
    fn new(call_limit: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                open_calls: 0,
                last_completed: Instant::now(),
                reader: None,
            }),
            call_limit,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state stays consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the connection is to be closed, as things stand.
    fn close_at(&self, waker: &Waker) -> Instant {
        let mut state = self.state();
        if !state.reader.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.reader = Some(waker.clone());
        }
        match state.open_calls {
            0 => state.last_completed + IDLE_LIMIT,
            // Every call ends within the call limit; open calls past this
            // point were chained to hold the connection.
            _ => state.last_completed + IDLE_LIMIT + self.call_limit,
        }
    }

    fn call_started(&self) {
        self.state().open_calls += 1;
    }

    fn call_ended(&self, completed: bool) {
        let mut state = self.state();
        state.open_calls -= 1;
        if completed {
            state.last_completed = Instant::now();
        }
        if let Some(reader) = &state.reader {
            reader.wake_by_ref();
        }
    }
}

/// What the server knows of a connection: its peer, checked at accept, and
/// its calls. The server puts it in each request's extensions.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The peer's credentials (SO_PEERCRED: those it had when it connected).
    pub peer_cred: Option<UCred>,
    activity: Arc<Activity>,
}

/// An accepted connection, closed once idle (see the module doc). It holds
/// one of the server's connection slots until hyper drops it.
pub struct IdleClosingStream {
    inner: UnixStream,
    activity: Arc<Activity>,
    timer: Pin<Box<Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl IdleClosingStream {
    pub fn new(inner: UnixStream, slot: OwnedSemaphorePermit, call_limit: Duration) -> Self {
        let activity = Activity::new(call_limit);
        Self {
            inner,
            timer: Box::pin(tokio::time::sleep(IDLE_LIMIT)),
            activity,
            _slot: slot,
        }
    }
}

impl AsyncRead for IdleClosingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Poll::Ready(result) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            return Poll::Ready(result);
        }
        // Nothing to read: end the connection (an EOF, with nothing filled)
        // once it has been idle long enough.
        let close_at = this.activity.close_at(cx.waker());
        if this.timer.deadline() != close_at {
            this.timer.as_mut().reset(close_at);
        }
        match this.timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                log::debug!("closing a connection with no completed call for {IDLE_LIMIT:?}");
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for IdleClosingStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl IdleClosingStream {
    /// What each call on this connection is told about it.
    pub fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            peer_cred: self.inner.peer_cred().ok(),
            activity: self.activity.clone(),
        }
    }
}

/// An open call on a connection; it ends, as not completed, when dropped
/// (the client reset the stream, or the call limit ended it).
struct OpenCall {
    activity: Arc<Activity>,
    completed: bool,
}

impl OpenCall {
    fn start(activity: Arc<Activity>) -> Self {
        activity.call_started();
        Self {
            activity,
            completed: false,
        }
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.activity.call_ended(self.completed);
    }
}

/// A tower layer that tracks each call on its connection's [`Activity`] and
/// ends a call that runs past `limit` with DEADLINE_EXCEEDED. sceau's own
/// calls end within the request deadline; only a request that never arrives
/// in full (a client trickling its body) reaches the limit.
#[derive(Clone, Copy, Debug)]
pub struct CallLimitLayer {
    limit: Duration,
}

impl CallLimitLayer {
    pub fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> tower::Layer<S> for CallLimitLayer {
    type Service = CallLimit<S>;

    fn layer(&self, inner: S) -> CallLimit<S> {
        CallLimit {
            inner,
            limit: self.limit,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CallLimit<S> {
    inner: S,
    limit: Duration,
}

/// Calls ended by the limit; a client can cause many, so the log is bounded.
static CALL_LIMIT_LOG: LogBudget = LogBudget::new();

impl<S, B, R> tower::Service<http::Request<B>> for CallLimit<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let call = request
            .extensions()
            .get::<ConnectionInfo>()
            .map(|info| OpenCall::start(info.activity.clone()));
        let limit = self.limit;
        let response = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(limit, response).await {
                Ok(response) => {
                    if let Some(mut call) = call {
                        call.completed = true;
                    }
                    response
                }
                Err(_) => {
                    if let Some(suppressed) = CALL_LIMIT_LOG.allow() {
                        log::warn!(
                            "ended a call still running after {limit:?} (its request never \
                             completed?){suppressed}"
                        );
                    }
                    Ok(Status::deadline_exceeded("the call did not complete in time").into_http())
                }
            }
        })
    }
}
