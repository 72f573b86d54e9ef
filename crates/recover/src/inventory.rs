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

use std::collections::BTreeMap;

use super::etcd::StoredValue;
use super::kubernetes::parse_stored_value;
use sceau_format::text::{printable, push_json_string};

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
        match parse_stored_value(value) {
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

/// The count of values by resource and storage.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Inventory {
    counts: BTreeMap<(String, Storage), usize>,
}

impl Inventory {
    /// Every value of `values`, counted.
    pub fn take(values: &[StoredValue]) -> Self {
        let mut counts = BTreeMap::new();
        for stored in values {
            *counts
                .entry((resource_of(&stored.key), Storage::of(&stored.value)))
                .or_insert(0) += 1;
        }
        Self { counts }
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
        out
    }

    /// The same as one JSON object: `{"values":N,"rows":[{"resource":…,
    /// "storage":"kms-v2"|"other-provider"|"malformed"|"unencrypted",
    /// "provider":…,"key_id":…,"values":N},…]}`.
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
        out.push_str("]}\n");
        out
    }
}

#[cfg(test)]
mod tests;
