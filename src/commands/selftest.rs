//! `sceau selftest --sandbox`: tries what the sandbox forbids
//! (`sceau::selftest` has the probes).
#![forbid(unsafe_code)]

use anyhow::{Context as _, bail};
use sceau::cli::SelfTestOptions;

pub fn run(options: &SelfTestOptions) -> anyhow::Result<()> {
    if !sceau::selftest::run(options).context("preparing the selftest's targets")? {
        bail!("the sandbox let a forbidden action through");
    }
    Ok(())
}
