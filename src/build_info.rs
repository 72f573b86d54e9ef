//! What this build of `sceau` is: version, git commit, profile, features
//! and the tpm2-tss it was built against. `sceau --version` prints it and
//! `sceau serve` logs it once at start-up, so a bug report or a journal
//! names the exact build (SECURITY.md asks reporters for the commit).
//! build.rs sets the values (`sceau_cli::build_script`).
#![forbid(unsafe_code)]

use sceau_cli::build_info::BuildInfo;

/// This binary's build.
pub const BUILD: BuildInfo = sceau_cli::build_info!("sceau", Some(env!("SCEAU_BUILD_TPM2_TSS")));
