//! `sceau srk-public`: prints this node's member file: its SRK and its
//! envelope signing key.
#![forbid(unsafe_code)]

use sceau::cli::SrkPublicOptions;
use sceau_format::members::member_file;

use super::{open_tpm_for_tool, own_member};

pub fn run(options: &SrkPublicOptions) -> anyhow::Result<()> {
    let tpm = open_tpm_for_tool(options)?;
    print!("{}", member_file(&own_member(&tpm)?, &tpm.srk().key_id()));
    Ok(())
}
