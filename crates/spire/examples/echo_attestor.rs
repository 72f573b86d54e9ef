//! A minimal server NodeAttestor plugin on sceau-spire's plumbing, for the
//! process-level protocol tests (tests/plugin_protocol.rs): it attests any
//! agent, naming it by the hex of its payload. Not for use with a real
//! SPIRE server.

use std::sync::{Arc, Mutex};

use sceau_spire::pb::server_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use sceau_spire::pb::server_attestor::{
    AgentAttributes, AttestRequest, AttestResponse, attest_request, attest_response,
};
use sceau_spire::plugin::hcl::Body;
use sceau_spire::plugin::{self, ConfigError, CoreConfig, MAX_MESSAGE_BYTES, Plugin, Service};
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
    type AttestStream = tokio_stream::Once<Result<AttestResponse, Status>>;

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
        let first = request.into_inner().message().await?;
        let Some(AttestRequest {
            request: Some(attest_request::Request::Payload(payload)),
        }) = first
        else {
            return Err(Status::invalid_argument("expected a payload first"));
        };
        let name: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        let attributes = AgentAttributes {
            spiffe_id: format!("spiffe://{trust_domain}/spire/agent/echo/{name}"),
            selector_values: vec![format!("payload:{name}")],
            can_reattest: false,
        };
        Ok(Response::new(tokio_stream::once(Ok(AttestResponse {
            response: Some(attest_response::Response::AgentAttributes(attributes)),
        }))))
    }
}

fn main() -> std::process::ExitCode {
    plugin::run(Arc::new(EchoAttestor::default()))
}
