//! Small encoders the targets use as oracles and the seed generator uses to
//! write inputs: standard base64, the protobuf wire format of a KMS v2
//! stored value, `etcdctl get -w json` output, and the byte framing of the
//! `cluster_envelope`, `key_files` and `recovery_input` inputs. The fuzz crate has no
//! dependency for any of these, and adding one is not worth it.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use sceau_format::enrollment::{
    CHALLENGE_LABEL, EK_CERTIFICATE_LABEL, EK_LABEL, EXPECTED_LABEL, RESPONSE_LABEL,
};
use sceau_format::members::{MEMBER_LABEL, RECOVERY_PUBLIC_LABEL};
use sceau_format::recovery_key::IDENTITY_LABEL;
use sceau_recover::etcd::StoredValue;
use sceau_recover::kubernetes::{DekSourceType, KMS_V2_PREFIX, KmsV2Object};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 §4), as etcdctl and the
/// Kubernetes API write bytes.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The inverse of [`base64`]; `None` for anything it would not write.
pub fn unbase64(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (i, quad) in text.chunks(4).enumerate() {
        let last = i + 1 == text.len() / 4;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            let v = ALPHABET.iter().position(|&a| a == c)?;
            n = n << 6 | v as u32;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    // Canonical only: the bits a padded quad drops must be zero.
    (base64(&out).as_bytes() == text).then_some(out)
}

/// Appends a protobuf varint.
pub fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a length-delimited protobuf field.
pub fn bytes_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    varint(out, u64::from(number) << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends a varint protobuf field.
pub fn varint_field(out: &mut Vec<u8>, number: u32, value: u64) {
    varint(out, u64::from(number) << 3);
    varint(out, value);
}

/// A `map<string, bytes>` entry (key = 1, value = 2).
pub fn map_entry(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut entry = Vec::new();
    bytes_field(&mut entry, 1, key);
    bytes_field(&mut entry, 2, value);
    entry
}

/// The value the kube-apiserver stores for `object`: the KMS v2 prefix, the
/// provider name, ':' and the `EncryptedObject` protobuf.
pub fn stored_value(object: &KmsV2Object) -> Vec<u8> {
    let mut out = [KMS_V2_PREFIX, object.provider.as_bytes(), b":"].concat();
    bytes_field(&mut out, 1, &object.encrypted_data);
    bytes_field(&mut out, 2, object.key_id.as_bytes());
    bytes_field(&mut out, 3, &object.encrypted_dek_source);
    for (k, v) in &object.annotations {
        bytes_field(&mut out, 4, &map_entry(k.as_bytes(), v));
    }
    if object.dek_source_type == DekSourceType::HkdfSha256XnonceAesGcmSeed {
        varint_field(&mut out, 5, 1);
    }
    out
}

/// An etcd `mvccpb.KeyValue` as etcd stores it in its `key` bucket.
pub fn key_value(kv: &StoredValue) -> Vec<u8> {
    let mut out = Vec::new();
    bytes_field(&mut out, 1, &kv.key);
    for (number, value) in [
        (2, kv.create_revision),
        (3, kv.mod_revision),
        (4, kv.version),
    ] {
        if value != 0 {
            varint_field(&mut out, number, value as u64);
        }
    }
    if !kv.value.is_empty() {
        bytes_field(&mut out, 5, &kv.value);
    }
    out
}

/// One `etcdctl get -w json` response listing `values`, as encoding/json
/// prints etcd's RangeResponse (bytes in base64, zero fields omitted).
pub fn etcdctl_json(header: &str, values: &[StoredValue]) -> String {
    let kvs: Vec<String> = values
        .iter()
        .map(|kv| {
            let mut fields = vec![format!("\"key\":\"{}\"", base64(&kv.key))];
            for (name, value) in [
                ("create_revision", kv.create_revision),
                ("mod_revision", kv.mod_revision),
                ("version", kv.version),
            ] {
                if value != 0 {
                    fields.push(format!("\"{name}\":{value}"));
                }
            }
            if !kv.value.is_empty() {
                fields.push(format!("\"value\":\"{}\"", base64(&kv.value)));
            }
            format!("{{{}}}", fields.join(","))
        })
        .collect();
    let mut out = format!("{{{header}");
    if !header.is_empty() {
        out.push(',');
    }
    if !kvs.is_empty() {
        out.push_str(&format!("\"kvs\":[{}],", kvs.join(",")));
    }
    out.push_str(&format!("\"count\":{}}}\n", values.len()));
    out
}

/// Reads the framed fields of a fuzz input; a short read ends the input.
pub struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self(data)
    }

    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        (self.0.len() >= n).then(|| {
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            head
        })
    }

    /// A u16 (big-endian) length, then that many bytes.
    pub fn field16(&mut self) -> Option<&'a [u8]> {
        let len = self.take(2)?;
        self.take(usize::from(u16::from_be_bytes([len[0], len[1]])))
    }

    /// A u8 length, then that many bytes.
    pub fn field8(&mut self) -> Option<&'a [u8]> {
        let len = self.u8()?;
        self.take(usize::from(len))
    }

    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}

fn push16(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u16::try_from(bytes.len()).expect("fuzz input fields are below 64 KiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// `cluster_envelope` flag bit: before parsing, overwrite the last 32 bytes
/// of the ciphertext with the SHA-256 of the recipients annotation, so that
/// the fuzzer can mutate an annotation-layout envelope's recipients without
/// having to forge a digest.
pub const FIX_DIGEST: u8 = 0x01;
/// `cluster_envelope` flag bit: the input is not an envelope but the three
/// fields of one recovery entry (sealed object public, duplicate,
/// in_sym_seed), which the target wraps into an envelope addressed to the
/// test identity.
pub const RAW_ENTRY: u8 = 0x02;

/// A `cluster_envelope` input: flags, then a u16-framed ciphertext, then
/// annotations as (u8-framed key, u16-framed value) pairs. In `RAW_ENTRY`
/// mode the three u16-framed fields follow the flags instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInput {
    pub flags: u8,
    pub ciphertext: Vec<u8>,
    /// In input order; a repeated key keeps its last value.
    pub annotations: Vec<(String, Vec<u8>)>,
}

impl ClusterInput {
    pub fn decode(data: &[u8]) -> Self {
        let mut c = Cursor::new(data);
        let flags = c.u8().unwrap_or(0);
        let ciphertext = c.field16().unwrap_or_default().to_vec();
        let mut annotations = Vec::new();
        while let (Some(key), Some(value)) = (c.field8(), c.field16()) {
            annotations.push((String::from_utf8_lossy(key).into_owned(), value.to_vec()));
        }
        Self {
            flags,
            ciphertext,
            annotations,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.flags];
        push16(&mut out, &self.ciphertext);
        for (key, value) in &self.annotations {
            out.push(u8::try_from(key.len()).expect("annotation keys are short"));
            out.extend_from_slice(key.as_bytes());
            push16(&mut out, value);
        }
        out
    }

    pub fn annotation_map(&self) -> HashMap<String, Vec<u8>> {
        self.annotations.iter().cloned().collect()
    }
}

/// A `RAW_ENTRY` input.
pub fn raw_entry_input(object_public: &[u8], duplicate: &[u8], in_sym_seed: &[u8]) -> Vec<u8> {
    let mut out = vec![RAW_ENTRY];
    for field in [object_public, duplicate, in_sym_seed] {
        push16(&mut out, field);
    }
    out
}

/// `recovery_input` modes: the low two bits of the first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryMode {
    /// The rest is an etcd snapshot file (bbolt, optional SHA-256 trailer).
    Snapshot,
    /// The rest is `etcdctl get -w json` output.
    EtcdctlJson,
    /// The rest is a u8-framed etcd key, then the value stored under it.
    StoredValue,
    /// The rest is a decrypted object, as the apiserver's codec wrote it.
    Plaintext,
}

pub fn recovery_mode(byte: u8) -> RecoveryMode {
    match byte & 0b11 {
        0 => RecoveryMode::Snapshot,
        1 => RecoveryMode::EtcdctlJson,
        2 => RecoveryMode::StoredValue,
        _ => RecoveryMode::Plaintext,
    }
}

/// A `recovery_input` input for `mode`.
pub fn recovery_input(mode: RecoveryMode, payload: &[u8]) -> Vec<u8> {
    let byte = match mode {
        RecoveryMode::Snapshot => 0,
        RecoveryMode::EtcdctlJson => 1,
        RecoveryMode::StoredValue => 2,
        RecoveryMode::Plaintext => 3,
    };
    [&[byte][..], payload].concat()
}

/// The `StoredValue` payload: the etcd key (u8-framed) and the value.
pub fn stored_value_payload(etcd_key: &[u8], value: &[u8]) -> Vec<u8> {
    let len = u8::try_from(etcd_key.len()).expect("etcd keys in seeds are short");
    [&[len][..], etcd_key, value].concat()
}

/// The armor labels `key_files` decodes in its `Armored` mode.
pub const KEY_FILE_LABELS: [&str; 8] = [
    MEMBER_LABEL,
    RECOVERY_PUBLIC_LABEL,
    IDENTITY_LABEL,
    EK_LABEL,
    EK_CERTIFICATE_LABEL,
    CHALLENGE_LABEL,
    EXPECTED_LABEL,
    RESPONSE_LABEL,
];

/// `key_files` modes, from the first byte: `byte % 6` picks the mode and,
/// for `Armored`, `byte / 6 % 8` the label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFileMode {
    /// `armor::decode` with `KEY_FILE_LABELS[i]`, then what
    /// `members::parse_pinned` does with the block.
    Armored(usize),
    /// `StorageKey::from_tpm2b_public` of the raw bytes.
    RawKey,
    /// `enrollment::Request::parse`.
    Request,
    /// `enrollment::parse_challenge`, for the pinned member 0.
    Challenge,
    /// `enrollment::verify` of the pinned request: expected answer, NUL,
    /// response.
    Verify,
    /// `RecoveryIdentity::parse`.
    Identity,
}

pub fn key_file_mode(byte: u8) -> KeyFileMode {
    match byte % 6 {
        0 => KeyFileMode::Armored(usize::from(byte / 6) % KEY_FILE_LABELS.len()),
        1 => KeyFileMode::RawKey,
        2 => KeyFileMode::Request,
        3 => KeyFileMode::Challenge,
        4 => KeyFileMode::Verify,
        _ => KeyFileMode::Identity,
    }
}

/// A `key_files` input: the mode byte, then the file (text, or raw bytes).
pub fn key_file_input(mode: KeyFileMode, payload: &[u8]) -> Vec<u8> {
    let byte = match mode {
        KeyFileMode::Armored(label) => u8::try_from(label * 6).expect("8 labels"),
        KeyFileMode::RawKey => 1,
        KeyFileMode::Request => 2,
        KeyFileMode::Challenge => 3,
        KeyFileMode::Verify => 4,
        KeyFileMode::Identity => 5,
    };
    [&[byte][..], payload].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_is_canonical() {
        for len in 0..8 {
            let bytes: Vec<u8> = (0..len).map(|i| 0xF0 ^ i as u8).collect();
            assert_eq!(unbase64(&base64(&bytes)), Some(bytes));
        }
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(unbase64("Zm9="), None);
        assert_eq!(unbase64("Zm8"), None);
        assert_eq!(unbase64("Z=8="), None);
    }

    #[test]
    fn key_file_modes_round_trip() {
        let modes = (0..KEY_FILE_LABELS.len()).map(KeyFileMode::Armored).chain([
            KeyFileMode::RawKey,
            KeyFileMode::Request,
            KeyFileMode::Challenge,
            KeyFileMode::Verify,
            KeyFileMode::Identity,
        ]);
        for mode in modes {
            assert_eq!(key_file_mode(key_file_input(mode, b"")[0]), mode);
        }
    }

    #[test]
    fn cluster_inputs_round_trip() {
        let input = ClusterInput {
            flags: FIX_DIGEST,
            ciphertext: vec![2, 0, 1],
            annotations: vec![("recipients.sceau.io".into(), vec![1, 2, 3])],
        };
        assert_eq!(ClusterInput::decode(&input.encode()), input);
    }
}
