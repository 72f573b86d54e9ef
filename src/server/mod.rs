//! Serving the KMS service on a unix socket, and stopping cleanly.
#![forbid(unsafe_code)]

pub mod idle;
pub mod peer;
pub mod socket;

pub use crate::sys::DeferredStopSignals;

use std::future::Future;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::kms::{KmsService, Sealer};
use crate::pb::key_management_service_server::KeyManagementServiceServer;
use crate::tpm::worker::WorkerDeath;

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

/// Accepted connections, each closed after [`idle::IDLE_LIMIT`] of silence.
fn incoming_connections(
    listener: UnixListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<idle::IdleClosingStream>> {
    use tokio_stream::StreamExt;
    UnixListenerStream::new(listener).map(|accepted| accepted.map(idle::IdleClosingStream::new))
}

/// Serves until `stop` resolves, then stops accepting and gives in-flight
/// calls [`SHUTDOWN_GRACE`] to finish.
pub async fn serve<S: Sealer>(
    listener: UnixListener,
    service: KmsService<S>,
    callers: peer::AllowedCallers,
    stop: impl Future<Output = StopReason>,
) -> Result<StopReason, tonic::transport::Error> {
    let (begin_drain, drain) = oneshot::channel::<()>();
    let server = Server::builder()
        .add_service(KeyManagementServiceServer::with_interceptor(
            service, callers,
        ))
        .serve_with_incoming_shutdown(incoming_connections(listener), async {
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
