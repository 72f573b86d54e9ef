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
//! - `event_log`: measured boot: the firmware event log, parsed, replayed,
//!   read (`verify::check_event_log` uses it after the quote).
//! - `verify`: the checks, in order.
//! - `limits`: the answer deadline and the caps on pending challenges.
//! - `resets`: TPM resets between an EK's attestations, from the quote's
//!   clockInfo.
//!
//! A refusal's log line names the EK by its hash as soon as the payload
//! gives a key (`attestation refused (EK <hash>): …`), `unknown` before.

pub mod config;
pub mod credential;
pub mod event_log;
pub mod keys;
pub mod limits;
pub mod resets;
pub mod structures;
pub mod verify;
pub mod x509;

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use self::config::ServerConfig;
use self::limits::{ChallengeSlots, Limits};
use self::resets::{Observed, ResetTracker};
use self::verify::Refusal;
use crate::payload::{ChallengeResponse, Payload};
use crate::pb::server_attestor::attest_request::Request as Inbound;
use crate::pb::server_attestor::attest_response::Response as Outbound;
use crate::pb::server_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use crate::pb::server_attestor::{AgentAttributes, AttestRequest, AttestResponse};
use crate::plugin::log::cap_field;
use crate::plugin::{ConfigError, CoreConfig, MAX_MESSAGE_BYTES, Plugin, Service};

/// The name agent IDs carry (`spiffe://<td>/spire/agent/sceau_tpm/<hash>`)
/// and the one both sides are configured under (`NodeAttestor "sceau_tpm"`).
pub const PLUGIN_NAME: &str = "sceau_tpm";

pub struct ServerPlugin {
    config: RwLock<Option<Arc<ServerConfig>>>,
    limits: Limits,
    slots: ChallengeSlots,
    resets: ResetTracker,
}

impl Default for ServerPlugin {
    fn default() -> Self {
        Self::with_limits(Limits::default())
    }
}

impl ServerPlugin {
    /// A server plugin with other deadlines or caps than the defaults
    /// (tests use short ones).
    pub fn with_limits(limits: Limits) -> Self {
        ServerPlugin {
            config: RwLock::new(None),
            limits,
            slots: ChallengeSlots::new(limits),
            resets: ResetTracker::default(),
        }
    }

    /// The challenges waiting for an answer, and the refusals for capacity.
    pub fn challenge_slots(&self) -> &ChallengeSlots {
        &self.slots
    }
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
        tower::util::BoxCloneSyncService::new(
            NodeAttestorServer::from_arc(self).max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
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
        let attestation = Attestation {
            config,
            limits: self.limits,
            slots: self.slots.clone(),
            resets: self.resets.clone(),
        };
        tokio::spawn(async move {
            let result = attestation.run(&mut inbound, &outbound).await;
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
                Err(failure) => {
                    log::warn!("{}", failure.log_line());
                    Err(failure.status)
                }
            };
            // The agent may have gone; nothing is left to tell it.
            let _ = outbound.send(message).await;
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }
}

/// A failed attestation: the status for the host, and what the log line
/// adds to it.
#[derive(Debug)]
pub struct Failure {
    /// The EK hash, once the payload named a key.
    pub ek: Option<String>,
    pub status: Status,
    /// For a refusal for capacity: how many since the start.
    pub refused_for_capacity: Option<u64>,
}

impl From<verify::NamedRefusal> for Failure {
    /// A refused payload, named by its EK hash when it gave a key.
    fn from(named: verify::NamedRefusal) -> Self {
        Failure {
            ek: named.ek,
            status: refused(&named.refusal),
            refused_for_capacity: None,
        }
    }
}

impl Failure {
    fn unnamed(status: Status) -> Self {
        Failure {
            ek: None,
            status,
            refused_for_capacity: None,
        }
    }

    /// The one log line: `attestation refused (EK <hash>|unknown): <the
    /// status message>`, then the capacity counter for RESOURCE_EXHAUSTED.
    /// The peer's text in the message is capped where it enters it (DNs in
    /// `x509`, the transport's errors in [`receive`]).
    pub fn log_line(&self) -> String {
        let mut line = format!(
            "attestation refused (EK {}): {}",
            self.ek.as_deref().unwrap_or("unknown"),
            self.status.message()
        );
        if let Some(count) = self.refused_for_capacity {
            line.push_str(&format!(
                " ({count} attestations refused for capacity since the plugin started)"
            ));
        }
        line
    }
}

/// One attestation's context.
struct Attestation {
    config: Arc<ServerConfig>,
    limits: Limits,
    slots: ChallengeSlots,
    resets: ResetTracker,
}

impl Attestation {
    async fn run(
        &self,
        inbound: &mut Streaming<AttestRequest>,
        outbound: &mpsc::Sender<Result<AttestResponse, Status>>,
    ) -> Result<AgentAttributes, Failure> {
        let config = &*self.config;
        let unnamed = Failure::unnamed;
        let payload = match receive(inbound, outbound, self.limits.payload_timeout)
            .await
            .map_err(unnamed)?
        {
            Inbound::Payload(bytes) => Payload::decode(&bytes)
                .map_err(|e| unnamed(refused(&Refusal::Malformed(format!("payload: {e}")))))?,
            Inbound::ChallengeResponse(_) => {
                return Err(unnamed(Status::invalid_argument(
                    "sceau_tpm: a challenge response came before the payload",
                )));
            }
        };
        let verified = verify::check_payload_naming_ek(config, &payload, SystemTime::now())
            .map_err(Failure::from)?;
        let ek = verified.pub_hash.clone();
        let with_ek = |status: Status| Failure {
            ek: Some(ek.clone()),
            status,
            refused_for_capacity: None,
        };
        // Held until this function returns, whichever way: the slot is
        // freed by its drop.
        let proof = verified.place_proof;
        let ak_under_ek = verified.ak_under_ek;
        let slot = self
            .slots
            .try_acquire(&ek, proof.as_ref())
            .map_err(|full| Failure {
                ek: Some(ek.clone()),
                status: Status::resource_exhausted(format!("sceau_tpm: {full}")),
                refused_for_capacity: Some(full.refused),
            })?;
        let (pending, challenge) =
            verify::issue_challenge(config, verified).map_err(|r| with_ek(refused(&r)))?;
        outbound
            .send(Ok(AttestResponse {
                response: Some(Outbound::Challenge(challenge.encode())),
            }))
            .await
            .map_err(|_| with_ek(Status::cancelled("sceau_tpm: the agent went away")))?;
        let response = match receive(inbound, outbound, self.limits.answer_timeout)
            .await
            .map_err(with_ek)?
        {
            Inbound::ChallengeResponse(bytes) => {
                ChallengeResponse::decode(&bytes).map_err(|e| {
                    with_ek(refused(&Refusal::Malformed(format!(
                        "challenge response: {e}"
                    ))))
                })?
            }
            Inbound::Payload(_) => {
                return Err(with_ek(Status::invalid_argument(
                    "sceau_tpm: a second payload came instead of the challenge response",
                )));
            }
        };
        let next_proof = pending.next_place_proof();
        let (mut selectors, clock) =
            verify::check_response_clocked(pending, &response).map_err(|r| with_ek(refused(&r)))?;
        let observed = Observed {
            clock,
            ak_under_ek,
            proven: slot.is_proven(),
        };
        let reset = self
            .resets
            .check(&ek, observed, config.measured_boot)
            .map_err(|r| with_ek(refused(&r)))?;
        selectors.extend(reset.map(str::to_owned));
        // Only now: the sender activated the credential made for this EK,
        // which takes the EK's private key inside its TPM; public data
        // cannot do that, nor know the secret the next proof derives from.
        self.slots.prove(&ek, &next_proof);
        Ok(AgentAttributes {
            spiffe_id: format!(
                "spiffe://{}/spire/agent/{PLUGIN_NAME}/{ek}",
                config.trust_domain
            ),
            selector_values: selectors,
            can_reattest: true,
        })
    }
}

/// The next message, within `limit`; ends at once when the host drops the
/// call (the answer side closes) even if the request side stays open.
async fn receive(
    inbound: &mut Streaming<AttestRequest>,
    outbound: &mpsc::Sender<Result<AttestResponse, Status>>,
    limit: Duration,
) -> Result<Inbound, Status> {
    let next = tokio::select! {
        next = tokio::time::timeout(limit, inbound.message()) => next,
        () = outbound.closed() => {
            return Err(Status::cancelled("sceau_tpm: the agent went away"));
        }
    };
    match next {
        Err(_) => Err(Status::deadline_exceeded(format!(
            "sceau_tpm: the agent did not answer within {} ms",
            limit.as_millis()
        ))),
        // The transport's error, whose text may carry the peer's.
        Ok(Err(status)) => Err(Status::new(status.code(), cap_field(status.message()))),
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
