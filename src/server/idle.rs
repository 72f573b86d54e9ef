//! Client connections that end after a quiet spell.
//!
//! hyper and h2 keep a live connection's read and write buffers, which still
//! hold its last frames (an Encrypt request's DEK, a Decrypt response's DEK)
//! until later traffic overwrites them. The apiserver keeps its connection
//! open and mostly idle, so those bytes could linger indefinitely. A
//! connection with no traffic in either direction for [`IDLE_LIMIT`] reads as
//! closed by its peer: hyper drops it, its buffers are freed, and the wiping
//! allocator clears them. gRPC clients reconnect on their next call.
//!
//! No call can be in flight on a connection that quiet: every call ends
//! within the TPM deadline, far below the limit.
#![forbid(unsafe_code)]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, UdsConnectInfo};

/// How long a connection may stay silent before sceau ends it.
pub const IDLE_LIMIT: Duration = Duration::from_secs(10);

pub struct IdleClosingStream {
    inner: UnixStream,
    quiet_until: Pin<Box<Sleep>>,
}

impl IdleClosingStream {
    pub fn new(inner: UnixStream) -> Self {
        Self {
            inner,
            quiet_until: Box::pin(tokio::time::sleep(IDLE_LIMIT)),
        }
    }

    fn note_activity(&mut self) {
        self.quiet_until.as_mut().reset(Instant::now() + IDLE_LIMIT);
    }
}

impl AsyncRead for IdleClosingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.note_activity();
                }
                Poll::Ready(result)
            }
            // Nothing to read: end the connection (an EOF, with nothing
            // filled) once the quiet spell is over.
            Poll::Pending => match self.quiet_until.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    log::debug!("closing a connection idle for {IDLE_LIMIT:?}");
                    Poll::Ready(Ok(()))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for IdleClosingStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.note_activity();
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connected for IdleClosingStream {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> UdsConnectInfo {
        self.inner.connect_info()
    }
}
