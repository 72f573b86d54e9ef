//! One module per command of `sceau`; `main.rs` parses and dispatches here.
//! `anyhow` is used from here up only: the library below returns typed errors.
#![forbid(unsafe_code)]

pub mod check;
pub mod enroll;
pub mod kek;
pub mod pcrs;
pub mod revoke_policy;
pub mod selftest;
pub mod serve;
pub mod srk_public;

use anyhow::Context as _;
use sceau::cli::SrkPublicOptions;
use sceau_format::members::Member;
use sceau_tpm::device::OpenError;
use sceau_tpm::{Observer, ParameterEncryption, Tpm, TpmConfig};

/// What to do when `TSS2_LOG` would make tpm2-tss log secrets.
#[derive(Clone, Copy)]
enum RevealingTssLog {
    /// `serve` without `--tss-log-reveals-secrets`: every DEK would reach
    /// the journal.
    Refuse,
    /// `serve` with it.
    AllowAsAsked,
    /// The one-shot tools, which handle no DEK: a warning is enough.
    Warn,
}

/// tpm2-tss prints its own diagnostics to stderr, TPM return codes included.
/// sceau logs its own account of every failure, so the TSS is silenced
/// unless the operator set TSS2_LOG explicitly. Called while the process
/// still has one thread (`sys::set_env` checks it).
///
/// An explicit TSS2_LOG that would make tpm2-tss dump DEKs and session keys
/// (`sceau::tss_log`) is handled as `revealing` says.
fn silence_tss_log(revealing: RevealingTssLog) -> anyhow::Result<()> {
    let Some(value) = std::env::var_os("TSS2_LOG") else {
        sceau_sys::set_env("TSS2_LOG", "all+none").context("silencing tpm2-tss's log")?;
        return Ok(());
    };
    let Err(refusal) = sceau::tss_log::check(&value.to_string_lossy()) else {
        return Ok(());
    };
    match revealing {
        RevealingTssLog::Refuse => anyhow::bail!(
            "{refusal}: refusing to start. Use TSS2_LOG=tcti+debug for connection problems, or \
             at most all+info; to debug a throwaway TPM anyway, add --tss-log-reveals-secrets \
             (docs/troubleshooting.md)"
        ),
        RevealingTssLog::AllowAsAsked => log::warn!(
            "--tss-log-reveals-secrets: {refusal}; every DEK of every call goes to this log"
        ),
        RevealingTssLog::Warn => log::warn!("{refusal}"),
    }
    Ok(())
}

/// The TPM for a one-shot command (no daemon, no sandbox). tpm2-tss stays
/// quiet, as for `serve`: an absent EK certificate is an answer, not an error.
fn open_tpm_for_tool(options: &SrkPublicOptions) -> anyhow::Result<Tpm> {
    silence_tss_log(RevealingTssLog::Warn)?;
    let config = TpmConfig {
        tcti: options.tcti.clone(),
        srk_handle: options.srk_handle,
        parameter_encryption: ParameterEncryption::SaltedSession,
        observer: Observer::none(),
        // The member file carries it; enrollment sends the member file.
        envelope_signing_key: true,
        boot_policy: None,
        owner_auth: sceau::credentials::owner_auth()?,
        pinned_srk_name: None,
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

/// This node as enrollment proves it: generation 0's storage key (the
/// SRK) and its envelope signing key.
fn own_member(tpm: &Tpm) -> anyhow::Result<Member> {
    Ok(tpm.member()?)
}
