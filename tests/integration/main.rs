//! End-to-end tests of the sceau daemon against software TPMs.
//!
//! Every test starts its own swtpm (on its own loopback port pair, with its
//! own state directory) and its own sceau process, so the tests run in
//! parallel without sharing anything. tpm2-tools serve as an independent
//! implementation to cross-check key ids and envelopes.

// The harness signals and sandboxes its child processes with libc and
// seccompiler calls, each with a SAFETY note.
#![allow(unsafe_code)]

mod harness;

mod bus_capture;
mod cli;
mod cluster;
mod concurrency;
mod enroll;
mod foreign_tpm;
mod hardening;
mod harness_self_test;
mod malformed;
mod memory_scan;
mod recover_offline;
mod restart;
mod round_trip;
mod server_limits;
mod tools_cross_check;
mod tpm_faults;
