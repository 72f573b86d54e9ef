//! `sceau srk-public`: prints this node's member file.
#![forbid(unsafe_code)]

use sceau::cli::SrkPublicOptions;
use sceau_format::members::member_file;

use super::{open_tpm_for_tool, srk_storage_key};

pub fn run(options: &SrkPublicOptions) -> anyhow::Result<()> {
    let tpm = open_tpm_for_tool(options)?;
    print!(
        "{}",
        member_file(&srk_storage_key(&tpm)?, &tpm.srk().key_id())
    );
    Ok(())
}
