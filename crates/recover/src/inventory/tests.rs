//! The inventory's counts, resources and verdicts, over values made in the
//! test (the snapshot read itself is `etcd`'s and tested there).

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
    let done = Inventory::take(&values);
    assert_eq!(done.total(), 3);
    assert_eq!(done.not_under("sceau-new"), 0);
    assert_eq!(done.not_under("sceau-other"), 2);

    values.push(stored("/registry/secrets/a/old", &kms("sceau-old")));
    values.push(stored("/registry/secrets/a/clear", b"k8s\x00plain"));
    let pending = Inventory::take(&values);
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
    let inventory = Inventory::take(&values);
    assert!(!inventory.to_text().contains('\x1b'));
    let json = inventory.to_json();
    assert!(json.contains("se\\u001b[2Jcrets"), "{json}");
    crate::json::parse(&json).expect("still JSON");
}
