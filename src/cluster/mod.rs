//! Cluster mode (`serve --members DIR`, or `--recovery-key` alone): reading
//! the member and recovery key files the operator placed, with ownership
//! checks. The wrapping itself is pure and lives in `sceau_format`
//! (`members`, `wrapped`, `duplicate`); opening a wrapped DEK is
//! TPM2_Import and TPM2_Unseal on the TPM thread (`tpm::device`).
#![forbid(unsafe_code)]

pub mod load;
pub mod trusted_files;
