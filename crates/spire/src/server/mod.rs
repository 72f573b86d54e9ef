//! The server plugin (`sceau-spire-server`): verifies a node's TPM without
//! one of its own.
//!
//! One `Attest` stream is one attestation: the agent's payload
//! ([`verify::check_payload`]), one challenge ([`verify::issue_challenge`]),
//! the answer ([`verify::check_response`]), then the agent's ID and
//! selectors. Every refusal is one log line and one gRPC status with the
//! same text; the stream never carries TPM internals.
//!
//! - `config`: `plugin_data` and the trust sources it names.
//! - `structures`: TPMT_PUBLIC, TPMS_ATTEST, TPMT_SIGNATURE.
//! - `keys`: RSA and EC keys in TPM and X.509 form, compared by value.
//! - `x509`: EK certificates, manufacturer roots and intermediates.
//! - `credential`: TPM2_MakeCredential in software.
//! - `verify`: the checks, in order.

pub mod config;
pub mod credential;
pub mod keys;
pub mod structures;
pub mod verify;
pub mod x509;

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use self::config::ServerConfig;
use self::verify::Refusal;
use crate::payload::{ChallengeResponse, Payload};
use crate::pb::server_attestor::attest_request::Request as Inbound;
use crate::pb::server_attestor::attest_response::Response as Outbound;
use crate::pb::server_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use crate::pb::server_attestor::{AgentAttributes, AttestRequest, AttestResponse};
use crate::plugin::{ConfigError, CoreConfig, Plugin, Service};

/// The name agent IDs carry (`spiffe://<td>/spire/agent/sceau_tpm/<hash>`)
/// and the one both sides are configured under (`NodeAttestor "sceau_tpm"`).
pub const PLUGIN_NAME: &str = "sceau_tpm";
/// How long the agent has to send its payload once the stream is open.
const PAYLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the agent's TPM has to answer the challenge (ActivateCredential
/// and a quote take well under a second even on slow discrete TPMs).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct ServerPlugin {
    config: RwLock<Option<Arc<ServerConfig>>>,
}

impl Plugin for ServerPlugin {
    const SERVICE_NAME: &'static str = "spire.plugin.server.nodeattestor.v1.NodeAttestor";

    fn validate(&self, core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError> {
        ServerConfig::parse(core, hcl).map(|config| config.notes())
    }

    fn configure(&self, core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
        let config = ServerConfig::parse(core, hcl)?;
        log::info!(
            "configured for trust domain {}: {}",
            config.trust_domain,
            config.notes().join("; ")
        );
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(config));
        Ok(())
    }

    fn service(self: Arc<Self>) -> Service {
        tower::util::BoxCloneSyncService::new(NodeAttestorServer::from_arc(self))
    }
}

#[tonic::async_trait]
impl NodeAttestor for ServerPlugin {
    type AttestStream = ReceiverStream<Result<AttestResponse, Status>>;

    async fn attest(
        &self,
        request: Request<Streaming<AttestRequest>>,
    ) -> Result<Response<Self::AttestStream>, Status> {
        let config = self
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                Status::failed_precondition("sceau_tpm: the plugin is not configured")
            })?;
        let mut inbound = request.into_inner();
        let (outbound, stream) = mpsc::channel(2);
        tokio::spawn(async move {
            let result = attest(&config, &mut inbound, &outbound).await;
            let message = match result {
                Ok(attributes) => {
                    log::info!(
                        "attested agent {} with {} selectors",
                        attributes.spiffe_id,
                        attributes.selector_values.len()
                    );
                    Ok(AttestResponse {
                        response: Some(Outbound::AgentAttributes(attributes)),
                    })
                }
                Err((ek, failure)) => {
                    log::warn!("attestation refused (EK {ek}): {}", failure.message());
                    Err(failure)
                }
            };
            // The agent may have gone; nothing is left to tell it.
            let _ = outbound.send(message).await;
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }
}

/// One attestation. On failure, returns the EK hash (or "unknown") for the
/// log line with the status.
async fn attest(
    config: &ServerConfig,
    inbound: &mut Streaming<AttestRequest>,
    outbound: &mpsc::Sender<Result<AttestResponse, Status>>,
) -> Result<AgentAttributes, (String, Status)> {
    let unknown = |status: Status| ("unknown".to_string(), status);
    let payload = match receive(inbound, PAYLOAD_TIMEOUT).await.map_err(unknown)? {
        Inbound::Payload(bytes) => Payload::decode(&bytes)
            .map_err(|e| unknown(refused(&Refusal::Malformed(format!("payload: {e}")))))?,
        Inbound::ChallengeResponse(_) => {
            return Err(unknown(Status::invalid_argument(
                "sceau_tpm: a challenge response came before the payload",
            )));
        }
    };
    let verified = verify::check_payload(config, &payload, SystemTime::now())
        .map_err(|r| unknown(refused(&r)))?;
    let ek = verified.pub_hash.clone();
    let with_ek = |status: Status| (ek.clone(), status);
    let (pending, challenge) =
        verify::issue_challenge(config, verified).map_err(|r| with_ek(refused(&r)))?;
    outbound
        .send(Ok(AttestResponse {
            response: Some(Outbound::Challenge(challenge.encode())),
        }))
        .await
        .map_err(|_| with_ek(Status::cancelled("sceau_tpm: the agent went away")))?;
    let response = match receive(inbound, ANSWER_TIMEOUT).await.map_err(with_ek)? {
        Inbound::ChallengeResponse(bytes) => ChallengeResponse::decode(&bytes).map_err(|e| {
            with_ek(refused(&Refusal::Malformed(format!(
                "challenge response: {e}"
            ))))
        })?,
        Inbound::Payload(_) => {
            return Err(with_ek(Status::invalid_argument(
                "sceau_tpm: a second payload came instead of the challenge response",
            )));
        }
    };
    let selectors = verify::check_response(pending, &response).map_err(|r| with_ek(refused(&r)))?;
    Ok(AgentAttributes {
        spiffe_id: format!(
            "spiffe://{}/spire/agent/{PLUGIN_NAME}/{ek}",
            config.trust_domain
        ),
        selector_values: selectors,
        can_reattest: true,
    })
}

async fn receive(
    inbound: &mut Streaming<AttestRequest>,
    limit: Duration,
) -> Result<Inbound, Status> {
    match tokio::time::timeout(limit, inbound.message()).await {
        Err(_) => Err(Status::deadline_exceeded(format!(
            "sceau_tpm: the agent did not answer within {} s",
            limit.as_secs()
        ))),
        Ok(Err(status)) => Err(status),
        Ok(Ok(None)) => Err(Status::cancelled("sceau_tpm: the agent closed the stream")),
        Ok(Ok(Some(AttestRequest { request: None }))) => Err(Status::invalid_argument(
            "sceau_tpm: an empty message came from the agent",
        )),
        Ok(Ok(Some(AttestRequest {
            request: Some(message),
        }))) => Ok(message),
    }
}

/// The status for a refusal: malformed input is INVALID_ARGUMENT, anything
/// that was well-formed but not trusted is PERMISSION_DENIED.
fn refused(refusal: &Refusal) -> Status {
    let message = format!("sceau_tpm: {refusal}");
    match refusal {
        Refusal::Malformed(_) => Status::invalid_argument(message),
        _ => Status::permission_denied(message),
    }
}
