//! Serving the KMS service on a unix socket, within fixed resource limits,
//! and stopping cleanly.
//!
//! Every limit below bounds what one local client can make sceau hold:
//! request bytes, open streams, open connections, and time (see
//! docs/hardening.md, "Resource limits").
#![forbid(unsafe_code)]

pub mod accept;
pub mod idle;
mod log_budget;
pub mod peer;
pub mod socket;

pub use crate::sys::DeferredStopSignals;

use std::future::Future;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;

use crate::kms::{KmsService, Sealer};
use crate::pb::key_management_service_server::KeyManagementServiceServer;
use crate::tpm::worker::WorkerDeath;
use sceau_format::envelope::MAX_CIPHERTEXT_LEN;
use sceau_format::wrapped::MAX_RECIPIENTS;

/// The largest request message sceau decodes; tonic refuses a longer one
/// with OUT_OF_RANGE on its length prefix, before reading its body.
///
/// The largest request sceau could ever accept is a Decrypt in cluster mode:
/// a ciphertext of at most [`MAX_CIPHERTEXT_LEN`] (1 KiB) plus sceau's own
/// `recipients.sceau.io` annotation, at most [`MAX_RECIPIENTS`] (16) entries
/// of about 215 bytes each (src/cluster/envelope.rs), counted here as 256.
/// An Encrypt carries at most a 1 KiB DEK. The last 1 KiB covers key_id,
/// uid, the annotation key and protobuf framing (a few dozen bytes in
/// practice). 6 KiB in all, against tonic's default of 4 MiB.
pub const MAX_REQUEST_BYTES: usize = MAX_CIPHERTEXT_LEN + MAX_RECIPIENTS * 256 + 1024;
/// Streams (calls) one connection may have open at once, advertised in the
/// server's HTTP/2 SETTINGS. TPM work is serial, so more would only queue;
/// an h2 client waits for a free stream instead of failing.
pub const MAX_CONCURRENT_STREAMS: u32 = 16;
/// Connections served at once; more are closed at accept. The apiserver
/// uses one per KMS provider, `sceau check` and probes one each; 64 leaves
/// room for bursts of short-lived clients. What each may buffer is bounded
/// by the windows and the header list size below.
pub const MAX_CONNECTIONS: usize = 64;
/// The HTTP/2 flow-control windows: how many request bytes a client may send
/// ahead of sceau reading them, per stream and per connection. hyper's
/// defaults are 1 MiB each; a whole maximal request still fits a stream's.
const STREAM_WINDOW: u32 = 16 * 1024;
const CONNECTION_WINDOW: u32 = 64 * 1024;
/// The largest header block a client may send (the same as hyper's default,
/// stated so that it cannot grow unnoticed).
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// How much longer than `--request-deadline` a call may run before the
/// server ends it. sceau's own work ends within the deadline; this catches
/// a request whose body never completes.
pub const CALL_LIMIT_MARGIN: Duration = Duration::from_secs(2);

/// How long in-flight calls may run after a stop is requested. It exceeds
/// the TPM deadline, so a call already queued can still finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Terminate,
    Interrupt,
    /// The TPM worker died; the process must exit non-zero.
    TpmLost,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Terminate => "SIGTERM",
            StopReason::Interrupt => "SIGINT",
            StopReason::TpmLost => "TPM lost",
        })
    }
}

/// Installs the signal handlers now (inside the runtime) and returns a
/// future that resolves on SIGTERM, SIGINT, or the death of the TPM worker.
pub fn stop_requested(
    death: WorkerDeath,
) -> std::io::Result<impl Future<Output = StopReason> + Send> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => StopReason::Terminate,
            _ = interrupt.recv() => StopReason::Interrupt,
            () = death.wait() => StopReason::TpmLost,
        }
    })
}

/// Serves until `stop` resolves, then stops accepting and gives in-flight
/// calls [`SHUTDOWN_GRACE`] to finish. Each call may run for
/// `request_deadline` plus [`CALL_LIMIT_MARGIN`].
pub async fn serve<S: Sealer>(
    listener: UnixListener,
    service: KmsService<S>,
    callers: peer::AllowedCallers,
    request_deadline: Duration,
    stop: impl Future<Output = StopReason>,
) -> Result<StopReason, tonic::transport::Error> {
    let call_limit = request_deadline + CALL_LIMIT_MARGIN;
    let (begin_drain, drain) = oneshot::channel::<()>();
    let kms = KeyManagementServiceServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES);
    // The uid is checked at accept (accept.rs); the interceptor checks it
    // again per call, which costs a lookup in a short list.
    let connections =
        accept::Connections::new(listener, callers.clone(), MAX_CONNECTIONS, call_limit);
    let server = Server::builder()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .layer(idle::CallLimitLayer::new(call_limit))
        .add_service(InterceptedService::new(kms, callers))
        .serve_with_incoming_shutdown(connections, async {
            let _ = drain.await;
        });
    tokio::pin!(server);
    let reason = tokio::select! {
        result = &mut server => {
            result?;
            unreachable!("the server only returns after a drain request");
        }
        reason = stop => reason,
    };
    log::info!(
        "stopping ({reason}): refusing new connections, draining for up to {SHUTDOWN_GRACE:?}"
    );
    crate::notify::stopping();
    let _ = begin_drain.send(());
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(result) => result?,
        Err(_) => log::warn!("calls still running after {SHUTDOWN_GRACE:?} were dropped"),
    }
    Ok(reason)
}
