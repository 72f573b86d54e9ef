//! Kubernetes' side of recovery: a value the kube-apiserver stored in etcd
//! through a KMS v2 provider, decrypted offline exactly as the apiserver
//! reads it, and the Secret inside it.
//!
//! Every format fact comes from the upstream sources (k8s.io/apiserver,
//! k8s.io/apimachinery and k8s.io/api v0.37.2), cited where it is used:
//!
//! 1. The stored value is `k8s:enc:kms:v2:<providerName>:` followed by an
//!    `EncryptedObject` protobuf (`parse_stored_value`).
//! 2. The lead's envelope code turns `encrypted_dek_source` (+ `annotations`)
//!    into the plaintext DEK source; `decrypt_data` then opens
//!    `encrypted_data` with it, the etcd key being the AES-GCM additional
//!    data.
//! 3. The plaintext is the object as the apiserver's storage codec wrote it:
//!    `k8s\0` + `runtime.Unknown` protobuf, or JSON (`decode_object`);
//!    a v1 Secret prints as a Kubernetes manifest (`describe_secret`).
//!
//! The test vectors in tests/fixtures/recovery were written by the upstream
//! code itself (tests/recovery-vectors).
//!
//! Limits: only v1 Secrets are decoded from protobuf (other kinds come back
//! as `KubeObject::Other` with their apiVersion and kind); a JSON-stored
//! object is passed through unparsed, AES-GCM having authenticated it. The
//! plaintext, the derived key, Secret values and the rendering are
//! zeroizing; the `hkdf` and `aes-gcm` crates' internal key state and a
//! Secret's labels and annotations are not (in the `sceau` binary the
//! wipe-on-free allocator still clears the heap copies).

use std::collections::BTreeMap;
use std::fmt;

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes192;
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm, Nonce};
use base64::Engine as _;
use hkdf::Hkdf;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::json::write_string;
use super::protowire::{Reader, WireError, map_entry};

/// encryptionconfig/config.go: `kmsTransformerPrefixV2 = "k8s:enc:kms:v2:"`,
/// and the provider's prefix is `kmsTransformerPrefixV2 + kmsName + ":"`
/// (`kmsPrefixTransformer`). KMS v2 names cannot contain ':'
/// (apis/apiserver/validation/validation_encryption.go), so the name ends at
/// the next ':'.
pub const KMS_V2_PREFIX: &[u8] = b"k8s:enc:kms:v2:";

/// envelope/kmsv2/envelope.go: `encryptedDEKSourceMaxSize`, `KeyIDMaxSize`
/// and `annotationsMaxSize`, checked by `ValidateEncryptedObject` on every
/// read (`doDecode`).
const ENCRYPTED_DEK_SOURCE_MAX: usize = 1024;
const KEY_ID_MAX: usize = 1024;
const ANNOTATIONS_MAX: usize = 32 * 1024;

/// aes/aes_extended_nonce.go: `infoSizeExtendedNonceGCM` and
/// `MinSeedSizeExtendedNonceGCM` both equal `commonSize` (aes/aes.go), 32.
const INFO_LEN: usize = 32;
const MIN_SEED_LEN: usize = 32;
/// aes/aes.go `newGCM`: the apiserver insists on Go's standard 12-byte nonce.
const NONCE_LEN: usize = 12;

/// apimachinery runtime/serializer/protobuf/protobuf.go:
/// `protoEncodingPrefix = []byte{0x6b, 0x38, 0x73, 0x00}`.
pub const PROTOBUF_MAGIC: &[u8] = b"k8s\x00";

/// How the plaintext of `encrypted_dek_source` becomes the data key
/// (kmsv2/v2/api.proto, enum `EncryptedDEKSourceType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DekSourceType {
    /// 0: the plaintext is the AES-GCM key itself. The older mode: v0.37.2
    /// writes it only when its tests turn the seed off
    /// (encryptionconfig/config.go `GetKDF`), but still reads it, and values
    /// written by older apiservers may still be in etcd.
    AesGcmKey,
    /// 1: the plaintext is a seed; each object's key is HKDF-SHA256-Expand of
    /// it with a random 32-byte info stored before the AES-GCM nonce.
    HkdfSha256XnonceAesGcmSeed,
}

/// A stored value's `EncryptedObject` (kmsv2/v2/api.proto: encryptedData=1,
/// keyID=2, encryptedDEKSource=3, annotations=4, encryptedDEKSourceType=5)
/// and the provider name from its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsV2Object {
    pub provider: String,
    pub key_id: String,
    /// What the KMS plugin (sceau) returned from Encrypt: sceau's envelope.
    pub encrypted_dek_source: Vec<u8>,
    pub dek_source_type: DekSourceType,
    pub annotations: BTreeMap<String, Vec<u8>>,
    pub encrypted_data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubernetesError {
    #[error("stored value has the KMS v2 prefix but no ':' after the provider name")]
    NoProviderName,
    #[error("EncryptedObject: {0}")]
    EncryptedObject(WireError),
    #[error("EncryptedObject is invalid: {0}")]
    InvalidEncryptedObject(&'static str),
    #[error("unknown encryptedDEKSourceType {0}")]
    UnknownDekSourceType(i64),
    #[error("a DEK source of {len} bytes cannot be a {kind}")]
    DekSourceLength { kind: &'static str, len: usize },
    #[error("encrypted data is too short")]
    DataTooShort,
    #[error("AES-GCM authentication failed: wrong DEK source, wrong etcd key, or altered data")]
    Decrypt,
    #[error("plaintext is neither a Kubernetes protobuf object nor JSON")]
    UnknownEncoding,
    #[error("Kubernetes object: {0}")]
    Object(WireError),
    #[error("JSON object is not UTF-8")]
    JsonNotUtf8,
    #[error("object is a {api_version}/{kind}, not a v1/Secret")]
    NotASecret { api_version: String, kind: String },
}

/// Reads a value from etcd: `Ok(None)` when it is not a KMS v2 value (stored
/// in the clear, or by another provider type), the `EncryptedObject` when it
/// is, or an error when the KMS v2 value is malformed.
pub fn parse_stored_value(value: &[u8]) -> Result<Option<KmsV2Object>, KubernetesError> {
    let Some(rest) = value.strip_prefix(KMS_V2_PREFIX) else {
        return Ok(None);
    };
    let colon = rest
        .iter()
        .position(|&b| b == b':')
        .ok_or(KubernetesError::NoProviderName)?;
    let provider =
        std::str::from_utf8(&rest[..colon]).map_err(|_| KubernetesError::NoProviderName)?;
    let mut object = parse_encrypted_object(&rest[colon + 1..])?;
    object.provider = provider.to_owned();
    validate(&object)?;
    Ok(Some(object))
}

fn parse_encrypted_object(bytes: &[u8]) -> Result<KmsV2Object, KubernetesError> {
    let wire = KubernetesError::EncryptedObject;
    let mut object = KmsV2Object {
        provider: String::new(),
        key_id: String::new(),
        encrypted_dek_source: Vec::new(),
        dek_source_type: DekSourceType::AesGcmKey, // proto3 default, 0
        annotations: BTreeMap::new(),
        encrypted_data: Vec::new(),
    };
    for field in Reader::new(bytes) {
        let field = field.map_err(wire)?;
        match field.number {
            1 => object.encrypted_data = field.bytes().map_err(wire)?.to_vec(),
            2 => object.key_id = field.str().map_err(wire)?.to_owned(),
            3 => object.encrypted_dek_source = field.bytes().map_err(wire)?.to_vec(),
            4 => {
                let (k, v) = map_entry(field.bytes().map_err(wire)?).map_err(wire)?;
                object.annotations.insert(k.to_owned(), v.to_vec());
            }
            5 => {
                object.dek_source_type = match field.int64().map_err(wire)? {
                    0 => DekSourceType::AesGcmKey,
                    1 => DekSourceType::HkdfSha256XnonceAesGcmSeed,
                    other => return Err(KubernetesError::UnknownDekSourceType(other)),
                }
            }
            _ => {}
        }
    }
    Ok(object)
}

/// The checks of envelope.go `ValidateEncryptedObject` that bear on reading,
/// so that what the apiserver would refuse is refused here too. The
/// annotation keys' DNS-name check is left out: it guards what a plugin may
/// return, and a name that passed it once is no help to decryption.
fn validate(object: &KmsV2Object) -> Result<(), KubernetesError> {
    let invalid = |what| Err(KubernetesError::InvalidEncryptedObject(what));
    if object.encrypted_data.is_empty() {
        return invalid("encrypted data is empty");
    }
    if object.encrypted_dek_source.is_empty()
        || object.encrypted_dek_source.len() > ENCRYPTED_DEK_SOURCE_MAX
    {
        return invalid("encrypted DEK source is empty or over 1 kB");
    }
    if object.key_id.is_empty() || object.key_id.len() > KEY_ID_MAX {
        return invalid("key ID is empty or over 1 kB");
    }
    let annotations: usize = object
        .annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if annotations > ANNOTATIONS_MAX {
        return invalid("annotations are over 32 kB");
    }
    Ok(())
}

/// Decrypts `encrypted_data` as the apiserver does once its KMS plugin has
/// returned the plaintext DEK source (envelope.go
/// `envelopeTransformer.TransformFromStorage` → `addTransformerForDecryption`).
/// `etcd_key` is the full etcd key the value was stored under (for example
/// `/registry/secrets/default/name`): the etcd3 store passes it as the
/// AES-GCM additional data (storage/etcd3/store.go,
/// `authenticatedDataString(preparedKey)`), so a value moved to another key
/// does not decrypt.
pub fn decrypt_data(
    object: &KmsV2Object,
    dek_source: &[u8],
    etcd_key: &[u8],
) -> Result<Zeroizing<Vec<u8>>, KubernetesError> {
    match object.dek_source_type {
        DekSourceType::HkdfSha256XnonceAesGcmSeed => {
            open_with_seed(dek_source, &object.encrypted_data, etcd_key)
        }
        DekSourceType::AesGcmKey => open_gcm(dek_source, &object.encrypted_data, etcd_key),
    }
}

/// aes_extended_nonce.go `extendedNonceGCM.TransformFromStorage`: the first
/// 32 bytes are the HKDF info; `sha256KDFExpandOnly` derives a 32-byte key
/// with HKDF-Expand only (the seed is the PRK, no Extract step, no salt);
/// `transformerWithInfo` strips the info and the rest is a plain AES-GCM
/// value.
fn open_with_seed(
    seed: &[u8],
    data: &[u8],
    aad: &[u8],
) -> Result<Zeroizing<Vec<u8>>, KubernetesError> {
    if seed.len() < MIN_SEED_LEN {
        return Err(KubernetesError::DekSourceLength {
            kind: "seed (32 bytes or more)",
            len: seed.len(),
        });
    }
    if data.len() < INFO_LEN {
        return Err(KubernetesError::DataTooShort);
    }
    let (info, sealed) = data.split_at(INFO_LEN);
    let key = derive_key(seed, info);
    open_gcm(&key[..], sealed, aad)
}

fn derive_key(seed: &[u8], info: &[u8]) -> Zeroizing<[u8; 32]> {
    let kdf = Hkdf::<Sha256>::from_prk(seed).expect("a PRK of 32 bytes or more is accepted");
    let mut key = Zeroizing::new([0u8; 32]);
    kdf.expand(info, &mut key[..])
        .expect("32 bytes is within HKDF-SHA256's output limit");
    key
}

/// aes.go `gcm.TransformFromStorage`: a 12-byte nonce, then the ciphertext
/// with its 16-byte tag. The key is whatever aes.NewCipher accepts (16, 24 or
/// 32 bytes; the apiserver generates 32).
fn open_gcm(key: &[u8], data: &[u8], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, KubernetesError> {
    if data.len() < NONCE_LEN {
        return Err(KubernetesError::DataTooShort);
    }
    let (nonce, sealed) = data.split_at(NONCE_LEN);
    let nonce = Nonce::<U12>::from_slice(nonce);
    let payload = Payload { msg: sealed, aad };
    let opened = match key.len() {
        16 => Aes128Gcm::new_from_slice(key)
            .expect("16-byte key")
            .decrypt(nonce, payload),
        24 => AesGcm::<Aes192, U12>::new_from_slice(key)
            .expect("24-byte key")
            .decrypt(nonce, payload),
        32 => Aes256Gcm::new_from_slice(key)
            .expect("32-byte key")
            .decrypt(nonce, payload),
        len => {
            return Err(KubernetesError::DekSourceLength {
                kind: "AES key (16, 24 or 32 bytes)",
                len,
            });
        }
    };
    opened
        .map(Zeroizing::new)
        .map_err(|_| KubernetesError::Decrypt)
}

/// A decrypted Kubernetes object.
#[derive(Debug)]
pub enum KubeObject {
    Secret(Secret),
    /// Stored as JSON (`--storage-media-type=application/json`): the text as
    /// stored, less trailing whitespace.
    Json(Zeroizing<String>),
    /// A protobuf object of another kind (for example a ConfigMap, when the
    /// EncryptionConfiguration covers configmaps too).
    Other {
        api_version: String,
        kind: String,
    },
}

/// The fields of a v1 Secret that matter for restoring it (core/v1
/// generated.proto `Secret`: metadata=1, data=2, type=3, stringData=4,
/// immutable=5; meta/v1 generated.proto `ObjectMeta`: name=1, namespace=3,
/// uid=5, labels=11, annotations=12).
#[derive(Default)]
pub struct Secret {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub secret_type: String,
    pub immutable: Option<bool>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub data: BTreeMap<String, Zeroizing<Vec<u8>>>,
    /// Write-only in the API and never stored by a real apiserver; read in
    /// case some tool wrote it to etcd directly.
    pub string_data: BTreeMap<String, Zeroizing<String>>,
}

/// Shows which keys a Secret has, never their values.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("type", &self.secret_type)
            .field("data keys", &self.data.keys().collect::<Vec<_>>())
            .field(
                "stringData keys",
                &self.string_data.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Decodes a decrypted object as the apiserver's storage codec wrote it.
pub fn decode_object(plaintext: &[u8]) -> Result<KubeObject, KubernetesError> {
    if let Some(unknown) = plaintext.strip_prefix(PROTOBUF_MAGIC) {
        return decode_protobuf(unknown);
    }
    if plaintext.trim_ascii_start().starts_with(b"{") {
        let text = std::str::from_utf8(plaintext).map_err(|_| KubernetesError::JsonNotUtf8)?;
        return Ok(KubeObject::Json(Zeroizing::new(text.trim_end().to_owned())));
    }
    Err(KubernetesError::UnknownEncoding)
}

/// apimachinery runtime/generated.proto `Unknown` {typeMeta=1 {apiVersion=1,
/// kind=2}, raw=2, contentEncoding=3, contentType=4}; the protobuf
/// serializer's `Decode` reads the kind from typeMeta and the object from raw
/// (contentEncoding and contentType play no part there, nor here).
fn decode_protobuf(unknown: &[u8]) -> Result<KubeObject, KubernetesError> {
    let wire = KubernetesError::Object;
    let (mut api_version, mut kind, mut raw) = ("", "", &[][..]);
    for field in Reader::new(unknown) {
        let field = field.map_err(wire)?;
        match field.number {
            1 => {
                for meta in Reader::new(field.bytes().map_err(wire)?) {
                    let meta = meta.map_err(wire)?;
                    match meta.number {
                        1 => api_version = meta.str().map_err(wire)?,
                        2 => kind = meta.str().map_err(wire)?,
                        _ => {}
                    }
                }
            }
            2 => raw = field.bytes().map_err(wire)?,
            _ => {}
        }
    }
    if (api_version, kind) != ("v1", "Secret") {
        return Ok(KubeObject::Other {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
    }
    decode_secret(raw).map(KubeObject::Secret).map_err(wire)
}

fn decode_secret(raw: &[u8]) -> Result<Secret, WireError> {
    let mut secret = Secret::default();
    for field in Reader::new(raw) {
        let field = field?;
        match field.number {
            // A repeated embedded message merges, as protobuf specifies.
            1 => decode_object_meta(field.bytes()?, &mut secret)?,
            2 => {
                let (k, v) = map_entry(field.bytes()?)?;
                secret.data.insert(k.to_owned(), Zeroizing::new(v.to_vec()));
            }
            3 => secret.secret_type = field.str()?.to_owned(),
            4 => {
                let (k, v) = string_entry(field.bytes()?, field.number)?;
                secret.string_data.insert(k, Zeroizing::new(v));
            }
            5 => secret.immutable = Some(field.bool()?),
            _ => {}
        }
    }
    Ok(secret)
}

fn decode_object_meta(meta: &[u8], secret: &mut Secret) -> Result<(), WireError> {
    for field in Reader::new(meta) {
        let field = field?;
        match field.number {
            1 => secret.name = field.str()?.to_owned(),
            3 => secret.namespace = field.str()?.to_owned(),
            5 => secret.uid = field.str()?.to_owned(),
            11 => {
                let (k, v) = string_entry(field.bytes()?, field.number)?;
                secret.labels.insert(k, v);
            }
            12 => {
                let (k, v) = string_entry(field.bytes()?, field.number)?;
                secret.annotations.insert(k, v);
            }
            _ => {}
        }
    }
    Ok(())
}

/// A `map<string, string>` entry; the value must be UTF-8 too.
fn string_entry(entry: &[u8], number: u32) -> Result<(String, String), WireError> {
    let (k, v) = map_entry(entry)?;
    let v = std::str::from_utf8(v).map_err(|_| WireError::NotUtf8(number))?;
    Ok((k.to_owned(), v.to_owned()))
}

/// A decrypted object, printable: a v1 Secret as a Kubernetes manifest
/// (`Secret::to_json`), a JSON-stored object as stored; any other kind is
/// `NotASecret`.
pub fn describe_secret(plaintext: &[u8]) -> Result<Zeroizing<String>, KubernetesError> {
    match decode_object(plaintext)? {
        KubeObject::Secret(secret) => Ok(secret.to_json()),
        KubeObject::Json(text) => Ok(text),
        KubeObject::Other { api_version, kind } => {
            Err(KubernetesError::NotASecret { api_version, kind })
        }
    }
}

impl Secret {
    /// The Secret as a manifest that `kubectl apply -f` takes back: JSON,
    /// two-space indentation, members in a fixed order and map keys sorted,
    /// `data` in standard base64 as the API serves it. Server-set fields (uid,
    /// resourceVersion, timestamps) are left out so that it applies to a new
    /// cluster; empty fields are left out.
    pub fn to_json(&self) -> Zeroizing<String> {
        let mut out = Zeroizing::new(String::with_capacity(self.size_hint()));
        out.push_str("{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Secret\",\n  \"metadata\": {\n");
        let mut meta = Members::new(&mut out, 4);
        meta.string("name", &self.name);
        if !self.namespace.is_empty() {
            meta.string("namespace", &self.namespace);
        }
        meta.map(
            "labels",
            self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        meta.map(
            "annotations",
            self.annotations
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        out.push_str("\n  }");
        let mut top = Members::continuing(&mut out, 2);
        if !self.secret_type.is_empty() {
            top.string("type", &self.secret_type);
        }
        if let Some(immutable) = self.immutable {
            top.raw("immutable", if immutable { "true" } else { "false" });
        }
        top.base64_map("data", &self.data);
        top.map(
            "stringData",
            self.string_data
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        out.push_str("\n}");
        out
    }

    /// Enough room for the usual rendering, so that the buffer holding Secret
    /// values is not reallocated (and copied) while it grows.
    fn size_hint(&self) -> usize {
        let strings = |m: &BTreeMap<String, String>| {
            m.iter().map(|(k, v)| k.len() + v.len() + 16).sum::<usize>()
        };
        let data: usize = self
            .data
            .iter()
            .map(|(k, v)| k.len() + v.len() * 4 / 3 + 24)
            .sum();
        let string_data: usize = self
            .string_data
            .iter()
            .map(|(k, v)| k.len() + v.len() + 16)
            .sum();
        let plain = strings(&self.labels) + strings(&self.annotations) + string_data;
        // Escapes may double plain text; base64 is never escaped.
        256 + self.name.len() + self.namespace.len() + self.secret_type.len() + 2 * plain + data
    }
}

/// Writes the members of one JSON object, one per line.
struct Members<'a> {
    out: &'a mut String,
    indent: usize,
    first: bool,
}

impl<'a> Members<'a> {
    fn new(out: &'a mut String, indent: usize) -> Self {
        Self {
            out,
            indent,
            first: true,
        }
    }

    /// After members already written (and not yet closed).
    fn continuing(out: &'a mut String, indent: usize) -> Self {
        Self {
            out,
            indent,
            first: false,
        }
    }

    fn name(&mut self, name: &str) {
        if !self.first {
            self.out.push_str(",\n");
        }
        self.first = false;
        self.out.extend(std::iter::repeat_n(' ', self.indent));
        write_string(self.out, name);
        self.out.push_str(": ");
    }

    fn raw(&mut self, name: &str, json: &str) {
        self.name(name);
        self.out.push_str(json);
    }

    fn string(&mut self, name: &str, value: &str) {
        self.name(name);
        write_string(self.out, value);
    }

    /// A map of strings; nothing when empty.
    fn map<'v>(&mut self, name: &str, entries: impl ExactSizeIterator<Item = (&'v str, &'v str)>) {
        if entries.len() == 0 {
            return;
        }
        self.name(name);
        self.out.push_str("{\n");
        let mut inner = Members::new(self.out, self.indent + 2);
        for (k, v) in entries {
            inner.string(k, v);
        }
        self.close();
    }

    fn base64_map(&mut self, name: &str, data: &BTreeMap<String, Zeroizing<Vec<u8>>>) {
        if data.is_empty() {
            return;
        }
        self.name(name);
        self.out.push_str("{\n");
        let mut inner = Members::new(self.out, self.indent + 2);
        for (k, v) in data {
            inner.name(k);
            inner.out.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(&v[..], inner.out);
            inner.out.push('"');
        }
        self.close();
    }

    fn close(&mut self) {
        self.out.push('\n');
        self.out.extend(std::iter::repeat_n(' ', self.indent));
        self.out.push('}');
    }
}

#[cfg(test)]
mod tests;
