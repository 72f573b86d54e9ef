//! `v2.KeyManagementService`: the three calls the kube-apiserver makes.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use tonic::{Code, Request, Response, Status};

use super::wrapping::WrappingThread;
use super::{Coalescer, Sealer, cluster};
use crate::pb::key_management_service_server::KeyManagementService;
use crate::pb::{
    DecryptRequest, DecryptResponse, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse,
};
use crate::secret::Dek;
use crate::tpm::Fault;
use crate::tpm::sealed::LoadableObject;
use sceau_format::members::Membership;
use sceau_format::sealed::Envelope;
pub(super) use sceau_format::text::printable;
use sceau_format::wrapped::VERSION_CLUSTER;

/// The KMS API version sceau speaks; it never changes during a process's life.
const API_VERSION: &str = "v2";
const HEALTHY: &str = "ok";

type Unsealed = Result<Arc<Dek>, Fault>;

/// Cluster mode's state: who the recipients are, and the thread that wraps.
struct Cluster {
    membership: Arc<Membership>,
    wrapping: WrappingThread,
}

pub struct KmsService<S> {
    sealer: Arc<S>,
    /// Set in cluster mode (`serve --members`).
    cluster: Option<Cluster>,
    decrypts: Coalescer<Vec<u8>, Unsealed>,
}

impl<S: Sealer> KmsService<S> {
    pub fn new(sealer: Arc<S>) -> Self {
        Self {
            sealer,
            cluster: None,
            decrypts: Coalescer::new(),
        }
    }

    /// Cluster mode: Encrypt makes version 2 envelopes for every member and
    /// Status reports the cluster key_id; version 1 envelopes this TPM sealed
    /// before still open under their own key_id.
    /// Starts the wrapping thread, which Encrypt needs.
    pub fn clustered(sealer: Arc<S>, membership: Arc<Membership>) -> std::io::Result<Self> {
        Ok(Self {
            cluster: Some(Cluster {
                wrapping: WrappingThread::spawn(membership.clone())?,
                membership,
            }),
            ..Self::new(sealer)
        })
    }

    fn reported_key_id(&self) -> String {
        match &self.cluster {
            Some(cluster) => cluster.membership.key_id().to_string(),
            None => self.sealer.key_id().to_string(),
        }
    }

    async fn seal(&self, request: EncryptRequest) -> Result<EncryptResponse, Status> {
        let dek = Dek::take_from(request.plaintext)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if let Some(cluster) = &self.cluster {
            return cluster::seal(&cluster.membership, &cluster.wrapping, dek).await;
        }
        let blobs = self.sealer.seal(dek).await.map_err(fault_status)?;
        Ok(EncryptResponse {
            ciphertext: blobs.encode(),
            key_id: self.sealer.key_id().to_string(),
            annotations: HashMap::new(),
        })
    }

    /// Checks run cheapest first, and none touches the TPM until the request
    /// is known to be well-formed and addressed to this TPM.
    async fn unseal(&self, request: DecryptRequest) -> Result<DecryptResponse, Status> {
        if let Some(cluster) = &self.cluster
            && request.ciphertext.first() == Some(&VERSION_CLUSTER)
        {
            let object = cluster::importable_entry(&cluster.membership, &request)?;
            let sealer = self.sealer.clone();
            return self
                .answer(request.ciphertext, || async move {
                    sealer.unseal_imported(object).await.map(Arc::new)
                })
                .await;
        }
        let ours = self.sealer.key_id().as_str();
        if request.key_id != ours {
            return Err(Status::invalid_argument(format!(
                "unknown key_id {}; this TPM only serves {ours}",
                printable(&request.key_id)
            )));
        }
        if !request.annotations.is_empty() {
            return Err(Status::invalid_argument(
                "sceau envelopes carry no annotations, but the request has some",
            ));
        }
        let object = loadable_object(&request.ciphertext)?;
        let sealer = self.sealer.clone();
        self.answer(request.ciphertext, || async move {
            sealer.unseal(object).await.map(Arc::new)
        })
        .await
    }

    /// Runs one unseal per distinct ciphertext, however many ask at once.
    async fn answer<F, Fut>(
        &self,
        ciphertext: Vec<u8>,
        unseal: F,
    ) -> Result<DecryptResponse, Status>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Unsealed> + Send + 'static,
    {
        let dek = self
            .decrypts
            .run(ciphertext, unseal)
            .await
            .map_err(fault_status)?;
        Ok(DecryptResponse {
            plaintext: dek.expose().to_vec(),
        })
    }
}

fn loadable_object(ciphertext: &[u8]) -> Result<LoadableObject, Status> {
    let Envelope::Sealed(blobs) = Envelope::parse(ciphertext).map_err(malformed)?;
    LoadableObject::from_blobs(&blobs).map_err(malformed)
}

/// Bad input in a ciphertext, for either envelope version.
pub(super) fn malformed(error: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("malformed ciphertext: {error}"))
}

/// The class word only: TPM return codes and TSS text stay in sceau's log.
fn fault_status(fault: Fault) -> Status {
    let code = match fault {
        Fault::EnvelopeRejected => Code::InvalidArgument,
        Fault::Timeout => Code::DeadlineExceeded,
        Fault::Unreachable | Fault::Busy | Fault::Lockout => Code::Unavailable,
        Fault::Failure => Code::Internal,
    };
    Status::new(code, fault.to_string())
}

#[tonic::async_trait]
impl<S: Sealer> KeyManagementService for KmsService<S> {
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
            key_id: self.reported_key_id(),
        }))
    }

    async fn encrypt(
        &self,
        request: Request<EncryptRequest>,
    ) -> Result<Response<EncryptResponse>, Status> {
        let request = request.into_inner();
        let uid = printable(&request.uid);
        let result = self.seal(request).await.map_err(bounded);
        log_call("Encrypt", &uid, &result);
        result.map(Response::new)
    }

    async fn decrypt(
        &self,
        request: Request<DecryptRequest>,
    ) -> Result<Response<DecryptResponse>, Status> {
        let request = request.into_inner();
        let uid = printable(&request.uid);
        let result = self.unseal(request).await.map_err(bounded);
        log_call("Decrypt", &uid, &result);
        result.map(Response::new)
    }
}

/// The longest status message sceau sends. Every message is built from
/// sceau's own words and [`printable`] echoes, far below this; the cut is a
/// second line, so that no path can send (or log) a message that grows with
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

fn log_call<T>(method: &str, uid: &str, result: &Result<T, Status>) {
    match result {
        Ok(_) => log::debug!("{method} uid={uid} ok"),
        Err(status) => log::info!(
            "{method} uid={uid} failed: {:?} {}",
            status.code(),
            status.message()
        ),
    }
}

#[cfg(test)]
mod tests;
