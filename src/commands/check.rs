//! `sceau check`: one Status call and one Encrypt/Decrypt round trip against
//! a running sceau.
#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::{Context as _, bail};
use sceau::cli::CheckOptions;

/// `sceau check` gives up after this: a healthy sceau answers in milliseconds,
/// and each of its calls is bounded by a 2.5 s TPM deadline.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(options: &CheckOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime
        .block_on(async {
            tokio::time::timeout(CHECK_TIMEOUT, sceau::client::check(&options.socket)).await
        })
        .map_err(|_| anyhow::anyhow!("no answer within {CHECK_TIMEOUT:?}"))
        .and_then(|report| Ok(report?))
        .with_context(|| format!("checking {}", options.socket.display()))?;
    let status = &report.status;
    println!(
        "status: version={} healthz={} key_id={}",
        status.version, status.healthz, status.key_id
    );
    println!(
        "round trip: ok (32-byte DEK, {}-byte ciphertext, encrypt {:.1} ms, decrypt {:.1} ms)",
        report.ciphertext_len,
        report.encrypt.as_secs_f64() * 1e3,
        report.decrypt.as_secs_f64() * 1e3
    );
    if status.healthz != "ok" {
        bail!("sceau reports healthz={}", status.healthz);
    }
    Ok(())
}
