//! Reading the cluster's key files: every `*.pub` member file of the
//! `--members` directory, of the optional `--former-members` directory, and
//! the optional `--recovery-key` public file, once at start, before the
//! sandbox closes the filesystem. Every file and
//! directory must pass [`trusted_files`]' checks; the text itself is parsed
//! by `sceau_format::members`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sceau_format::endorsement::{EndorsementError, EnrollmentPublic};
use sceau_format::key_id::hex;
use sceau_format::members::{
    Member, Membership, MembershipError, PinnedKeyError, RECOVERY_PUBLIC_LABEL, member_files,
    parse_member, parse_pinned,
};
use sceau_format::storage_key::StorageKey;
use sceau_format::wrapped::MAX_RECIPIENTS;

use super::trusted_files::{self, TrustError};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Untrusted(#[from] TrustError),
    // The messages below name the file only: the cause is the error's
    // source, which the log line prints after it (anyhow's `{:#}`); naming
    // it in the message too printed it twice.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}")]
    Pinned {
        path: PathBuf,
        source: PinnedKeyError,
    },
    #[error("{0}: no member files (*.pub)")]
    Empty(PathBuf),
    #[error("{count} member files exceed the {MAX_RECIPIENTS}-recipient limit")]
    TooMany { count: usize },
    #[error("two member files hold the same key {0}")]
    Duplicate(String),
    #[error(
        "{path}: attributes {attributes:#010x} are not the TCG SRK's (0x00030472): not an SRK made by a TPM"
    )]
    NotAnSrk { path: PathBuf, attributes: u32 },
    #[error(
        "this node's SRK (Name {name}) is in none of the {files} member files in {dir}: on this \
         node run `sceau srk-public > {dir}/$(hostname).pub` (with serve's --tcti), copy that \
         file into {dir} on every member, then restart sceau on every node (docs/ha.md); if \
         this node's TPM was replaced or cleared, its old member file is stale"
    )]
    NotAMember {
        name: String,
        files: usize,
        dir: PathBuf,
    },
    #[error(transparent)]
    Membership(#[from] MembershipError),
    #[error("{path}")]
    NotEndorsed {
        path: PathBuf,
        source: EndorsementError,
    },
    #[error(
        "{path} is not a membership epoch: it holds one number from 1, the same on every member \
         (docs/ha.md, \"The membership epoch\")"
    )]
    BadEpoch { path: PathBuf },
}

/// The file in a members directory that holds the membership's epoch.
pub const EPOCH_FILE: &str = "epoch";

/// The membership epoch in `DIR/epoch`, one number from 1 on one line, read
/// with the member files' checks; `None` without the file.
pub fn epoch(dir: &Path) -> Result<Option<u64>, LoadError> {
    let path = dir.join(EPOCH_FILE);
    let text = match trusted_files::read_trusted(&path) {
        Ok(text) => text,
        Err(TrustError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let number = text.strip_suffix('\n').unwrap_or(&text);
    let canonical = !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && !number.starts_with('0');
    canonical
        .then(|| number.parse().ok())
        .flatten()
        .map(Some)
        .ok_or(LoadError::BadEpoch { path })
}

/// Reads every `*.pub` file of `dir`, and the recovery key if given, and
/// checks that this TPM is one of them under one of its KEK generations
/// (`own`, the current first: the first one listed is this node's member
/// key, and its generation is returned), and with `enrollment` that the
/// enrollment key endorsed every file.
pub fn load(
    dir: &Path,
    recovery_file: Option<&Path>,
    own: &[(u32, Member)],
    enrollment: Option<&EnrollmentPublic>,
) -> Result<(Membership, u32), LoadError> {
    let members = read_members(dir, enrollment)?;
    let files = members.len();
    let recovery = recovery_file
        .map(|path| read_pinned(path, RECOVERY_PUBLIC_LABEL))
        .transpose()?;
    let listed = |member: &Member| members.iter().any(|m| m.srk.name() == member.srk.name());
    let (generation, member) = own
        .iter()
        .find(|(_, member)| listed(member))
        .or(own.first())
        .cloned()
        .expect("a TPM holds at least generation 0");
    Membership::from_keys(member, members, recovery)
        .map(|membership| (membership, generation))
        .map_err(|error| match error {
            MembershipError::NotAMember(name) => LoadError::NotAMember {
                name,
                files,
                dir: dir.to_path_buf(),
            },
            other => other.into(),
        })
}

/// The former members of `--former-members DIR`: members removed from the
/// cluster whose envelopes still open until the operator drops the flag.
pub fn former(
    membership: Membership,
    dir: &Path,
    enrollment: Option<&EnrollmentPublic>,
) -> Result<Membership, LoadError> {
    Ok(membership.with_former(read_members(dir, enrollment)?)?)
}

/// The public half of the enrollment key (`serve --enrollment-key`), after
/// [`trusted_files`]' checks: whoever can replace it admits members.
pub fn enrollment_key(path: &Path) -> Result<EnrollmentPublic, LoadError> {
    let text = trusted_files::read_trusted(path)?;
    EnrollmentPublic::parse(&text).map_err(|source| LoadError::NotEndorsed {
        path: path.to_path_buf(),
        source,
    })
}

/// A single node with a backup (`serve --recovery-key` without
/// `--members`): this node is the only member, so every envelope opens
/// here and with the offline recovery key.
pub fn alone_with_recovery(recovery_file: &Path, own: Member) -> Result<Membership, LoadError> {
    let recovery = read_pinned(recovery_file, RECOVERY_PUBLIC_LABEL)?;
    Ok(Membership::from_keys(
        own.clone(),
        vec![own],
        Some(recovery),
    )?)
}

fn read_members(
    dir: &Path,
    enrollment: Option<&EnrollmentPublic>,
) -> Result<Vec<Member>, LoadError> {
    trusted_files::check_directory(dir)?;
    let read_error = |source| LoadError::Read {
        path: dir.to_path_buf(),
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
        return Err(LoadError::Empty(dir.to_path_buf()));
    }
    if paths.len() > MAX_RECIPIENTS {
        return Err(LoadError::TooMany { count: paths.len() });
    }
    let mut seen = HashMap::new();
    let mut members = Vec::new();
    for path in paths {
        let member = read_member(&path, enrollment)?;
        if !member.srk.is_srk() {
            return Err(LoadError::NotAnSrk {
                attributes: member.srk.attributes(),
                path,
            });
        }
        if seen.insert(*member.srk.name(), path).is_some() {
            return Err(LoadError::Duplicate(hex(member.srk.name())));
        }
        members.push(member);
    }
    Ok(members)
}

/// Reads one member file, after [`trusted_files`]' checks: both keys, each
/// checked against its pin, and with `enrollment`, the endorsement of both.
fn read_member(path: &Path, enrollment: Option<&EnrollmentPublic>) -> Result<Member, LoadError> {
    let text = trusted_files::read_trusted(path)?;
    let member = parse_member(&text).map_err(|source| LoadError::Pinned {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(key) = enrollment {
        key.verify(&text, &member)
            .map_err(|source| LoadError::NotEndorsed {
                path: path.to_path_buf(),
                source,
            })?;
    }
    Ok(member)
}

/// Reads one armored key, after [`trusted_files`]' checks, and checks it
/// against its `name:` line.
fn read_pinned(path: &Path, label: &'static str) -> Result<StorageKey, LoadError> {
    let text = trusted_files::read_trusted(path)?;
    parse_pinned(&text, label).map_err(|source| LoadError::Pinned {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
