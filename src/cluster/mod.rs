//! Cluster mode (`serve --members DIR`): every DEK is wrapped in software, as
//! a TPM2_Import blob, for each member TPM's SRK and for the offline recovery
//! key, so any member (and only a member) can open any member's envelope.
//! Nothing here touches a TPM; `tpm::import` runs the member's side.
#![forbid(unsafe_code)]

pub mod armor;
pub mod credential;
pub mod duplicate;
pub mod enrollment;
pub mod envelope;
pub mod kdf;
pub mod membership;
pub mod recovery_key;
pub mod storage_key;
pub mod trusted_files;
pub mod wire;
