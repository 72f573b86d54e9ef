//! End-to-end tests of the sceau daemon against software TPMs.
//!
//! Every test starts its own swtpm (on its own loopback port pair, with its
//! own state directory) and its own sceau process, so the tests run in
//! parallel without sharing anything. tpm2-tools serve as an independent
//! implementation to cross-check key ids and envelopes. The runners and
//! checks are the shared test kit, `sceau-testkit` (crates/testkit).

/// The shared test kit (crates/testkit, package `sceau-testkit`) under the
/// name the tests use, plus the one path only this package's tests can name.
mod harness {
    pub use sceau_testkit::*;

    pub mod sceau {
        pub use sceau_testkit::sceau::*;

        /// The daemon under test, as Cargo names it for this package's tests;
        /// the kit finds the same file itself (`sceau_testkit::sceau::bin`).
        pub const BIN: &str = env!("CARGO_BIN_EXE_sceau");
    }
}

mod audit_events;
mod boot_binding;
mod bus_capture;
mod cli;
mod cluster;
mod concurrency;
mod enroll;
mod fault_matrix;
mod foreign_tpm;
mod hardening;
mod harness_self_test;
mod kek;
mod load_faults;
mod malformed;
mod memory_scan;
mod metrics;
mod recover_offline;
mod recover_shares;
mod restart;
mod round_trip;
mod server_limits;
mod soak;
mod startup_errors;
mod tools_cross_check;
mod tpm_faults;
mod trusted_tpm;
mod tss_log;
