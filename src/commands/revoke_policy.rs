//! `sceau revoke-policy --serial N`: revokes, in this TPM, every signed boot
//! policy of a revocation serial (`sceau_tpm::revocation`). It needs no SRK
//! and no sceau state: the TPM's NV index is the whole record, so the
//! revocation holds whatever files are later restored.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use sceau::cli::RevokePolicyOptions;
use sceau::events::{self, Event, Kind};
use sceau_tpm::revocation::{Revocation, revoke_at};

pub fn run(options: &RevokePolicyOptions) -> anyhow::Result<()> {
    super::silence_tss_log(super::RevealingTssLog::Warn)?;
    events::connect_for_command();
    let serial = options.serial;
    let owner_auth = sceau::credentials::owner_auth()?;
    let outcome = revoke_at(&options.tcti, owner_auth.as_ref(), serial)
        .with_context(|| format!("revoking serial {serial} at {}", options.tcti))?;
    let index = serial.index_handle();
    match outcome {
        Revocation::Revoked => {
            println!(
                "serial {serial} revoked: NV index 0x{index:08x} written; no policy signed with \
                 this serial opens on this TPM again"
            );
            events::emit(
                Event::new(
                    Kind::PolicyRevoked,
                    format!("revoke-policy: serial {serial} revoked (NV index 0x{index:08x})"),
                )
                .field("SERIAL", serial)
                .field("NV_INDEX", format!("0x{index:08x}")),
            );
        }
        Revocation::AlreadyRevoked => {
            println!("serial {serial} was already revoked (NV index 0x{index:08x} is written)")
        }
    }
    Ok(())
}
