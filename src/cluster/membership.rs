//! Who can open a cluster envelope: the member SRKs an operator placed in the
//! `--members` directory (each pinned by its Name), and the optional offline
//! recovery key. Loaded once at start, before the sandbox closes the
//! filesystem, from files only root (or sceau's user) can write
//! (`trusted_files`); the cluster key_id is derived from it.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::armor::{self, ArmorError};
use super::duplicate::SealedObject;
use super::envelope::{
    ClusterEnvelope, ClusterEnvelopeError, Encoded, MAX_RECIPIENTS, Recipient, Role,
};
use super::storage_key::{StorageKey, StorageKeyError};
use super::trusted_files::{self, TrustError};
use super::wire::NAME_LEN;
use crate::tpm::KeyId;
use crate::tpm::srk::hex;

/// The armor label of a member's SRK public (what `sceau srk-public` prints).
pub const MEMBER_LABEL: &str = "TPM2B_PUBLIC";
/// The armor label of the recovery key's public half.
pub const RECOVERY_PUBLIC_LABEL: &str = "SCEAU RECOVERY PUBLIC KEY";
/// Member files are the `*.pub` files of the directory.
const MEMBER_EXTENSION: &str = "pub";
/// v3: every (role, Name) pair is hashed (v2 hashed the member Names and
/// only the first recovery Name).
const KEY_ID_DOMAIN: &[u8] = b"sceau cluster key_id v3\0";

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("{0}")]
    Untrusted(#[from] TrustError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Armor { path: PathBuf, source: ArmorError },
    #[error("{path}: {source}")]
    Key {
        path: PathBuf,
        source: StorageKeyError,
    },
    #[error("{path}: no 'name:' line; pin every key by its Name")]
    Unpinned { path: PathBuf },
    #[error("{path}: the pinned name {pinned} is not the key's Name {actual}")]
    PinMismatch {
        path: PathBuf,
        pinned: String,
        actual: String,
    },
    #[error("{0}: no member files (*.pub)")]
    Empty(PathBuf),
    #[error("{count} member files and a recovery key exceed the {MAX_RECIPIENTS}-recipient limit")]
    TooMany { count: usize },
    #[error("two member files hold the same key {0}")]
    Duplicate(String),
    #[error("this node's SRK (Name {0}) is not among the members")]
    NotAMember(String),
    #[error("cluster mode needs an ECC P-256 SRK: {0}")]
    OwnSrk(StorageKeyError),
    #[error(
        "{path}: attributes {attributes:#010x} are not the TCG SRK's (0x00030472): not an SRK made by a TPM"
    )]
    NotAnSrk { path: PathBuf, attributes: u32 },
}

#[derive(Debug)]
pub struct Membership {
    own_name: [u8; NAME_LEN],
    members: Vec<StorageKey>,
    recovery: Option<StorageKey>,
    key_id: KeyId,
}

impl Membership {
    /// Reads every `*.pub` file of `dir`, and the recovery key if given,
    /// and checks that `own_srk_public` (a TPM2B_PUBLIC) is one of them.
    /// Every file and directory must pass [`trusted_files`]' checks.
    pub fn load(
        dir: &Path,
        recovery_file: Option<&Path>,
        own_srk_public: &[u8],
    ) -> Result<Self, MembershipError> {
        let own = StorageKey::from_tpm2b_public(own_srk_public).map_err(MembershipError::OwnSrk)?;
        let members = read_members(dir)?;
        let recovery = recovery_file
            .map(|path| read_pinned(path, RECOVERY_PUBLIC_LABEL))
            .transpose()?;
        Self::from_keys(own, members, recovery)
    }

    /// A single node with a backup (`serve --recovery-key` without
    /// `--members`): this node's SRK is the only member, so every envelope
    /// opens here and with the offline recovery key.
    pub fn alone_with_recovery(
        recovery_file: &Path,
        own_srk_public: &[u8],
    ) -> Result<Self, MembershipError> {
        let own = StorageKey::from_tpm2b_public(own_srk_public).map_err(MembershipError::OwnSrk)?;
        let recovery = read_pinned(recovery_file, RECOVERY_PUBLIC_LABEL)?;
        Self::from_keys(own.clone(), vec![own], Some(recovery))
    }

    /// The membership of keys already read and checked: `own` must be among
    /// `members`, and the recovery key must not be one of them.
    pub fn from_keys(
        own: StorageKey,
        members: Vec<StorageKey>,
        recovery: Option<StorageKey>,
    ) -> Result<Self, MembershipError> {
        if members.len() + usize::from(recovery.is_some()) > MAX_RECIPIENTS {
            return Err(MembershipError::TooMany {
                count: members.len(),
            });
        }
        if !members.iter().any(|m| m.name() == own.name()) {
            return Err(MembershipError::NotAMember(hex(own.name())));
        }
        if let Some(recovery) = &recovery
            && members.iter().any(|m| m.name() == recovery.name())
        {
            return Err(MembershipError::Duplicate(hex(recovery.name())));
        }
        let key_id = cluster_key_id(
            members
                .iter()
                .map(|m| (Role::Member, m.name()))
                .chain(recovery.iter().map(|r| (Role::Recovery, r.name()))),
        );
        Ok(Self {
            own_name: *own.name(),
            members,
            recovery,
            key_id,
        })
    }

    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    pub fn own_name(&self) -> &[u8; NAME_LEN] {
        &self.own_name
    }

    /// Every recipient's Name and role, for the start-up log.
    pub fn describe(&self) -> Vec<String> {
        let members = self
            .members
            .iter()
            .map(|m| format!("member {}", hex(m.name())));
        let recovery = self
            .recovery
            .iter()
            .map(|r| format!("recovery {}", hex(r.name())));
        members.chain(recovery).collect()
    }

    /// Encrypt in cluster mode: one sealed object, wrapped for every member
    /// and the recovery key. Needs no TPM.
    pub fn seal(&self, dek: &[u8]) -> Result<Encoded, ClusterEnvelopeError> {
        let object = SealedObject::new(dek);
        let entry = |role, key: &StorageKey| Recipient {
            role,
            name: *key.name(),
            blob: object.wrap_for(key),
        };
        let members = self.members.iter().map(|m| entry(Role::Member, m));
        let recovery = self.recovery.iter().map(|r| entry(Role::Recovery, r));
        ClusterEnvelope {
            object_public: object.tpmt_public().to_vec(),
            recipients: members.chain(recovery).collect(),
        }
        .encode()
    }
}

/// `sceau-` and 16 bytes of SHA-256 over every recipient's (role, Name)
/// pair in canonical order: every member computes the same value, and any
/// change of membership, of the recovery key or of a recipient's role
/// changes it.
pub fn cluster_key_id<'a>(recipients: impl Iterator<Item = (Role, &'a [u8; NAME_LEN])>) -> KeyId {
    let mut pairs: Vec<(Role, &[u8; NAME_LEN])> = recipients.collect();
    pairs.sort();
    let mut hash = Sha256::new();
    hash.update(KEY_ID_DOMAIN);
    hash.update([u8::try_from(pairs.len()).unwrap_or(u8::MAX)]);
    for (role, name) in pairs {
        hash.update([role as u8]);
        hash.update(name);
    }
    KeyId::from_cluster_digest(&hash.finalize())
}

/// The key_id an envelope's recipient set stands for: all of it.
pub fn envelope_key_id(envelope: &ClusterEnvelope) -> KeyId {
    cluster_key_id(envelope.recipients.iter().map(|r| (r.role, &r.name)))
}

/// The text `sceau srk-public` prints and `--members` reads.
pub fn member_file(key: &StorageKey, node_key_id: &KeyId) -> String {
    armor::encode(
        MEMBER_LABEL,
        &[
            "sceau member: this node's storage root key (SRK) public area.",
            "Before you copy it into --members, compare the name with the one the node prints.",
        ],
        &[
            ("name", hex(key.name())),
            ("key_id", node_key_id.to_string()),
        ],
        &key.to_tpm2b_public(),
    )
}

fn read_members(dir: &Path) -> Result<Vec<StorageKey>, MembershipError> {
    trusted_files::check_directory(dir)?;
    let read_error = |source| MembershipError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_error)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read_error)?;
    paths.retain(|p| p.extension().is_some_and(|e| e == MEMBER_EXTENSION));
    paths.sort();
    if paths.is_empty() {
        return Err(MembershipError::Empty(dir.to_path_buf()));
    }
    if paths.len() > MAX_RECIPIENTS {
        return Err(MembershipError::TooMany { count: paths.len() });
    }
    let mut seen = HashMap::new();
    let mut members = Vec::new();
    for path in paths {
        let key = read_pinned(&path, MEMBER_LABEL)?;
        if !key.is_srk() {
            return Err(MembershipError::NotAnSrk {
                attributes: key.attributes(),
                path,
            });
        }
        if seen.insert(*key.name(), path).is_some() {
            return Err(MembershipError::Duplicate(hex(key.name())));
        }
        members.push(key);
    }
    Ok(members)
}

/// Reads one armored key, after [`trusted_files`]' checks, and checks it
/// against its `name:` line.
pub fn read_pinned(path: &Path, label: &'static str) -> Result<StorageKey, MembershipError> {
    let text = trusted_files::read_trusted(path)?;
    let armored = armor::decode(&text, label).map_err(|source| MembershipError::Armor {
        path: path.to_path_buf(),
        source,
    })?;
    let key =
        StorageKey::from_tpm2b_public(&armored.bytes).map_err(|source| MembershipError::Key {
            path: path.to_path_buf(),
            source,
        })?;
    let pinned = armored
        .header("name")
        .ok_or_else(|| MembershipError::Unpinned {
            path: path.to_path_buf(),
        })?;
    if !pinned.eq_ignore_ascii_case(&hex(key.name())) {
        return Err(MembershipError::PinMismatch {
            path: path.to_path_buf(),
            pinned: pinned.to_string(),
            actual: hex(key.name()),
        });
    }
    Ok(key)
}

#[cfg(test)]
mod tests;
