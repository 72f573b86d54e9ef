//! The values a cluster stored in etcd, read offline from either of two
//! inputs:
//!
//! * **an etcd snapshot**: the file `etcdctl snapshot save FILE` writes, or a
//!   stopped member's `member/snap/db`. Both are bbolt databases; the snapshot
//!   also carries a 32-byte SHA-256 trailer of the database
//!   (etcdserver/api/v3rpc/maintenance.go `Snapshot`, client/v3/snapshot
//!   `hasChecksum`: size % 512 == 32), which is verified when present.
//! * **a set of etcd values**: what `etcdctl get --prefix /registry/secrets
//!   -w json` prints (one JSON object per command, `kvs` holding base64 `key`
//!   and `value` and the revisions, as encoding/json prints etcd's
//!   `RangeResponse`); several such outputs appended to one file are read in
//!   turn.
//!
//! # Why a real bbolt walk rather than a scan for records
//!
//! Scanning the raw file for protobuf `KeyValue`s that look right would also
//! find stale copies on free pages and would miss values that bbolt split
//! across overflow pages only by luck of the layout; and it cannot tell a
//! deleted key, because etcd's tombstone is told by its bucket key, not its
//! value. The walk reads only what the current meta page reaches (the
//! committed state), follows branch, leaf, overflow and inline pages, and is
//! short (`bbolt.rs`); it was checked against a snapshot written by etcd
//! v3.7.0 through `snapshot.SaveWithVersion` (`tests/recovery-vectors`).
//!
//! # What a value is
//!
//! etcd's `key` bucket (server/storage/schema/bucket.go) maps a revision to
//! an `mvccpb.KeyValue` (api/v3/mvccpb/kv.proto: key=1, create_revision=2,
//! mod_revision=3, version=4, value=5, lease=6). The bucket key is the
//! revision as `main` (8 bytes big-endian), `_`, `sub` (8 bytes big-endian),
//! plus a trailing `t` for a deletion (server/storage/mvcc/revision.go). Every
//! revision not yet compacted is kept; for each etcd key the entry with the
//! highest revision wins, and a key whose latest entry is a tombstone is left
//! out.
//!
//! Limits: the bbolt file must be little-endian (every platform etcd supports
//! but s390x); the whole file is held in memory by the caller; values are
//! returned as stored (for Kubernetes, mostly ciphertext), not zeroized.

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::bbolt::{BoltError, Db};
use super::json::{self, Json, JsonError};
use super::protowire::{Reader, WireError};

/// One live etcd key and its latest value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error(
        "the snapshot's SHA-256 trailer does not match its contents: the file is truncated or altered"
    )]
    ChecksumMismatch,
    #[error("etcd database: {0}")]
    Bolt(BoltError),
    #[error("the database has no `key` bucket: not an etcd v3 database")]
    NoKeyBucket,
    #[error("malformed revision {0:02x?} in the key bucket")]
    BadRevision(Vec<u8>),
    #[error("value at revision {main}.{sub}: {error}")]
    KeyValue {
        main: i64,
        sub: i64,
        error: WireError,
    },
    #[error("value at revision {main} claims mod_revision {claimed}")]
    RevisionMismatch { main: i64, claimed: i64 },
    #[error("etcdctl JSON: {0}")]
    Json(JsonError),
    #[error("etcdctl JSON: {0}")]
    JsonShape(String),
}

sceau_format::inner_errors!(EtcdError {
    Bolt(BoltError),
    Json(JsonError),
});

/// The live values of an etcd snapshot (or `member/snap/db`), sorted by key.
pub fn values_from_snapshot(file: &[u8]) -> Result<Vec<StoredValue>, EtcdError> {
    let db = Db::open(strip_checksum(file)?)?;
    let bucket = db
        .bucket(db.root(), b"key")?
        .ok_or(EtcdError::NoKeyBucket)?;
    let mut latest = Latest::default();
    let mut failure = None;
    db.for_each(bucket, &mut |entry| {
        if failure.is_none()
            && !entry.is_bucket
            && let Err(e) = latest.add(entry.key, entry.value)
        {
            failure = Some(e);
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(latest.into_values()),
    }
}

/// Verifies and removes the SHA-256 trailer that `etcdctl snapshot save`
/// leaves; a file without one (a member's own `db`, always a whole number of
/// pages) is returned as it is.
fn strip_checksum(file: &[u8]) -> Result<&[u8], EtcdError> {
    const SUM: usize = 32;
    if file.len() % 512 != SUM {
        return Ok(file);
    }
    let (db, trailer) = file.split_at(file.len() - SUM);
    if Sha256::digest(db).as_slice() != trailer {
        return Err(EtcdError::ChecksumMismatch);
    }
    Ok(db)
}

/// A revision from the key bucket: (main, sub) and whether it is a deletion.
fn parse_revision(bucket_key: &[u8]) -> Option<(Revision, bool)> {
    let tombstone = match bucket_key.len() {
        17 => false,
        18 if bucket_key[17] == b't' => true,
        _ => return None,
    };
    if bucket_key[8] != b'_' {
        return None;
    }
    let main = i64::try_from(u64::from_be_bytes(bucket_key[..8].try_into().ok()?)).ok()?;
    let sub = i64::try_from(u64::from_be_bytes(bucket_key[9..17].try_into().ok()?)).ok()?;
    Some(((main, sub), tombstone))
}

fn parse_key_value(bytes: &[u8]) -> Result<StoredValue, WireError> {
    let mut kv = StoredValue {
        key: Vec::new(),
        value: Vec::new(),
        create_revision: 0,
        mod_revision: 0,
        version: 0,
    };
    for field in Reader::new(bytes) {
        let field = field?;
        match field.number {
            1 => kv.key = field.bytes()?.to_vec(),
            2 => kv.create_revision = field.int64()?,
            3 => kv.mod_revision = field.int64()?,
            4 => kv.version = field.int64()?,
            5 => kv.value = field.bytes()?.to_vec(),
            _ => {}
        }
    }
    Ok(kv)
}

/// An etcd revision: (main, sub), ordered as etcd orders them.
type Revision = (i64, i64);

/// The newest entry seen for each etcd key (by revision); `None` once
/// deleted.
#[derive(Default)]
struct Latest(BTreeMap<Vec<u8>, (Revision, Option<StoredValue>)>);

impl Latest {
    fn add(&mut self, bucket_key: &[u8], value: &[u8]) -> Result<(), EtcdError> {
        let (revision, tombstone) = parse_revision(bucket_key)
            .ok_or_else(|| EtcdError::BadRevision(bucket_key.to_vec()))?;
        let (main, sub) = revision;
        let kv =
            parse_key_value(value).map_err(|error| EtcdError::KeyValue { main, sub, error })?;
        if !tombstone && kv.mod_revision != main {
            return Err(EtcdError::RevisionMismatch {
                main,
                claimed: kv.mod_revision,
            });
        }
        if self
            .0
            .get(&kv.key)
            .is_some_and(|(seen, _)| *seen > revision)
        {
            return Ok(());
        }
        let key = kv.key.clone();
        self.0.insert(key, (revision, (!tombstone).then_some(kv)));
        Ok(())
    }

    fn into_values(self) -> Vec<StoredValue> {
        self.0.into_values().filter_map(|(_, kv)| kv).collect()
    }
}

/// The values in the output of one or more `etcdctl get ... -w json`
/// commands, sorted by key; a key listed more than once keeps its highest
/// `mod_revision`. A response cut short by `--limit` (`"more": true`) is read
/// as far as it goes.
pub fn values_from_etcdctl_json(text: &str) -> Result<Vec<StoredValue>, EtcdError> {
    let mut by_key: BTreeMap<Vec<u8>, StoredValue> = BTreeMap::new();
    for response in json::parse_stream(text)? {
        if !matches!(response, Json::Object(_)) {
            return Err(shape("expected a JSON object per response"));
        }
        let kvs = match response.get("kvs") {
            // encoding/json omits an empty `kvs` (omitempty).
            None | Some(Json::Null) => continue,
            Some(Json::Array(kvs)) => kvs,
            Some(_) => return Err(shape("`kvs` is not an array")),
        };
        for kv in kvs {
            let kv = json_key_value(kv)?;
            if by_key
                .get(&kv.key)
                .is_none_or(|old| old.mod_revision <= kv.mod_revision)
            {
                by_key.insert(kv.key.clone(), kv);
            }
        }
    }
    Ok(by_key.into_values().collect())
}

fn shape(what: &str) -> EtcdError {
    EtcdError::JsonShape(what.to_owned())
}

/// One element of `kvs`: encoding/json's form of `mvccpb.KeyValue`, bytes in
/// standard padded base64 and zero fields omitted.
fn json_key_value(kv: &Json) -> Result<StoredValue, EtcdError> {
    let bytes = |name: &str| -> Result<Vec<u8>, EtcdError> {
        match kv.get(name) {
            None | Some(Json::Null) => Ok(Vec::new()),
            Some(Json::String(text)) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| shape(&format!("`{name}` is not base64: {e}"))),
            Some(_) => Err(shape(&format!("`{name}` is not a string"))),
        }
    };
    let int = |name: &str| -> Result<i64, EtcdError> {
        match kv.get(name) {
            None => Ok(0),
            Some(n) => n
                .as_i64()
                .ok_or_else(|| shape(&format!("`{name}` is not an int64"))),
        }
    };
    if !matches!(kv, Json::Object(_)) {
        return Err(shape("a `kvs` element is not an object"));
    }
    let key = bytes("key")?;
    if key.is_empty() {
        return Err(shape("a `kvs` element has no key"));
    }
    Ok(StoredValue {
        key,
        value: bytes("value")?,
        create_revision: int("create_revision")?,
        mod_revision: int("mod_revision")?,
        version: int("version")?,
    })
}

#[cfg(test)]
mod tests;
