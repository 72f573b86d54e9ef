//! Who can open a cluster envelope and who may sign one: the members (each
//! a TPM's SRK and envelope signing key, pinned by their Names in the
//! member file) and the optional offline recovery key; the cluster key_id is
//! derived from all of them. The daemon reads the files (its
//! `cluster::load`, with its ownership checks); this module parses their
//! text, holds the result, and verifies envelopes against it.

use sha2::{Digest as _, Sha256};

use super::armor::{self, ArmorError};
use super::duplicate::{SealedObject, check_sealed_public};
use super::signing_key::{SignatureError, SigningKey, SigningKeyError};
use super::storage_key::{StorageKey, StorageKeyError};
use super::wire::NAME_LEN;
use crate::key_id::KeyId;
use crate::key_id::hex;
use crate::text::printable;
use crate::wrapped::{
    ClusterEnvelope, ClusterEnvelopeError, MAX_RECIPIENTS, Recipient, Role, ToSign,
};

/// The armor label of a member's SRK public (what `sceau srk-public` prints).
pub const MEMBER_LABEL: &str = "TPM2B_PUBLIC";
/// The armor label of a member's envelope signing key, the member file's
/// second block.
pub const SIGNING_LABEL: &str = "SCEAU ENVELOPE SIGNING KEY";
/// The armor label of the recovery key's public half.
pub const RECOVERY_PUBLIC_LABEL: &str = "SCEAU RECOVERY PUBLIC KEY";
/// v3: every (role, Name) pair is hashed (v2 hashed the member Names and
/// only the first recovery Name). The key_id of unsigned envelopes.
const UNSIGNED_KEY_ID_DOMAIN: &[u8] = b"sceau cluster key_id v3\0";
/// v4: every member's SRK and signing key Names, and the recovery Name.
const KEY_ID_DOMAIN: &[u8] = b"sceau cluster key_id v4\0";
/// A membership's key_id at an epoch (`MembershipDigest::key_id`).
const EPOCH_KEY_ID_DOMAIN: &[u8] = b"sceau cluster key_id at an epoch\0";

/// Why a member or recovery public file's text is not a pinned key.
#[derive(Debug, thiserror::Error)]
pub enum PinnedKeyError {
    // Transparent: the tools print each error's chain of sources, and a
    // "{0}" message with the same error as its source printed it twice.
    #[error(transparent)]
    Armor(#[from] ArmorError),
    #[error(transparent)]
    Key(#[from] StorageKeyError),
    #[error("no 'name:' line; pin every key by its Name")]
    Unpinned,
    /// `pinned` comes from the file, so it is escaped and cut
    /// ([`printable`]): the message reaches the operator's terminal.
    #[error("the pinned name {pinned} is not the key's Name {actual}")]
    PinMismatch { pinned: String, actual: String },
    #[error(
        "no envelope signing key: the file predates signed envelopes; on that node run \
         `sceau srk-public` again and use what it prints"
    )]
    NoSigningKey,
    #[error(transparent)]
    SigningKey(#[from] SigningKeyError),
    #[error("no 'signing-name:' line; pin the signing key by its Name")]
    SigningUnpinned,
}

/// A member: the SRK envelopes are wrapped to, and the signing key that
/// signs the envelopes its TPM makes. Both come from one TPM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub srk: StorageKey,
    pub signing: SigningKey,
}

/// Why a cluster envelope is refused before any TPM work. Each reason has
/// a short class word for the client ([`Refusal::class`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the envelope is unsigned (version 2)")]
    Unsigned,
    #[error("member {0} of the envelope's membership is not a member this node knows")]
    UnknownMember(String),
    #[error("the signature by member {signer} does not stand: {error}")]
    Signature {
        signer: String,
        error: SignatureError,
    },
    #[error("key_id {request} is not the envelope's membership ({envelope})")]
    KeyId { request: String, envelope: String },
}

impl Refusal {
    /// Every class word, in [`Refusal::index`] order: metrics label them.
    pub const CLASSES: [&'static str; 4] = [
        "unsigned-envelope",
        "unknown-member",
        "bad-signature",
        "key-id-mismatch",
    ];

    pub fn index(&self) -> usize {
        match self {
            Refusal::Unsigned => 0,
            Refusal::UnknownMember(_) => 1,
            Refusal::Signature { .. } => 2,
            Refusal::KeyId { .. } => 3,
        }
    }

    /// The word a client sees: no Names, no key material.
    pub fn class(&self) -> &'static str {
        Self::CLASSES[self.index()]
    }
}

/// The members whose signatures this node accepts: today's, and the former
/// members the operator still lists while their envelopes are rewritten.
#[derive(Debug, Clone, Default)]
pub struct KnownMembers(Vec<Member>);

impl KnownMembers {
    pub fn new(members: Vec<Member>) -> Self {
        Self(members)
    }

    /// The Names of every listed member's SRK (or KEK generation).
    pub fn srk_names(&self) -> impl Iterator<Item = &[u8; NAME_LEN]> {
        self.0.iter().map(|m| m.srk.name())
    }

    fn by_srk(&self, name: &[u8; NAME_LEN]) -> Option<&Member> {
        self.0.iter().find(|m| m.srk.name() == name)
    }

    /// Checks a signed envelope and returns the digest of its membership:
    /// every member entry must be a known member (so the key_id can be
    /// computed from both of its keys), and the signature must be the
    /// signer's over every byte before it. Needs no TPM.
    pub fn verify(&self, envelope: &ClusterEnvelope) -> Result<MembershipDigest, Refusal> {
        let signed = envelope.signature.as_ref().ok_or(Refusal::Unsigned)?;
        let mut members = Vec::new();
        let mut recovery = None;
        for recipient in &envelope.recipients {
            match recipient.role {
                Role::Member => members.push(
                    self.by_srk(&recipient.name)
                        .ok_or_else(|| Refusal::UnknownMember(hex(&recipient.name)))?,
                ),
                Role::Recovery => recovery = Some(&recipient.name),
            }
        }
        let signer = self
            .by_srk(&envelope.recipients[signed.signer].name)
            .expect("the signer is a member entry, and every member entry is known");
        signer
            .signing
            .verify(&signed.digest, &signed.signature)
            .map_err(|error| Refusal::Signature {
                signer: hex(signer.srk.name()),
                error,
            })?;
        // The binding is part of the signed bytes (the object's public
        // area); an area check_sealed_public refuses is refused later.
        let auth_policy = check_sealed_public(&envelope.object_public)
            .ok()
            .and_then(|area| area.auth_policy);
        Ok(cluster_digest(
            members.into_iter(),
            recovery,
            auth_policy.as_ref(),
        ))
    }
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
    #[error(
        "the member file of this node's SRK {srk} holds signing key {listed}, but this TPM's is \
         {own}: the file was not made on this node; run `sceau srk-public` here"
    )]
    ForeignSigningKey {
        srk: String,
        listed: String,
        own: String,
    },
    #[error("member {0} is listed both as a member and as a former member")]
    FormerAndCurrent(String),
}

#[derive(Debug)]
pub struct Membership {
    own: Member,
    members: Vec<Member>,
    recovery: Option<StorageKey>,
    /// The boot policy key's PolicyAuthorize, when DEKs are bound to it.
    auth_policy: Option<[u8; 32]>,
    /// Today's members and the former ones still accepted.
    known: KnownMembers,
    digest: MembershipDigest,
    /// The membership's epoch (0: none; `Membership::with_epoch`).
    epoch: u64,
    key_id: KeyId,
}

impl Membership {
    /// The membership of keys already read and checked: `own` must be among
    /// `members` with both of its keys, and the recovery key must not be one
    /// of them.
    pub fn from_keys(
        own: Member,
        members: Vec<Member>,
        recovery: Option<StorageKey>,
    ) -> Result<Self, MembershipError> {
        if members.len() + usize::from(recovery.is_some()) > MAX_RECIPIENTS {
            return Err(MembershipError::TooMany {
                count: members.len(),
            });
        }
        let listed = members
            .iter()
            .find(|m| m.srk.name() == own.srk.name())
            .ok_or_else(|| MembershipError::NotAMember(hex(own.srk.name())))?;
        if listed.signing != own.signing {
            return Err(MembershipError::ForeignSigningKey {
                srk: hex(own.srk.name()),
                listed: hex(listed.signing.name()),
                own: hex(own.signing.name()),
            });
        }
        if let Some(recovery) = &recovery
            && members.iter().any(|m| m.srk.name() == recovery.name())
        {
            return Err(MembershipError::Duplicate(hex(recovery.name())));
        }
        let digest = cluster_digest(
            members.iter(),
            recovery.as_ref().map(StorageKey::name),
            None,
        );
        Ok(Self {
            own,
            known: KnownMembers::new(members.clone()),
            members,
            recovery,
            auth_policy: None,
            digest,
            epoch: 0,
            key_id: digest.key_id(0),
        })
    }

    /// Binds every DEK sealed from now on to a boot policy key: the sealed
    /// object's authPolicy is `auth_policy` (its PolicyAuthorize), and the
    /// key_id covers it, so that the apiserver re-seeds and reads older
    /// envelopes as stale. Those still open: their key_id is computed from
    /// their own object.
    pub fn with_boot_policy(mut self, auth_policy: [u8; 32]) -> Self {
        self.digest = cluster_digest(
            self.members.iter(),
            self.recovery.as_ref().map(StorageKey::name),
            Some(&auth_policy),
        );
        self.key_id = self.digest.key_id(self.epoch);
        self.auth_policy = Some(auth_policy);
        self
    }

    /// Reports the key_id of this membership at `epoch`
    /// ([`MembershipDigest::key_id`]).
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self.key_id = self.digest.key_id(epoch);
        self
    }

    pub fn digest(&self) -> &MembershipDigest {
        &self.digest
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Also accepts envelopes whose membership includes `former` members,
    /// and their signatures: the members removed from the cluster whose
    /// envelopes are not yet rewritten. Their SRKs receive no new DEK.
    pub fn with_former(mut self, former: Vec<Member>) -> Result<Self, MembershipError> {
        for member in &former {
            if self.known.by_srk(member.srk.name()).is_some() {
                return Err(MembershipError::FormerAndCurrent(hex(member.srk.name())));
            }
            self.known.0.push(member.clone());
        }
        Ok(self)
    }

    /// Also accepts envelopes whose membership includes this node under
    /// another of its KEK generations (older keys its TPM still holds):
    /// known, as former members are, and receiving no new DEK. Keys already
    /// known are left as they are.
    pub fn with_own_generations(mut self, own: impl IntoIterator<Item = Member>) -> Self {
        for member in own {
            if self.known.by_srk(member.srk.name()).is_none() {
                self.known.0.push(member);
            }
        }
        self
    }

    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    pub fn own_name(&self) -> &[u8; NAME_LEN] {
        self.own.srk.name()
    }

    /// The members whose signatures this node accepts.
    pub fn known(&self) -> &KnownMembers {
        &self.known
    }

    /// Every recipient's Names and role, and the former members still
    /// accepted, for the start-up log.
    pub fn describe(&self) -> Vec<String> {
        let member = |m: &Member| {
            format!(
                "SRK {} signing key {}",
                hex(m.srk.name()),
                hex(m.signing.name())
            )
        };
        let members = self.members.iter().map(|m| format!("member {}", member(m)));
        let recovery = self
            .recovery
            .iter()
            .map(|r| format!("recovery {}", hex(r.name())));
        let former = self
            .known
            .0
            .iter()
            .skip(self.members.len())
            .map(|m| format!("former member, still accepted: {}", member(m)));
        members.chain(recovery).chain(former).collect()
    }

    /// Encrypt in cluster mode: one sealed object, wrapped for every member
    /// and the recovery key, up to the signature this node's TPM adds.
    /// Needs no TPM.
    pub fn seal(&self, dek: &[u8]) -> Result<ToSign, ClusterEnvelopeError> {
        let object = SealedObject::with_policy(dek, self.auth_policy.as_ref());
        let entry = |role, key: &StorageKey| Recipient {
            role,
            name: *key.name(),
            blob: object.wrap_for(key),
        };
        let members = self.members.iter().map(|m| entry(Role::Member, &m.srk));
        let recovery = self.recovery.iter().map(|r| entry(Role::Recovery, r));
        ClusterEnvelope {
            object_public: object.tpmt_public().to_vec(),
            recipients: members.chain(recovery).collect(),
            signature: None,
        }
        .encode_for_signing(self.own_name())
    }

    /// Decrypt's checks before any TPM work: a signed envelope by a known
    /// member, over every byte, of the membership the request's key_id
    /// names. An unsigned one is refused as [`Refusal::Unsigned`]; the
    /// caller decides whether the operator still allows those.
    pub fn verify(&self, envelope: &ClusterEnvelope, key_id: &str) -> Result<(), Refusal> {
        let digest = self.known.verify(envelope)?;
        if !digest.names(key_id) {
            return Err(Refusal::KeyId {
                request: printable(key_id),
                envelope: digest
                    .key_id(membership_epoch(key_id).unwrap_or(0))
                    .to_string(),
            });
        }
        Ok(())
    }
}

/// SHA-256 over every member's SRK and signing key Names, sorted by SRK
/// Name, the recovery Name, and the authPolicy of a membership bound to a
/// boot policy key (nothing is hashed for an unbound one, so its key_id is
/// the one sceau computed before binding existed): every member computes
/// the same value, and any change of membership, of a member's keys (a KEK
/// generation included), of the recovery key or of the policy key changes it.
pub fn cluster_digest<'a>(
    members: impl Iterator<Item = &'a Member>,
    recovery: Option<&[u8; NAME_LEN]>,
    auth_policy: Option<&[u8; 32]>,
) -> MembershipDigest {
    let mut members: Vec<&Member> = members.collect();
    members.sort_by_key(|m| *m.srk.name());
    let mut hash = Sha256::new();
    hash.update(KEY_ID_DOMAIN);
    hash.update([u8::try_from(members.len()).unwrap_or(u8::MAX)]);
    for member in members {
        hash.update(member.srk.name());
        hash.update(member.signing.name());
    }
    match recovery {
        None => hash.update([0]),
        Some(name) => {
            hash.update([1]);
            hash.update(name);
        }
    }
    if let Some(policy) = auth_policy {
        hash.update([2]);
        hash.update(policy);
    }
    MembershipDigest(hash.finalize().into())
}

/// The key_id of a membership before epochs (`MembershipDigest::key_id(0)`).
pub fn cluster_key_id<'a>(
    members: impl Iterator<Item = &'a Member>,
    recovery: Option<&[u8; NAME_LEN]>,
    auth_policy: Option<&[u8; 32]>,
) -> KeyId {
    cluster_digest(members, recovery, auth_policy).key_id(0)
}

/// What a membership's key_ids are made from ([`cluster_digest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MembershipDigest(pub [u8; 32]);

impl MembershipDigest {
    /// The key_id of this membership at `epoch`: for 0, `sceau-` and 16
    /// bytes of the digest (as before epochs); else `sceau-mN-` and 16
    /// bytes of SHA-256 over the epoch and the digest. Every member reads
    /// the epoch from the same file, so every member reports the same
    /// key_id, and a membership brought back under a higher epoch reports a
    /// new one.
    pub fn key_id(&self, epoch: u64) -> KeyId {
        if epoch == 0 {
            return KeyId::from_cluster_digest(&self.0);
        }
        let digest = Sha256::new()
            .chain_update(EPOCH_KEY_ID_DOMAIN)
            .chain_update(epoch.to_be_bytes())
            .chain_update(self.0)
            .finalize();
        KeyId::from_text(format!("sceau-m{epoch}-{}", hex(&digest[..16])))
    }

    /// Whether `key_id` names this membership, at the epoch it carries: an
    /// envelope opens under its own key_id, whatever the epoch served now.
    pub fn names(&self, key_id: &str) -> bool {
        self.key_id(membership_epoch(key_id).unwrap_or(0)).as_str() == key_id
    }
}

/// The epoch a key_id of the `sceau-mN-` form carries.
pub fn membership_epoch(key_id: &str) -> Option<u64> {
    let rest = key_id.strip_prefix("sceau-m")?;
    let (epoch, digest) = rest.split_once('-')?;
    let canonical = !epoch.is_empty()
        && epoch.bytes().all(|b| b.is_ascii_digit())
        && !epoch.starts_with('0')
        && digest.len() == 32;
    canonical.then(|| epoch.parse().ok()).flatten()
}

/// The key_id of an unsigned (version 2) envelope: SHA-256 over every
/// recipient's (role, Name) pair in canonical order, as sceau computed it
/// before envelopes were signed.
pub fn unsigned_envelope_key_id(envelope: &ClusterEnvelope) -> KeyId {
    let mut pairs: Vec<(Role, &[u8; NAME_LEN])> = envelope
        .recipients
        .iter()
        .map(|r| (r.role, &r.name))
        .collect();
    pairs.sort();
    let mut hash = Sha256::new();
    hash.update(UNSIGNED_KEY_ID_DOMAIN);
    hash.update([u8::try_from(pairs.len()).unwrap_or(u8::MAX)]);
    for (role, name) in pairs {
        hash.update([role as u8]);
        hash.update(name);
    }
    KeyId::from_cluster_digest(&hash.finalize())
}

/// The text `sceau srk-public` prints and `--members` reads: the SRK
/// block, then the signing key block, each pinned by its Name.
pub fn member_file(member: &Member, node_key_id: &KeyId) -> String {
    let srk = armor::encode(
        MEMBER_LABEL,
        &[
            "sceau member: this node's storage root key (SRK) public area.",
            "Before you copy it into --members, compare the name with the one the node prints.",
        ],
        &[
            ("name", hex(member.srk.name())),
            ("key_id", node_key_id.to_string()),
        ],
        &member.srk.to_tpm2b_public(),
    );
    let signing = armor::encode(
        SIGNING_LABEL,
        &["This node's envelope signing key, made and kept by the same TPM."],
        &[("signing-name", hex(member.signing.name()))],
        &member.signing.to_tpm2b_public(),
    );
    srk + &signing
}

/// Parses a member file: both keys, each checked against its pin.
pub fn parse_member(text: &str) -> Result<Member, PinnedKeyError> {
    let srk = parse_pinned(text, MEMBER_LABEL)?;
    let armored = match armor::decode(text, SIGNING_LABEL) {
        Err(ArmorError::MissingBegin(_)) => return Err(PinnedKeyError::NoSigningKey),
        other => other?,
    };
    let signing = SigningKey::from_tpm2b_public(&armored.bytes)?;
    let pinned = armored
        .header("signing-name")
        .ok_or(PinnedKeyError::SigningUnpinned)?;
    if !pinned.eq_ignore_ascii_case(&hex(signing.name())) {
        return Err(PinnedKeyError::PinMismatch {
            pinned: printable(pinned),
            actual: hex(signing.name()),
        });
    }
    Ok(Member { srk, signing })
}

/// The member files among a directory's entries: the `*.pub` ones, in
/// name order, so that every reader of a members directory (the daemon,
/// `sceau-recover`) takes the same files in the same order.
pub fn member_files(entries: Vec<std::path::PathBuf>) -> Vec<std::path::PathBuf> {
    let mut paths = entries;
    paths.retain(|p| p.extension().is_some_and(|e| e == "pub"));
    paths.sort();
    paths
}

/// Parses one armored key of `label` and checks it against its `name:`
/// line.
pub fn parse_pinned(text: &str, label: &'static str) -> Result<StorageKey, PinnedKeyError> {
    let armored = armor::decode(text, label)?;
    let key = StorageKey::from_tpm2b_public(&armored.bytes)?;
    let pinned = armored.header("name").ok_or(PinnedKeyError::Unpinned)?;
    if !pinned.eq_ignore_ascii_case(&hex(key.name())) {
        return Err(PinnedKeyError::PinMismatch {
            pinned: printable(pinned),
            actual: hex(key.name()),
        });
    }
    Ok(key)
}

#[cfg(test)]
mod tests;
