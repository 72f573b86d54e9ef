//! The TPM layer: SRK, sealed objects, parameter encryption,
//! fault classification, and the worker thread that owns the ESAPI context.
#![forbid(unsafe_code)]

pub mod device;
pub mod enroll;
pub mod fault;
pub mod health;
pub mod sealed;
pub mod session;
pub mod srk;
pub mod tcti;
pub mod worker;

pub use device::{Tpm, TpmConfig};
pub use fault::Fault;
pub use session::ParameterEncryption;
pub use srk::KeyId;
pub use tcti::Tcti;
