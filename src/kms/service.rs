//! `v2.KeyManagementService`: the three calls the kube-apiserver makes.
#![forbid(unsafe_code)]

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::coalesce::Coalescer;
use super::sealer::Sealer;
use super::status::fault_status;
use crate::metrics::call::{note_envelope, note_uid};
use sceau_kms_api::pb::key_management_service_server::KeyManagementService;
use sceau_kms_api::pb::{
    DecryptRequest, DecryptResponse, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse,
};
use sceau_tpm::Fault;
use sceau_tpm::secret::Dek;

/// The KMS API version sceau speaks; it never changes during a process's life.
const API_VERSION: &str = "v2";
const HEALTHY: &str = "ok";

type Unsealed = Result<Arc<Dek>, Fault>;

/// The service over a mode ([`Sealer`]): single-node or cluster, it does not
/// know which. It validates the plaintext, coalesces Decrypts, and bounds
/// every answer. Each call's request uid goes to its log line, which the
/// server writes once the call is answered (`server::observe`).
pub struct KmsService {
    sealer: Box<dyn Sealer>,
    decrypts: Coalescer<Vec<u8>, Unsealed>,
}

impl KmsService {
    pub fn new(sealer: Box<dyn Sealer>) -> Self {
        Self {
            sealer,
            decrypts: Coalescer::counting_joins(|| crate::metrics::METRICS.decrypt_coalesced()),
        }
    }

    async fn seal(&self, request: EncryptRequest) -> Result<EncryptResponse, Status> {
        let dek = Dek::take_from(request.plaintext)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let (sealed, key_id) = self.sealer.seal(dek).await?;
        note_envelope(&key_id.to_string(), &sealed.ciphertext);
        Ok(EncryptResponse {
            ciphertext: sealed.ciphertext,
            key_id: key_id.to_string(),
            annotations: sealed.annotations,
        })
    }

    /// The mode checks the request without the TPM; its TPM part then runs
    /// once per distinct ciphertext, however many ask at once.
    async fn unseal(&self, request: DecryptRequest) -> Result<DecryptResponse, Status> {
        let opening = self.sealer.open(&request)?;
        let dek = self
            .decrypts
            .run(
                request.ciphertext,
                || async move { opening.await.map(Arc::new) },
            )
            .await
            .map_err(fault_status)?;
        Ok(DecryptResponse {
            plaintext: dek.expose().to_vec(),
        })
    }
}

#[tonic::async_trait]
impl KeyManagementService for KmsService {
    async fn status(
        &self,
        _request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let healthz = match self.sealer.health().await {
            Ok(()) => HEALTHY.to_string(),
            Err(fault) => fault.to_string(),
        };
        Ok(Response::new(StatusResponse {
            version: API_VERSION.to_string(),
            healthz,
            key_id: self.sealer.key_id().to_string(),
        }))
    }

    async fn encrypt(
        &self,
        request: Request<EncryptRequest>,
    ) -> Result<Response<EncryptResponse>, Status> {
        let request = request.into_inner();
        note_uid(&request.uid);
        self.seal(request).await.map_err(bounded).map(Response::new)
    }

    async fn decrypt(
        &self,
        request: Request<DecryptRequest>,
    ) -> Result<Response<DecryptResponse>, Status> {
        let request = request.into_inner();
        note_uid(&request.uid);
        note_envelope(&request.key_id, &request.ciphertext);
        self.unseal(request)
            .await
            .map_err(bounded)
            .map(Response::new)
    }
}

/// The longest status message sceau sends. Every message is built from
/// sceau's own words and [`printable`] echoes (at most 163 bytes each), far
/// below this; the cut is a second line, so that no path can send (or log) a message that grows with
/// the request: gRPC carries the message in a trailer, and one too large
/// for the client's header limit ends the call with no status at all.
const MAX_STATUS_MESSAGE: usize = 512;

fn bounded(status: Status) -> Status {
    if status.message().len() <= MAX_STATUS_MESSAGE {
        return status;
    }
    let mut cut = MAX_STATUS_MESSAGE;
    while !status.message().is_char_boundary(cut) {
        cut -= 1;
    }
    Status::new(status.code(), format!("{}…", &status.message()[..cut]))
}

#[cfg(test)]
mod tests;
