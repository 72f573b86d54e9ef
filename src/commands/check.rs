//! `sceau check`: one Status call and one Encrypt/Decrypt round trip against
//! a running sceau.
#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::{Context as _, bail};
use sceau::cli::CheckOptions;
use sceau::client::CheckError;

/// `sceau check` gives up after this: a healthy sceau answers in milliseconds,
/// and each of its calls is bounded by a 2.5 s TPM deadline.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(options: &CheckOptions) -> anyhow::Result<()> {
    require_socket(&options.socket)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime
        .block_on(async {
            tokio::time::timeout(CHECK_TIMEOUT, sceau::client::check(&options.socket)).await
        })
        .map_err(|_| anyhow::anyhow!("no answer within {CHECK_TIMEOUT:?}"))
        .and_then(|report| match report {
            Err(CheckError::Connect(e)) => Err(anyhow::anyhow!(
                "no sceau answers on {} ({e}): start it (systemctl start sceau.socket \
                 sceau.service); `journalctl -u sceau` says why it stopped",
                options.socket.display()
            )),
            report => Ok(report?),
        })
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

/// A missing socket file is the usual "sceau is not running": said so,
/// with what to do, before any connection is tried.
fn require_socket(socket: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    match std::fs::metadata(socket) {
        Ok(metadata) if metadata.file_type().is_socket() => Ok(()),
        Ok(_) => bail!(
            "{} is not a socket: pass --socket with the path `sceau serve` listens on",
            socket.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no sceau socket at {}: start sceau (systemctl start sceau.socket sceau.service; \
             `journalctl -u sceau` says why it is not running), or pass --socket with the path \
             `sceau serve` listens on",
            socket.display()
        ),
        Err(e) => bail!(
            "cannot reach {} ({e}): run `sceau check` as root",
            socket.display()
        ),
    }
}
