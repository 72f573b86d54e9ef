//! The unit tests of `etcd` (etcd.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use super::*;
use crate::json::Json;
use sceau_format::as_printed;
use sceau_format::key_id::hex;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/recovery");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn vectors() -> Json {
    json::parse(std::str::from_utf8(&fixture("vectors.json")).unwrap()).unwrap()
}

/// Checks `values` against the live keys the generator read back from
/// etcd itself (key, revisions, SHA-256 of the value).
fn assert_live(values: &[StoredValue], live: &[&Json]) {
    assert_eq!(values.len(), live.len());
    for (got, want) in values.iter().zip(live) {
        let key = want.get("key").unwrap().as_str().unwrap();
        assert_eq!(got.key, key.as_bytes());
        assert_eq!(
            got.mod_revision,
            want.get("mod_revision").unwrap().as_i64().unwrap(),
            "{key}"
        );
        assert_eq!(
            got.create_revision,
            want.get("create_revision").unwrap().as_i64().unwrap()
        );
        assert_eq!(got.version, want.get("version").unwrap().as_i64().unwrap());
        let sum = hex(&Sha256::digest(&got.value));
        assert_eq!(
            sum,
            want.get("value_sha256").unwrap().as_str().unwrap(),
            "{key}"
        );
    }
}

fn live_keys(v: &Json, prefix: &str) -> Vec<Json> {
    let Some(Json::Array(live)) = v.get("live") else {
        panic!("no live keys")
    };
    live.iter()
        .filter(|k| k.get("key").unwrap().as_str().unwrap().starts_with(prefix))
        .cloned()
        .collect()
}

#[test]
fn snapshot_from_etcd_3_7_lists_the_live_keys() {
    let v = vectors();
    let values = values_from_snapshot(&fixture("snapshot.db")).unwrap();
    let live = live_keys(&v, "/");
    assert_live(&values, &live.iter().collect::<Vec<_>>());
    // The overwritten Secret shows its second version only, the deleted
    // one not at all.
    let alpha = values
        .iter()
        .find(|s| s.key == b"/registry/secrets/default/alpha")
        .unwrap();
    assert_eq!((alpha.create_revision, alpha.version), (2, 2));
    let Some(Json::Array(deleted)) = v.get("deleted") else {
        panic!()
    };
    for key in deleted {
        assert!(
            !values
                .iter()
                .any(|s| s.key == key.as_str().unwrap().as_bytes())
        );
    }
}

#[test]
fn snapshot_without_trailer_reads_the_same() {
    let file = fixture("snapshot.db");
    let bare = values_from_snapshot(&file[..file.len() - 32]).unwrap();
    assert_eq!(bare, values_from_snapshot(&file).unwrap());
}

#[test]
fn snapshot_with_a_flipped_bit_is_refused() {
    let mut file = fixture("snapshot.db");
    let middle = file.len() / 2;
    file[middle] ^= 0x10;
    assert_eq!(
        values_from_snapshot(&file),
        Err(EtcdError::ChecksumMismatch)
    );
}

/// Bytes flipped all over a real database (no trailer to catch them):
/// every outcome is a result, never a panic or an endless walk.
#[test]
fn corrupt_databases_error_instead_of_panicking() {
    let file = fixture("snapshot.db");
    let bare = &file[..file.len() - 32];
    let mut errors = 0;
    for at in (0..bare.len()).step_by(31) {
        let mut corrupt = bare.to_vec();
        corrupt[at] ^= 0xff;
        errors += usize::from(values_from_snapshot(&corrupt).is_err());
    }
    assert!(errors > 0);
}

#[test]
fn non_database_input_is_refused() {
    assert_eq!(
        values_from_snapshot(&[0u8; 8192]),
        Err(EtcdError::Bolt(BoltError::NoValidMeta))
    );
    assert_eq!(
        values_from_snapshot(b"short"),
        Err(EtcdError::Bolt(BoltError::NoValidMeta))
    );
}

#[test]
fn etcdctl_json_lists_the_secrets() {
    let v = vectors();
    let text = String::from_utf8(fixture("etcdctl-get.json")).unwrap();
    let values = values_from_etcdctl_json(&text).unwrap();
    let live = live_keys(&v, "/registry/secrets");
    assert_live(&values, &live.iter().collect::<Vec<_>>());
}

#[test]
fn etcdctl_json_keeps_the_newest_of_repeated_keys() {
    let old = r#"{"kvs":[{"key":"L2E=","mod_revision":5,"value":"b2xk"}],"count":1}"#;
    let new = r#"{"kvs":[{"key":"L2E=","create_revision":4,"mod_revision":7,"version":2,"value":"bmV3"}]}"#;
    let empty = r#"{"header":{"cluster_id":11103263719474598048},"count":0}"#;
    let values = values_from_etcdctl_json(&format!("{new}\n{old}\n{empty}\n")).unwrap();
    assert_eq!(
        values,
        vec![StoredValue {
            key: b"/a".to_vec(),
            value: b"new".to_vec(),
            create_revision: 4,
            mod_revision: 7,
            version: 2,
        }]
    );
}

#[test]
fn etcdctl_json_of_the_wrong_shape_is_refused() {
    for bad in [
        "[]",
        r#"{"kvs":{}}"#,
        r#"{"kvs":[{"value":"eA=="}]}"#,
        r#"{"kvs":[{"key":"not base64!"}]}"#,
        r#"{"kvs":[{"key":"eA==","mod_revision":"5"}]}"#,
        r#"{"kvs":[{"key":"eA==","mod_revision":1.5}]}"#,
    ] {
        assert!(
            matches!(values_from_etcdctl_json(bad), Err(EtcdError::JsonShape(_))),
            "{bad}"
        );
    }
    assert!(matches!(
        values_from_etcdctl_json("{"),
        Err(EtcdError::Json(_))
    ));
}

/// A bad snapshot or JSON file is named in one clear line: the inner
/// error is part of the message, not also its source. Without this,
/// this fails with "etcd database: not a bbolt database (no valid meta
/// page): not a bbolt database (no valid meta page)".
#[test]
fn errors_name_their_cause_once() {
    let revision = [&2u64.to_be_bytes()[..], b"_", &0u64.to_be_bytes()].concat();
    let errors = [
        values_from_snapshot(&[0u8; 8192]).unwrap_err(),
        values_from_etcdctl_json("{").unwrap_err(),
        Latest::default().add(&revision, &[0x0a, 9]).unwrap_err(),
    ];
    for error in errors {
        let printed = as_printed(&error);
        assert_eq!(printed, error.to_string(), "{printed}");
    }
}

#[test]
fn revisions_parse_as_etcd_writes_them() {
    let mut key = [0u8; 18];
    key[7] = 3;
    key[8] = b'_';
    key[16] = 1;
    assert_eq!(parse_revision(&key[..17]), Some(((3, 1), false)));
    key[17] = b't';
    assert_eq!(parse_revision(&key), Some(((3, 1), true)));
    key[17] = b'x';
    assert_eq!(parse_revision(&key), None);
    key[8] = b'-';
    assert_eq!(parse_revision(&key[..17]), None);
    assert_eq!(parse_revision(b"short"), None);
}

#[test]
fn tombstone_hides_older_and_a_later_put_revives() {
    let kv = |rev: u8, value: &[u8]| {
        let mut m = vec![0x0a, 2, b'/', b'k', 0x18, rev, 0x2a, value.len() as u8];
        m.extend_from_slice(value);
        m
    };
    let rev = |main: u8, tomb: bool| {
        let mut k = vec![0, 0, 0, 0, 0, 0, 0, main, b'_', 0, 0, 0, 0, 0, 0, 0, 0];
        if tomb {
            k.push(b't');
        }
        k
    };
    let mut latest = Latest::default();
    latest.add(&rev(2, false), &kv(2, b"a")).unwrap();
    latest.add(&rev(3, true), &[0x0a, 2, b'/', b'k']).unwrap();
    assert!(Latest(latest.0.clone()).into_values().is_empty());
    latest.add(&rev(4, false), &kv(4, b"b")).unwrap();
    assert_eq!(latest.into_values()[0].value, b"b");

    let mut latest = Latest::default();
    let err = latest.add(&rev(5, false), &kv(4, b"x"));
    assert_eq!(
        err,
        Err(EtcdError::RevisionMismatch {
            main: 5,
            claimed: 4
        })
    );
}
