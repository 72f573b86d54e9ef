//! Writes the seed corpus: `cargo run --manifest-path fuzz/Cargo.toml
//! --example seeds -- fuzz/corpus` (from the repository root).
//!
//! Deterministic: the same files, byte for byte, on every run. Each seed is
//! a well-formed input the targets should accept (or a typical rejection),
//! so that the fuzzer starts from the accepted paths instead of finding them.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;

use prost::Message;
use sceau::kms::Sealer;
use sceau::pb::{DecryptRequest, EncryptRequest};
use sceau::tpm::Fault;
use sceau::tpm::envelope::SealedBlobs;
use sceau::tpm::sealed::{blobs_from_created, sealed_attributes};
use sceau_fuzz::{Call, FakeSealer, encode_header};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::structures::{
    Digest, KeyedHashScheme, Private, PublicBuilder, PublicKeyedHashParameters,
};

fn main() -> std::io::Result<()> {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let root = Path::new(&root);
    write_all(&root.join("envelope"), envelope_seeds())?;
    write_all(&root.join("kms_request"), kms_request_seeds())?;
    write_all(&root.join("cli"), cli_seeds())
}

fn write_all(dir: &Path, seeds: Vec<(&str, Vec<u8>)>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

/// A 32-byte DEK, as the apiserver sends (a KMS v2 DEK seed).
const DEK: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

/// Shaped like what a real TPM returns for a 32-byte DEK: the template with
/// a SHA-256 unique field, and a 158-byte private (the README's 211-byte
/// envelope). A real TPM would not load it: the bytes are made up.
fn tpm_sized_envelope() -> SealedBlobs {
    let public = PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::KeyedHash)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(sealed_attributes().expect("builds"))
        .with_keyed_hash_parameters(PublicKeyedHashParameters::new(KeyedHashScheme::Null))
        .with_keyed_hash_unique_identifier(Digest::try_from(vec![0x5C; 32]).expect("fits"))
        .build()
        .expect("builds");
    let private = Private::try_from(vec![0xA5; 158]).expect("fits");
    blobs_from_created(public, &private).expect("marshals")
}

/// Finding 1 in audit/fuzzing.md: a valid envelope whose public blob's last
/// field, the unique digest, declares 64 bytes and carries none. tpm2-tss
/// decodes it as an empty digest; Decrypt must refuse it as malformed.
fn overlong_unique() -> Vec<u8> {
    let mut envelope = FakeSealer::seal_bytes(b"k").encode();
    // Version, u16 length L, then L bytes of TPM2B_PUBLIC ending in the
    // unique field's u16 size.
    let public_len = usize::from(u16::from_be_bytes([envelope[1], envelope[2]]));
    let unique_size = 1 + 2 + public_len - 2;
    envelope[unique_size..unique_size + 2].copy_from_slice(&64u16.to_be_bytes());
    envelope
}

fn envelope_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let tpm_sized = tpm_sized_envelope().encode();
    let mut other_version = tpm_sized.clone();
    other_version[0] = 0x02;
    vec![
        ("sealed-211-bytes", tpm_sized),
        ("sealed-fake-dek32", FakeSealer::seal_bytes(DEK).encode()),
        ("sealed-fake-dek1", FakeSealer::seal_bytes(b"k").encode()),
        (
            "sealed-fake-dek128",
            FakeSealer::seal_bytes(&[0x42; 128]).encode(),
        ),
        ("version-2", other_version),
        ("finding-1-overlong-unique", overlong_unique()),
    ]
}

fn kms_request_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let key_id = FakeSealer::default().key_id().to_string();
    let decrypt = |ciphertext: Vec<u8>, annotations: HashMap<String, Vec<u8>>| DecryptRequest {
        ciphertext,
        uid: "3c0c2a29-6a3f-4b8e-9d1d-6d3f0c1a2b4c".into(),
        key_id: key_id.clone(),
        annotations,
    };
    let encrypt = EncryptRequest {
        plaintext: DEK.to_vec(),
        uid: "8f2b1c4e-0d7a-4e55-b3c9-2a1f6e9d7c30".into(),
    };
    let sealed = FakeSealer::seal_bytes(DEK).encode();
    let annotated = HashMap::from([("kms.sceau.io/x".to_string(), vec![1])]);
    let with = |call, fault, body: Vec<u8>| {
        let mut input = vec![encode_header(call, fault)];
        input.extend(body);
        input
    };
    vec![
        ("status", with(Call::Status, None, vec![])),
        (
            "status-tpm-busy",
            with(Call::Status, Some(Fault::Busy), vec![]),
        ),
        (
            "encrypt-dek32",
            with(Call::Encrypt, None, encrypt.encode_to_vec()),
        ),
        (
            "encrypt-tpm-timeout",
            with(Call::Encrypt, Some(Fault::Timeout), encrypt.encode_to_vec()),
        ),
        (
            "decrypt-dek32",
            with(
                Call::Decrypt,
                None,
                decrypt(sealed.clone(), HashMap::new()).encode_to_vec(),
            ),
        ),
        (
            "decrypt-real-tpm-size",
            with(
                Call::DecryptAddressed,
                None,
                decrypt(tpm_sized_envelope().encode(), HashMap::new()).encode_to_vec(),
            ),
        ),
        (
            "decrypt-annotated",
            with(
                Call::Decrypt,
                None,
                decrypt(sealed.clone(), annotated).encode_to_vec(),
            ),
        ),
        (
            "decrypt-finding-1-overlong-unique",
            with(
                Call::DecryptAddressed,
                None,
                decrypt(overlong_unique(), HashMap::new()).encode_to_vec(),
            ),
        ),
        (
            "decrypt-tpm-rejects",
            with(
                Call::DecryptAddressed,
                Some(Fault::EnvelopeRejected),
                decrypt(sealed, HashMap::new()).encode_to_vec(),
            ),
        ),
    ]
}

fn cli_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // The first field is $SCEAU_TCTI; the rest are the arguments.
    let argv = |fields: &[&str]| fields.join("\0").into_bytes();
    vec![
        ("no-args", argv(&[""])),
        ("help", argv(&["", "--help"])),
        ("version", argv(&["", "-V"])),
        ("serve-defaults", argv(&["", "serve"])),
        (
            "serve-env-tcti",
            argv(&["swtpm:host=127.0.0.1,port=2321", "serve"]),
        ),
        (
            "serve-every-flag",
            argv(&[
                "",
                "serve",
                "--socket",
                "/run/sceau/kms.sock",
                "--tcti=device:/dev/tpmrm0",
                "--socket-mode",
                "0660",
                "--socket-group=kube",
                "--srk-handle",
                "0x81000001",
                "--request-deadline",
                "2.5s",
                "--allow-uid",
                "1000",
                "--allow-uid=1001",
                "--landlock",
                "require",
                "--seccomp=log",
            ]),
        ),
        (
            "serve-deadline-ms",
            argv(&["", "serve", "--request-deadline=800ms", "--landlock=off"]),
        ),
        ("serve-help", argv(&["", "serve", "-h"])),
        (
            "check",
            argv(&["", "check", "--socket", "/run/sceau/kms.sock"]),
        ),
        (
            "selftest",
            argv(&[
                "device:/dev/tpmrm0",
                "selftest",
                "--sandbox",
                "--tcti",
                "device:/dev/tpm0",
            ]),
        ),
        ("unknown-command", argv(&["", "frobnicate"])),
    ]
}
