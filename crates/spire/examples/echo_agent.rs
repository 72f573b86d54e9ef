//! A minimal agent NodeAttestor plugin on sceau-spire's plumbing, the
//! partner of `echo_attestor`: it sends its payload (`SCEAU_ECHO_PAYLOAD`,
//! or `node`) and answers each challenge with its bytes reversed. It proves
//! nothing: never use it outside a test.

use std::sync::Arc;

use sceau_spire::pb::agent_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use sceau_spire::pb::agent_attestor::{
    Challenge, PayloadOrChallengeResponse, payload_or_challenge_response,
};
use sceau_spire::plugin::hcl::Body;
use sceau_spire::plugin::{self, ConfigError, CoreConfig, MAX_MESSAGE_BYTES, Plugin, Service};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

struct EchoAgent;

impl Plugin for EchoAgent {
    const SERVICE_NAME: &'static str =
        sceau_spire::pb::agent_attestor::node_attestor_server::SERVICE_NAME;

    fn validate(&self, _core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError> {
        Body::parse(hcl)?.check_keys(&[])?;
        Ok(Vec::new())
    }

    fn configure(&self, core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
        self.validate(core, hcl).map(drop)
    }

    fn service(self: Arc<Self>) -> Service {
        Service::new(
            NodeAttestorServer::from_arc(self).max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
    }
}

#[tonic::async_trait]
impl NodeAttestor for EchoAgent {
    type AidAttestationStream = ReceiverStream<Result<PayloadOrChallengeResponse, Status>>;

    async fn aid_attestation(
        &self,
        request: Request<Streaming<Challenge>>,
    ) -> Result<Response<Self::AidAttestationStream>, Status> {
        let payload = std::env::var("SCEAU_ECHO_PAYLOAD").unwrap_or_else(|_| "node".to_owned());
        let mut challenges = request.into_inner();
        let (out, stream) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            let first = PayloadOrChallengeResponse {
                data: Some(payload_or_challenge_response::Data::Payload(
                    payload.into_bytes(),
                )),
            };
            if out.send(Ok(first)).await.is_err() {
                return;
            }
            while let Ok(Some(Challenge { mut challenge })) = challenges.message().await {
                challenge.reverse();
                let answer = PayloadOrChallengeResponse {
                    data: Some(payload_or_challenge_response::Data::ChallengeResponse(
                        challenge,
                    )),
                };
                if out.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }
}

fn main() -> std::process::ExitCode {
    plugin::run(Arc::new(EchoAgent))
}
