//! sceau: a Kubernetes KMS v2 plugin that seals every DEK under the TPM's
//! storage root key (SRK).
//!
//! The crate follows the request pipeline:
//! `server` (unix socket, gRPC) → `kms` (validation, coalescing, status) →
//! `sceau_tpm::worker` (one thread, bounded queue, deadlines) → `sceau_tpm`
//! (ESAPI calls). It forbids unsafe code: the few system calls std does not
//! wrap are in `sceau-sys`, the one crate that may use it (audit/unsafe.md).
#![forbid(unsafe_code)]

pub mod activation;
pub mod boot_policy;
pub mod build_info;
pub mod cli;
pub mod cluster;
pub mod credentials;
pub mod events;
pub mod kek;
pub mod kms;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod sandbox;
pub mod selftest;
pub mod server;
pub mod tss_log;
