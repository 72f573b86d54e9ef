//! The server side: the HTTP/2 settings a connection is served with, one
//! connection served until it ends or drains, and the drain of all of them
//! at a stop. The daemon's KMS socket and the SPIRE plugins' socket accept
//! in their own ways (a uid check and idle limits; a connection count) and
//! share everything after the accept.
#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tonic::body::Body;
use tonic::codegen::http;
use tower::Service;

/// The limits of one HTTP/2 connection, advertised in the server's SETTINGS.
/// HTTP/1 is never spoken: a client that does not open with the HTTP/2
/// preface gets a protocol error and the connection ends.
#[derive(Debug, Clone, Copy)]
pub struct Http2Limits {
    /// Calls one connection may have open at once; an h2 client waits for
    /// a free stream rather than failing.
    pub max_concurrent_streams: u32,
    /// Header bytes one call may send.
    pub max_header_list_bytes: u32,
    /// Flow-control windows, per stream and per connection; `None` keeps
    /// hyper's defaults (1 MiB each).
    pub stream_window: Option<u32>,
    pub connection_window: Option<u32>,
}

impl Http2Limits {
    /// The builder every connection is served with.
    pub fn builder(&self) -> http2::Builder<TokioExecutor> {
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list_bytes);
        if let Some(window) = self.stream_window {
            http2.initial_stream_window_size(window);
        }
        if let Some(window) = self.connection_window {
            http2.initial_connection_window_size(window);
        }
        http2
    }
}

/// Serves one connection until it ends or, once `drain` resolves, until its
/// open calls finish: hyper then sends GOAWAY, so the client opens no new
/// call on it.
pub async fn serve_connection<I, S>(
    connection: I,
    calls: S,
    http2: http2::Builder<TokioExecutor>,
    drain: impl Future<Output = ()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<http::Request<Incoming>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let served = http2.serve_connection(TokioIo::new(connection), TowerToHyperService::new(calls));
    tokio::pin!(served, drain);
    let result = tokio::select! {
        result = served.as_mut() => result,
        () = &mut drain => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(e) = result {
        log::debug!("connection ended: {e}");
    }
}

/// Waits up to `grace` for the connections in `open` (already told to
/// drain) to end, then drops the calls still running.
pub async fn drain_within(mut open: JoinSet<()>, grace: Duration) {
    let drained = async { while open.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        log::warn!("calls still running after {grace:?} were dropped");
        open.abort_all();
    }
}
