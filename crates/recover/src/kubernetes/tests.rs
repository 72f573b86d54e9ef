//! Tests against vectors written by k8s.io/apiserver v0.37.2 itself
//! (tests/recovery-vectors → tests/fixtures/recovery/vectors.json).

use super::*;
use crate::etcd;
use crate::json::{self, Json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/recovery");

fn b64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

struct Vector {
    etcd_key: String,
    stored: Vec<u8>,
    dek_source_type: i64,
    media_type: String,
    plaintext: Vec<u8>,
    expect: Json,
}

struct Vectors {
    seed: Vec<u8>,
    aes_key: Vec<u8>,
    objects: Vec<Vector>,
}

impl Vectors {
    fn load() -> Self {
        let text = std::fs::read_to_string(format!("{FIXTURES}/vectors.json")).unwrap();
        let v = json::parse(&text).unwrap();
        let s = |j: &Json, name: &str| j.get(name).unwrap().as_str().unwrap().to_owned();
        let Some(Json::Array(objects)) = v.get("objects") else {
            panic!("objects")
        };
        let objects = objects
            .iter()
            .map(|o| Vector {
                etcd_key: s(o, "etcd_key"),
                stored: b64(&s(o, "stored")),
                dek_source_type: o.get("dek_source_type").unwrap().as_i64().unwrap(),
                media_type: s(o, "media_type"),
                plaintext: b64(&s(o, "plaintext")),
                expect: o.get("expect").unwrap().clone(),
            })
            .collect();
        Self {
            seed: b64(&s(&v, "seed")),
            aes_key: b64(&s(&v, "aes_gcm_key")),
            objects,
        }
    }

    fn dek_source(&self, object: &KmsV2Object) -> &[u8] {
        match object.dek_source_type {
            DekSourceType::HkdfSha256XnonceAesGcmSeed => &self.seed,
            DekSourceType::AesGcmKey => &self.aes_key,
        }
    }

    fn find(&self, etcd_key: &str) -> &Vector {
        self.objects
            .iter()
            .find(|o| o.etcd_key == etcd_key)
            .unwrap()
    }
}

fn parsed(vector: &Vector) -> KmsV2Object {
    parse_stored_value(&vector.stored)
        .unwrap()
        .expect("a KMS v2 value")
}

/// Compares a decoded Secret with the generator's expectation.
fn assert_secret(secret: &Secret, expect: &Json) {
    let s = |name: &str| expect.get(name).unwrap().as_str().unwrap();
    assert_eq!(secret.namespace, s("namespace"));
    assert_eq!(secret.name, s("name"));
    assert_eq!(secret.uid, s("uid"));
    assert_eq!(secret.secret_type, s("type"));
    assert_eq!(
        secret.immutable.unwrap_or(false),
        expect.get("immutable") == Some(&Json::Bool(true))
    );
    let strings = |name: &str| -> BTreeMap<String, String> {
        match expect.get(name) {
            Some(Json::Object(m)) => m
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect(),
            _ => BTreeMap::new(),
        }
    };
    assert_eq!(secret.labels, strings("labels"));
    assert_eq!(secret.annotations, strings("annotations"));
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .map(|(k, v)| (k.clone(), v.to_vec()))
        .collect();
    let want: BTreeMap<String, Vec<u8>> = strings("data")
        .into_iter()
        .map(|(k, v)| (k, b64(&v)))
        .collect();
    assert_eq!(data, want);
}

#[test]
fn parses_the_encrypted_object_as_the_apiserver_wrote_it() {
    let vectors = Vectors::load();
    for vector in &vectors.objects {
        let object = parsed(vector);
        assert_eq!(object.provider, "sceau");
        assert_eq!(object.key_id, "recovery-vectors-key");
        assert!(
            object
                .encrypted_dek_source
                .starts_with(b"fake-kms-ciphertext-")
        );
        assert_eq!(
            object
                .annotations
                .get("vectors.sceau.io")
                .map(Vec::as_slice),
            Some(&b"fake"[..])
        );
        let want = match vector.dek_source_type {
            1 => DekSourceType::HkdfSha256XnonceAesGcmSeed,
            _ => DekSourceType::AesGcmKey,
        };
        assert_eq!(object.dek_source_type, want, "{}", vector.etcd_key);
    }
}

#[test]
fn decrypts_every_vector_to_the_apiserver_plaintext() {
    let vectors = Vectors::load();
    let mut types = std::collections::BTreeSet::new();
    for vector in &vectors.objects {
        let object = parsed(vector);
        types.insert(vector.dek_source_type);
        let plain = decrypt_data(
            &object,
            vectors.dek_source(&object),
            vector.etcd_key.as_bytes(),
        )
        .unwrap();
        assert_eq!(*plain, vector.plaintext, "{}", vector.etcd_key);
    }
    // Both DEK source types and both media types are covered.
    assert_eq!(types.into_iter().collect::<Vec<_>>(), vec![0, 1]);
    assert!(
        vectors
            .objects
            .iter()
            .any(|o| o.media_type == "application/json")
    );
}

#[test]
fn decodes_every_protobuf_vector_to_the_expected_secret() {
    let vectors = Vectors::load();
    for vector in vectors
        .objects
        .iter()
        .filter(|o| o.media_type != "application/json")
    {
        match decode_object(&vector.plaintext).unwrap() {
            KubeObject::Secret(secret) => assert_secret(&secret, &vector.expect),
            other => panic!("{}: {other:?}", vector.etcd_key),
        }
    }
}

#[test]
fn passes_a_json_stored_secret_through() {
    let vectors = Vectors::load();
    let vector = vectors.find("/registry/secrets/default/json-stored");
    let text = describe_secret(&vector.plaintext).unwrap();
    assert_eq!(text.as_bytes(), vector.plaintext.trim_ascii_end());
    let doc = json::parse(&text).unwrap();
    assert_eq!(doc.get("kind").unwrap().as_str(), Some("Secret"));
    assert_eq!(
        doc.get("data").unwrap().get("k").unwrap().as_str(),
        Some("dg==")
    );
}

#[test]
fn renders_a_secret_as_a_manifest() {
    let vectors = Vectors::load();
    let vector = vectors.find("/registry/secrets/default/alpha");
    let text = describe_secret(&vector.plaintext).unwrap();
    let want = r#"{
  "apiVersion": "v1",
  "kind": "Secret",
  "metadata": {
    "name": "alpha",
    "namespace": "default",
    "labels": {
      "app": "demo",
      "tier": "db"
    },
    "annotations": {
      "note": "quote \" backslash \\ newline \n tab \t unicode é ✓"
    }
  },
  "type": "Opaque",
  "data": {
    "binary": "AAEC/v8=",
    "password": "aHVudGVyMg==",
    "user": "YWRtaW4="
  }
}"#;
    assert_eq!(*text, want);
    // It is valid JSON whatever the content.
    json::parse(&text).unwrap();
}

#[test]
fn renders_immutable_and_empty_secrets() {
    let vectors = Vectors::load();
    let big = describe_secret(&vectors.find("/registry/secrets/prod/big").plaintext).unwrap();
    assert!(
        big.contains(
            "\n  \"type\": \"kubernetes.io/tls\",\n  \"immutable\": true,\n  \"data\": {\n"
        )
    );
    let empty =
        describe_secret(&vectors.find("/registry/secrets/default/empty").plaintext).unwrap();
    assert_eq!(
        *empty,
        "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Secret\",\n  \"metadata\": {\n    \"name\": \"empty\",\n    \
         \"namespace\": \"default\"\n  },\n  \"type\": \"Opaque\"\n}"
    );
}

#[test]
fn debug_shows_no_secret_values() {
    let vectors = Vectors::load();
    let KubeObject::Secret(secret) =
        decode_object(&vectors.find("/registry/secrets/default/alpha").plaintext).unwrap()
    else {
        panic!("not a Secret")
    };
    let debug = format!("{secret:?}");
    assert!(
        debug.contains("password") && !debug.contains("hunter2"),
        "{debug}"
    );
}

#[test]
fn a_flipped_bit_anywhere_in_the_data_is_refused() {
    let vectors = Vectors::load();
    for etcd_key in [
        "/registry/secrets/default/alpha",
        "/registry/secrets/legacy/old-key",
    ] {
        let vector = vectors.find(etcd_key);
        let object = parsed(vector);
        let dek = vectors.dek_source(&object);
        // Info (seed type only), nonce, ciphertext, tag.
        let len = object.encrypted_data.len();
        for at in [0, 31, 32, 43, 44, len / 2, len - 16, len - 1] {
            let mut tampered = object.clone();
            tampered.encrypted_data[at] ^= 0x01;
            let got = decrypt_data(&tampered, dek, etcd_key.as_bytes());
            assert_eq!(
                got.err(),
                Some(KubernetesError::Decrypt),
                "{etcd_key} byte {at}"
            );
        }
    }
}

#[test]
fn a_value_under_another_etcd_key_is_refused() {
    let vectors = Vectors::load();
    for vector in &vectors.objects[..3] {
        let object = parsed(vector);
        let dek = vectors.dek_source(&object);
        for other in [
            "/registry/secrets/default/other",
            "",
            "/registry/secrets/default/alph",
        ] {
            let got = decrypt_data(&object, dek, other.as_bytes());
            assert_eq!(
                got.err(),
                Some(KubernetesError::Decrypt),
                "{} as {other}",
                vector.etcd_key
            );
        }
    }
}

#[test]
fn a_wrong_dek_source_is_refused() {
    let vectors = Vectors::load();
    let vector = vectors.find("/registry/secrets/default/alpha");
    let object = parsed(vector);
    let key = vector.etcd_key.as_bytes();
    let mut seed = vectors.seed.clone();
    seed[0] ^= 1;
    assert_eq!(
        decrypt_data(&object, &seed, key).err(),
        Some(KubernetesError::Decrypt)
    );
    assert_eq!(
        decrypt_data(&object, &vectors.aes_key, key).err(),
        Some(KubernetesError::Decrypt)
    );
    assert!(matches!(
        decrypt_data(&object, &vectors.seed[..31], key),
        Err(KubernetesError::DekSourceLength { len: 31, .. })
    ));
    let legacy = parsed(vectors.find("/registry/secrets/legacy/old-key"));
    assert!(matches!(
        decrypt_data(
            &legacy,
            &vectors.aes_key[..20],
            b"/registry/secrets/legacy/old-key"
        ),
        Err(KubernetesError::DekSourceLength { len: 20, .. })
    ));
}

#[test]
fn truncated_data_is_refused() {
    let vectors = Vectors::load();
    let mut object = parsed(vectors.find("/registry/secrets/default/alpha"));
    object.encrypted_data.truncate(40); // info and part of the nonce
    assert_eq!(
        decrypt_data(&object, &vectors.seed, b"k").err(),
        Some(KubernetesError::DataTooShort)
    );
    object.encrypted_data.truncate(20);
    assert_eq!(
        decrypt_data(&object, &vectors.seed, b"k").err(),
        Some(KubernetesError::DataTooShort)
    );
}

/// Every prefix of a real stored value and of its plaintext: every outcome
/// is a result, never a panic.
#[test]
fn truncated_inputs_error_instead_of_panicking() {
    let vectors = Vectors::load();
    let vector = vectors.find("/registry/secrets/default/alpha");
    for n in 0..vector.stored.len() {
        if let Ok(Some(object)) = parse_stored_value(&vector.stored[..n]) {
            let _ = decrypt_data(&object, &vectors.seed, vector.etcd_key.as_bytes());
        }
    }
    for n in 0..vector.plaintext.len() {
        let _ = describe_secret(&vector.plaintext[..n]);
    }
}

#[test]
fn other_values_are_not_kms_v2() {
    for value in [
        &b"k8s\x00\n\x0c\n\x02v1\x12\x06Secret"[..],
        b"k8s:enc:aescbc:v1:key1:xxxxxxxx",
        b"k8s:enc:kms:v1:old:xxxxxxxx",
        b"{\"kind\":\"Secret\"}",
        b"",
    ] {
        assert_eq!(parse_stored_value(value), Ok(None));
    }
}

/// A minimal valid EncryptedObject, as fields, to break one at a time.
fn encrypted_object(fields: &[(u8, &[u8])]) -> Vec<u8> {
    let mut out = b"k8s:enc:kms:v2:p:".to_vec();
    for (tag, value) in fields {
        out.push(*tag);
        out.push(value.len() as u8);
        out.extend_from_slice(value);
    }
    out
}

#[test]
fn malformed_kms_v2_values_are_refused() {
    use KubernetesError::*;
    let ok: &[(u8, &[u8])] = &[(0x0a, b"data"), (0x12, b"kid"), (0x1a, b"dek")];
    assert!(parse_stored_value(&encrypted_object(ok)).unwrap().is_some());

    assert_eq!(
        parse_stored_value(b"k8s:enc:kms:v2:no-colon"),
        Err(NoProviderName)
    );
    assert!(matches!(
        parse_stored_value(b"k8s:enc:kms:v2:p:\x0a\x05ab"),
        Err(EncryptedObject(WireError::Truncated))
    ));
    let missing =
        |drop: u8| -> Vec<(u8, &[u8])> { ok.iter().copied().filter(|(t, _)| *t != drop).collect() };
    for tag in [0x0a, 0x12, 0x1a] {
        assert!(matches!(
            parse_stored_value(&encrypted_object(&missing(tag))),
            Err(InvalidEncryptedObject(_))
        ));
    }
    let mut unknown_type = encrypted_object(ok);
    unknown_type.extend_from_slice(&[0x28, 0x07]);
    assert_eq!(
        parse_stored_value(&unknown_type),
        Err(UnknownDekSourceType(7))
    );
    let long_dek = vec![b'x'; ENCRYPTED_DEK_SOURCE_MAX + 1];
    let mut too_long = encrypted_object(&ok[..2]);
    too_long.extend_from_slice(&[0x1a, 0x81, 0x08]); // length 1025
    too_long.extend_from_slice(&long_dek);
    assert!(matches!(
        parse_stored_value(&too_long),
        Err(InvalidEncryptedObject(_))
    ));
}

#[test]
fn unknown_kinds_and_encodings_are_told_apart() {
    // runtime.Unknown{typeMeta{v1, ConfigMap}, raw: ""}
    let config_map = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x00";
    assert!(matches!(
        describe_secret(config_map),
        Err(KubernetesError::NotASecret { ref api_version, ref kind }) if api_version == "v1" && kind == "ConfigMap"
    ));
    assert_eq!(
        describe_secret(b"\x00\x01").err(),
        Some(KubernetesError::UnknownEncoding)
    );
    assert_eq!(
        describe_secret(b"{\xff}").err(),
        Some(KubernetesError::JsonNotUtf8)
    );
    assert!(matches!(
        describe_secret(b"k8s\x00\x0a\x05"),
        Err(KubernetesError::Object(WireError::Truncated))
    ));
}

/// The whole offline path on the etcd v3.7.0 snapshot: scan, parse, decrypt,
/// decode. Every encrypted value decrypts, and the plain ones are passed over.
#[test]
fn every_secret_in_the_snapshot_is_recovered() {
    let vectors = Vectors::load();
    let snapshot = std::fs::read(format!("{FIXTURES}/snapshot.db")).unwrap();
    let mut recovered = 0;
    let mut passed_over = Vec::new();
    for stored in etcd::values_from_snapshot(&snapshot).unwrap() {
        let Some(object) = parse_stored_value(&stored.value).unwrap() else {
            passed_over.push(String::from_utf8(stored.key).unwrap());
            continue;
        };
        let plain = decrypt_data(&object, vectors.dek_source(&object), &stored.key).unwrap();
        let text = describe_secret(&plain).unwrap();
        let key = String::from_utf8(stored.key).unwrap();
        let vector = vectors.find(&key);
        assert_eq!(*plain, vector.plaintext);
        let doc = json::parse(&text).unwrap();
        let name = doc
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Json::as_str);
        assert_eq!(name, vector.expect.get("name").unwrap().as_str());
        recovered += 1;
    }
    assert_eq!(recovered, vectors.objects.len());
    assert_eq!(
        passed_over,
        [
            "/other/not-kubernetes",
            "/registry/configmaps/default/plain"
        ]
    );
}
