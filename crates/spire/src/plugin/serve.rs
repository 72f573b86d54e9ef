//! The gRPC server on the plugin socket: hyper's HTTP/2 server, one task
//! per connection, the router of services.rs, and a stop that drains.
//!
//! SPIRE dials the socket once and multiplexes every call on that
//! connection; a few more connections are allowed (a health probe, a
//! reconnect), not many.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sceau_rpc::serve::{Http2Limits, drain_within, serve_connection};
use tokio::net::UnixListener;
use tokio::task::JoinSet;

use super::Plugin;
use super::handshake::PluginSocket;
use super::services::{Stop, router};

/// Connections served at once; one more is closed at accept.
pub const MAX_CONNECTIONS: usize = 4;
/// Calls open at once on one connection: each attesting agent holds one
/// Attest stream, and SPIRE queues calls beyond the limit rather than
/// failing them.
pub const MAX_CONCURRENT_STREAMS: u32 = 64;
/// The HTTP/2 settings of every connection: the stream limit above, 16 KiB
/// of headers per call (gRPC's are a few hundred), hyper's windows.
const HTTP2: Http2Limits = Http2Limits {
    max_concurrent_streams: MAX_CONCURRENT_STREAMS,
    max_header_list_bytes: 16 * 1024,
    stream_window: None,
    connection_window: None,
};
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
    let http2 = HTTP2.builder();
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
                        connection,
                        calls.clone(),
                        http2.clone(),
                        shutdown.stopped(),
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
    drain_within(open, SHUTDOWN_GRACE).await;
    Ok(reason)
}
