//! KEK generations and the key_ids that name them: where a generation lives
//! in the TPM, how its key_id is made, the ledger file that remembers what
//! was reported, and the rule that decides which key_ids a node accepts.
//!
//! Generation 0 is the SRK, which the owner hierarchy's seed derives again
//! at every start. Generation N ≥ 1 is a storage key that `sceau kek rotate`
//! creates under the SRK from the TPM's random number generator and makes
//! persistent at [`generation_handle`]`(N)`; its private part is never
//! written anywhere, so evicting it (`sceau kek retire`) destroys it.
//!
//! A key_id is never reported twice for two different things. Each key_id
//! is made from an *epoch*, a value of an NV counter in the TPM
//! ([`EPOCH_COUNTER_INDEX`]) that only goes up, even across its deletion
//! (the TPM starts a new counter at the highest value any counter held), so
//! no file restored from a backup can bring an old key_id back. The
//! [`Ledger`] in the state directory only says which key_id was reported
//! last, so that a restart without change keeps it.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest as _, Sha256};

use crate::key_id::{KeyId, hex};
use crate::text::printable;

/// The persistent handle of generation N is this plus N: the owner's
/// persistent range (0x81000000–0x817FFFFF), "5CE" for sceau.
pub const GENERATION_HANDLE_BASE: u32 = 0x815C_E000;
/// The highest generation number: 4095 rotations, one every 90 days for a
/// thousand years.
pub const MAX_GENERATION: u32 = 0x0FFF;
/// Generations 1 and up kept in the TPM at once. Each takes a persistent
/// slot, of which the PC Client profile promises only seven for the whole
/// machine (TPM_PT_HR_PERSISTENT_MIN), shared with the EK and the platform's
/// keys. Three lets an operator rotate, rewrite and retire with one spare.
pub const MAX_OPEN_GENERATIONS: usize = 3;
/// The epoch counter: an NV counter index next to the revocation serials'
/// range (0x013A0000–0x013AFFFF).
pub const EPOCH_COUNTER_INDEX: u32 = 0x013B_0000;
/// TPMA_NV of the epoch counter: TPM_NT_COUNTER (1 << 4), OWNERWRITE,
/// OWNERREAD, NO_DA. Anyone with the owner authorization can push it
/// further, which only makes the next key_id new sooner.
pub const EPOCH_COUNTER_ATTRIBUTES: u32 = (1 << 4) | (1 << 1) | (1 << 17) | (1 << 25);
/// The cluster membership mark: the highest membership epoch this node
/// served and that membership's digest (8 + 32 bytes), an ordinary NV index
/// next to the epoch counter. A node refuses a lower epoch, and the same
/// epoch with another membership.
pub const MEMBERSHIP_MARK_INDEX: u32 = 0x013B_0001;
/// TPMA_NV of the mark: TPM_NT_ORDINARY, OWNERWRITE, OWNERREAD, NO_DA.
pub const MEMBERSHIP_MARK_ATTRIBUTES: u32 = (1 << 1) | (1 << 17) | (1 << 25);
pub const MEMBERSHIP_MARK_SIZE: u16 = 40;
/// Where the ledger lives in the state directory.
pub const LEDGER_FILE: &str = "kek-ledger";
/// A ledger is a few lines per rotation or configuration change, and keeps
/// the last [`KEPT_KEY_IDS`] key_ids: a file larger than this was not
/// written by sceau.
pub const MAX_LEDGER_BYTES: usize = 60 * 1024;
/// Key_ids the ledger keeps, the newest: an older one is still accepted by
/// its generation (`KeyIdTable::generation_for`), and never given again
/// (the TPM's counter is past it).
pub const KEPT_KEY_IDS: usize = 256;
/// Retired generations the ledger keeps, the newest, for `kek list`.
pub const KEPT_RETIRED: usize = 64;

const KEY_ID_DOMAIN: &[u8] = b"sceau key_id v5\0";
const SINGLE_NODE_CONFIG_DOMAIN: &[u8] = b"sceau single-node configuration\0";
const LEDGER_HEADER: &str = "# sceau KEK ledger: written by sceau, one record a line; do not edit";

/// The persistent handle of generation `n` (1 ..= [`MAX_GENERATION`]).
pub fn generation_handle(n: u32) -> u32 {
    GENERATION_HANDLE_BASE + n
}

/// The generation a persistent handle holds, if it is in sceau's range.
pub fn generation_of_handle(handle: u32) -> Option<u32> {
    let n = handle.checked_sub(GENERATION_HANDLE_BASE)?;
    (1..=MAX_GENERATION).contains(&n).then_some(n)
}

/// What a node's key_id names besides its generation: the boot policy key
/// new objects are sealed to, or none, and in cluster mode (`--members`, or
/// `--recovery-key` alone) the membership's digest, so that turning a
/// recovery key on and off again takes a new epoch each time.
pub fn single_node_config(
    policy_key_name: Option<&[u8]>,
    membership: Option<&[u8; 32]>,
) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(SINGLE_NODE_CONFIG_DOMAIN);
    match policy_key_name {
        None => hash.update([0]),
        Some(name) => {
            hash.update([1]);
            hash.update(u16::try_from(name.len()).unwrap_or(u16::MAX).to_be_bytes());
            hash.update(name);
        }
    }
    if let Some(digest) = membership {
        hash.update([3]);
        hash.update(digest);
    }
    hash.finalize().into()
}

/// The key_id of `generation` (whose key has Name `generation_name`) under
/// `config`, allocated at `epoch`: `sceau-N.E-` and 16 hex digits of
/// SHA-256 over all four. The generation and epoch are in the clear so that
/// a node whose state directory was lost still knows which key opens an
/// envelope, and so that `sceau-recover inventory` can name generations.
pub fn key_id(generation: u32, epoch: u64, generation_name: &[u8], config: &[u8; 32]) -> KeyId {
    let digest = Sha256::new()
        .chain_update(KEY_ID_DOMAIN)
        .chain_update(generation.to_be_bytes())
        .chain_update(epoch.to_be_bytes())
        .chain_update(
            u16::try_from(generation_name.len())
                .unwrap_or(u16::MAX)
                .to_be_bytes(),
        )
        .chain_update(generation_name)
        .chain_update(config)
        .finalize();
    KeyId::from_text(format!("sceau-{generation}.{epoch}-{}", hex(&digest[..8])))
}

/// The generation and epoch a key_id of [`key_id`]'s form names; `None` for
/// any other text (an older key_id, another plugin's).
pub fn parse_key_id(text: &str) -> Option<(u32, u64)> {
    let rest = text.strip_prefix("sceau-")?;
    let (numbers, digest) = rest.split_once('-')?;
    let (generation, epoch) = numbers.split_once('.')?;
    let canonical = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    if !canonical(generation) || !canonical(epoch) {
        return None;
    }
    if digest.len() != 16
        || !digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let generation: u32 = generation.parse().ok()?;
    (generation <= MAX_GENERATION).then_some(())?;
    Some((generation, epoch.parse().ok()?))
}

/// One generation as the ledger remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationRecord {
    /// The key's TPM Name (the SRK's for generation 0).
    pub name: Vec<u8>,
    /// Seconds since the epoch when it was made (generation 0: when sceau
    /// first served it).
    pub made: u64,
    /// When `kek retire` destroyed it.
    pub retired: Option<u64>,
}

/// One key_id as the ledger remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIdRecord {
    pub key_id: KeyId,
    pub generation: u32,
    pub epoch: u64,
    pub config: [u8; 32],
    /// Seconds since the epoch when it was allocated.
    pub at: u64,
}

/// The state directory's memory of generations and key_ids. It is a
/// convenience, never the authority: the TPM says which generations exist
/// and which epoch is the latest, and a ledger that is lost, old or
/// restored from a copy makes sceau allocate a new key_id, never reuse one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    generations: BTreeMap<u32, GenerationRecord>,
    key_ids: Vec<KeyIdRecord>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LedgerError {
    #[error("the ledger is larger than {MAX_LEDGER_BYTES} bytes")]
    TooLarge,
    #[error("line {line} is not a ledger record: {text}")]
    BadLine { line: usize, text: String },
    #[error("line {line} repeats generation {generation}")]
    RepeatedGeneration { line: usize, generation: u32 },
    #[error("line {line} retires generation {generation}, which no earlier line made")]
    RetiredUnknown { line: usize, generation: u32 },
    #[error("line {line} goes back in epoch ({epoch} after {previous})")]
    EpochBackwards {
        line: usize,
        epoch: u64,
        previous: u64,
    },
    #[error("line {line}: its key_id is not the one its generation, epoch and configuration give")]
    KeyIdMismatch { line: usize },
}

impl Ledger {
    /// Reads a ledger [`Ledger::render`] wrote. Every key_id is checked
    /// against the generation Name, epoch and configuration on its line.
    pub fn parse(text: &str) -> Result<Self, LedgerError> {
        if text.len() > MAX_LEDGER_BYTES {
            return Err(LedgerError::TooLarge);
        }
        let mut ledger = Ledger::default();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            if raw.is_empty() || raw.starts_with('#') {
                continue;
            }
            let bad = || LedgerError::BadLine {
                line,
                text: printable(raw),
            };
            let words: Vec<&str> = raw.split(' ').collect();
            match words.as_slice() {
                ["generation", n, "name", name, "made", made] => {
                    let generation = number::<u32>(n)
                        .filter(|g| *g <= MAX_GENERATION)
                        .ok_or_else(bad)?;
                    let record = GenerationRecord {
                        name: unhex(name).ok_or_else(bad)?,
                        made: number(made).ok_or_else(bad)?,
                        retired: None,
                    };
                    if ledger.generations.insert(generation, record).is_some() {
                        return Err(LedgerError::RepeatedGeneration { line, generation });
                    }
                }
                ["retired", n, "at", at] => {
                    let generation: u32 = number(n).ok_or_else(bad)?;
                    let at = number(at).ok_or_else(bad)?;
                    let record = ledger
                        .generations
                        .get_mut(&generation)
                        .ok_or(LedgerError::RetiredUnknown { line, generation })?;
                    record.retired = Some(at);
                }
                [
                    "key_id",
                    id,
                    "generation",
                    n,
                    "epoch",
                    e,
                    "config",
                    config,
                    "at",
                    at,
                ] => {
                    let generation: u32 = number(n).ok_or_else(bad)?;
                    let epoch: u64 = number(e).ok_or_else(bad)?;
                    let config: [u8; 32] = unhex(config)
                        .and_then(|c| c.try_into().ok())
                        .ok_or_else(bad)?;
                    if let Some(previous) = ledger.key_ids.last().map(|r| r.epoch)
                        && epoch <= previous
                    {
                        return Err(LedgerError::EpochBackwards {
                            line,
                            epoch,
                            previous,
                        });
                    }
                    let name = &ledger.generations.get(&generation).ok_or_else(bad)?.name;
                    let expected = key_id(generation, epoch, name, &config);
                    if expected.as_str() != *id {
                        return Err(LedgerError::KeyIdMismatch { line });
                    }
                    ledger.key_ids.push(KeyIdRecord {
                        key_id: expected,
                        generation,
                        epoch,
                        config,
                        at: number(at).ok_or_else(bad)?,
                    });
                }
                _ => return Err(bad()),
            }
        }
        Ok(ledger)
    }

    /// The ledger's text, bounded: every open generation, the newest
    /// [`KEPT_RETIRED`] retired ones, and the newest [`KEPT_KEY_IDS`]
    /// key_ids of the generations kept. What it drops was only a record:
    /// an older key_id still opens by its generation, and no number or
    /// epoch is given again (the TPM holds the newer ones).
    pub fn render(&self) -> String {
        let retired: Vec<u32> = self
            .generations
            .iter()
            .filter(|(_, g)| g.retired.is_some())
            .map(|(n, _)| *n)
            .collect();
        let dropped: BTreeSet<u32> = retired[..retired.len().saturating_sub(KEPT_RETIRED)]
            .iter()
            .copied()
            .collect();
        let kept = || {
            self.generations
                .iter()
                .filter(|(n, _)| !dropped.contains(n))
        };
        let mut text = format!("{LEDGER_HEADER}\n");
        for (n, record) in kept() {
            text.push_str(&format!(
                "generation {n} name {} made {}\n",
                hex(&record.name),
                record.made
            ));
        }
        for (n, record) in kept() {
            if let Some(at) = record.retired {
                text.push_str(&format!("retired {n} at {at}\n"));
            }
        }
        let key_ids: Vec<&KeyIdRecord> = self
            .key_ids
            .iter()
            .filter(|r| !dropped.contains(&r.generation))
            .collect();
        for record in &key_ids[key_ids.len().saturating_sub(KEPT_KEY_IDS)..] {
            text.push_str(&format!(
                "key_id {} generation {} epoch {} config {} at {}\n",
                record.key_id,
                record.generation,
                record.epoch,
                hex(&record.config),
                record.at
            ));
        }
        text
    }

    pub fn generations(&self) -> &BTreeMap<u32, GenerationRecord> {
        &self.generations
    }

    pub fn key_ids(&self) -> &[KeyIdRecord] {
        &self.key_ids
    }

    /// The key_id reported last, if it is still what this node serves: the
    /// same generation (by Name) and configuration, and no epoch allocated
    /// since (`counter` is the TPM's epoch counter now). Anything else, a
    /// ledger restored from a copy included, takes a new key_id.
    pub fn reusable(
        &self,
        counter: u64,
        generation: u32,
        generation_name: &[u8],
        config: &[u8; 32],
    ) -> Option<&KeyIdRecord> {
        let last = self.key_ids.last()?;
        let same_key = self
            .generations
            .get(&generation)
            .is_some_and(|g| g.name == generation_name);
        (last.epoch == counter
            && last.generation == generation
            && same_key
            && last.config == *config)
            .then_some(last)
    }

    /// Remembers a generation (made now, or first seen now); a generation
    /// already remembered with the same Name is left as it is.
    pub fn note_generation(&mut self, generation: u32, name: &[u8], now: u64) {
        let fresh = GenerationRecord {
            name: name.to_vec(),
            made: now,
            retired: None,
        };
        match self.generations.get(&generation) {
            Some(known) if known.name == name => {}
            // Another key under a number the ledger knew: the ledger is
            // older than the TPM; the TPM wins, and its key_ids go.
            Some(_) => {
                self.key_ids.retain(|r| r.generation != generation);
                self.generations.insert(generation, fresh);
            }
            None => {
                self.generations.insert(generation, fresh);
            }
        }
    }

    pub fn note_retired(&mut self, generation: u32, now: u64) {
        if let Some(record) = self.generations.get_mut(&generation) {
            record.retired.get_or_insert(now);
        }
    }

    /// Records a key_id allocated at `epoch`, which must be later than every
    /// epoch recorded: the TPM's counter only goes up.
    pub fn note_key_id(&mut self, record: KeyIdRecord) {
        if self
            .key_ids
            .last()
            .is_some_and(|last| last.epoch >= record.epoch)
        {
            // A ledger from another TPM, or restored across a counter that
            // was pushed further: what it said of later epochs is void.
            self.key_ids.retain(|r| r.epoch < record.epoch);
        }
        self.key_ids.push(record);
    }

    /// The next generation number: above every one this ledger remembers
    /// (retired ones included) and every one the TPM holds.
    pub fn next_generation(&self, open: &BTreeSet<u32>) -> u32 {
        let remembered = self.generations.keys().next_back().copied().unwrap_or(0);
        let held = open.iter().next_back().copied().unwrap_or(0);
        remembered.max(held) + 1
    }

    /// The configuration the last key_id was allocated for, which
    /// `kek rotate` keeps for the new generation's key_id.
    pub fn last_config(&self) -> Option<[u8; 32]> {
        self.key_ids.last().map(|r| r.config)
    }
}

fn number<T: std::str::FromStr>(text: &str) -> Option<T> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// Lowercase hex as sceau writes it, at most a Name's or a digest's length.
fn unhex(text: &str) -> Option<Vec<u8>> {
    let canonical = text.len() <= 256 && !text.bytes().any(|b| b.is_ascii_uppercase());
    canonical.then(|| crate::text::decode_hex(text)).flatten()
}

/// Which generation a key_id presented with a Decrypt opens under, from
/// what the TPM holds and the ledger remembers: the one rule behind every
/// refusal of a version 1 envelope's key_id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIdTable {
    /// What Encrypt stamps and Status reports, and its generation.
    pub current: KeyIdRecord,
    /// The current generation's key's Name.
    pub current_name: Vec<u8>,
    /// Every generation the TPM holds, 0 included.
    pub open: BTreeSet<u32>,
    /// The same generations by their keys' Names: which one a cluster
    /// envelope's entry was wrapped for.
    names: BTreeMap<Vec<u8>, u32>,
    /// The epoch counter when this table was made.
    pub counter: u64,
    /// Every key_id of the new form a ledger or this process knows, by epoch.
    known: BTreeMap<u64, KeyIdRecord>,
    /// Key_ids of the form before generations (the SRK's own, bound to a
    /// policy key, former policy keys): all generation 0.
    legacy: BTreeSet<String>,
}

/// What [`KeyIdTable::generation_for`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyIdVerdict {
    /// The envelope opens under this generation's key, if it is one of its.
    Opens(u32),
    /// A key_id sceau never reported on this node.
    Unknown,
    /// A key_id of a generation that is retired (destroyed) here.
    Retired(u32),
    /// A key_id allocated after this process last read the TPM: by a
    /// `kek rotate` that the daemon has not been reloaded for.
    NotLoaded,
}

impl KeyIdTable {
    pub fn new<'a>(
        current: KeyIdRecord,
        current_name: &[u8],
        open: &BTreeMap<u32, Vec<u8>>,
        counter: u64,
        known: impl IntoIterator<Item = &'a KeyIdRecord>,
        legacy: impl IntoIterator<Item = KeyId>,
    ) -> Self {
        let mut known: BTreeMap<u64, KeyIdRecord> =
            known.into_iter().map(|r| (r.epoch, r.clone())).collect();
        known.insert(current.epoch, current.clone());
        Self {
            counter: counter.max(current.epoch),
            current,
            current_name: current_name.to_vec(),
            open: open.keys().copied().collect(),
            names: open.iter().map(|(n, name)| (name.clone(), *n)).collect(),
            known,
            legacy: legacy.into_iter().map(|k| k.as_str().to_owned()).collect(),
        }
    }

    /// The generation whose key has TPM Name `name`, if the TPM holds it.
    pub fn generation_named(&self, name: &[u8]) -> Option<u32> {
        self.names.get(name).copied()
    }

    /// Every key_id of the new form this table knows, oldest first.
    pub fn known(&self) -> impl Iterator<Item = &KeyIdRecord> {
        self.known.values()
    }

    /// The generation a Decrypt's key_id opens under. A key_id of the new
    /// form whose epoch this node remembers must be the one remembered; one
    /// whose epoch it does not (a state directory lost or restored from an
    /// older copy) is taken by its generation, if that generation is open
    /// and the epoch is no later than the counter.
    pub fn generation_for(&self, key_id: &str) -> KeyIdVerdict {
        if self.legacy.contains(key_id) {
            return KeyIdVerdict::Opens(0);
        }
        let Some((generation, epoch)) = parse_key_id(key_id) else {
            return KeyIdVerdict::Unknown;
        };
        if epoch > self.counter {
            return KeyIdVerdict::NotLoaded;
        }
        if let Some(known) = self.known.get(&epoch)
            && known.key_id.as_str() != key_id
        {
            return KeyIdVerdict::Unknown;
        }
        match self.open.contains(&generation) {
            true => KeyIdVerdict::Opens(generation),
            false => KeyIdVerdict::Retired(generation),
        }
    }
}

#[cfg(test)]
mod tests;
