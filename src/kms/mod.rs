//! The KMS v2 gRPC service: request validation, Decrypt coalescing, and the
//! mapping of every failure to a gRPC status that carries no TPM detail.
#![forbid(unsafe_code)]

mod cluster;
mod coalesce;
mod service;
pub mod wrapping;

use std::future::Future;

pub use coalesce::Coalescer;
pub use service::KmsService;

use crate::secret::Dek;
use crate::tpm::sealed::{ImportableObject, LoadableObject};
use crate::tpm::worker::TpmWorker;
use crate::tpm::{Fault, KeyId};
use sceau_format::sealed::SealedBlobs;

/// What the service needs from a TPM. The real one is [`TpmWorker`]; unit
/// tests and fuzzers put a fake behind it.
pub trait Sealer: Send + Sync + 'static {
    fn key_id(&self) -> &KeyId;
    fn seal(&self, dek: Dek) -> impl Future<Output = Result<SealedBlobs, Fault>> + Send;
    fn unseal(&self, object: LoadableObject) -> impl Future<Output = Result<Dek, Fault>> + Send;
    /// Import, Load and Unseal of a cluster envelope's entry. Fakes that do
    /// not model cluster mode refuse every entry.
    fn unseal_imported(
        &self,
        _object: ImportableObject,
    ) -> impl Future<Output = Result<Dek, Fault>> + Send {
        async { Err(Fault::EnvelopeRejected) }
    }
    fn health(&self) -> impl Future<Output = Result<(), Fault>> + Send;
}

impl Sealer for TpmWorker {
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
