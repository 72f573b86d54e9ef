//! `sceau recover` over etcd contents: every KMS v2 value is opened with the
//! recovery identity and decrypted as the apiserver would; Secrets are printed
//! as manifests, everything else is counted and named on the log stream.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write;

use super::etcd::StoredValue;
use super::kubernetes::{KubernetesError, decrypt_data, describe_secret, parse_stored_value};
use crate::cluster::recovery_key::RecoveryIdentity;

/// What one run did, for the closing line and the exit status.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub printed: usize,
    /// Values that are not KMS v2, or objects that are not Secrets.
    pub skipped: usize,
    /// KMS v2 values this identity could not open or decrypt.
    pub failed: usize,
}

/// Writes each recovered Secret to `out` (one JSON manifest per line) and one
/// line per value it could not recover to `log`, naming the etcd key.
pub fn recover_secrets(
    identity: &RecoveryIdentity,
    values: &[StoredValue],
    out: &mut impl Write,
    log: &mut impl Write,
) -> std::io::Result<Summary> {
    let mut summary = Summary::default();
    for stored in values {
        let key = String::from_utf8_lossy(&stored.key);
        match recover_one(identity, stored) {
            Ok(Some(manifest)) => {
                out.write_all(manifest.as_bytes())?;
                out.write_all(b"\n")?;
                summary.printed += 1;
            }
            Ok(None) => summary.skipped += 1,
            Err(Failure::NotASecret(kind)) => {
                writeln!(log, "skipped {key}: {kind}")?;
                summary.skipped += 1;
            }
            Err(Failure::Unrecoverable(why)) => {
                writeln!(log, "FAILED {key}: {why}")?;
                summary.failed += 1;
            }
        }
    }
    Ok(summary)
}

enum Failure {
    NotASecret(String),
    Unrecoverable(String),
}

/// `Ok(None)`: not a KMS v2 value (stored in the clear or by another provider).
fn recover_one(
    identity: &RecoveryIdentity,
    stored: &StoredValue,
) -> Result<Option<zeroize::Zeroizing<String>>, Failure> {
    let unrecoverable = |e: &dyn std::fmt::Display| Failure::Unrecoverable(e.to_string());
    let Some(object) = parse_stored_value(&stored.value).map_err(|e| unrecoverable(&e))? else {
        return Ok(None);
    };
    let annotations: HashMap<String, Vec<u8>> = object.annotations.clone().into_iter().collect();
    let seed = identity
        .open(&object.encrypted_dek_source, &annotations)
        .map_err(|e| unrecoverable(&e))?;
    let plaintext = decrypt_data(&object, &seed, &stored.key).map_err(|e| unrecoverable(&e))?;
    match describe_secret(&plaintext) {
        Ok(manifest) => Ok(Some(manifest)),
        Err(KubernetesError::NotASecret { api_version, kind }) => Err(Failure::NotASecret(
            format!("a {api_version}/{kind}, not a Secret"),
        )),
        Err(e) => Err(unrecoverable(&e)),
    }
}
