//! Starting a TPM and listing what it holds: the first commands any opener
//! sends (`device`'s `Tpm::open`, and the read-only openers `pcrs`,
//! `identity`, `revocation`), kept in a leaf so that those modules need not
//! reach `device`.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::constants::{CapabilityType, StartupType};
use tss_esapi::handles::TpmHandle;
use tss_esapi::structures::CapabilityData;

use super::fault::{INITIALIZE, TpmError};
use super::tcti::Tcti;

/// TPM_HT_TRANSIENT and TPM_HT_LOADED_SESSION: the first handle of each.
pub(crate) const FIRST_TRANSIENT_HANDLE: u32 = 0x8000_0000;
pub(crate) const FIRST_LOADED_SESSION_HANDLE: u32 = 0x0200_0000;
/// More than any TPM holds at once (the PC Client minimum is 3).
const MAX_HANDLES: u32 = 64;

/// An ESAPI context on the TPM at `tcti`, started: for a command that
/// creates nothing (no SRK, no session).
pub(crate) fn started_context(tcti: &Tcti) -> Result<Context, TpmError> {
    let mut ctx = Context::new(tcti.name_conf()).map_err(|e| TpmError::new(INITIALIZE, e))?;
    started_and_transients(&mut ctx)?;
    Ok(ctx)
}

/// The transient objects the TPM holds: the first command sceau sends, so
/// it also finds a TPM that was reset without Startup, which answers
/// TPM_RC_INITIALIZE to everything (the kernel and swtpm's `startup-clear`
/// normally send Startup): sceau then sends Startup(CLEAR) and asks again.
/// One GetCapability serves both purposes, one round trip less at every
/// start than a separate probe.
pub(crate) fn started_and_transients(ctx: &mut Context) -> Result<Vec<TpmHandle>, TpmError> {
    match list_handles(ctx, FIRST_TRANSIENT_HANDLE) {
        Err(e) if e.response_code() == Some(0x100) => {
            log::info!("TPM was not started; sending Startup(CLEAR)");
            ctx.execute_without_session(|c| c.startup(StartupType::Clear))
                .map_err(|e| TpmError::new("Startup", e))?;
            list_handles(ctx, FIRST_TRANSIENT_HANDLE)
        }
        listed => listed,
    }
}

/// The handles of the kind `first` starts (its top byte).
pub(crate) fn list_handles(ctx: &mut Context, first: u32) -> Result<Vec<TpmHandle>, TpmError> {
    let (data, _) = ctx
        .execute_without_session(|c| c.get_capability(CapabilityType::Handles, first, MAX_HANDLES))
        .map_err(|e| TpmError::new("GetCapability", e))?;
    let CapabilityData::Handles(handles) = data else {
        return Ok(Vec::new());
    };
    Ok(handles
        .iter()
        .copied()
        .filter(|h| u32::from(*h) >> 24 == first >> 24)
        .collect())
}
