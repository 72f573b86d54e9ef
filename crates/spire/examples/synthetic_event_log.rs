//! Writes the measured-boot tests' synthetic firmware event log
//! (crates/spire/tests/integration/synthetic_log.rs) for
//! scripts/interop-spire.sh, which extends the same digests into a swtpm.
//!
//! Usage: `synthetic_event_log secure-boot|empty PATH`. `secure-boot`: the
//! SecureBoot variable (enabled) in PCR 7, a separator in each of PCRs
//! 0–7, the shim started from PCR 4; `empty`: the Spec ID event alone,
//! which extends nothing. Writes the log to PATH, then prints one line
//! `shim <hex>` (the shim's SHA-256 Authenticode hash, the boot_app
//! selector's value) and one line per extending event, in order: the
//! `tpm2_pcrextend` argument `<pcr>:sha256=<hex>`.

use std::process::ExitCode;

#[path = "../tests/integration/synthetic_log.rs"]
mod synthetic_log;

use synthetic_log::{Log, SHIM, hex};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (log, path) = match (args.first().map(String::as_str), args.get(1)) {
        (Some("secure-boot"), Some(path)) if args.len() == 2 => (Log::secure_boot(), path),
        (Some("empty"), Some(path)) if args.len() == 2 => (Log::new(), path),
        _ => {
            eprintln!("usage: synthetic_event_log secure-boot|empty PATH");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = std::fs::write(path, log.bytes()) {
        eprintln!("synthetic_event_log: {path}: {error}");
        return ExitCode::FAILURE;
    }
    println!("shim {}", hex(&SHIM));
    for argument in log.pcrextend_args() {
        println!("{argument}");
    }
    ExitCode::SUCCESS
}
