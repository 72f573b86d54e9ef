//! A test-only SPIRE agent NodeAttestor that misbehaves on purpose, so that
//! a real SPIRE server with the `sceau_tpm` server plugin can be shown to
//! refuse it. Never deploy it. Same plumbing as `sceau-spire-agent`; SPIRE
//! loads it with `plugin_cmd` and:
//!
//! ```hcl
//! plugin_data {
//!   tcti   = "swtpm:host=127.0.0.1,port=2321"   # default device:/dev/tpmrm0
//!   ek_algorithm = "ecc"                        # default "rsa"
//!   attack = "foreign_ek_key"                   # see below
//!   foreign_ek_certificate = "/path/a.der"      # for foreign_ek_key
//!   replay_file = "/path/response.bin"          # for replay
//! }
//! ```
//!
//! - `foreign_ek_key`: another TPM's EK certificate (DER, from
//!   `foreign_ek_certificate`) with this TPM's EK public area. A server that
//!   checks the chain but not that the certificate names the EK would
//!   accept it (../shared/notes/spire.md §4.1, "Gap").
//! - `unrestricted_ak`: an AK without `restricted`, which could sign
//!   anything, certified by CertifyCreation as usual.
//! - `replay`: the first attestation answers honestly and records its
//!   challenge response in `replay_file`; every later one sends that
//!   recording instead of answering.
//! - `garbage`: 512 random bytes as the payload.
//!
//! Everything else is honest, so that each refusal is due to the one thing
//! the attack changes.

use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sceau_spire::agent::tpm::{Attestation, EkAlgorithm, TpmSettings};
use sceau_spire::payload::{Challenge, Payload};
use sceau_spire::pb::agent_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use sceau_spire::pb::agent_attestor::payload_or_challenge_response::Data;
use sceau_spire::pb::agent_attestor::{Challenge as ChallengeMessage, PayloadOrChallengeResponse};
use sceau_spire::plugin::hcl::Body;
use sceau_spire::plugin::{ConfigError, CoreConfig, Plugin, Service};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

const KEYS: &[&str] = &[
    "tcti",
    "ek_algorithm",
    "attack",
    "foreign_ek_certificate",
    "replay_file",
];
const CHALLENGE_TIMEOUT: Duration = Duration::from_secs(60);
const GARBAGE_LEN: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    ForeignEkKey,
    UnrestrictedAk,
    Replay,
    Garbage,
}

#[derive(Debug, Clone)]
struct RogueConfig {
    settings: TpmSettings,
    attack: Attack,
    foreign_ek_certificate: Option<PathBuf>,
    replay_file: Option<PathBuf>,
}

fn parse(hcl: &str) -> Result<RogueConfig, ConfigError> {
    let refused = |e: sceau_spire::plugin::hcl::HclError| ConfigError(e.to_string());
    let body = Body::parse(hcl).map_err(refused)?;
    body.check_keys(KEYS).map_err(refused)?;
    let string = |key| body.string(key).map_err(refused);
    let tcti_text = string("tcti")?.unwrap_or_else(|| "device:/dev/tpmrm0".into());
    let tcti = tcti_text
        .parse()
        .map_err(|e| ConfigError(format!("tcti {tcti_text:?}: {e}")))?;
    let ek_algorithm = match string("ek_algorithm")?.as_deref() {
        None | Some("rsa") => EkAlgorithm::Rsa2048,
        Some("ecc") => EkAlgorithm::EccP256,
        Some(other) => return Err(ConfigError(format!("ek_algorithm {other:?}: rsa or ecc"))),
    };
    let attack = match string("attack")?.as_deref() {
        Some("foreign_ek_key") => Attack::ForeignEkKey,
        Some("unrestricted_ak") => Attack::UnrestrictedAk,
        Some("replay") => Attack::Replay,
        Some("garbage") => Attack::Garbage,
        other => {
            return Err(ConfigError(format!(
                "attack {other:?}: foreign_ek_key, unrestricted_ak, replay or garbage"
            )));
        }
    };
    let foreign_ek_certificate = string("foreign_ek_certificate")?.map(PathBuf::from);
    let replay_file = string("replay_file")?.map(PathBuf::from);
    match attack {
        Attack::ForeignEkKey if foreign_ek_certificate.is_none() => Err(ConfigError(
            "attack foreign_ek_key needs foreign_ek_certificate".into(),
        )),
        Attack::Replay if replay_file.is_none() => {
            Err(ConfigError("attack replay needs replay_file".into()))
        }
        _ => Ok(RogueConfig {
            settings: TpmSettings {
                tcti,
                ek_algorithm,
                event_log_path: None,
            },
            attack,
            foreign_ek_certificate,
            replay_file,
        }),
    }
}

#[derive(Default)]
struct RogueAgent {
    config: RwLock<Option<Arc<RogueConfig>>>,
}

impl Plugin for RogueAgent {
    const SERVICE_NAME: &'static str = "spire.plugin.agent.nodeattestor.v1.NodeAttestor";

    fn validate(&self, _core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError> {
        parse(hcl).map(|_| vec!["this is sceau's rogue test agent: never deploy it".into()])
    }

    fn configure(&self, _core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
        let config = parse(hcl)?;
        log::warn!("rogue test agent configured for attack {:?}", config.attack);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(config));
        Ok(())
    }

    fn service(self: Arc<Self>) -> Service {
        tower::util::BoxCloneSyncService::new(NodeAttestorServer::from_arc(self))
    }
}

type Outbound = mpsc::Sender<Result<PayloadOrChallengeResponse, Status>>;
type ResponseStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<PayloadOrChallengeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl NodeAttestor for RogueAgent {
    type AidAttestationStream = ResponseStream;

    async fn aid_attestation(
        &self,
        request: Request<Streaming<ChallengeMessage>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let config = self
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| Status::failed_precondition("not configured"))?;
        let (sender, receiver) = mpsc::channel(2);
        let inbound = request.into_inner();
        tokio::spawn(async move {
            if let Err(status) = attack(config, inbound, &sender).await {
                log::warn!("rogue attestation ended: {}", status.message());
                let _ = sender.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }
}

async fn attack(
    config: Arc<RogueConfig>,
    mut inbound: Streaming<ChallengeMessage>,
    sender: &Outbound,
) -> Result<(), Status> {
    if config.attack == Attack::Garbage {
        let mut garbage = vec![0u8; GARBAGE_LEN];
        sceau_format::random::fill(&mut garbage);
        return send(sender, Data::Payload(garbage)).await;
    }
    let begin_config = Arc::clone(&config);
    let (mut attestation, payload) = tokio::task::spawn_blocking(move || {
        let settings = &begin_config.settings;
        let (attestation, mut payload) = match begin_config.attack {
            Attack::UnrestrictedAk => {
                let template =
                    sceau_spire::agent::tpm::ak_template_with(false).map_err(|e| e.to_string())?;
                Attestation::begin_with_ak_template(settings, template)
            }
            _ => Attestation::begin(settings),
        }
        .map_err(|e| e.to_string())?;
        if let Some(path) = &begin_config.foreign_ek_certificate
            && begin_config.attack == Attack::ForeignEkKey
        {
            payload.ek_certificate = std::fs::read(path)
                .map_err(|e| format!("foreign_ek_certificate {}: {e}", path.display()))?;
        }
        Ok::<(Attestation, Payload), String>((attestation, payload))
    })
    .await
    .map_err(|_| Status::internal("the TPM task panicked"))?
    .map_err(Status::unavailable)?;
    send(sender, Data::Payload(payload.encode())).await?;
    let message = match tokio::time::timeout(CHALLENGE_TIMEOUT, inbound.message()).await {
        Ok(Ok(Some(message))) => message,
        _ => {
            log::info!("the server sent no challenge (it refused the payload)");
            tokio::task::spawn_blocking(move || drop(attestation));
            return Ok(());
        }
    };
    let recording = config
        .replay_file
        .as_ref()
        .filter(|_| config.attack == Attack::Replay)
        .and_then(|path| std::fs::read(path).ok());
    let response = match recording {
        Some(recorded) => {
            log::warn!("replaying a recorded challenge response");
            tokio::task::spawn_blocking(move || drop(attestation));
            recorded
        }
        None => {
            let challenge = Challenge::decode(&message.challenge)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let answered = tokio::task::spawn_blocking(move || {
                let answer = attestation.answer(&challenge);
                drop(attestation);
                answer
            })
            .await
            .map_err(|_| Status::internal("the TPM task panicked"))?
            .map_err(|e| Status::unavailable(e.to_string()))?;
            let encoded = answered.encode();
            if let (Attack::Replay, Some(path)) = (config.attack, &config.replay_file) {
                std::fs::write(path, &encoded)
                    .map_err(|e| Status::internal(format!("{}: {e}", path.display())))?;
                log::warn!("recorded this response for replay in {}", path.display());
            }
            encoded
        }
    };
    send(sender, Data::ChallengeResponse(response)).await
}

async fn send(sender: &Outbound, data: Data) -> Result<(), Status> {
    sender
        .send(Ok(PayloadOrChallengeResponse { data: Some(data) }))
        .await
        .map_err(|_| Status::cancelled("SPIRE closed the stream"))
}

fn main() -> ExitCode {
    if let Err(e) = sceau_spire::agent::silence_tss_log() {
        eprintln!("rogue_agent: {e}");
        return ExitCode::FAILURE;
    }
    sceau_spire::plugin::run(Arc::new(RogueAgent::default()))
}
