//! A KMS v2 client over a unix socket: `sceau check`, the examples, the
//! benchmark and the integration tests use it.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::pb::key_management_service_client::KeyManagementServiceClient;
use crate::pb::{DecryptRequest, EncryptRequest, StatusRequest, StatusResponse};

pub type KmsClient = KeyManagementServiceClient<Channel>;

/// Connects to a KMS plugin at `path`. The authority is `localhost`, as the
/// kube-apiserver sends it.
pub async fn connect(path: &Path) -> Result<KmsClient, tonic::transport::Error> {
    let path: PathBuf = path.into();
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await?;
    Ok(KeyManagementServiceClient::new(channel))
}

/// What `sceau check` reports.
#[derive(Debug)]
pub struct CheckReport {
    pub status: StatusResponse,
    pub ciphertext_len: usize,
    pub encrypt: Duration,
    pub decrypt: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("{call} failed: {status}")]
    Call {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("reading a random DEK: {0}")]
    Random(std::io::Error),
    #[error("Decrypt returned different bytes than were encrypted")]
    Mismatch,
}

/// Status, then Encrypt and Decrypt of a fresh random 32-byte DEK.
pub async fn check(path: &Path) -> Result<CheckReport, CheckError> {
    let mut client = connect(path).await?;
    let failed = |call| move |status| CheckError::Call { call, status };
    let status = client
        .status(StatusRequest {})
        .await
        .map_err(failed("Status"))?
        .into_inner();
    let dek = zeroize::Zeroizing::new(random_dek().map_err(CheckError::Random)?);

    let started = Instant::now();
    let sealed = client
        .encrypt(EncryptRequest {
            plaintext: dek.to_vec(),
            uid: "sceau-check".into(),
        })
        .await
        .map_err(failed("Encrypt"))?
        .into_inner();
    let encrypt = started.elapsed();

    let started = Instant::now();
    let ciphertext_len = sealed.ciphertext.len();
    let opened = client
        .decrypt(DecryptRequest {
            ciphertext: sealed.ciphertext,
            uid: "sceau-check".into(),
            key_id: sealed.key_id,
            annotations: sealed.annotations,
        })
        .await
        .map_err(failed("Decrypt"))?
        .into_inner();
    let decrypt = started.elapsed();
    if zeroize::Zeroizing::new(opened.plaintext).as_slice() != dek.as_slice() {
        return Err(CheckError::Mismatch);
    }
    Ok(CheckReport {
        status,
        ciphertext_len,
        encrypt,
        decrypt,
    })
}

fn random_dek() -> std::io::Result<[u8; 32]> {
    use std::io::Read;
    let mut dek = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut dek)?;
    Ok(dek)
}
