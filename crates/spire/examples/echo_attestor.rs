//! A minimal server NodeAttestor plugin on sceau-spire's plumbing, for the
//! process-level protocol tests (tests/plugin_protocol.rs) and for trying
//! the plumbing under a real SPIRE server with `echo_agent` on the agent's
//! side: it attests any agent that answers its challenge (the challenge
//! reversed), naming it by the hex of its payload. It proves nothing about
//! the agent: never use it outside a test.

use std::sync::{Arc, Mutex};

use sceau_spire::pb::server_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use sceau_spire::pb::server_attestor::{
    AgentAttributes, AttestRequest, AttestResponse, attest_request, attest_response,
};
use sceau_spire::plugin::hcl::Body;
use sceau_spire::plugin::{self, ConfigError, CoreConfig, MAX_MESSAGE_BYTES, Plugin, Service};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// The configured trust domain; attesting before Configure is refused.
#[derive(Default)]
struct EchoAttestor {
    trust_domain: Mutex<Option<String>>,
}

fn check(core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
    let body = Body::parse(hcl).map_err(|e| ConfigError(e.to_string()))?;
    body.check_keys(&["note"])
        .map_err(|e| ConfigError(e.to_string()))?;
    body.string("note")
        .map_err(|e| ConfigError(e.to_string()))?;
    if core.trust_domain.is_empty() {
        return Err(ConfigError("the trust domain is empty".to_owned()));
    }
    Ok(())
}

impl Plugin for EchoAttestor {
    const SERVICE_NAME: &'static str =
        sceau_spire::pb::server_attestor::node_attestor_server::SERVICE_NAME;

    fn validate(&self, core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError> {
        check(core, hcl).map(|()| Vec::new())
    }

    fn configure(&self, core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
        check(core, hcl)?;
        *self.trust_domain.lock().unwrap() = Some(core.trust_domain.clone());
        Ok(())
    }

    fn service(self: Arc<Self>) -> Service {
        Service::new(
            NodeAttestorServer::from_arc(self).max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
    }
}

#[tonic::async_trait]
impl NodeAttestor for EchoAttestor {
    type AttestStream = ReceiverStream<Result<AttestResponse, Status>>;

    /// Payload in; a challenge (`prove:` and the payload) out; the answer
    /// must be the challenge reversed; then the agent's attributes.
    async fn attest(
        &self,
        request: Request<Streaming<AttestRequest>>,
    ) -> Result<Response<Self::AttestStream>, Status> {
        let trust_domain = self
            .trust_domain
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| Status::failed_precondition("not configured"))?;
        let mut inbound = request.into_inner();
        let (answers, stream) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            let outcome = exchange(&mut inbound, &answers, &trust_domain).await;
            let _ = answers.send(outcome).await;
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }
}

async fn exchange(
    inbound: &mut Streaming<AttestRequest>,
    answers: &tokio::sync::mpsc::Sender<Result<AttestResponse, Status>>,
    trust_domain: &str,
) -> Result<AttestResponse, Status> {
    let Some(attest_request::Request::Payload(payload)) =
        inbound.message().await?.and_then(|m| m.request)
    else {
        return Err(Status::invalid_argument("expected a payload first"));
    };
    let challenge = [b"prove:".as_slice(), &payload].concat();
    let sent = answers
        .send(Ok(AttestResponse {
            response: Some(attest_response::Response::Challenge(challenge.clone())),
        }))
        .await;
    if sent.is_err() {
        return Err(Status::cancelled("the host went away"));
    }
    let Some(attest_request::Request::ChallengeResponse(answer)) =
        inbound.message().await?.and_then(|m| m.request)
    else {
        return Err(Status::invalid_argument("expected a challenge response"));
    };
    let mut expected = challenge;
    expected.reverse();
    if answer != expected {
        return Err(Status::permission_denied("wrong challenge response"));
    }
    let name: String = payload.iter().map(|b| format!("{b:02x}")).collect();
    Ok(AttestResponse {
        response: Some(attest_response::Response::AgentAttributes(
            AgentAttributes {
                spiffe_id: format!("spiffe://{trust_domain}/spire/agent/echo/{name}"),
                selector_values: vec![format!("payload:{name}")],
                can_reattest: false,
            },
        )),
    })
}

fn main() -> std::process::ExitCode {
    plugin::run(Arc::new(EchoAttestor::default()))
}
