//! sceau's TPM layer, shared by the daemon, the SPIRE agent plugin and the
//! test kit: the parsed TCTI (`tcti`), the open TPM (`device`), SRK and key_id
//! (`srk`), the envelope signing key (`signing`), sealed objects (`sealed`),
//! the salted session (`session`), TSS
//! errors to class words (`fault`), the cached health verdict (`health`), EK
//! and credential activation for enrollment (`enroll`), the TPM thread
//! (`worker`: bounded queue, deadlines, retries, reconnect), the DEK in a
//! locked page (`secret`), what the layer reports to whoever watches it
//! (`observe`), PCRs (`pcrs`), the signed boot policies that objects are
//! sealed to (`boot_policy`) and the NV indices that revoke them
//! (`revocation`), the KEK generations with their epoch counter
//! (`kek`), and the owner hierarchy's authorization value (`owner`), and who made
//! the TPM and its firmware version (`identity`).
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
