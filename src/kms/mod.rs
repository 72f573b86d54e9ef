//! The KMS v2 gRPC service: request validation, Decrypt coalescing, and the
//! mapping of every failure to a gRPC status that carries no TPM detail.
//!
//! Modules, each importing only those above it in this list:
//! - `coalesce`, `status`, `wrapping`, `key_ids` (the key_ids served and
//!   accepted, replaced by a reload): building blocks;
//! - `sealer`: the [`Sealer`] trait (the mode); the TPM calls a mode makes
//!   are [`SealingTpm`], answered by the TPM layer's
//!   [`TpmWorker`](sceau_tpm::worker::TpmWorker);
//! - `single`, `cluster`: the two modes;
//! - `service`: [`KmsService`], over whichever [`Sealer`] it is given;
//! - `fake` (tests and `insecure-test-hooks` only): [`fake::FakeTpm`].
#![forbid(unsafe_code)]

mod cluster;
mod coalesce;
#[cfg(any(test, feature = "insecure-test-hooks"))]
pub mod fake;
pub mod key_ids;
mod sealer;
mod service;
mod single;
mod status;
pub mod wrapping;

use std::sync::Arc;

pub use cluster::Cluster;
pub use coalesce::Coalescer;
pub use key_ids::ServedKeys;
pub use sceau_tpm::worker::SealingTpm;
pub use sealer::{Pending, Sealer};
pub use service::KmsService;
pub use single::SingleNode;

use sceau_format::members::Membership;

/// The service in the mode `serve` was started in: cluster mode with
/// `--members`, else single-node. The only place that asks which.
///
/// Cluster mode starts the wrapping thread; call this inside the sandbox, so
/// that the thread inherits it.
pub fn service_for<T: SealingTpm>(
    tpm: Arc<T>,
    keys: Arc<ServedKeys>,
    membership: Option<Arc<Membership>>,
    accept_unsigned: bool,
) -> std::io::Result<KmsService> {
    let sealer: Box<dyn Sealer> = match membership {
        Some(membership) => Box::new(Cluster::start(tpm, keys, membership, accept_unsigned)?),
        None => Box::new(SingleNode::new(tpm, keys)),
    };
    Ok(KmsService::new(sealer))
}
