//! `sceau-recover recover`'s readers of untrusted etcd data: the etcd snapshot
//! walker (`values_from_snapshot`, over `crates/recover/src/bbolt.rs`), etcdctl
//! JSON (`values_from_etcdctl_json`, over `crates/recover/src/json.rs`), the KMS v2
//! stored value (`parse_stored_value`, `decrypt_data`), the decrypted object
//! (`decode_object`, `describe_secret`, `Secret::to_json`) and the report
//! loop that ties them together (`report::open_seeds`, then
//! `report::recover_secrets`).
//!
//! Input: a mode byte (`sceau_fuzz::codec::recovery_mode`), then a snapshot
//! file, etcdctl JSON (read as lossy UTF-8), a u8-framed etcd key followed by
//! the value stored under it, or a decrypted object. Every value a snapshot
//! or JSON input yields also goes through the stored-value checks. Values
//! decrypt with the DEK sources of `tests/fixtures/recovery/vectors.json`.
//!
//! Invariants, besides "no panic":
//! - listed values are sorted by key, each key once; a snapshot's values,
//!   written as etcdctl JSON, read back identically (two parsers agree), as
//!   do JSON values written again; a snapshot reads the same with a valid
//!   SHA-256 trailer appended;
//! - a stored value is KMS v2 exactly when it has the prefix; an accepted
//!   one is within the apiserver's limits and, encoded again, parses to the
//!   same object;
//! - decryption succeeds only with the etcd key it was stored under, yields
//!   exactly the ciphertext less nonce, tag (and HKDF info), and fails with
//!   a DEK source that differs in one bit;
//! - `describe_secret` agrees with `decode_object`; a Secret's manifest is
//!   one JSON object holding exactly its name, namespace, type, immutable,
//!   labels, annotations, data (base64) and stringData;
//! - `recover_secrets` accounts for every value, and neither its log lines
//!   nor any error message has control characters: they reach the
//!   operator's terminal.
#![no_main]
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::wire::sha256_name;
use sceau_fuzz::codec::{self, Cursor, RecoveryMode, recovery_mode};
use sceau_fuzz::pinned;
use sceau_recover::etcd::{StoredValue, values_from_etcdctl_json, values_from_snapshot};
use sceau_recover::json::{self, Json};
use sceau_recover::kubernetes::{
    DekSourceType, KMS_V2_PREFIX, KmsV2Object, KubeObject, KubernetesError, PROTOBUF_MAGIC, Secret,
    decode_object, decrypt_data, describe_secret, parse_stored_value,
};
use sceau_recover::report::{open_seeds, recover_secrets};

struct Fixture {
    identity: RecoveryIdentity,
    seed: Vec<u8>,
    aes_key: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture {
        identity: pinned::identity(),
        seed: codec::unbase64(pinned::VECTOR_SEED).expect("base64"),
        aes_key: codec::unbase64(pinned::VECTOR_AES_KEY).expect("base64"),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, payload)) = data.split_first() else {
        return;
    };
    match recovery_mode(mode) {
        RecoveryMode::Snapshot => snapshot(payload),
        RecoveryMode::EtcdctlJson => etcdctl(&String::from_utf8_lossy(payload)),
        RecoveryMode::StoredValue => {
            let mut c = Cursor::new(payload);
            let key = c.field8().unwrap_or_default();
            let value = c.rest();
            stored(key, value);
            recover(&[StoredValue {
                key: key.to_vec(),
                value: value.to_vec(),
                create_revision: 1,
                mod_revision: 1,
                version: 1,
            }]);
        }
        RecoveryMode::Plaintext => plaintext(payload),
    }
});

fn snapshot(file: &[u8]) {
    let result = values_from_snapshot(file);
    if !file.is_empty() && file.len().is_multiple_of(512) {
        let with_trailer = [file, &sha256_name(file)[2..]].concat();
        assert_eq!(values_from_snapshot(&with_trailer), result);
    }
    let values = match result {
        Ok(values) => values,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    check_listed(&values);
    // etcdctl prints every value with a key; the JSON reader refuses an
    // element without one.
    let json = codec::etcdctl_json("", &values);
    match values_from_etcdctl_json(&json) {
        Ok(again) => assert_eq!(again, values, "snapshot and JSON readers disagree"),
        Err(error) => assert!(values.iter().any(|v| v.key.is_empty()), "{error}"),
    }
    each_value(&values);
}

fn etcdctl(text: &str) {
    let values = match values_from_etcdctl_json(text) {
        Ok(values) => values,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    check_listed(&values);
    assert!(values.iter().all(|v| !v.key.is_empty()));
    let again = values_from_etcdctl_json(&codec::etcdctl_json("", &values));
    assert_eq!(
        again.as_ref(),
        Ok(&values),
        "JSON values written again differ"
    );
    each_value(&values);
}

fn check_listed(values: &[StoredValue]) {
    assert!(values.windows(2).all(|w| w[0].key < w[1].key));
}

fn each_value(values: &[StoredValue]) {
    for value in values {
        stored(&value.key, &value.value);
    }
    recover(values);
}

/// The whole `sceau-recover recover` loop, with the pinned identity:
/// without member files (every Secret printed is named unverified), and
/// with the pinned members (none is, and no more are printed).
fn recover(values: &[StoredValue]) {
    let unchecked = recover_with(values, None);
    assert_eq!(unchecked.unverified, unchecked.printed);
    let known = sceau_fuzz::pinned::known_members();
    let checked = recover_with(values, Some(&known));
    assert_eq!(checked.unverified, 0);
    assert!(checked.printed <= unchecked.printed);
}

fn recover_with(
    values: &[StoredValue],
    known: Option<&sceau_format::members::KnownMembers>,
) -> sceau_recover::report::Summary {
    let (mut out, mut log) = (Vec::new(), Vec::new());
    let seeds = open_seeds(&fixture().identity, known, values);
    let summary =
        recover_secrets(&seeds, values, &mut out, &mut log).expect("writing to memory succeeds");
    assert_eq!(
        summary.printed + summary.skipped + summary.failed,
        values.len()
    );
    let log = String::from_utf8(log).expect("log lines are UTF-8");
    assert!(log.is_empty() || log.ends_with('\n'));
    for line in log.lines() {
        assert_no_control(line);
    }
    assert!(String::from_utf8(out).is_ok(), "manifests are UTF-8");
    summary
}

fn stored(etcd_key: &[u8], value: &[u8]) {
    let object = match parse_stored_value(value) {
        Ok(None) => return assert!(!value.starts_with(KMS_V2_PREFIX)),
        Ok(Some(object)) => object,
        Err(error) => {
            assert!(value.starts_with(KMS_V2_PREFIX));
            return assert_no_control(&error.to_string());
        }
    };
    let prefix = [KMS_V2_PREFIX, object.provider.as_bytes(), b":"].concat();
    assert!(value.starts_with(&prefix));
    assert!(!object.provider.contains(':'));
    assert!(!object.encrypted_data.is_empty());
    assert!((1..=1024).contains(&object.encrypted_dek_source.len()));
    assert!((1..=1024).contains(&object.key_id.len()));
    let annotations: usize = object
        .annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    assert!(annotations <= 32 * 1024);
    let again = parse_stored_value(&codec::stored_value(&object));
    assert_eq!(again, Ok(Some(object.clone())), "re-encoded value differs");
    decrypt(&object, etcd_key);
}

fn decrypt(object: &KmsV2Object, etcd_key: &[u8]) {
    let f = fixture();
    let (source, info) = match object.dek_source_type {
        DekSourceType::HkdfSha256XnonceAesGcmSeed => (&f.seed, 32),
        DekSourceType::AesGcmKey => (&f.aes_key, 0),
    };
    let plain = match decrypt_data(object, source, etcd_key) {
        Ok(plain) => plain,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    assert_eq!(plain.len() + info + 12 + 16, object.encrypted_data.len());
    let moved = [etcd_key, b"/"].concat();
    assert_eq!(
        decrypt_data(object, source, &moved).err(),
        Some(KubernetesError::Decrypt),
        "decrypted under another etcd key"
    );
    let mut wrong = source.clone();
    wrong[0] ^= 1;
    assert_eq!(
        decrypt_data(object, &wrong, etcd_key).err(),
        Some(KubernetesError::Decrypt),
        "decrypted with another DEK source"
    );
    plaintext(&plain);
}

fn plaintext(bytes: &[u8]) {
    let described = describe_secret(bytes);
    match decode_object(bytes) {
        Ok(KubeObject::Secret(secret)) => {
            assert!(bytes.starts_with(PROTOBUF_MAGIC));
            let manifest = described.expect("a Secret is described");
            assert_eq!(*manifest, *secret.to_json());
            check_manifest(&manifest, &secret);
        }
        Ok(KubeObject::Json(text)) => {
            assert!(!bytes.starts_with(PROTOBUF_MAGIC));
            let stored = std::str::from_utf8(bytes).expect("JSON objects are UTF-8");
            assert_eq!(*text, stored.trim_end());
            assert_eq!(described.ok(), Some(text));
        }
        Ok(KubeObject::Other { api_version, kind }) => {
            assert!(bytes.starts_with(PROTOBUF_MAGIC));
            assert_ne!((api_version.as_str(), kind.as_str()), ("v1", "Secret"));
            assert_eq!(
                described.err(),
                Some(KubernetesError::NotASecret { api_version, kind })
            );
        }
        Err(error) => {
            assert_eq!(described.err(), Some(error.clone()));
            assert_no_control(&error.to_string());
        }
    }
}

/// The manifest is one JSON object with exactly the Secret's contents.
fn check_manifest(manifest: &str, secret: &Secret) {
    let mut values = json::parse_stream(manifest).expect("the manifest is JSON");
    assert_eq!(values.len(), 1);
    let doc = values.remove(0);
    let mut expected = vec!["apiVersion", "kind", "metadata"];
    let optional = [
        ("type", !secret.secret_type.is_empty()),
        ("immutable", secret.immutable.is_some()),
        ("data", !secret.data.is_empty()),
        ("stringData", !secret.string_data.is_empty()),
    ];
    expected.extend(
        optional
            .iter()
            .filter(|(_, present)| *present)
            .map(|(n, _)| *n),
    );
    assert_eq!(names(&doc), expected);
    assert_eq!(string(doc.get("apiVersion")), Some("v1"));
    assert_eq!(string(doc.get("kind")), Some("Secret"));
    if !secret.secret_type.is_empty() {
        assert_eq!(string(doc.get("type")), Some(secret.secret_type.as_str()));
    }
    if let Some(immutable) = secret.immutable {
        assert_eq!(doc.get("immutable"), Some(&Json::Bool(immutable)));
    }
    let data: BTreeMap<String, Vec<u8>> = strings(doc.get("data"))
        .into_iter()
        .map(|(k, v)| (k, codec::unbase64(&v).expect("data is base64")))
        .collect();
    let want: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .map(|(k, v)| (k.clone(), v.to_vec()))
        .collect();
    assert_eq!(data, want);
    let string_data: BTreeMap<String, String> = secret
        .string_data
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(strings(doc.get("stringData")), string_data);

    let meta = doc.get("metadata").expect("metadata");
    let mut expected = vec!["name"];
    let optional = [
        ("namespace", !secret.namespace.is_empty()),
        ("labels", !secret.labels.is_empty()),
        ("annotations", !secret.annotations.is_empty()),
    ];
    expected.extend(
        optional
            .iter()
            .filter(|(_, present)| *present)
            .map(|(n, _)| *n),
    );
    assert_eq!(names(meta), expected);
    assert_eq!(string(meta.get("name")), Some(secret.name.as_str()));
    if !secret.namespace.is_empty() {
        assert_eq!(
            string(meta.get("namespace")),
            Some(secret.namespace.as_str())
        );
    }
    assert_eq!(strings(meta.get("labels")), secret.labels);
    assert_eq!(strings(meta.get("annotations")), secret.annotations);
}

fn names(object: &Json) -> Vec<&str> {
    match object {
        Json::Object(members) => members.iter().map(|(n, _)| n.as_str()).collect(),
        other => panic!("not an object: {other:?}"),
    }
}

fn string(value: Option<&Json>) -> Option<&str> {
    match value {
        Some(Json::String(s)) => Some(s),
        _ => None,
    }
}

/// A JSON object of strings (absent: empty).
fn strings(value: Option<&Json>) -> BTreeMap<String, String> {
    match value {
        None => BTreeMap::new(),
        Some(Json::Object(members)) => members
            .iter()
            .map(|(k, v)| (k.clone(), string(Some(v)).expect("a string").to_owned()))
            .collect(),
        Some(other) => panic!("not an object: {other:?}"),
    }
}

fn assert_no_control(message: &str) {
    assert!(!message.chars().any(char::is_control), "{message:?}");
}
