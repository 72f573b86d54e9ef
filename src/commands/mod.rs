//! One module per command of `sceau`; `main.rs` parses and dispatches here.
//! `anyhow` is used from here up only: the library below returns typed errors.
#![forbid(unsafe_code)]

pub mod check;
pub mod enroll;
pub mod selftest;
pub mod serve;
pub mod srk_public;

use anyhow::Context as _;
use sceau::cli::SrkPublicOptions;
use sceau::tpm::device::OpenError;
use sceau::tpm::{ParameterEncryption, Tpm, TpmConfig};
use sceau_format::storage_key::StorageKey;

/// tpm2-tss prints its own diagnostics to stderr, TPM return codes included.
/// sceau logs its own account of every failure, so the TSS is silenced
/// unless the operator set TSS2_LOG explicitly. Called while the process
/// still has one thread (`sys::set_env` checks it).
fn silence_tss_log() -> anyhow::Result<()> {
    if std::env::var_os("TSS2_LOG").is_none() {
        sceau::sys::set_env("TSS2_LOG", "all+none").context("silencing tpm2-tss's log")?;
    }
    Ok(())
}

/// The TPM for a one-shot command (no daemon, no sandbox). tpm2-tss stays
/// quiet, as for `serve`: an absent EK certificate is an answer, not an error.
fn open_tpm_for_tool(options: &SrkPublicOptions) -> anyhow::Result<Tpm> {
    silence_tss_log()?;
    let config = TpmConfig {
        tcti: options.tcti.clone(),
        srk_handle: options.srk_handle,
        parameter_encryption: ParameterEncryption::SaltedSession,
    };
    open_tpm_explained(&config)
}

/// Opens the TPM; a failure is one line naming the cause and the fix, and
/// tpm2-tss's own account (with its return code) goes to a DEBUG line.
fn open_tpm_explained(config: &TpmConfig) -> anyhow::Result<Tpm> {
    Tpm::open_explained(config).map_err(|error| {
        if let Some(detail) = error.detail() {
            log::debug!("tpm2-tss's account of the failure below: {detail}");
        }
        match error {
            OpenError::Srk(_) => {
                anyhow::Error::new(error).context(format!("opening the TPM at {}", config.tcti))
            }
            _ => anyhow::Error::new(error),
        }
    })
}

/// The SRK as a storage key, which cluster mode and enrollment need.
fn srk_storage_key(tpm: &Tpm) -> anyhow::Result<StorageKey> {
    StorageKey::from_tpm2b_public(&tpm.srk().tpm2b_public()?)
        .context("cluster mode needs an ECC P-256 SRK, and this TPM gave another")
}
