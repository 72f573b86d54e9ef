//! Who can open a cluster envelope: the member SRKs (each pinned by its Name
//! in its member file) and the optional offline recovery key; the cluster
//! key_id is derived from them. The daemon reads the files (its
//! `cluster::load`, with its ownership checks); this module parses their
//! text and holds the result.

use sha2::{Digest as _, Sha256};

use super::armor::{self, ArmorError};
use super::duplicate::SealedObject;
use super::storage_key::{StorageKey, StorageKeyError};
use super::wire::NAME_LEN;
use crate::key_id::KeyId;
use crate::key_id::hex;
use crate::wrapped::{
    ClusterEnvelope, ClusterEnvelopeError, Encoded, MAX_RECIPIENTS, Recipient, Role,
};

/// The armor label of a member's SRK public (what `sceau srk-public` prints).
pub const MEMBER_LABEL: &str = "TPM2B_PUBLIC";
/// The armor label of the recovery key's public half.
pub const RECOVERY_PUBLIC_LABEL: &str = "SCEAU RECOVERY PUBLIC KEY";
/// v3: every (role, Name) pair is hashed (v2 hashed the member Names and
/// only the first recovery Name).
const KEY_ID_DOMAIN: &[u8] = b"sceau cluster key_id v3\0";

/// Why a member or recovery public file's text is not a pinned key.
#[derive(Debug, thiserror::Error)]
pub enum PinnedKeyError {
    #[error("{0}")]
    Armor(#[from] ArmorError),
    #[error("{0}")]
    Key(#[from] StorageKeyError),
    #[error("no 'name:' line; pin every key by its Name")]
    Unpinned,
    #[error("the pinned name {pinned} is not the key's Name {actual}")]
    PinMismatch { pinned: String, actual: String },
}

/// Why a set of keys is not a membership.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("{count} member files and a recovery key exceed the {MAX_RECIPIENTS}-recipient limit")]
    TooMany { count: usize },
    #[error("two member files hold the same key {0}")]
    Duplicate(String),
    #[error("this node's SRK (Name {0}) is not among the members")]
    NotAMember(String),
}

#[derive(Debug)]
pub struct Membership {
    own_name: [u8; NAME_LEN],
    members: Vec<StorageKey>,
    recovery: Option<StorageKey>,
    key_id: KeyId,
}

impl Membership {
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

/// Parses one armored key of `label` and checks it against its `name:`
/// line.
pub fn parse_pinned(text: &str, label: &'static str) -> Result<StorageKey, PinnedKeyError> {
    let armored = armor::decode(text, label)?;
    let key = StorageKey::from_tpm2b_public(&armored.bytes)?;
    let pinned = armored.header("name").ok_or(PinnedKeyError::Unpinned)?;
    if !pinned.eq_ignore_ascii_case(&hex(key.name())) {
        return Err(PinnedKeyError::PinMismatch {
            pinned: pinned.to_string(),
            actual: hex(key.name()),
        });
    }
    Ok(key)
}
