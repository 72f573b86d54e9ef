//! The Kubernetes KMS v2 API (`proto/kms/v2/api.proto`, package `v2`) as the
//! daemon serves it and its clients call it: the generated messages and
//! service in [`pb`], and [`connect`], a client on one unix-socket HTTP/2
//! connection, as the kube-apiserver makes it. The wire format is its own
//! crate so that the test kit and the tools call the daemon without linking
//! it.
#![forbid(unsafe_code)]

use std::path::Path;

use tonic::codegen::http::Uri;

pub use sceau_rpc::client::{ConnectError, Connection};

/// Code generated from `proto/kms/v2/api.proto` (package `v2`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("v2");
}

pub type KmsClient = pb::key_management_service_client::KeyManagementServiceClient<Connection>;

/// The scheme and authority of every call, as the kube-apiserver sends them.
pub const ORIGIN: &str = "http://localhost";

/// Connects to a KMS plugin at `path`; each call sends its whole request
/// before it awaits the answer, as unary calls do.
pub async fn connect(path: &Path) -> Result<KmsClient, ConnectError> {
    Ok(KmsClient::with_origin(
        open(path).await?,
        Uri::from_static(ORIGIN),
    ))
}

/// Opens a connection to `path`, for callers that need more than the
/// generated client's methods (a test calling a method sceau lacks).
pub async fn open(path: &Path) -> Result<Connection, ConnectError> {
    sceau_rpc::client::open(path, sceau_rpc::client::Bodies::BeforeTheAnswer).await
}
