//! `serve --policy-key FILE --policy FILE|DIR`: reading the boot policy key
//! and the signed PCR policies at start, while the filesystem is still open
//! (Landlock closes it before serving; a new policy takes a restart).
//!
//! Both are read like member files (`cluster::trusted_files`: no symbolic
//! link, a regular file owned by root or sceau's user and writable by
//! neither group nor others, in such a directory): the key decides in which
//! boot states every DEK opens. A policy's signature is checked later, by
//! the TPM (`sceau_tpm::boot_policy`); here each file is parsed, and every
//! line that refuses one names it.
//!
//! Two kinds of policy are refused here, before any TPM work, because
//! another OS booted on the machine could meet them: one over a PCR that
//! software may reset (16, 23), and, unless
//! `--accept-policies-another-os-can-meet`, one that covers no PCR the
//! firmware extends (0–7), such as systemd-measure's PCR 11 alone.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use crate::cluster::trusted_files::{self, TrustError};
use sceau_format::pcr_policy::{MAX_POLICIES, PolicyError, parse_signed_policies};
use sceau_format::policy_key::{PolicyKey, PolicyKeyError};
use sceau_tpm::boot_policy::BootPolicyConfig;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Trust(#[from] TrustError),
    // The causes are the sources, which the top level prints after these.
    #[error("--policy-key {path}")]
    Key {
        path: PathBuf,
        source: PolicyKeyError,
    },
    #[error("--policy {path}")]
    Policy { path: PathBuf, source: PolicyError },
    #[error("reading --policy {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--policy {0}: no signed policy (*.json) in the directory")]
    Empty(PathBuf),
    #[error("--policy: more than {MAX_POLICIES} signed policies in all")]
    TooMany,
    #[error("{file}: {source}")]
    Resettable { file: String, source: PolicyError },
    #[error(
        "{file}: the policy covers PCRs {pcrs} and no PCR the firmware extends (0-7): any OS \
         booted on this machine without systemd-stub can extend those PCRs from userspace to \
         the signed values and open every bound DEK. Sign PCR 7 with them \
         (`sceau-recover policy sign --pcrs 7,11`), or pass \
         --accept-policies-another-os-can-meet to accept that (docs/boot-binding.md)"
    )]
    AnotherOsCanMeet { file: String, pcrs: String },
}

/// The key, the former keys and every policy of `policies` (files, or
/// directories whose `*.json` files are read in name order).
pub fn load(
    key: &Path,
    former_keys: &[PathBuf],
    policies: &[PathBuf],
    accept_policies_another_os_can_meet: bool,
) -> Result<BootPolicyConfig, LoadError> {
    let read_key = |path: &Path| -> Result<PolicyKey, LoadError> {
        let text = trusted_files::read_trusted(path)?;
        PolicyKey::from_pem(&text).map_err(|source| LoadError::Key {
            path: path.to_path_buf(),
            source,
        })
    };
    let key = read_key(key)?;
    let former_keys = former_keys
        .iter()
        .map(|path| read_key(path))
        .collect::<Result<Vec<_>, _>>()?;
    let mut loaded = Vec::new();
    for path in policy_files(policies)? {
        let text = trusted_files::read_trusted(&path)?;
        let parsed = parse_signed_policies(&text).map_err(|source| LoadError::Policy {
            path: path.clone(),
            source,
        })?;
        let count = parsed.len();
        for (i, policy) in parsed.into_iter().enumerate() {
            let label = match count {
                1 => path.display().to_string(),
                _ => format!("{} (policy {} of {count})", path.display(), i + 1),
            };
            policy
                .pcrs
                .check_bindable()
                .map_err(|source| LoadError::Resettable {
                    file: label.clone(),
                    source,
                })?;
            if !accept_policies_another_os_can_meet && !policy.pcrs.covers_firmware() {
                return Err(LoadError::AnotherOsCanMeet {
                    file: label,
                    pcrs: policy.pcrs.to_string(),
                });
            }
            loaded.push((label, policy));
        }
        if loaded.len() > MAX_POLICIES {
            return Err(LoadError::TooMany);
        }
    }
    Ok(BootPolicyConfig {
        key,
        former_keys,
        policies: loaded,
    })
}

fn policy_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        trusted_files::check_directory(path)?;
        let read_error = |source| LoadError::Read {
            path: path.clone(),
            source,
        };
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read_error)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(read_error)?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        if found.is_empty() {
            return Err(LoadError::Empty(path.clone()));
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}
