//! `sceau selftest --sandbox`: tries what the sandbox forbids
//! (`sceau::selftest` has the probes).
#![forbid(unsafe_code)]

use anyhow::{Context as _, bail};
use sceau::cli::SelfTestOptions;
use sceau::selftest::Verdict;

pub fn run(options: &SelfTestOptions) -> anyhow::Result<()> {
    match sceau::selftest::run(options).context("preparing the selftest's targets")? {
        Verdict::AllRefused => Ok(()),
        Verdict::SomeAllowed => {
            bail!("the sandbox let a forbidden action through (see the FAIL lines above)")
        }
        Verdict::NotApplied(why) => {
            bail!("the sandbox could not be applied, so no probe ran and nothing was tested: {why}")
        }
    }
}
