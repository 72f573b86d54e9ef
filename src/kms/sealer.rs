//! The two traits the service stands on.
//!
//! [`Sealer`] is the mode: what Encrypt makes, what Decrypt accepts, which
//! key_id is reported. [`single::SingleNode`](super::single::SingleNode) seals
//! under this TPM's SRK; [`cluster::Cluster`](super::cluster::Cluster) wraps
//! for every member. The service holds one and never asks which.
//!
//! [`SealingTpm`] is what both modes need from a TPM: [`TpmWorker`] in the
//! daemon, [`FakeTpm`](super::fake::FakeTpm) in unit tests, fuzz targets and
//! the bench, so that the modes' own checks run against a fake too.
#![forbid(unsafe_code)]

use std::future::Future;
use std::pin::Pin;

use tonic::Status;

use crate::pb::DecryptRequest;
use crate::secret::Dek;
use crate::tpm::sealed::{ImportableObject, LoadableObject};
use crate::tpm::worker::TpmWorker;
use crate::tpm::{Fault, KeyId};
use sceau_format::sealed::SealedBlobs;
use sceau_format::wrapped::Encoded;

/// A boxed future, so that [`Sealer`] can stand behind `dyn`.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The mode the daemon runs in, as the service sees it.
pub trait Sealer: Send + Sync + 'static {
    /// The key_id Encrypt stamps on new envelopes and Status reports.
    fn key_id(&self) -> &KeyId;

    /// Encrypt: the envelope of `dek`, as the response's ciphertext and
    /// annotations; errors are already gRPC statuses with no TPM detail.
    fn seal(&self, dek: Dek) -> Pending<'_, Result<Encoded, Status>>;

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

/// The start-up code picks the mode at run time.
impl Sealer for Box<dyn Sealer> {
    fn key_id(&self) -> &KeyId {
        (**self).key_id()
    }

    fn seal(&self, dek: Dek) -> Pending<'_, Result<Encoded, Status>> {
        (**self).seal(dek)
    }

    fn open<'a>(
        &'a self,
        request: &DecryptRequest,
    ) -> Result<Pending<'a, Result<Dek, Fault>>, Status> {
        (**self).open(request)
    }

    fn health(&self) -> Pending<'_, Result<(), Fault>> {
        (**self).health()
    }
}

/// The TPM calls of both modes, each answered by the TPM thread.
pub trait SealingTpm: Send + Sync + 'static {
    /// This TPM's own key_id (from its SRK's Name).
    fn key_id(&self) -> &KeyId;
    /// Create of a sealed-data object under the SRK.
    fn seal(&self, dek: Dek) -> impl Future<Output = Result<SealedBlobs, Fault>> + Send;
    /// Load and Unseal of a version 1 envelope's object.
    fn unseal(&self, object: LoadableObject) -> impl Future<Output = Result<Dek, Fault>> + Send;
    /// Import, Load and Unseal of a version 2 envelope's entry.
    fn unseal_imported(
        &self,
        object: ImportableObject,
    ) -> impl Future<Output = Result<Dek, Fault>> + Send;
    fn health(&self) -> impl Future<Output = Result<(), Fault>> + Send;
}

impl SealingTpm for TpmWorker {
    fn key_id(&self) -> &KeyId {
        TpmWorker::key_id(self)
    }

    fn seal(&self, dek: Dek) -> impl Future<Output = Result<SealedBlobs, Fault>> + Send {
        TpmWorker::seal(self, dek)
    }

    fn unseal(&self, object: LoadableObject) -> impl Future<Output = Result<Dek, Fault>> + Send {
        TpmWorker::unseal(self, object)
    }

    fn unseal_imported(
        &self,
        object: ImportableObject,
    ) -> impl Future<Output = Result<Dek, Fault>> + Send {
        TpmWorker::unseal_imported(self, object)
    }

    fn health(&self) -> impl Future<Output = Result<(), Fault>> + Send {
        TpmWorker::health(self)
    }
}
