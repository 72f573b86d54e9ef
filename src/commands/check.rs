//! `sceau check`: one Status call and one Encrypt/Decrypt round trip against
//! a running sceau; with `--status-only`, the Status call alone (what a
//! container's liveness probe runs: Status answers from the cached health
//! verdict, so probing costs the TPM at most one light command per 5 s).
//! With `--tpm-identity` it also reads who made the TPM and its firmware
//! itself: the KMS Status answer has no field for them.
#![forbid(unsafe_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sceau::cli::CheckOptions;
use sceau_format::advisories;
use sceau_kms_api::ConnectError;
use sceau_kms_api::pb::{DecryptRequest, EncryptRequest, StatusRequest, StatusResponse};

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
            tokio::time::timeout(CHECK_TIMEOUT, check(&options.socket, options.status_only)).await
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
    if let Some(trip) = &report.round_trip {
        println!(
            "round trip: ok (32-byte DEK, {}-byte ciphertext, encrypt {:.1} ms, decrypt {:.1} ms)",
            trip.ciphertext_len,
            trip.encrypt.as_secs_f64() * 1e3,
            trip.decrypt.as_secs_f64() * 1e3
        );
    }
    if let Some(tcti) = &options.tpm_identity {
        super::silence_tss_log(super::RevealingTssLog::Warn)?;
        let identity = sceau_tpm::identity::read_at(tcti)
            .with_context(|| format!("reading the TPM's identity at {tcti}"))?;
        println!(
            "tpm: manufacturer={} vendor={:?} firmware={}",
            identity.manufacturer, identity.vendor, identity.firmware
        );
        // The built-in list only: the daemon's --tpm-advisories-file is its
        // configuration, which check does not read.
        let builtin = advisories::parse(advisories::BUILTIN)?;
        for advisory in
            advisories::matching(&builtin, &identity.manufacturer, identity.firmware_version)
        {
            println!("tpm: under {} ({})", advisory.cve, advisory.summary);
        }
    }
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

/// What `sceau check` reports.
#[derive(Debug)]
struct CheckReport {
    status: StatusResponse,
    /// `None` with `--status-only`.
    round_trip: Option<RoundTrip>,
}

#[derive(Debug)]
struct RoundTrip {
    ciphertext_len: usize,
    encrypt: Duration,
    decrypt: Duration,
}

#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error("cannot connect: {0}")]
    Connect(ConnectError),
    #[error("{call} failed: {status}")]
    Call {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("reading a random DEK: {0}")]
    Random(std::io::Error),
    #[error("Decrypt returned different bytes than were encrypted")]
    Mismatch,
}

sceau_format::inner_errors!(CheckError {
    Connect(ConnectError),
});

/// Status, then (unless `status_only`) Encrypt and Decrypt of a fresh
/// random 32-byte DEK.
async fn check(path: &Path, status_only: bool) -> Result<CheckReport, CheckError> {
    let mut client = sceau_kms_api::connect(path).await?;
    let failed = |call| move |status| CheckError::Call { call, status };
    let status = client
        .status(StatusRequest {})
        .await
        .map_err(failed("Status"))?
        .into_inner();
    if status_only {
        return Ok(CheckReport {
            status,
            round_trip: None,
        });
    }
    let dek = zeroize::Zeroizing::new(random_dek().map_err(CheckError::Random)?);

    let started = Instant::now();
    let sealed = client
        .encrypt(EncryptRequest {
            plaintext: dek.to_vec(),
            uid: "sceau-check".into(),
        })
        .await
        .map_err(failed("Encrypt"))?
        .into_inner();
    let encrypt = started.elapsed();

    let started = Instant::now();
    let ciphertext_len = sealed.ciphertext.len();
    let opened = client
        .decrypt(DecryptRequest {
            ciphertext: sealed.ciphertext,
            uid: "sceau-check".into(),
            key_id: sealed.key_id,
            annotations: sealed.annotations,
        })
        .await
        .map_err(failed("Decrypt"))?
        .into_inner();
    let decrypt = started.elapsed();
    if zeroize::Zeroizing::new(opened.plaintext).as_slice() != dek.as_slice() {
        return Err(CheckError::Mismatch);
    }
    Ok(CheckReport {
        status,
        round_trip: Some(RoundTrip {
            ciphertext_len,
            encrypt,
            decrypt,
        }),
    })
}

fn random_dek() -> std::io::Result<[u8; 32]> {
    use std::io::Read;
    let mut dek = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut dek)?;
    Ok(dek)
}
