//! Who can open a cluster envelope: the member SRKs an operator placed in the
//! `--members` directory (each pinned by its Name), and the optional offline
//! recovery key. Loaded once at start, before the sandbox closes the
//! filesystem; the cluster key_id is derived from it.
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
use super::wire::NAME_LEN;
use crate::tpm::KeyId;
use crate::tpm::srk::hex;

/// The armor label of a member's SRK public (what `sceau srk-public` prints).
pub const MEMBER_LABEL: &str = "TPM2B_PUBLIC";
/// The armor label of the recovery key's public half.
pub const RECOVERY_PUBLIC_LABEL: &str = "SCEAU RECOVERY PUBLIC KEY";
/// Member files are the `*.pub` files of the directory.
const MEMBER_EXTENSION: &str = "pub";
const KEY_ID_DOMAIN: &[u8] = b"sceau cluster key_id v2\0";

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
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
        if members.len() + usize::from(recovery.is_some()) > MAX_RECIPIENTS {
            return Err(MembershipError::TooMany {
                count: members.len(),
            });
        }
        if !members.iter().any(|m| m.name() == own.name()) {
            return Err(MembershipError::NotAMember(hex(own.name())));
        }
        let key_id = cluster_key_id(
            members.iter().map(StorageKey::name),
            recovery.as_ref().map(StorageKey::name),
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

/// `sceau-` and 16 bytes of SHA-256 over the sorted member Names and the
/// recovery key's Name: every member computes the same value, and any change
/// of membership changes it.
pub fn cluster_key_id<'a>(
    members: impl Iterator<Item = &'a [u8; NAME_LEN]>,
    recovery: Option<&[u8; NAME_LEN]>,
) -> KeyId {
    let mut names: Vec<&[u8; NAME_LEN]> = members.collect();
    names.sort();
    let mut hash = Sha256::new();
    hash.update(KEY_ID_DOMAIN);
    hash.update([u8::try_from(names.len()).unwrap_or(u8::MAX)]);
    for name in names {
        hash.update(name);
    }
    match recovery {
        Some(name) => hash.update([[1].as_slice(), name].concat()),
        None => hash.update([0]),
    }
    KeyId::from_cluster_digest(&hash.finalize())
}

/// The key_id an envelope's recipient set stands for.
pub fn envelope_key_id(envelope: &ClusterEnvelope) -> KeyId {
    let names = |role| {
        envelope
            .recipients
            .iter()
            .filter(move |r| r.role == role)
            .map(|r| &r.name)
    };
    cluster_key_id(names(Role::Member), names(Role::Recovery).next())
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

/// Reads one armored key and checks it against its `name:` line.
pub fn read_pinned(path: &Path, label: &'static str) -> Result<StorageKey, MembershipError> {
    let text = std::fs::read_to_string(path).map_err(|source| MembershipError::Read {
        path: path.to_path_buf(),
        source,
    })?;
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
