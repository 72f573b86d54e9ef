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
pub mod metrics;
pub mod observe;
pub mod peer;
pub mod socket;

pub use sceau_sys::DeferredStopSignals;

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::TokioExecutor;
use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::service::interceptor::InterceptedService;
use tower::{Layer, Service, ServiceExt};

use crate::kms::KmsService;
use sceau_format::envelope::MAX_CIPHERTEXT_LEN;
use sceau_format::wrapped::MAX_RECIPIENTS;
use sceau_kms_api::pb::key_management_service_server::KeyManagementServiceServer;
use sceau_rpc::serve::{Http2Limits, drain_within};
use sceau_tpm::worker::WorkerDeath;

/// The largest request message sceau decodes; tonic refuses a longer one
/// with OUT_OF_RANGE on its length prefix, before reading its body.
///
/// The largest request sceau could ever accept is a Decrypt in cluster mode:
/// a ciphertext of at most [`MAX_CIPHERTEXT_LEN`] (1 KiB) plus sceau's own
/// `recipients.sceau.io` annotation, at most [`MAX_RECIPIENTS`] (16) entries
/// of about 215 bytes each (crates/format/src/wrapped.rs), counted here as 256.
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
/// The HTTP/2 settings of every connection. The flow-control windows bound
/// how many request bytes a client may send ahead of sceau reading them,
/// per stream (16 KiB) and per connection (64 KiB), against hyper's 1 MiB
/// each; a whole maximal request still fits a stream's. The header block
/// limit is hyper's default, stated so that it cannot grow unnoticed.
const HTTP2: Http2Limits = Http2Limits {
    max_concurrent_streams: MAX_CONCURRENT_STREAMS,
    max_header_list_bytes: 16 * 1024,
    stream_window: Some(16 * 1024),
    connection_window: Some(64 * 1024),
};
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
///
/// Each accepted connection is served by hyper's HTTP/2 server on a task of
/// its own ([`serve_connection`]); the service is the generated
/// `KeyManagementServiceServer`, which also answers unknown methods with
/// UNIMPLEMENTED. Accept errors are retried inside [`accept::Connections`],
/// so serving itself cannot fail.
///
/// The client's `grpc-timeout` header is not read (tonic's own `Server`
/// ended a call with CANCELLED there): a gRPC client whose deadline passes
/// resets its stream, which drops the call here, and every call ends at the
/// call limit whatever the client sends.
pub async fn serve(
    listener: UnixListener,
    service: KmsService,
    callers: peer::AllowedCallers,
    request_deadline: Duration,
    stop: impl Future<Output = StopReason>,
) -> Result<StopReason, Infallible> {
    let call_limit = request_deadline + CALL_LIMIT_MARGIN;
    let kms = KeyManagementServiceServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES);
    // The uid is checked at accept (accept.rs); the interceptor checks it
    // again per call, which costs a lookup in a short list.
    let checked = ServiceExt::<http::Request<Incoming>>::map_response(
        InterceptedService::new(kms, callers.clone()),
        |response| response.map(Body::new),
    );
    // Outermost, so that calls refused by the layers below count and log
    // like the others (observe.rs).
    let calls = observe::Observed::new(idle::CallLimitLayer::new(call_limit).layer(checked));
    let http2 = HTTP2.builder();
    let mut connections = accept::Connections::new(listener, callers, MAX_CONNECTIONS, call_limit);
    let (begin_drain, drain) = watch::channel(());
    let mut open = JoinSet::new();
    tokio::pin!(stop);
    let reason = loop {
        tokio::select! {
            reason = &mut stop => break reason,
            Some(connection) = connections.next() => {
                open.spawn(serve_connection(
                    connection,
                    calls.clone(),
                    http2.clone(),
                    drain.clone(),
                ));
            }
            // Reaps finished connections so that the set stays small.
            Some(_) = open.join_next(), if !open.is_empty() => {}
        }
    };
    log::info!(
        "stopping ({reason}): refusing new connections, draining for up to {SHUTDOWN_GRACE:?}"
    );
    crate::notify::stopping();
    // Dropping the listener refuses new connections at once, rather than
    // leaving them queued until the process exits.
    drop(connections);
    drop(drain);
    let _ = begin_drain.send(());
    drain_within(open, SHUTDOWN_GRACE).await;
    Ok(reason)
}

/// Serves one connection until it ends, or, once a drain begins, until its
/// open calls finish: hyper then sends GOAWAY, so the client opens no new
/// call on it.
async fn serve_connection<C>(
    connection: idle::IdleClosingStream,
    calls: C,
    http2: http2::Builder<TokioExecutor>,
    mut drain: watch::Receiver<()>,
) where
    C: Service<http::Request<Incoming>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    C::Future: Send + 'static,
{
    // Each call learns its connection's peer and activity from its
    // extensions (peer.rs, idle.rs).
    let info = connection.info();
    let calls = calls.map_request(move |mut request: http::Request<Incoming>| {
        request.extensions_mut().insert(info.clone());
        request
    });
    let drain = async move {
        let _ = drain.changed().await;
    };
    sceau_rpc::serve::serve_connection(connection, calls, http2, drain).await;
}
