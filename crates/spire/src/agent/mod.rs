//! The agent plugin: proves the node's TPM to the server plugin.
//!
//! SPIRE's agent opens one `AidAttestation` stream per attestation. The
//! plugin sends the payload (EK, EK certificate, a fresh AK certified by
//! TPM2_CertifyCreation), waits for the server's challenge, answers it
//! (TPM2_ActivateCredential, TPM2_Quote) and then drops every TPM object it
//! loaded. TPM work runs in `spawn_blocking`; attestations are serialized so
//! that a TPM without a resource manager never holds two at once. The lock
//! that serializes them holds the place proof of the last answered
//! challenge (`payload::place_proof`, in memory only), which the next
//! payload carries so that the server keeps this node a place its
//! public-data stalls cannot take (`server::limits`).
//!
//! - `config`: the `plugin_data` keys (`tcti`, `ek_algorithm`,
//!   `event_log_path`);
//! - `tpm`: the TPM commands, blocking;
//! - `raw`: TPM2_CertifyCreation, which tss-esapi 7.7 lacks.

pub mod config;
mod raw;
pub mod tpm;

use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tonic::{Request, Response, Status, Streaming};

use crate::payload::{Challenge, PLACE_PROOF_LEN, place_proof};
use crate::pb::agent_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use crate::pb::agent_attestor::payload_or_challenge_response::Data;
use crate::pb::agent_attestor::{Challenge as ChallengeMessage, PayloadOrChallengeResponse};
use crate::plugin::{ConfigError, CoreConfig, MAX_MESSAGE_BYTES, Plugin, Service};
use tpm::{AgentTpmError, Attestation, TpmSettings};

/// tpm2-tss prints its own diagnostics to stderr, TPM return codes
/// included, and SPIRE turns the plugin's stderr into log lines: a TPM
/// without an EK certificate would log three ESAPI errors per attestation.
/// The plugin logs its own one-line account instead. Call this first in
/// `main`, while the process has one thread (`sceau_sys::set_env` checks
/// it); an operator's explicit TSS2_LOG is kept.
pub fn silence_tss_log() -> std::io::Result<()> {
    if std::env::var_os("TSS2_LOG").is_none() {
        sceau_sys::set_env("TSS2_LOG", "all+none")?;
    }
    Ok(())
}

/// A place proof, wiped when replaced.
type PlaceProof = zeroize::Zeroizing<[u8; PLACE_PROOF_LEN]>;

/// How long the server may take to send its challenge after the payload.
pub const CHALLENGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an attestation waits for the one before it to finish.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one TPM step (the payload, or the answer) may take before the
/// attestation fails with DEADLINE_EXCEEDED. An RSA EK's CreatePrimary takes
/// seconds on slow discrete TPMs; a minute means the TPM hangs. The blocked
/// thread flushes what it made if the TPM ever answers.
pub const TPM_STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The agent-side NodeAttestor.
#[derive(Debug)]
pub struct AgentPlugin {
    settings: RwLock<Option<Arc<TpmSettings>>>,
    /// One attestation at a time uses the TPM.
    /// Held by the attestation running; the place proof of the last
    /// answered challenge.
    busy: Arc<Mutex<Option<PlaceProof>>>,
    tpm_step_timeout: Duration,
}

impl Default for AgentPlugin {
    fn default() -> Self {
        Self::with_tpm_step_timeout(TPM_STEP_TIMEOUT)
    }
}

type ResponseStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<PayloadOrChallengeResponse, Status>> + Send>>;

impl AgentPlugin {
    pub fn new() -> Self {
        Self::default()
    }

    /// A plugin whose TPM steps fail after `limit` instead of
    /// [`TPM_STEP_TIMEOUT`] (the tests' frozen TPM).
    pub fn with_tpm_step_timeout(limit: Duration) -> Self {
        Self {
            settings: RwLock::default(),
            busy: Arc::default(),
            tpm_step_timeout: limit,
        }
    }

    fn current(&self) -> Option<Arc<TpmSettings>> {
        self.settings
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl Plugin for AgentPlugin {
    const SERVICE_NAME: &'static str = "spire.plugin.agent.nodeattestor.v1.NodeAttestor";

    fn validate(&self, _core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError> {
        config::parse(hcl).map(|_| Vec::new())
    }

    fn configure(&self, _core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
        let settings = Arc::new(config::parse(hcl)?);
        log::info!(
            "configured: TPM at {}, {} EK, event log {}",
            settings.tcti,
            settings.ek_algorithm,
            settings
                .event_log_path
                .as_deref()
                .map_or_else(|| "not sent".into(), |p| p.display().to_string())
        );
        *self
            .settings
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(settings);
        Ok(())
    }

    fn service(self: Arc<Self>) -> Service {
        tower::util::BoxCloneSyncService::new(
            NodeAttestorServer::from_arc(self).max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
    }
}

#[tonic::async_trait]
impl NodeAttestor for AgentPlugin {
    type AidAttestationStream = ResponseStream;

    async fn aid_attestation(
        &self,
        request: Request<Streaming<ChallengeMessage>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let Some(settings) = self.current() else {
            return Err(Status::failed_precondition("not configured"));
        };
        let inbound = request.into_inner();
        let (sender, receiver) = mpsc::channel(2);
        let busy = Arc::clone(&self.busy);
        let limit = self.tpm_step_timeout;
        tokio::spawn(async move {
            let outcome = attest(settings, inbound, &sender, busy, limit).await;
            if let Err(status) = outcome {
                // The one log line for a failed attestation; SPIRE logs the
                // status too.
                log::warn!("TPM attestation failed: {}", status.message());
                let _ = sender.send(Err(status)).await;
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        Ok(Response::new(Box::pin(stream)))
    }
}

/// One attestation, start to end. The TPM objects live in `attestation`,
/// which [`release`] drops on a blocking thread on every path.
async fn attest(
    settings: Arc<TpmSettings>,
    mut inbound: Streaming<ChallengeMessage>,
    sender: &mpsc::Sender<Result<PayloadOrChallengeResponse, Status>>,
    busy: Arc<Mutex<Option<PlaceProof>>>,
    limit: Duration,
) -> Result<(), Status> {
    let mut turn = tokio::time::timeout(QUEUE_TIMEOUT, busy.lock_owned())
        .await
        .map_err(|_| Status::unavailable("another TPM attestation is still running"))?;
    let started = std::time::Instant::now();
    let proof = turn.clone();
    let (attestation, payload) = bounded(
        limit,
        "the payload",
        blocking(move || Attestation::begin_with_place_proof(&settings, proof.as_deref())),
    )
    .await?;
    log::info!("TPM payload ready in {} ms", started.elapsed().as_millis());
    let mut attestation = Guard(Some(attestation));
    send(sender, Data::Payload(payload.encode())).await?;
    let message = match tokio::time::timeout(CHALLENGE_TIMEOUT, inbound.message()).await {
        Err(_) => {
            return Err(Status::deadline_exceeded(format!(
                "no challenge from the server within {} s",
                CHALLENGE_TIMEOUT.as_secs()
            )));
        }
        // The stream ended: the server needed no challenge, or gave up.
        Ok(Ok(None)) => {
            release(attestation).await;
            return Ok(());
        }
        Ok(Err(status)) => {
            log::info!("the attestation stream ended: {}", status.message());
            release(attestation).await;
            return Ok(());
        }
        Ok(Ok(Some(message))) => message,
    };
    let challenge = Challenge::decode(&message.challenge)
        .map_err(|e| Status::invalid_argument(format!("the server's challenge: {e}")))?;
    let started = std::time::Instant::now();
    let mut taken = attestation.0.take().expect("held until answered");
    let answering = tokio::task::spawn_blocking(move || {
        let answer = taken.answer(&challenge);
        (taken, answer)
    });
    let (taken, answer) = bounded(limit, "the answer", async {
        answering
            .await
            .map_err(|_| Status::internal("the TPM task panicked"))
    })
    .await?;
    attestation.0 = Some(taken);
    let response = answer.map_err(status_of)?;
    log::info!(
        "TPM challenge answered in {} ms",
        started.elapsed().as_millis()
    );
    let next_proof = place_proof(&response.credential);
    send(sender, Data::ChallengeResponse(response.encode())).await?;
    // Sent: whether the server accepted it or not, only this TPM could
    // have opened the credential. A proof the server does not expect (it
    // refused the answer) only puts the next payload in the shared pool.
    *turn = Some(next_proof);
    release(attestation).await;
    Ok(())
}

/// Holds the attestation between steps; if the task ends early (the client
/// went away, a send failed) its drop still flushes, on a blocking thread.
struct Guard(Option<Attestation>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(attestation) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(attestation))),
                Err(_) => drop(attestation),
            }
        }
    }
}

/// Flushes the TPM objects now, and waits for it.
async fn release(mut guard: Guard) {
    if let Some(attestation) = guard.0.take() {
        let _ = tokio::task::spawn_blocking(move || drop(attestation)).await;
    }
}

/// `step`, or DEADLINE_EXCEEDED once `limit` has passed (a hung TPM).
async fn bounded<T>(
    limit: Duration,
    what: &str,
    step: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    tokio::time::timeout(limit, step).await.unwrap_or_else(|_| {
        Err(Status::deadline_exceeded(format!(
            "the TPM did not finish {what} within {} s; check that it answers (tpm2_getrandom 8)",
            limit.as_secs()
        )))
    })
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, AgentTpmError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| Status::internal("the TPM task panicked"))?
        .map_err(status_of)
}

async fn send(
    sender: &mpsc::Sender<Result<PayloadOrChallengeResponse, Status>>,
    data: Data,
) -> Result<(), Status> {
    sender
        .send(Ok(PayloadOrChallengeResponse { data: Some(data) }))
        .await
        .map_err(|_| Status::cancelled("SPIRE closed the attestation stream"))
}

/// A TPM failure as a status: the error's one line, and a code saying
/// whether trying again may help.
fn status_of(error: AgentTpmError) -> Status {
    use sceau_tpm::fault::Fault;
    let message = error.to_string();
    match error {
        AgentTpmError::Open { .. }
        | AgentTpmError::Step {
            fault: Fault::Busy | Fault::Unreachable | Fault::Timeout,
            ..
        }
        | AgentTpmError::PcrsChanging => Status::unavailable(message),
        AgentTpmError::CredentialRejected => Status::invalid_argument(message),
        AgentTpmError::SecondConnection(_) => Status::failed_precondition(message),
        _ => Status::internal(message),
    }
}
