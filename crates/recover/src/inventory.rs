//! `sceau-recover inventory`: what etcd holds, by resource and by how each
//! value is stored, read from a snapshot or `etcdctl get -w json` output
//! without any key.
//!
//! The question it answers is the one an operator asks before retiring a
//! key: has the rewrite finished, or do values still name an old key_id (or
//! sit in the clear, or under another provider)? The apiserver stores a
//! KMS v2 value as `k8s:enc:kms:v2:PROVIDER:` and an `EncryptedObject` whose
//! `keyID` is what the plugin's Status reported when the DEK seed was made
//! (`kubernetes::parse_stored_value`); the other encryption providers write
//! `k8s:enc:NAME:v1:…`, and anything else is stored as it is.
//!
//! A value's resource is the first segment of its etcd key after
//! `/registry/` (`secrets`, `configmaps`), or the first two when the first
//! names an API group (`/registry/apiregistration.k8s.io/apiservices/…`:
//! it holds a dot). Nothing here decrypts: the report is the same whoever
//! runs it.
//!
//! Given what the configuration holds now ([`Current`]: the node's KEK
//! ledger, the current member files, the current recovery key), it also
//! counts the values whose envelopes still name a key that is going or
//! gone: a retired generation, a member key no current member file lists
//! (a removed member, or a member's earlier generation), an earlier
//! recovery key. Those are the values a retire or a recovery-key rotation
//! leaves unreadable, or readable by a key that should no longer read them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::etcd::StoredValue;
use super::kubernetes::{KmsV2Object, parse_stored_value};
use sceau_format::envelope::Envelope;
use sceau_format::kek::{Ledger, parse_key_id};
use sceau_format::key_id::hex;
use sceau_format::text::{printable, push_json_string};
use sceau_format::wire::NAME_LEN;
use sceau_format::wrapped::Role;

/// Where every apiserver key begins.
const REGISTRY_PREFIX: &[u8] = b"/registry/";
/// What the other encryption providers write before their data
/// (`k8s:enc:aescbc:v1:`, `k8s:enc:secretbox:v1:`, `k8s:enc:kms:v1:`, …).
const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

/// How one value is stored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Storage {
    /// A KMS v2 value of this provider name, under this key_id.
    KmsV2 { provider: String, key_id: String },
    /// Another encryption provider: the word after `k8s:enc:` (`aescbc`,
    /// `aesgcm`, `secretbox`, `kms` for KMS v1).
    OtherProvider(String),
    /// A value with the KMS v2 prefix that does not parse.
    Malformed,
    /// Stored as it is: not encrypted at rest.
    Unencrypted,
}

impl Storage {
    /// How a value is stored, from its first bytes (and, for KMS v2, its
    /// `EncryptedObject`).
    pub fn of(value: &[u8]) -> Self {
        Self::from_parsed(parse_stored_value(value), value)
    }

    /// The same, from `value` and what `parse_stored_value` made of it.
    fn from_parsed(
        parsed: Result<Option<KmsV2Object>, super::kubernetes::KubernetesError>,
        value: &[u8],
    ) -> Self {
        match parsed {
            Ok(Some(object)) => Self::KmsV2 {
                provider: object.provider,
                key_id: object.key_id,
            },
            Err(_) => Self::Malformed,
            Ok(None) => match value.strip_prefix(ENCRYPTED_PREFIX) {
                Some(rest) => {
                    let name = rest.split(|&b| b == b':').next().unwrap_or_default();
                    Self::OtherProvider(String::from_utf8_lossy(name).into_owned())
                }
                None => Self::Unencrypted,
            },
        }
    }

    /// The words of the text report.
    fn describe(&self) -> String {
        match self {
            Self::KmsV2 { provider, key_id } => {
                format!("kms-v2 {} {}", printable(provider), printable(key_id))
            }
            Self::OtherProvider(name) => format!("{} (not KMS v2)", printable(name)),
            Self::Malformed => "kms-v2, malformed".to_string(),
            Self::Unencrypted => "unencrypted".to_string(),
        }
    }
}

/// The resource a value belongs to, from its etcd key.
pub fn resource_of(key: &[u8]) -> String {
    let Some(rest) = key.strip_prefix(REGISTRY_PREFIX) else {
        return "(outside /registry)".to_string();
    };
    let mut segments = rest.split(|&b| b == b'/');
    let first = String::from_utf8_lossy(segments.next().unwrap_or_default()).into_owned();
    match segments.next() {
        Some(second) if first.contains('.') => {
            format!("{first}/{}", String::from_utf8_lossy(second))
        }
        _ => first,
    }
}

/// Why a value's envelope still depends on a key the configuration no
/// longer holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stale {
    /// A single-node key_id of a generation the ledger says was retired, or
    /// a cluster entry for that generation's key: it opens nowhere now
    /// (except with the recovery key it may also name).
    RetiredGeneration(u32),
    /// A member entry for a key (hex Name) that no current member file
    /// lists: a removed member, or a member's earlier generation.
    OutsideMembership(String),
    /// A recovery entry for a recovery key (hex Name) other than the
    /// current one: whoever holds that key can still open it.
    OldRecoveryKey(String),
}

impl Stale {
    fn describe(&self) -> String {
        match self {
            Self::RetiredGeneration(n) => format!("name retired generation {n}"),
            Self::OutsideMembership(name) => {
                format!("name member key {name}, in no current member file")
            }
            Self::OldRecoveryKey(name) => format!("name earlier recovery key {name}"),
        }
    }
}

/// What the configuration holds now, against which envelopes are judged;
/// each part left empty is not judged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Current {
    /// Retired generations, with their keys' Names (the node's ledger).
    pub retired: BTreeMap<u32, Vec<u8>>,
    /// The SRK Names of the current member files.
    pub members: Option<BTreeSet<[u8; NAME_LEN]>>,
    /// The current recovery key's Name.
    pub recovery: Option<[u8; NAME_LEN]>,
}

impl Current {
    /// The retired generations a node's ledger remembers.
    pub fn with_ledger(mut self, ledger: &Ledger) -> Self {
        self.retired = ledger
            .generations()
            .iter()
            .filter(|(_, record)| record.retired.is_some())
            .map(|(&n, record)| (n, record.name.clone()))
            .collect();
        self
    }

    fn judges_envelopes(&self) -> bool {
        !self.retired.is_empty() || self.members.is_some() || self.recovery.is_some()
    }

    /// Why `object` is stale, if it is; reads its envelope's recipients,
    /// never a key.
    pub fn judge(&self, object: &KmsV2Object) -> BTreeSet<Stale> {
        let mut found = BTreeSet::new();
        if let Some((generation, _)) = parse_key_id(&object.key_id)
            && self.retired.contains_key(&generation)
        {
            found.insert(Stale::RetiredGeneration(generation));
        }
        if !self.judges_envelopes() {
            return found;
        }
        let annotations: HashMap<String, Vec<u8>> = object
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let Ok(Envelope::Wrapped(envelope)) =
            Envelope::parse(&object.encrypted_dek_source, &annotations)
        else {
            return found;
        };
        for recipient in &envelope.recipients {
            let name = &recipient.name;
            match recipient.role {
                Role::Member => {
                    let retired = self
                        .retired
                        .iter()
                        .find(|(_, retired)| retired.as_slice() == name.as_slice());
                    if let Some((&generation, _)) = retired {
                        found.insert(Stale::RetiredGeneration(generation));
                    } else if let Some(members) = &self.members
                        && !members.contains(name)
                    {
                        found.insert(Stale::OutsideMembership(hex(name)));
                    }
                }
                Role::Recovery => {
                    if let Some(current) = &self.recovery
                        && current != name
                    {
                        found.insert(Stale::OldRecoveryKey(hex(name)));
                    }
                }
            }
        }
        found
    }
}

/// The count of values by resource and storage, and of stale values by
/// reason.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Inventory {
    counts: BTreeMap<(String, Storage), usize>,
    stale: BTreeMap<Stale, usize>,
}

impl Inventory {
    /// Every value of `values`, counted, and judged against `current`.
    pub fn take(values: &[StoredValue], current: &Current) -> Self {
        let mut counts = BTreeMap::new();
        let mut stale = BTreeMap::new();
        // A DEK seed's envelope is shared by every value written under it:
        // judge each distinct one once.
        let mut judged: HashMap<String, HashMap<Vec<u8>, BTreeSet<Stale>>> = HashMap::new();
        for stored in values {
            let parsed = parse_stored_value(&stored.value);
            if let Ok(Some(object)) = &parsed {
                let by_source = judged.entry(object.key_id.clone()).or_default();
                let source = object.encrypted_dek_source.as_slice();
                if !by_source.contains_key(source) {
                    by_source.insert(source.to_vec(), current.judge(object));
                }
                for reason in &by_source[source] {
                    *stale.entry(reason.clone()).or_insert(0) += 1;
                }
            }
            *counts
                .entry((
                    resource_of(&stored.key),
                    Storage::from_parsed(parsed, &stored.value),
                ))
                .or_insert(0) += 1;
        }
        Self { counts, stale }
    }

    /// Values by the reason they are stale (one value may have several).
    pub fn stale(&self) -> &BTreeMap<Stale, usize> {
        &self.stale
    }

    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// The distinct key_ids KMS v2 values name, with their counts.
    pub fn key_ids(&self) -> BTreeMap<&str, usize> {
        let mut key_ids = BTreeMap::new();
        for ((_, storage), count) in &self.counts {
            if let Storage::KmsV2 { key_id, .. } = storage {
                *key_ids.entry(key_id.as_str()).or_insert(0) += count;
            }
        }
        key_ids
    }

    /// The values that keep a rewrite under `key_id` from being finished:
    /// in every resource that holds at least one KMS v2 value, each value
    /// that is not a KMS v2 value under `key_id` (another key_id, another
    /// provider, malformed, or in the clear). A resource with no KMS v2
    /// value at all is taken to be outside the encryption configuration.
    pub fn not_under(&self, key_id: &str) -> usize {
        let encrypted: std::collections::BTreeSet<&str> = self
            .counts
            .keys()
            .filter(|(_, storage)| matches!(storage, Storage::KmsV2 { .. }))
            .map(|(resource, _)| resource.as_str())
            .collect();
        self.counts
            .iter()
            .filter(|((resource, storage), _)| {
                encrypted.contains(resource.as_str())
                    && !matches!(storage, Storage::KmsV2 { key_id: k, .. } if k == key_id)
            })
            .map(|(_, count)| count)
            .sum()
    }

    /// One line a (resource, storage) pair, then a total.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for ((resource, storage), count) in &self.counts {
            out.push_str(&format!(
                "{count:>9}  {:<24} {}\n",
                printable(resource),
                storage.describe()
            ));
        }
        let key_ids = self.key_ids();
        let kms: usize = key_ids.values().sum();
        out.push_str(&format!(
            "{:>9}  values; {kms} KMS v2 under {} key_id(s), {} otherwise\n",
            self.total(),
            key_ids.len(),
            self.total() - kms
        ));
        for (reason, count) in &self.stale {
            out.push_str(&format!("{count:>9}  values {}\n", reason.describe()));
        }
        out
    }

    /// The same as one JSON object: `{"values":N,"rows":[{"resource":…,
    /// "storage":"kms-v2"|"other-provider"|"malformed"|"unencrypted",
    /// "provider":…,"key_id":…,"values":N},…],"stale":[{"reason":
    /// "retired-generation"|"outside-membership"|"old-recovery-key",
    /// "generation":N|"name":HEX,"values":N},…]}`.
    pub fn to_json(&self) -> String {
        let mut out = format!("{{\"values\":{},\"rows\":[", self.total());
        for (i, ((resource, storage), count)) in self.counts.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"resource\":");
            push_json_string(&mut out, resource);
            out.push_str(",\"storage\":");
            match storage {
                Storage::KmsV2 { provider, key_id } => {
                    out.push_str("\"kms-v2\",\"provider\":");
                    push_json_string(&mut out, provider);
                    out.push_str(",\"key_id\":");
                    push_json_string(&mut out, key_id);
                }
                Storage::OtherProvider(name) => {
                    out.push_str("\"other-provider\",\"provider\":");
                    push_json_string(&mut out, name);
                }
                Storage::Malformed => out.push_str("\"malformed\""),
                Storage::Unencrypted => out.push_str("\"unencrypted\""),
            }
            out.push_str(&format!(",\"values\":{count}}}"));
        }
        out.push_str("],\"stale\":[");
        for (i, (reason, count)) in self.stale.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match reason {
                Stale::RetiredGeneration(n) => out.push_str(&format!(
                    "{{\"reason\":\"retired-generation\",\"generation\":{n}"
                )),
                Stale::OutsideMembership(name) => out.push_str(&format!(
                    "{{\"reason\":\"outside-membership\",\"name\":\"{name}\""
                )),
                Stale::OldRecoveryKey(name) => out.push_str(&format!(
                    "{{\"reason\":\"old-recovery-key\",\"name\":\"{name}\""
                )),
            }
            out.push_str(&format!(",\"values\":{count}}}"));
        }
        out.push_str("]}\n");
        out
    }
}

#[cfg(test)]
mod tests;

/// One line per KMS v2 value: its etcd key, its key_id and its envelope's
/// fingerprint (`sceau_format::envelope::fingerprint`, the `envelope=` of
/// sceau's call log), so that an auditor can tie a logged Decrypt to the
/// values it opened. With DEK reuse the apiserver stores one envelope for
/// many values; each of them lists the same fingerprint.
pub fn value_lines(values: &[StoredValue]) -> String {
    let mut out = String::new();
    for value in values {
        let Ok(Some(object)) = parse_stored_value(&value.value) else {
            continue;
        };
        out.push_str(&format!(
            "value {} key_id=\"{}\" envelope={}\n",
            printable(&String::from_utf8_lossy(&value.key)),
            printable(&object.key_id),
            sceau_format::envelope::fingerprint(&object.encrypted_dek_source)
        ));
    }
    out
}
