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
}

/// The key and every policy of `policies` (files, or directories whose
/// `*.json` files are read in name order).
pub fn load(key: &Path, policies: &[PathBuf]) -> Result<BootPolicyConfig, LoadError> {
    let key_text = trusted_files::read_trusted(key)?;
    let key = PolicyKey::from_pem(&key_text).map_err(|source| LoadError::Key {
        path: key.to_path_buf(),
        source,
    })?;
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
            loaded.push((label, policy));
        }
        if loaded.len() > MAX_POLICIES {
            return Err(LoadError::TooMany);
        }
    }
    Ok(BootPolicyConfig {
        key,
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
