//! `sceau-recover recover` over etcd contents: every KMS v2 value is opened with the
//! recovery identity and decrypted as the apiserver would; Secrets are printed
//! as manifests, everything else is counted and named on the log stream.

use std::collections::HashMap;
use std::io::Write;

use super::etcd::StoredValue;
use super::kubernetes::{KubernetesError, decrypt_data, describe_secret, parse_stored_value};
use super::verify::{Checked, check};
use sceau_format::members::KnownMembers;
use sceau_format::recovery_key::RecoveryIdentity;

/// What one run did, for the closing line and the exit status.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub printed: usize,
    /// Values that are not KMS v2, or objects that are not Secrets.
    pub skipped: usize,
    /// KMS v2 values this identity could not open or decrypt, or whose
    /// envelope the member files do not vouch for.
    pub failed: usize,
    /// Secrets opened without checking their envelope's signature (no
    /// member files were given).
    pub unverified: usize,
}

/// Every value's DEK seed, opened with the recovery identity before anything
/// is printed, so that the identity can be wiped before the first Secret is
/// written (a blocked output then holds no key).
pub struct OpenedSeeds {
    values: Vec<Opened>,
}

/// One stored value after the identity has done its part.
enum Opened {
    /// Not a KMS v2 value (stored in the clear or by another provider).
    NotKms,
    Failed(String),
    /// The value itself is parsed again when it is printed, rather than
    /// kept here twice (in locked memory).
    Ready {
        seed: zeroize::Zeroizing<Vec<u8>>,
        checked: Checked,
    },
}

/// Opens the DEK seed of every KMS v2 value in `values` with `identity`,
/// after checking its envelope against `known`; nothing is decrypted or
/// printed yet.
pub fn open_seeds(
    identity: &RecoveryIdentity,
    known: Option<&KnownMembers>,
    values: &[StoredValue],
) -> OpenedSeeds {
    let values = values
        .iter()
        .map(|stored| open_seed(identity, known, stored).unwrap_or_else(Opened::Failed))
        .collect();
    OpenedSeeds { values }
}

fn open_seed(
    identity: &RecoveryIdentity,
    known: Option<&KnownMembers>,
    stored: &StoredValue,
) -> Result<Opened, String> {
    let Some(object) = parse_stored_value(&stored.value).map_err(|e| e.to_string())? else {
        return Ok(Opened::NotKms);
    };
    let annotations: HashMap<String, Vec<u8>> = object.annotations.clone().into_iter().collect();
    let checked = check(
        known,
        &object.encrypted_dek_source,
        &annotations,
        Some(&object.key_id),
    )
    .map_err(|e| e.to_string())?;
    let seed = identity
        .open(&object.encrypted_dek_source, &annotations)
        .map_err(|e| e.to_string())?;
    Ok(Opened::Ready { seed, checked })
}

/// Writes each recovered Secret to `out` (one JSON manifest per line) and one
/// line per value it could not recover, or opened unverified, to `log`,
/// naming the etcd key. `seeds` are [`open_seeds`] of the same `values`.
pub fn recover_secrets(
    seeds: &OpenedSeeds,
    values: &[StoredValue],
    out: &mut impl Write,
    log: &mut impl Write,
) -> std::io::Result<Summary> {
    let mut summary = Summary::default();
    for (stored, opened) in values.iter().zip(&seeds.values) {
        // The key, like a decrypted object's kind below, comes from etcd:
        // escaped, so that control characters cannot reach the terminal.
        let key = String::from_utf8_lossy(&stored.key)
            .escape_debug()
            .to_string();
        match recover_one(stored, opened) {
            Ok(Some((manifest, checked))) => {
                out.write_all(manifest.as_bytes())?;
                out.write_all(b"\n")?;
                summary.printed += 1;
                if checked == Checked::Unverified {
                    writeln!(
                        log,
                        "UNVERIFIED {key}: opened without checking its signature"
                    )?;
                    summary.unverified += 1;
                }
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

/// `Ok(None)`: not a KMS v2 value.
fn recover_one(
    stored: &StoredValue,
    opened: &Opened,
) -> Result<Option<(zeroize::Zeroizing<String>, Checked)>, Failure> {
    let unrecoverable = |e: &dyn std::fmt::Display| Failure::Unrecoverable(e.to_string());
    let (seed, checked) = match opened {
        Opened::NotKms => return Ok(None),
        Opened::Failed(why) => return Err(Failure::Unrecoverable(why.clone())),
        Opened::Ready { seed, checked } => (seed, *checked),
    };
    // Parsed in `open_seed` already, so this cannot fail or be None.
    let Some(object) = parse_stored_value(&stored.value).map_err(|e| unrecoverable(&e))? else {
        return Ok(None);
    };
    let plaintext = decrypt_data(&object, seed, &stored.key).map_err(|e| unrecoverable(&e))?;
    match describe_secret(&plaintext) {
        Ok(manifest) => Ok(Some((manifest, checked))),
        Err(KubernetesError::NotASecret { api_version, kind }) => {
            Err(Failure::NotASecret(format!(
                "a {}/{}, not a Secret",
                api_version.escape_debug(),
                kind.escape_debug()
            )))
        }
        Err(e) => Err(unrecoverable(&e)),
    }
}

#[cfg(test)]
mod tests {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    use aes_gcm::{Aes256Gcm, Nonce};
    use hkdf::Hkdf;
    use sha2::Sha256;

    use super::*;
    use sceau_format::duplicate::SealedObject;
    use sceau_format::wrapped::{ClusterEnvelope, Recipient, Role};

    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        let mut len = bytes.len();
        while len >= 0x80 {
            out.push(len as u8 | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(bytes);
    }

    /// A KMS v2 value as an apiserver using cluster mode stores it: anyone
    /// with the recovery key's public half can make one.
    fn stored_value(identity: &RecoveryIdentity, etcd_key: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let seed = [7u8; 32];
        let object = SealedObject::new(&seed);
        let envelope = ClusterEnvelope {
            object_public: object.tpmt_public().to_vec(),
            recipients: vec![Recipient {
                role: Role::Recovery,
                name: *identity.public().name(),
                blob: object.wrap_for(identity.public()),
            }],
            signature: None,
        }
        .encode()
        .unwrap();
        let (info, nonce) = ([1u8; 32], [2u8; 12]);
        let mut key = [0u8; 32];
        Hkdf::<Sha256>::from_prk(&seed)
            .unwrap()
            .expand(&info, &mut key)
            .unwrap();
        let payload = Payload {
            msg: plaintext,
            aad: etcd_key,
        };
        let sealed = Aes256Gcm::new_from_slice(&key)
            .unwrap()
            .encrypt(Nonce::from_slice(&nonce), payload)
            .unwrap();
        let mut value = b"k8s:enc:kms:v2:sceau:".to_vec();
        field(&mut value, 1, &[&info[..], &nonce, &sealed].concat());
        field(&mut value, 2, b"sceau-test");
        field(&mut value, 3, &envelope.ciphertext);
        value.extend_from_slice(&[5 << 3, 1]); // HKDF seed
        value
    }

    /// Found by the `recovery_input` fuzz target (audit/fuzzing.md, «The
    /// etcd keys on the terminal»): an etcd key, or the kind inside a value made for the recovery key,
    /// went to the terminal with its control characters.
    #[test]
    fn log_lines_escape_control_characters_from_etcd() {
        let identity = RecoveryIdentity::generate();
        let mut type_meta = Vec::new();
        field(&mut type_meta, 1, b"v1");
        field(&mut type_meta, 2, b"Config\x1b]0;x\x07Map");
        let mut configmap = b"k8s\0".to_vec();
        field(&mut configmap, 1, &type_meta);
        let value = |key: &[u8], value: Vec<u8>| StoredValue {
            key: key.to_vec(),
            value,
            create_revision: 2,
            mod_revision: 2,
            version: 1,
        };
        let configmap_key = b"/registry/configmaps/default/c";
        let values = [
            value(
                b"/registry/secrets/default/\x1b[2Jx",
                b"k8s:enc:kms:v2:sceau:".to_vec(),
            ),
            value(
                configmap_key,
                stored_value(&identity, configmap_key, &configmap),
            ),
        ];
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let seeds = open_seeds(&identity, None, &values);
        let summary = recover_secrets(&seeds, &values, &mut out, &mut log).unwrap();
        assert_eq!(
            summary,
            Summary {
                printed: 0,
                skipped: 1,
                failed: 1,
                unverified: 0,
            }
        );
        let log = String::from_utf8(log).unwrap();
        assert!(
            !log.lines().any(|l| l.chars().any(char::is_control)),
            "{log:?}"
        );
        assert!(log.contains("FAILED /registry/secrets/default/\\u{1b}[2Jx: "));
        assert!(log.contains("a v1/Config\\u{1b}]0;x\\u{7}Map, not a Secret"));
    }
}
