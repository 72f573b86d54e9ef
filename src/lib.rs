//! sceau: a Kubernetes KMS v2 plugin that seals every DEK under the TPM's
//! storage root key (SRK).
//!
//! The crate follows the request pipeline:
//! `server` (unix socket, gRPC) → `kms` (validation, coalescing, status) →
//! `tpm::worker` (one thread, bounded queue, deadlines) → `tpm` (ESAPI calls).
//! `unsafe` is confined to one module, `sys`: the libc calls std does not
//! wrap, the start-up sequence's environment writes (which check that the
//! process has one thread) and the wiping allocator `sys::alloc`, each with a
//! `SAFETY` comment; every other module forbids it. audit/unsafe.md lists
//! every block, and scripts/check-unsafe.sh fails when that list and the code
//! disagree.

// No module may use `unsafe` unless it says so: `sys` carries
// `#![allow(unsafe_code)]`, every other module `#![forbid(unsafe_code)]`.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
// One unsafe operation per block, each with its own SAFETY comment.
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(clippy::multiple_unsafe_ops_per_block)]
#![deny(clippy::missing_safety_doc)]

pub mod activation;
pub mod build_info;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod hooks;
pub mod kms;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod sandbox;
pub mod secret;
pub mod selftest;
pub mod server;
pub mod sys;
pub mod tpm;
pub mod tss_log;

/// Code generated from `proto/kms/v2/api.proto` (package `v2`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("v2");
}
