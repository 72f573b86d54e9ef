//! The inventory's counts, resources and verdicts, over values made in the
//! test (the snapshot read itself is `etcd`'s and tested there).

use std::collections::HashMap;

use super::*;

/// A KMS v2 value as the apiserver writes it: provider `sceau`, this
/// key_id, and placeholder data and DEK source.
fn kms(key_id: &str) -> Vec<u8> {
    let mut out = b"k8s:enc:kms:v2:sceau:".to_vec();
    for (tag, value) in [
        (0x0a, &b"data"[..]),
        (0x12, key_id.as_bytes()),
        (0x1a, &b"dek"[..]),
    ] {
        out.push(tag);
        out.push(u8::try_from(value.len()).unwrap());
        out.extend_from_slice(value);
    }
    out
}

fn stored(key: &str, value: &[u8]) -> StoredValue {
    StoredValue {
        key: key.as_bytes().to_vec(),
        value: value.to_vec(),
        create_revision: 1,
        mod_revision: 1,
        version: 1,
    }
}

#[test]
fn resources_come_from_the_etcd_key() {
    assert_eq!(resource_of(b"/registry/secrets/default/a"), "secrets");
    assert_eq!(resource_of(b"/registry/namespaces/default"), "namespaces");
    assert_eq!(
        resource_of(b"/registry/apiregistration.k8s.io/apiservices/v1."),
        "apiregistration.k8s.io/apiservices"
    );
    assert_eq!(resource_of(b"/other/thing"), "(outside /registry)");
}

#[test]
fn values_are_told_apart_by_how_they_are_stored() {
    assert_eq!(
        Storage::of(&kms("sceau-1")),
        Storage::KmsV2 {
            provider: "sceau".into(),
            key_id: "sceau-1".into()
        }
    );
    assert_eq!(
        Storage::of(b"k8s:enc:aescbc:v1:key1:xxxx"),
        Storage::OtherProvider("aescbc".into())
    );
    assert_eq!(
        Storage::of(b"k8s:enc:kms:v2:sceau:\x0a\x05ab"),
        Storage::Malformed
    );
    assert_eq!(Storage::of(b"k8s\x00\x0a\x0c"), Storage::Unencrypted);
}

/// A rewrite is finished for a key_id when every value of every resource
/// that has KMS v2 values is a KMS v2 value under it; a resource with none
/// (configmaps here) is outside the encryption configuration.
#[test]
fn a_rewrite_is_finished_only_when_no_encrypted_resource_holds_anything_else() {
    let mut values = vec![
        stored("/registry/secrets/a/one", &kms("sceau-new")),
        stored("/registry/secrets/a/two", &kms("sceau-new")),
        stored("/registry/configmaps/a/c", b"k8s\x00plain"),
    ];
    let done = Inventory::take(&values, &Current::default());
    assert_eq!(done.total(), 3);
    assert_eq!(done.not_under("sceau-new"), 0);
    assert_eq!(done.not_under("sceau-other"), 2);

    values.push(stored("/registry/secrets/a/old", &kms("sceau-old")));
    values.push(stored("/registry/secrets/a/clear", b"k8s\x00plain"));
    let pending = Inventory::take(&values, &Current::default());
    assert_eq!(pending.not_under("sceau-new"), 2);
    assert_eq!(
        pending.key_ids().into_iter().collect::<Vec<_>>(),
        [("sceau-new", 2), ("sceau-old", 1)]
    );
    let text = pending.to_text();
    assert!(
        text.contains("        2  secrets                  kms-v2 sceau sceau-new"),
        "{text}"
    );
    assert!(
        text.contains("        1  secrets                  unencrypted"),
        "{text}"
    );
    assert!(
        text.contains("5  values; 3 KMS v2 under 2 key_id(s), 2 otherwise"),
        "{text}"
    );
    let json = pending.to_json();
    let parsed = crate::json::parse(&json).expect("the JSON report parses");
    assert_eq!(parsed.get("values").and_then(|v| v.as_i64()), Some(5));
    assert!(json.contains(
        "{\"resource\":\"secrets\",\"storage\":\"kms-v2\",\"provider\":\"sceau\",\"key_id\":\"sceau-old\",\"values\":1}"
    ), "{json}");
}

/// Names from etcd keys reach a terminal and a JSON reader escaped.
#[test]
fn hostile_names_are_escaped() {
    let values = [stored("/registry/se\x1b[2Jcrets/a/b", b"x")];
    let inventory = Inventory::take(&values, &Current::default());
    assert!(!inventory.to_text().contains('\x1b'));
    let json = inventory.to_json();
    assert!(json.contains("se\\u001b[2Jcrets"), "{json}");
    crate::json::parse(&json).expect("still JSON");
}

/// A KMS v2 value whose DEK source is `ciphertext` with `annotations`, as
/// the apiserver stores what the plugin returned.
fn kms_with(key_id: &str, ciphertext: &[u8], annotations: &HashMap<String, Vec<u8>>) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
        out.push(tag);
        let mut len = value.len();
        while len >= 0x80 {
            out.push(u8::try_from(len & 0x7f).unwrap() | 0x80);
            len >>= 7;
        }
        out.push(u8::try_from(len).unwrap());
        out.extend_from_slice(value);
    }
    let mut out = b"k8s:enc:kms:v2:sceau:".to_vec();
    field(&mut out, 0x0a, b"data");
    field(&mut out, 0x12, key_id.as_bytes());
    field(&mut out, 0x1a, ciphertext);
    for (key, value) in annotations {
        let mut entry = Vec::new();
        field(&mut entry, 0x0a, key.as_bytes());
        field(&mut entry, 0x12, value);
        field(&mut out, 0x22, &entry);
    }
    out
}

/// A real cluster envelope for members `a` and `b` and recovery key 1, and
/// the judgement of it against each way the configuration moves on.
#[test]
fn envelopes_naming_keys_the_configuration_no_longer_holds_are_counted() {
    use sceau_format::members::{Member, Membership};
    use sceau_format::signing_key::SoftwareSigner;
    use sceau_format::storage_key::software_storage_key;

    let member = |n: u8| Member {
        srk: software_storage_key(&[n; 32]),
        signing: SoftwareSigner::from_bytes(&[n + 0x40; 32]).public(),
    };
    let (a, b, c) = (member(1), member(2), member(3));
    let (recovery_1, recovery_2) = (
        software_storage_key(&[9; 32]),
        software_storage_key(&[10; 32]),
    );
    let membership = Membership::from_keys(
        a.clone(),
        vec![a.clone(), b.clone()],
        Some(recovery_1.clone()),
    )
    .unwrap();
    let to_sign = membership
        .seal(b"a DEK seed of thirty-two bytes!!")
        .unwrap();
    let signature = SoftwareSigner::from_bytes(&[0x41; 32]).sign(to_sign.digest());
    let encoded = to_sign.finish(&signature);
    let key_id = membership.key_id().to_string();
    let values: Vec<StoredValue> = (0..3)
        .map(|i| {
            stored(
                &format!("/registry/secrets/a/s{i}"),
                &kms_with(&key_id, &encoded.ciphertext, &encoded.annotations),
            )
        })
        .collect();
    let names = |members: &[&Member]| Some(members.iter().map(|m| *m.srk.name()).collect());

    let today = Current {
        members: names(&[&a, &b]),
        recovery: Some(*recovery_1.name()),
        ..Current::default()
    };
    assert!(Inventory::take(&values, &today).stale().is_empty());

    let b_removed = Current {
        members: names(&[&a, &c]),
        ..today.clone()
    };
    let inventory = Inventory::take(&values, &b_removed);
    let b_name = sceau_format::key_id::hex(b.srk.name());
    assert_eq!(
        inventory.stale().iter().collect::<Vec<_>>(),
        [(&Stale::OutsideMembership(b_name.clone()), &3)]
    );
    let text = inventory.to_text();
    assert!(
        text.contains(&format!(
            "        3  values name member key {b_name}, in no current member file"
        )),
        "{text}"
    );
    crate::json::parse(&inventory.to_json()).expect("the JSON report parses");

    // b's key was its generation 1 and was retired: named as such.
    let b_retired = Current {
        retired: [(1, b.srk.name().to_vec())].into(),
        ..b_removed.clone()
    };
    assert_eq!(
        Inventory::take(&values, &b_retired)
            .stale()
            .keys()
            .collect::<Vec<_>>(),
        [&Stale::RetiredGeneration(1)]
    );

    let recovery_rotated = Current {
        recovery: Some(*recovery_2.name()),
        ..today
    };
    let recovery_1_name = sceau_format::key_id::hex(recovery_1.name());
    assert_eq!(
        Inventory::take(&values, &recovery_rotated)
            .stale()
            .keys()
            .collect::<Vec<_>>(),
        [&Stale::OldRecoveryKey(recovery_1_name)]
    );
}

/// A single node's key_id names its generation: with the ledger, values
/// under a retired one are counted, and the others are not.
#[test]
fn single_node_values_under_a_retired_generation_are_counted() {
    let values = [
        stored(
            "/registry/secrets/a/old",
            &kms("sceau-1.4-0123456789abcdef"),
        ),
        stored(
            "/registry/secrets/a/new",
            &kms("sceau-2.5-0123456789abcdef"),
        ),
    ];
    let current = Current {
        retired: [(1, vec![0; 34])].into(),
        ..Current::default()
    };
    let inventory = Inventory::take(&values, &current);
    assert_eq!(
        inventory.stale().iter().collect::<Vec<_>>(),
        [(&Stale::RetiredGeneration(1), &1)]
    );
    assert!(
        inventory
            .to_text()
            .contains("        1  values name retired generation 1\n")
    );
    assert!(
        inventory.to_json().contains(
            "\"stale\":[{\"reason\":\"retired-generation\",\"generation\":1,\"values\":1}]"
        )
    );
}

/// `--list-values`: each KMS v2 value with the fingerprint of the envelope
/// it stores, the same function the daemon's call log uses; other values
/// are left out. Two values under one DEK seed share a fingerprint.
#[test]
fn each_kms_value_is_listed_with_its_envelopes_fingerprint() {
    let none = HashMap::new();
    let values = [
        stored(
            "/registry/secrets/a/one",
            &kms_with("k1", b"envelope-1", &none),
        ),
        stored(
            "/registry/secrets/a/two",
            &kms_with("k1", b"envelope-1", &none),
        ),
        stored(
            "/registry/secrets/b/three",
            &kms_with("k2\n", b"envelope-2", &none),
        ),
        stored("/registry/secrets/b/plain", b"k8s\0plain"),
    ];
    let listed = super::value_lines(&values);
    let one = sceau_format::envelope::fingerprint(b"envelope-1");
    let two = sceau_format::envelope::fingerprint(b"envelope-2");
    assert_eq!(
        listed,
        format!(
            "value /registry/secrets/a/one key_id=\"k1\" envelope={one}\n\
             value /registry/secrets/a/two key_id=\"k1\" envelope={one}\n\
             value /registry/secrets/b/three key_id=\"k2\\n\" envelope={two}\n"
        )
    );
    assert_eq!(one.len(), 16);
}
