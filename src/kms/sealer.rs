//! The trait the service stands on.
//!
//! [`Sealer`] is the mode: what Encrypt makes, what Decrypt accepts, which
//! key_id is reported. [`single::SingleNode`](super::single::SingleNode) seals
//! under this TPM's SRK; [`cluster::Cluster`](super::cluster::Cluster) wraps
//! for every member. The service holds one and never asks which.
//!
//! What both modes need from a TPM is [`SealingTpm`], from the TPM layer:
//! the TPM thread implements it, and [`FakeTpm`](super::fake::FakeTpm) stands
//! in for it in unit tests, fuzz targets and the bench.
#![forbid(unsafe_code)]

use std::future::Future;
use std::pin::Pin;

use tonic::Status;

use sceau_format::wrapped::Encoded;
use sceau_kms_api::pb::DecryptRequest;
use sceau_tpm::secret::Dek;
use sceau_tpm::{Fault, KeyId};

/// A boxed future, so that [`Sealer`] can stand behind `dyn`.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The mode the daemon runs in, as the service sees it.
pub trait Sealer: Send + Sync + 'static {
    /// The key_id Status reports: the one Encrypt stamps now.
    fn key_id(&self) -> KeyId;

    /// Encrypt: the envelope of `dek`, as the response's ciphertext and
    /// annotations, and the key_id that names it; errors are already gRPC
    /// statuses with no TPM detail.
    fn seal(&self, dek: Dek) -> Pending<'_, Result<(Encoded, KeyId), Status>>;

    /// Decrypt, in two steps. This call makes every check that needs no TPM,
    /// cheapest first, and refuses a request that is malformed or not for
    /// this node; the future it returns is the TPM's part, which the service
    /// runs once per distinct ciphertext however many ask at once.
    fn open<'a>(
        &'a self,
        request: &DecryptRequest,
    ) -> Result<Pending<'a, Result<Dek, Fault>>, Status>;

    /// Status: the TPM's health.
    fn health(&self) -> Pending<'_, Result<(), Fault>>;
}
