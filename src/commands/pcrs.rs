//! `sceau pcrs`: prints this TPM's PCR values of the sha256 bank, in
//! `tpm2_pcrread`'s text, for `sceau-recover policy sign`. It only reads:
//! no SRK, no session, nothing created.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use sceau::cli::PcrsOptions;
use sceau_format::pcr_policy::unextended;

pub fn run(options: &PcrsOptions) -> anyhow::Result<()> {
    super::silence_tss_log(super::RevealingTssLog::Warn)?;
    let values = sceau_tpm::pcrs::read_at(&options.tcti, options.pcrs)
        .with_context(|| format!("reading PCRs {} at {}", options.pcrs, options.tcti))?;
    print!("{}", values.to_text());
    for (index, value) in values.iter() {
        if let Some(state) = unextended(value) {
            eprintln!(
                "sceau: PCR {index} reads all {state}: nothing extended it this boot, so any OS \
                 booted on this machine can set it; do not bind to it (policy sign refuses it)"
            );
        }
    }
    Ok(())
}
