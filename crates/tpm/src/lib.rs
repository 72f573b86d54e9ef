//! sceau's TPM layer, shared by the daemon, the SPIRE agent plugin and the
//! test kit: opening the TPM and everything sceau asks of it, from the SRK
//! and sealed objects to the TPM thread. Its modules, and the one order in
//! which they import each other, are in ARCHITECTURE.md ("The TPM layer's
//! modules"; checked by scripts/check-architecture.sh); each module's own
//! documentation says what it does.
//!
//! It depends on `sceau-format` for byte formats and on `sceau-sys` for the
//! few system calls std does not wrap; it has no `unsafe` of its own, no
//! server, no sandbox and no gRPC types.
#![forbid(unsafe_code)]

pub mod boot_policy;
pub mod device;
pub mod enroll;
pub mod fault;
pub mod health;
pub mod identity;
pub mod kek;
pub mod observe;
pub mod owner;
pub mod pcrs;
pub mod revocation;
pub mod sealed;
pub mod secret;
pub mod session;
pub mod signing;
pub mod srk;
pub mod start;
pub mod tcti;
pub mod tss_log;
pub mod worker;

pub use device::{CredentialFor, Tpm, TpmConfig};
pub use fault::Fault;
pub use observe::{Observer, TpmCommand, TpmObserver};
pub use session::ParameterEncryption;
pub use srk::KeyId;
pub use tcti::Tcti;

pub use tss_log::{tss_log_muted, without_tss_log};
