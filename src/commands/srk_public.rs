//! `sceau srk-public`: prints this node's member file: the storage key of
//! its current KEK generation (the SRK until a `kek rotate`) and its
//! envelope signing key.
#![forbid(unsafe_code)]

use sceau::cli::SrkPublicOptions;
use sceau_format::key_id::KeyId;
use sceau_format::members::member_file;

use super::open_tpm_for_tool;

pub fn run(options: &SrkPublicOptions) -> anyhow::Result<()> {
    let tpm = open_tpm_for_tool(options)?;
    // The current KEK generation's storage key: what members wrap for.
    let (_, member) = tpm.members_by_generation()?.remove(0);
    print!(
        "{}",
        member_file(&member, &KeyId::from_srk_name(member.srk.name()))
    );
    Ok(())
}
