//! The gRPC server on the plugin socket: hyper's HTTP/2 server, one task
//! per connection, the router of services.rs, and a stop that drains.
//!
//! SPIRE dials the socket once and multiplexes every call on that
//! connection; a few more connections are allowed (a health probe, a
//! reconnect), not many.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::UnixListener;
use tokio::task::JoinSet;

use super::Plugin;
use super::handshake::PluginSocket;
use super::services::{Router, Stop, router};

/// Connections served at once; one more is closed at accept.
pub const MAX_CONNECTIONS: usize = 4;
/// Calls open at once on one connection: each attesting agent holds one
/// Attest stream, and SPIRE queues calls beyond the limit rather than
/// failing them.
pub const MAX_CONCURRENT_STREAMS: u32 = 64;
/// Header bytes one call may send (gRPC's are a few hundred).
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// How long calls in flight may run on after the stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Why serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The host called GRPCController.Shutdown.
    Shutdown,
    /// The `stop` future given to [`serve`] resolved (a signal).
    Stopped,
}

/// A failure to start serving.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve on the plugin socket: {0}")]
pub struct ServeError(#[from] std::io::Error);

/// Serves `plugin` and the plumbing on `socket` until the host calls
/// Shutdown or `stop` resolves. Then it stops accepting, ends the
/// long-lived streams, gives calls in flight [`SHUTDOWN_GRACE`], and
/// removes the socket file (and the directory made for it).
pub async fn serve<P: Plugin>(
    plugin: Arc<P>,
    socket: PluginSocket,
    stop: impl Future<Output = ()>,
) -> Result<StopReason, ServeError> {
    let PluginSocket { listener, place } = socket;
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    let shutdown = Stop::new();
    let calls = router(plugin, shutdown.clone());
    let http2 = http2_settings();
    let mut open = JoinSet::new();
    let host_shutdown = shutdown.stopped();
    tokio::pin!(stop, host_shutdown);
    let reason = loop {
        tokio::select! {
            () = &mut host_shutdown => break StopReason::Shutdown,
            () = &mut stop => break StopReason::Stopped,
            accepted = listener.accept() => match accepted {
                Ok((connection, _)) if open.len() >= MAX_CONNECTIONS => {
                    log::warn!("a connection beyond the {MAX_CONNECTIONS} open ones was closed");
                    drop(connection);
                }
                Ok((connection, _)) => {
                    if let Ok(peer) = connection.peer_cred() {
                        log::debug!("connection from pid {:?} uid {}", peer.pid(), peer.uid());
                    }
                    open.spawn(serve_connection(
                        TokioIo::new(connection),
                        calls.clone(),
                        http2.clone(),
                        shutdown.clone(),
                    ));
                }
                Err(e) => {
                    // EMFILE and the like pass; a pause keeps a persistent
                    // error from spinning.
                    log::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reaps finished connections so that the count stays true.
            Some(_) = open.join_next(), if !open.is_empty() => {}
        }
    };
    log::debug!("stopping ({reason:?})");
    // The long-lived streams end, and connections drain.
    shutdown.trigger();
    drop(listener);
    drop(place);
    let drained = async { while open.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        log::warn!("calls still running after {SHUTDOWN_GRACE:?} were dropped");
        open.abort_all();
    }
    Ok(reason)
}

/// HTTP/2 settings for every connection (the limits above). HTTP/1 is not
/// spoken: gRPC needs HTTP/2.
fn http2_settings() -> http2::Builder<TokioExecutor> {
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST_BYTES);
    http2
}

/// Serves one connection until it ends or, once the server stops, until its
/// calls finish (hyper sends GOAWAY, so the host opens no new one).
async fn serve_connection(
    connection: TokioIo<tokio::net::UnixStream>,
    calls: Router,
    http2: http2::Builder<TokioExecutor>,
    shutdown: Stop,
) {
    let served = http2.serve_connection(connection, TowerToHyperService::new(calls));
    let stopped = shutdown.stopped();
    tokio::pin!(served, stopped);
    let result = tokio::select! {
        result = served.as_mut() => result,
        () = &mut stopped => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(e) = result {
        log::debug!("connection ended: {e}");
    }
}
