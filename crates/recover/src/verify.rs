//! What `recover` checks before it opens an envelope: with the member files
//! (`--members`), a cluster envelope must be signed by one of those members
//! over every byte, exactly as a member checks it before its TPM; without
//! them, nothing is checked, and each envelope opened is named as
//! unverified.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sceau_format::members::{KnownMembers, PinnedKeyError, Refusal, member_files, parse_member};
use sceau_format::wrapped::{ClusterEnvelope, ClusterEnvelopeError};

/// Why the member files cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    // The causes are the sources, which the tool prints after the message.
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}")]
    Member {
        path: PathBuf,
        source: PinnedKeyError,
    },
    #[error("{0}: no member files (*.pub)")]
    Empty(PathBuf),
}

/// Why one envelope is not opened.
#[derive(Debug, thiserror::Error)]
pub enum Unverified {
    #[error("malformed envelope: {0}")]
    Envelope(#[from] ClusterEnvelopeError),
    #[error("{0}; not opened (without --members it would open unverified)")]
    Refused(#[from] Refusal),
    #[error("the envelope's key_id is {envelope}, but the stored value names {stored}")]
    KeyId { envelope: String, stored: String },
}

/// How an envelope was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Signed by a listed member over every byte.
    Verified,
    /// No member files were given: opened without any check.
    Unverified,
}

/// The members of every `*.pub` file in `dirs`; `None` for no dirs.
pub fn read_members(dirs: &[PathBuf]) -> Result<Option<KnownMembers>, MembersError> {
    if dirs.is_empty() {
        return Ok(None);
    }
    let mut members = Vec::new();
    for dir in dirs {
        let read_error = |source| MembersError::Read {
            path: dir.clone(),
            source,
        };
        let paths = member_files(
            std::fs::read_dir(dir)
                .map_err(read_error)?
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .map_err(read_error)?,
        );
        if paths.is_empty() {
            return Err(MembersError::Empty(dir.clone()));
        }
        for path in paths {
            members.push(read_member(&path)?);
        }
    }
    Ok(Some(KnownMembers::new(members)))
}

fn read_member(path: &Path) -> Result<sceau_format::members::Member, MembersError> {
    let text = std::fs::read_to_string(path).map_err(|source| MembersError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_member(&text).map_err(|source| MembersError::Member {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks one envelope against `known` (and against the key_id the
/// apiserver stored with it, when there is one).
pub fn check(
    known: Option<&KnownMembers>,
    ciphertext: &[u8],
    annotations: &HashMap<String, Vec<u8>>,
    stored_key_id: Option<&str>,
) -> Result<Checked, Unverified> {
    let Some(known) = known else {
        return Ok(Checked::Unverified);
    };
    let envelope = ClusterEnvelope::parse(ciphertext, annotations)?;
    let digest = known.verify(&envelope)?;
    if let Some(stored) = stored_key_id
        && !digest.names(stored)
    {
        let epoch = sceau_format::members::membership_epoch(stored).unwrap_or(0);
        return Err(Unverified::KeyId {
            envelope: digest.key_id(epoch).to_string(),
            stored: sceau_format::text::printable(stored),
        });
    }
    Ok(Checked::Verified)
}
