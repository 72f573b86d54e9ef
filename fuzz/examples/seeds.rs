//! Writes the seed corpus: `cargo run --manifest-path fuzz/Cargo.toml
//! --example seeds -- fuzz/corpus` (from the repository root).
//!
//! Deterministic: the same files, byte for byte, on every run. Each seed is
//! a well-formed input the targets should accept (or a typical rejection),
//! so that the fuzzer starts from the accepted paths instead of finding them.
//! Cluster-mode seeds come from the material pinned in `fuzz/pinned/`
//! (`sceau_fuzz::pinned`), which `--pin DIR` makes anew with sceau's own
//! sealing code; recovery seeds come from `tests/fixtures/recovery/`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;

use prost::Message;
use sceau_format::duplicate::BOUND_IMPORTED_OBJECT_ATTRIBUTES;
use sceau_format::enrollment::{Request, challenge_files, request_file};
use sceau_format::members::{Member, member_file};
use sceau_format::pcr_policy::{PcrSelection, PcrValues};
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::sealed::SealedBlobs;
use sceau_format::wrapped::{ClusterEnvelope, Encoded, RECIPIENTS_ANNOTATION, Role};
use sceau_fuzz::codec::{
    self, ClusterInput, FIX_DIGEST, KeyFileMode, RecoveryMode, key_file_input, raw_entry_input,
    recovery_input, stored_value_payload,
};
use sceau_fuzz::pinned::{self, DEK as PINNED_DEK};
use sceau_fuzz::{Call, FakeTpm, encode_header};
use sceau_kms_api::pb::{DecryptRequest, EncryptRequest};
use sceau_recover::etcd::{StoredValue, values_from_etcdctl_json, values_from_snapshot};
use sceau_recover::json::{self, Json};
use sceau_tpm::sealed::{blobs_from_created, sealed_attributes};
use sceau_tpm::{Fault, KeyId};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::structures::{
    Digest, KeyedHashScheme, Private, PublicBuilder, PublicKeyedHashParameters,
};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--pin") {
        let dir = args.get(1).map_or("fuzz/pinned", String::as_str);
        return pin(Path::new(dir));
    }
    let root = args.first().map_or("fuzz/corpus", String::as_str);
    let root = Path::new(root);
    write_all(&root.join("envelope"), envelope_seeds())?;
    write_all(&root.join("kms_request"), kms_request_seeds())?;
    write_all(&root.join("cli"), cli_seeds())?;
    write_all(&root.join("cluster_envelope"), cluster_envelope_seeds())?;
    write_all(&root.join("key_files"), key_files_seeds())?;
    write_all(&root.join("boot_policy"), boot_policy_seeds())?;
    write_all(&root.join("recovery_input"), recovery_input_seeds())?;
    write_all(&root.join("spire_attestation"), spire_attestation_seeds())?;
    write_all(&root.join("recovery_share"), recovery_share_seeds())?;
    write_all(&root.join("protected_file"), protected_file_seeds())?;
    write_all(&root.join("event_log"), event_log_seeds())?;
    write_all(&root.join("kek_ledger"), kek_ledger_seeds())
}

/// Share files: the pinned 2-of-3 shares as `recovery-keygen` made them,
/// and two 1-of-N shares of the pinned recovery identity, which `split`
/// makes without randomness (f is the constant polynomial: every share is
/// the key itself), the second with the largest index.
fn recovery_share_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use sceau_format::recovery_share::split;
    let names = |n: usize| -> Vec<String> { (1..=n).map(|i| format!("custodian-{i}")).collect() };
    let identity = pinned::identity();
    let solo = split(&identity, 1, &names(1)).expect("1 of 1");
    let widest = split(&identity, 1, &names(16)).expect("1 of 16");
    let seeds = vec![
        (
            "share-1-of-2-of-3",
            pinned::SHARE_FILES[0].as_bytes().to_vec(),
        ),
        (
            "share-2-of-2-of-3",
            pinned::SHARE_FILES[1].as_bytes().to_vec(),
        ),
        ("share-1-of-1", solo[0].file().as_bytes().to_vec()),
        ("share-16-of-1-of-16", widest[15].file().as_bytes().to_vec()),
    ];
    for (name, bytes) in &seeds {
        let text = std::str::from_utf8(bytes).expect("share files are text");
        assert!(
            sceau_format::recovery_share::Share::parse(text).is_ok(),
            "seed {name} parses"
        );
    }
    seeds
}

/// age files: alice's pinned share file (for the pinned age recipient, so
/// it opens), the same file unarmored (age's binary format) and with CRLF
/// line ends, bob's (for another recipient), carol's (a passphrase file,
/// which the target never opens: see its header) and a share file that is
/// not an age file at all.
fn protected_file_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let armored = pinned::PROTECTED_SHARES[0];
    let text = std::str::from_utf8(armored).expect("armored age files are text");
    let binary = sceau_format::armor::decode(text, "AGE ENCRYPTED FILE")
        .expect("an armored age file")
        .bytes
        .to_vec();
    assert!(binary.starts_with(b"age-encryption.org/v1\n"));
    let crlf = text.replace('\n', "\r\n").into_bytes();
    let identities = pinned::age_identities();
    for file in [armored, &binary, &crlf] {
        let opened = sceau_recover::custody::open(
            file,
            "seed",
            &identities,
            &mut sceau_recover::custody::Passphrases::new(None),
        )
        .expect("alice's share opens in each form");
        assert_eq!(opened.as_slice(), pinned::SHARE_FILES[0].as_bytes());
    }
    vec![
        ("alice-armored", armored.to_vec()),
        ("alice-binary", binary),
        ("alice-crlf", crlf),
        ("bob-other-recipient", pinned::PROTECTED_SHARES[1].to_vec()),
        ("carol-passphrase", pinned::PROTECTED_SHARES[2].to_vec()),
        (
            "plaintext-share",
            pinned::SHARE_FILES[0].as_bytes().to_vec(),
        ),
    ]
}

/// The SPIRE attestor's three messages: the pinned software forgery's
/// payload (which passes the payload checks), a challenge and a response.
fn spire_attestation_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use sceau_spire::payload::{Challenge, ChallengeResponse};
    let (payload, _) = sceau_spire::server::verify::test_support::forgery_with_ek(3);
    let challenge = Challenge {
        credential_blob: vec![0x11; 68],
        encrypted_secret: vec![0x22; 68],
        nonce: [0x33; 32],
        quote_pcrs: vec![0, 7],
    };
    let response = ChallengeResponse {
        credential: zeroize::Zeroizing::new(vec![0x44; 32]),
        quote: vec![0x55; 145],
        quote_signature: vec![0x66; 72],
        pcr_values: vec![vec![0x77; 32], vec![0x88; 32]],
        event_log: Vec::new(),
    };
    let seed = |mode: u8, bytes: Vec<u8>| [vec![mode], bytes].concat();
    vec![
        ("payload", seed(0, payload.encode())),
        ("challenge", seed(1, challenge.encode())),
        ("response", seed(2, response.encode())),
    ]
}

/// The SPIRE server's measured-boot evidence: every real firmware log in
/// `crates/spire/tests/fixtures/event_log/` (`*.bin`, named without the
/// extension), and a small SHA-256-only log made here that reaches every
/// fact (a startup locality, Secure Boot on, a boot application, PCRs 0–7
/// each closed by a clean separator), much shorter than the real ones.
fn event_log_seeds() -> Vec<(String, Vec<u8>)> {
    use sceau_spire::server::event_log::{BOOT_PCRS, Bank, EventLog, Limits};
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/spire/tests/fixtures/event_log");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name())
        .filter_map(|name| name.to_str()?.strip_suffix(".bin").map(str::to_owned))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no *.bin in {}", dir.display());
    let mut seeds: Vec<(String, Vec<u8>)> = names
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(format!("{name}.bin"))).expect("a fixture log");
            (name, bytes)
        })
        .collect();
    seeds.push(("small-sha256".to_owned(), small_event_log()));
    for (name, bytes) in &seeds {
        let log = EventLog::parse(bytes, Limits::default())
            .unwrap_or_else(|e| panic!("seed {name}: {e}"));
        assert!(log.has_bank(Bank::Sha256), "seed {name}");
    }
    let small = EventLog::parse(&seeds.last().expect("small").1, Limits::default()).expect("small");
    let replayed = small.replay(Bank::Sha256).expect("a SHA-256 replay");
    let quoted: Vec<(u8, &[u8])> = BOOT_PCRS
        .iter()
        .map(|&pcr| (pcr, replayed[usize::from(pcr)].as_slice()))
        .collect();
    let facts = small
        .matches(Bank::Sha256, &quoted)
        .expect("its own replay")
        .facts();
    assert!(facts.complete && facts.secure_boot == Some(true) && facts.firmware_debugger == Some(false));
    assert_eq!(facts.boot_applications, Some(vec![vec![0x42; 32]]));
    seeds
}

/// A crypto-agile log with one bank (SHA-256): the Spec ID event, the
/// startup locality 3, and a short boot (module documentation of
/// `crates/spire/src/server/event_log.rs`).
fn small_event_log() -> Vec<u8> {
    use sceau_spire::server::event_log::ALG_SHA256;
    use sceau_spire::server::event_log::event_type::*;
    let mut spec_id = b"Spec ID Event03\0".to_vec();
    spec_id.extend(0u32.to_le_bytes()); // platformClass
    spec_id.extend([0, 2, 0, 2]); // version 2.0, errata 0, uintnSize 2
    spec_id.extend(1u32.to_le_bytes());
    spec_id.extend(ALG_SHA256.to_le_bytes());
    spec_id.extend(32u16.to_le_bytes());
    spec_id.push(0); // vendorInfoSize
    let mut out = Vec::new();
    out.extend(0u32.to_le_bytes());
    out.extend(EV_NO_ACTION.to_le_bytes());
    out.extend([0; 20]);
    out.extend(u32::try_from(spec_id.len()).expect("short").to_le_bytes());
    out.extend(spec_id);
    /// A TCG_PCR_EVENT2 with its one SHA-256 digest.
    fn event(out: &mut Vec<u8>, pcr: u32, kind: u32, digest: &[u8], data: &[u8]) {
        out.extend(pcr.to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        out.extend(ALG_SHA256.to_le_bytes());
        out.extend(digest);
        out.extend(u32::try_from(data.len()).expect("short").to_le_bytes());
        out.extend(data);
    }
    /// One whose digest is the hash of its data.
    fn measured(out: &mut Vec<u8>, pcr: u32, kind: u32, data: &[u8]) {
        event(out, pcr, kind, &sha256(data), data);
    }
    event(
        &mut out,
        0,
        EV_NO_ACTION,
        &[0; 32],
        b"StartupLocality\0\x03",
    );
    measured(&mut out, 0, EV_S_CRTM_VERSION, b"v\0");
    // UEFI_VARIABLE_DATA: EFI_GLOBAL_VARIABLE, "SecureBoot", one byte: 1.
    let mut secure_boot = vec![
        0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b,
        0x8c,
    ];
    secure_boot.extend(10u64.to_le_bytes());
    secure_boot.extend(1u64.to_le_bytes());
    secure_boot.extend("SecureBoot".encode_utf16().flat_map(u16::to_le_bytes));
    secure_boot.push(1);
    measured(&mut out, 7, EV_EFI_VARIABLE_DRIVER_CONFIG, &secure_boot);
    for pcr in 0..8 {
        measured(&mut out, pcr, EV_SEPARATOR, &[0; 4]);
    }
    event(
        &mut out,
        4,
        EV_EFI_BOOT_SERVICES_APPLICATION,
        &[0x42; 32],
        b"\0\0",
    );
    measured(&mut out, 5, EV_EFI_ACTION, b"Exit Boot Services Invocation");
    out
}

/// Boot-state binding's files, each after its mode byte: a signed policy
/// file as sceau writes it (a fixed key, so the seed does not change) and as
/// systemd-measure writes it (two banks, no fingerprint), `tpm2_pcrread`
/// text, a PCR list, an OpenSSL P-256 and RSA-2048 public key, sceau's
/// private key file, and a DER signature.
fn boot_policy_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use sceau_format::pcr_policy::{SignedPolicy, write_signed_policies};
    use sceau_format::policy_key::PolicySigner;
    let with_mode = |mode: u8, body: &[u8]| [&[mode][..], body].concat();
    let pcrread = "  sha1:\n    7 : 0x0000000000000000000000000000000000000000\n  sha256:\n    7 : 0x90F4B39548DF55AD6187A1D20D731ECEE78C545B94AFD16F42EF7592D99CD365\n    11: 0x0000000000000000000000000000000000000000000000000000000000000000\n";
    let values = PcrValues::parse(pcrread).expect("pcrread text");
    let pcrs = PcrSelection::parse("7,11").expect("a list");
    let signer = PolicySigner::from_bytes(&[0x31; 32]);
    let signer_pem = signer.to_pem();
    // RFC 6979 nonces: the same key and policy give the same signature.
    let serial = sceau_format::revocation::Serial::new(1);
    let signed = SignedPolicy::sign(&signer, pcrs, &values, serial).expect("values for both");
    let signature = signed.signature.clone();
    let sceau_file = write_signed_policies(&[signed]);
    let systemd_file = format!(
        "{{\"sha1\":[{{\"pcrs\":[11],\"pol\":\"{}\",\"sig\":\"AA==\"}}],\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{}\",\"sig\":\"AQID\"}},{{\"pcrs\":[11],\"pol\":\"{}\",\"sig\":\"BAUG\"}}]}}",
        "00".repeat(20),
        "11".repeat(32),
        "22".repeat(32)
    );
    let p256 = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEifpyQBKfDQkP3+L5rmMYZTZJAVox\naIlLvu3QKXXe3HQEPdUVRJlDtlcSiQNFXksXkP4CazhnIzqu9oXSwAbnPw==\n-----END PUBLIC KEY-----\n";
    vec![
        ("policy-sceau", with_mode(0, sceau_file.as_bytes())),
        ("policy-systemd", with_mode(0, systemd_file.as_bytes())),
        ("pcrread", with_mode(1, pcrread.as_bytes())),
        ("pcr-list", with_mode(2, b"7,11")),
        // «A PCR list on the terminal» (audit/fuzzing.md).
        (
            "regression-pcr-list-control-character",
            with_mode(2, b"7\x1b]0;x\x07"),
        ),
        ("public-p256", with_mode(3, p256.as_bytes())),
        (
            "public-sceau",
            with_mode(3, signer.public().to_pem().as_bytes()),
        ),
        ("private-sceau", with_mode(4, signer_pem.as_bytes())),
        ("signature-der", with_mode(6, &signature)),
        ("serial", with_mode(5, b"42")),
    ]
}

fn write_all<N: AsRef<str>>(dir: &Path, seeds: Vec<(N, Vec<u8>)>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name.as_ref()), bytes)?;
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
        .with_object_attributes(sealed_attributes(false).expect("builds"))
        .with_keyed_hash_parameters(PublicKeyedHashParameters::new(KeyedHashScheme::Null))
        .with_keyed_hash_unique_identifier(Digest::try_from(vec![0x5C; 32]).expect("fits"))
        .build()
        .expect("builds");
    let private = Private::try_from(vec![0xA5; 158]).expect("fits");
    blobs_from_created(public, &private).expect("marshals")
}

/// «The public blob tpm2-tss misreads» in audit/fuzzing.md: a valid
/// envelope whose public blob's last field, the unique digest, declares 64
/// bytes and carries none. tpm2-tss decodes it as an empty digest; Decrypt
/// must refuse it as malformed.
fn overlong_unique() -> Vec<u8> {
    let mut envelope = FakeTpm::seal_bytes(b"k").encode();
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
        ("sealed-fake-dek32", FakeTpm::seal_bytes(DEK).encode()),
        ("sealed-fake-dek1", FakeTpm::seal_bytes(b"k").encode()),
        (
            "sealed-fake-dek128",
            FakeTpm::seal_bytes(&[0x42; 128]).encode(),
        ),
        ("version-2", other_version),
        ("regression-overlong-unique", overlong_unique()),
    ]
}

fn kms_request_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let key_id = FakeTpm::default().key_id().to_string();
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
    let sealed = FakeTpm::seal_bytes(DEK).encode();
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
            "decrypt-regression-overlong-unique",
            with(
                Call::DecryptAddressed,
                None,
                decrypt(overlong_unique(), HashMap::new()).encode_to_vec(),
            ),
        ),
        (
            // A key_id whose escaped echo once pushed the refusal past the
            // service's 512-byte cut (audit/fuzzing.md, «The escaped key_id
            // past the 512-byte cut»).
            "decrypt-regression-escaped-key-id",
            with(
                Call::Decrypt,
                None,
                DecryptRequest {
                    key_id: "\u{1a}".repeat(100),
                    ..decrypt(sealed.clone(), HashMap::new())
                }
                .encode_to_vec(),
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
        (
            "serve-cluster",
            argv(&[
                "",
                "serve",
                "--members=/etc/sceau/members",
                "--recovery-key",
                "/etc/sceau/recovery.pub",
            ]),
        ),
        (
            "srk-public",
            argv(&["", "srk-public", "--srk-handle=0x81000001"]),
        ),
        (
            "recover-snapshot",
            argv(&[
                "",
                "recover",
                "--identity",
                "recovery.identity",
                "--etcd-snapshot=snapshot.db",
                "--force",
            ]),
        ),
        (
            "enroll-verify",
            argv(&[
                "",
                "enroll",
                "verify",
                "--request",
                "node-1.request",
                "--expected=node-1.expected",
                "--response",
                "node-1.response",
                "--member-out",
                "members/node-1.pub",
            ]),
        ),
        (
            "regression-enroll-extra-flags",
            argv(&[
                "",
                "enroll",
                "request",
                "--response",
                "r",
                "--expected=e",
                "--request",
                "q",
            ]),
        ),
    ]
}

/// Makes the pinned cluster material anew (see `sceau_fuzz::pinned`): fresh
/// throwaway keys, envelopes sealed by `Membership::seal`, an enrollment.
fn pin(dir: &Path) -> std::io::Result<()> {
    let fresh = || RecoveryIdentity::generate().public().clone();
    let recovery = RecoveryIdentity::generate();
    let members: Vec<Member> = (0..4)
        .map(|i| Member {
            srk: fresh(),
            signing: pinned::signer(i).public(),
        })
        .collect();
    let ek = Member {
        srk: fresh(),
        signing: pinned::signer(0).public(),
    };
    let member_text =
        |member: &Member| member_file(member, &KeyId::from_srk_name(member.srk.name()));

    // Membership reads its members from a directory.
    let scratch = std::env::temp_dir().join(format!("sceau-fuzz-pin-{}", std::process::id()));
    let recovery_path = scratch.join("recovery.pub");
    std::fs::create_dir_all(&scratch)?;
    std::fs::write(&recovery_path, recovery.public_file())?;
    let seal = |count: usize| -> std::io::Result<Encoded> {
        let members_dir = scratch.join(format!("members-{count}"));
        std::fs::create_dir_all(&members_dir)?;
        for (i, member) in members[..count].iter().enumerate() {
            std::fs::write(
                members_dir.join(format!("node-{i}.pub")),
                member_text(member),
            )?;
        }
        let membership = sceau::cluster::load::load(
            &members_dir,
            Some(&recovery_path),
            &[(0, members[0].clone())],
            None,
        )
        .expect("the membership loads")
        .0;
        let to_sign = membership.seal(PINNED_DEK).expect("seals");
        let signature = pinned::signer(0).sign(to_sign.digest());
        Ok(to_sign.finish(&signature))
    };
    let inline = seal(2)?;
    let annotated = seal(4)?;
    std::fs::remove_dir_all(&scratch)?;
    assert!(
        inline.annotations.is_empty(),
        "2 members + recovery fit 1 KiB"
    );
    let recipients = annotated.annotations[RECIPIENTS_ANNOTATION].clone();

    let certificate = pinned::fake_ek_certificate(&ek.srk);
    let srk_id = KeyId::from_srk_name(members[0].srk.name());
    let request = request_file(&members[0], &srk_id, &ek.srk, Some(&certificate));
    let (challenge, expected) =
        challenge_files(&Request::parse(&request).expect("the request parses"));

    std::fs::create_dir_all(dir)?;
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            "recovery.identity".into(),
            recovery.identity_file().as_bytes().to_vec(),
        ),
        ("ek.pub".into(), member_text(&ek).into_bytes()),
        ("inline.ciphertext".into(), inline.ciphertext),
        ("annotated.ciphertext".into(), annotated.ciphertext),
        ("annotated.recipients".into(), recipients),
        ("enroll.request".into(), request.into_bytes()),
        ("enroll.challenge".into(), challenge.into_bytes()),
        ("enroll.expected".into(), expected.as_bytes().to_vec()),
    ];
    // Endorsed, as `sceau-recover enroll verify --enrollment-identity`
    // writes them, by the pinned enrollment key and for the pinned EK.
    let enrollment = pinned::enrollment_identity();
    for (i, member) in members.iter().enumerate() {
        let endorsed = member_text(member) + &enrollment.endorse(member, ek.srk.name());
        files.push((format!("member-{i}.pub"), endorsed.into_bytes()));
    }
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes)?;
    }
    pin_shares(dir)
}

/// The recovery shares of `sceau_fuzz::pinned`: a fresh throwaway key split
/// 2 of 3 among alice, bob and carol, and each share as `recovery-keygen`
/// writes it (alice's for the pinned age recipient, bob's for a recipient
/// made here and dropped, carol's under the pinned passphrase).
fn pin_shares(dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;

    use sceau_format::recovery_share::split;
    use sceau_recover::custody::{Passphrases, Protection, protect};

    let names = ["alice", "bob", "carol"].map(String::from);
    let shares = split(&RecoveryIdentity::generate(), 2, &names).expect("2 of 3");
    let other = age::x25519::Identity::generate().to_public().to_string();
    // carol's passphrase comes from a file, as `--passphrase-fd` gives it.
    let passphrase_path =
        std::env::temp_dir().join(format!("sceau-fuzz-pin-passphrase-{}", std::process::id()));
    std::fs::write(&passphrase_path, format!("{}\n", pinned::SHARE_PASSPHRASE))?;
    let passphrase_file = std::fs::File::open(&passphrase_path)?;
    std::fs::remove_file(&passphrase_path)?;
    let fd = u32::try_from(passphrase_file.as_raw_fd()).expect("an open descriptor");
    let protections = [
        Protection::Recipient(pinned::AGE_RECIPIENT.into()),
        Protection::Recipient(other),
        Protection::Passphrase,
    ];
    for ((name, share), protection) in names.iter().zip(&shares).zip(&protections) {
        let text = share.file();
        let file = protect(
            text.as_bytes(),
            protection,
            &mut Passphrases::new(Some(fd)),
            &format!("{name}'s share"),
        )
        .expect("encrypts");
        std::fs::write(dir.join(format!("{name}.share")), text.as_bytes())?;
        std::fs::write(dir.join(format!("{name}.share.age")), file)?;
    }
    Ok(())
}

fn cluster_envelope_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let [(inline, _), (annotated, annotations)] = pinned::envelopes();
    let input = |flags, ciphertext: &[u8], annotations: &HashMap<String, Vec<u8>>| {
        let mut annotations: Vec<_> = annotations.clone().into_iter().collect();
        annotations.sort();
        ClusterInput {
            flags,
            ciphertext: ciphertext.to_vec(),
            annotations,
        }
        .encode()
    };
    let none = HashMap::new();
    let mut members_only = ClusterEnvelope::parse(&inline, &none).expect("pinned");
    members_only.recipients.retain(|r| r.role == Role::Member);
    let members_only = members_only.encode().expect("encodes");
    let stray = HashMap::from([("kms.example.com/x".to_string(), b"1".to_vec())]);
    let known = &pinned::known_entries()[0];
    // «The annotation layout for recipients that fit inline»
    // (audit/fuzzing.md): the inline envelope's recipients moved to the
    // annotation.
    // (Unsigned, as the finding's envelope was.)
    let inline_envelope = ClusterEnvelope::parse(&inline, &none).expect("pinned");
    let unsigned = ClusterEnvelope {
        signature: None,
        ..inline_envelope.clone()
    }
    .encode()
    .expect("encodes")
    .ciphertext;
    let block = &unsigned[4 + inline_envelope.object_public.len()..];
    let mut moved = unsigned[..4 + inline_envelope.object_public.len()].to_vec();
    moved[1] = 0x01;
    moved.extend_from_slice(&sha256(block));
    let moved_annotations = HashMap::from([(RECIPIENTS_ANNOTATION.to_string(), block.to_vec())]);
    // The pinned envelope's object, bound to a boot policy key: noDA alone
    // and a 32-byte authPolicy before the scheme (built from the pinned bytes,
    // so that the seed does not change from one generation to the next).
    let area = &inline_envelope.object_public;
    let mut bound_area = area[..4].to_vec();
    bound_area.extend_from_slice(&BOUND_IMPORTED_OBJECT_ATTRIBUTES.to_be_bytes());
    bound_area.extend_from_slice(&[0, 32]);
    bound_area.extend_from_slice(&[0x5a; 32]);
    bound_area.extend_from_slice(&area[10..]);
    let bound = ClusterEnvelope {
        object_public: bound_area,
        signature: None,
        ..inline_envelope.clone()
    }
    .encode()
    .expect("encodes")
    .ciphertext;
    vec![
        ("inline-2-members-recovery", input(0, &inline, &none)),
        ("inline-bound-object-unsigned", input(0, &bound, &none)),
        (
            "annotated-4-members-recovery",
            input(0, &annotated, &annotations),
        ),
        (
            "annotated-fix-digest",
            input(FIX_DIGEST, &annotated, &annotations),
        ),
        (
            "inline-members-only",
            input(0, &members_only.ciphertext, &none),
        ),
        ("inline-stray-annotation", input(0, &inline, &stray)),
        (
            "raw-recovery-entry",
            raw_entry_input(
                &known.object_public,
                &known.blob.duplicate,
                &known.blob.in_sym_seed,
            ),
        ),
        (
            "version-1",
            input(0, &FakeTpm::seal_bytes(DEK).encode(), &none),
        ),
        (
            "regression-raw-long-public",
            raw_entry_input(
                &[0x5a; 1000],
                &known.blob.duplicate,
                &known.blob.in_sym_seed,
            ),
        ),
        (
            "regression-annotation-not-needed",
            input(0, &moved, &moved_annotations),
        ),
    ]
}

fn key_files_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use sceau_fuzz::codec::KEY_FILE_LABELS as LABELS;
    let label = |wanted: &str| {
        KeyFileMode::Armored(LABELS.iter().position(|l| *l == wanted).expect("a label"))
    };
    let srk = pinned::member(0);
    let ek = pinned::ek();
    let srk_id = KeyId::from_srk_name(srk.name());
    let public_file = pinned::identity().public_file();
    let verify = [pinned::EXPECTED, "\0", &pinned::response()].concat();
    // «The challenge's srk_name on the terminal» (audit/fuzzing.md): a control
    // character in the challenge's srk_name line.
    let pin = format!("srk_name: {}", sceau_format::key_id::hex(srk.name()));
    let hostile_challenge = pinned::CHALLENGE.replace(&pin, "srk_name: \x1b]0;x\x07");
    assert_ne!(hostile_challenge, pinned::CHALLENGE);
    // «A member file's pin on the terminal» (audit/fuzzing.md): a control
    // character in a member file's signing-name line.
    let signing_pin = format!(
        "signing-name: {}",
        sceau_format::key_id::hex(
            sceau_format::members::parse_member(pinned::MEMBER_FILES[0])
                .expect("a pinned member file")
                .signing
                .name()
        )
    );
    let hostile_member =
        pinned::MEMBER_FILES[0].replace(&signing_pin, "signing-name: \x1b]0;owned\x07");
    assert_ne!(hostile_member, pinned::MEMBER_FILES[0]);
    vec![
        (
            "armored-member",
            key_file_input(label("TPM2B_PUBLIC"), pinned::MEMBER_FILES[0].as_bytes()),
        ),
        (
            "armored-recovery-public",
            key_file_input(label("SCEAU RECOVERY PUBLIC KEY"), public_file.as_bytes()),
        ),
        (
            "armored-challenge",
            key_file_input(
                label("SCEAU ENROLLMENT CHALLENGE"),
                pinned::CHALLENGE.as_bytes(),
            ),
        ),
        (
            "raw-srk",
            key_file_input(KeyFileMode::RawKey, &srk.to_tpm2b_public()),
        ),
        (
            "request-with-certificate",
            key_file_input(KeyFileMode::Request, pinned::REQUEST.as_bytes()),
        ),
        (
            "request-without-certificate",
            key_file_input(
                KeyFileMode::Request,
                request_file(&pinned::request().member, &srk_id, &ek, None).as_bytes(),
            ),
        ),
        (
            "challenge",
            key_file_input(KeyFileMode::Challenge, pinned::CHALLENGE.as_bytes()),
        ),
        (
            "verify",
            key_file_input(KeyFileMode::Verify, verify.as_bytes()),
        ),
        (
            "identity",
            key_file_input(KeyFileMode::Identity, pinned::IDENTITY.as_bytes()),
        ),
        (
            "regression-challenge-control-character",
            key_file_input(KeyFileMode::Challenge, hostile_challenge.as_bytes()),
        ),
        (
            "regression-member-pin-control-character",
            key_file_input(label("TPM2B_PUBLIC"), hostile_member.as_bytes()),
        ),
    ]
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/recovery");

/// One object of vectors.json: (etcd key, stored value, plaintext).
struct Vector {
    etcd_key: String,
    stored: Vec<u8>,
    plaintext: Vec<u8>,
}

fn vectors() -> Vec<Vector> {
    let text = std::fs::read_to_string(format!("{FIXTURES}/vectors.json")).expect("vectors.json");
    let root = json::parse_stream(&text).expect("JSON").remove(0);
    let string = |j: &Json, name: &str| match j.get(name) {
        Some(Json::String(s)) => s.clone(),
        _ => panic!("vectors.json: no string {name}"),
    };
    let bytes = |j: &Json, name: &str| codec::unbase64(&string(j, name)).expect("base64");
    assert_eq!(string(&root, "seed"), pinned::VECTOR_SEED);
    assert_eq!(string(&root, "aes_gcm_key"), pinned::VECTOR_AES_KEY);
    let Some(Json::Array(objects)) = root.get("objects") else {
        panic!("vectors.json: no objects")
    };
    objects
        .iter()
        .map(|o| Vector {
            etcd_key: string(o, "etcd_key"),
            stored: bytes(o, "stored"),
            plaintext: bytes(o, "plaintext"),
        })
        .collect()
}

/// bbolt's on-disk format (crates/recover/src/bbolt.rs describes it), written for
/// a 1 KiB page size, which etcd never uses but bbolt and sceau accept: it
/// keeps the seed small.
mod bolt {
    pub const PAGE: usize = 1024;
    const LEAF: u16 = 0x02;
    const BRANCH: u16 = 0x01;
    const META: u16 = 0x04;
    const FREELIST: u16 = 0x10;
    pub const BUCKET: u32 = 0x01;

    fn header(id: u64, flags: u16, count: usize, body: &[u8], pad: bool) -> Vec<u8> {
        let len = 16 + body.len();
        let pages = if pad { len.div_ceil(PAGE) } else { 1 };
        let mut page = Vec::with_capacity(pages * PAGE);
        page.extend_from_slice(&id.to_le_bytes());
        page.extend_from_slice(&flags.to_le_bytes());
        page.extend_from_slice(&u16::try_from(count).expect("few elements").to_le_bytes());
        page.extend_from_slice(&u32::try_from(pages - 1).expect("small").to_le_bytes());
        page.extend_from_slice(body);
        if pad {
            page.resize(pages * PAGE, 0);
        }
        page
    }

    /// Elements (four u32 words each: `pos` in the second for a leaf, the
    /// first for a branch, counted from the element), then the payloads.
    fn page(id: u64, flags: u16, elements: &[([u32; 4], Vec<u8>)], pad: bool) -> Vec<u8> {
        let n = elements.len();
        let pos_word = if flags == LEAF { 1 } else { 0 };
        let mut body = Vec::new();
        let mut data = Vec::new();
        for (i, (words, payload)) in elements.iter().enumerate() {
            let mut words = *words;
            words[pos_word] = u32::try_from((n - i) * 16 + data.len()).expect("small");
            for word in words {
                body.extend_from_slice(&word.to_le_bytes());
            }
            data.extend_from_slice(payload);
        }
        body.extend_from_slice(&data);
        header(id, flags, n, &body, pad)
    }

    fn len32(bytes: &[u8]) -> u32 {
        u32::try_from(bytes.len()).expect("small")
    }

    /// A leaf page of (flags, key, value); `pad: false` for an inline bucket.
    pub fn leaf(id: u64, entries: &[(u32, &[u8], &[u8])], pad: bool) -> Vec<u8> {
        let elements: Vec<_> = entries
            .iter()
            .map(|(flags, k, v)| ([*flags, 0, len32(k), len32(v)], [*k, *v].concat()))
            .collect();
        page(id, LEAF, &elements, pad)
    }

    /// A branch page of (first key, child page).
    pub fn branch(id: u64, children: &[(&[u8], u64)]) -> Vec<u8> {
        let elements: Vec<_> = children
            .iter()
            .map(|(k, pgid)| {
                let [lo, hi] = [*pgid as u32, (*pgid >> 32) as u32];
                ([0, len32(k), lo, hi], k.to_vec())
            })
            .collect();
        page(id, BRANCH, &elements, true)
    }

    pub fn meta(id: u64, txid: u64, root: u64, freelist: u64, high_water: u64) -> Vec<u8> {
        let mut m = Vec::new();
        for word in [0xED0C_DAED_u32, 2, PAGE as u32, 0] {
            m.extend_from_slice(&word.to_le_bytes());
        }
        for word in [root, 0, freelist, high_water, txid] {
            m.extend_from_slice(&word.to_le_bytes());
        }
        let sum = m.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        m.extend_from_slice(&sum.to_le_bytes());
        header(id, META, 0, &m, true)
    }

    pub fn freelist(id: u64) -> Vec<u8> {
        header(id, FREELIST, 0, &[], true)
    }

    /// An inline bucket's value: a zero root, a zero sequence, its leaf.
    pub fn inline_bucket(entries: &[(u32, &[u8], &[u8])]) -> Vec<u8> {
        [&[0u8; 16][..], &leaf(0, entries, false)].concat()
    }

    /// A bucket whose root is page `pgid`.
    pub fn bucket(pgid: u64) -> Vec<u8> {
        [pgid.to_le_bytes(), [0u8; 8]].concat()
    }
}

/// etcd's key-bucket key for revision `main` (sub 0), `t` for a deletion.
fn revision(main: u64, tombstone: bool) -> Vec<u8> {
    let mut key = [&main.to_be_bytes()[..], b"_", &0u64.to_be_bytes()].concat();
    if tombstone {
        key.push(b't');
    }
    key
}

/// A small etcd database holding five of the fixture's values, a superseded
/// revision and a deleted key, over a branch page, two leaves (one with an
/// overflow page) and an inline bucket. Returns the file (no trailer) and
/// the live values it must read back as.
fn small_snapshot(vectors: &[Vector]) -> (Vec<u8>, Vec<StoredValue>) {
    let stored = |key: &str| {
        let v = vectors
            .iter()
            .find(|v| v.etcd_key == key)
            .expect("a vector");
        v.stored.clone()
    };
    let kv = |key: &str, value: Vec<u8>, create: i64, modified: i64, version: i64| StoredValue {
        key: key.as_bytes().to_vec(),
        value,
        create_revision: create,
        mod_revision: modified,
        version,
    };
    let alpha = "/registry/secrets/default/alpha";
    let gone = "/registry/secrets/kube-system/gone";
    // (revision, tombstone, KeyValue), in revision order.
    let history = [
        (2, false, kv(alpha, b"superseded".to_vec(), 2, 2, 1)),
        (3, false, kv(alpha, stored(alpha), 2, 3, 2)),
        (4, false, kv(gone, b"deleted below".to_vec(), 4, 4, 1)),
        (5, true, kv(gone, Vec::new(), 0, 5, 0)),
        (
            6,
            false,
            kv(
                "/registry/secrets/legacy/old-key",
                stored("/registry/secrets/legacy/old-key"),
                6,
                6,
                1,
            ),
        ),
        (
            7,
            false,
            kv(
                "/registry/secrets/default/json-stored",
                stored("/registry/secrets/default/json-stored"),
                7,
                7,
                1,
            ),
        ),
        (
            8,
            false,
            kv(
                "/registry/secrets/default/empty",
                stored("/registry/secrets/default/empty"),
                8,
                8,
                1,
            ),
        ),
        (
            9,
            false,
            kv(
                "/other/not-kubernetes",
                b"stored in the clear".to_vec(),
                9,
                9,
                1,
            ),
        ),
    ];
    let records: Vec<(Vec<u8>, Vec<u8>)> = history
        .iter()
        .map(|(rev, tomb, kv)| (revision(*rev, *tomb), codec::key_value(kv)))
        .collect();
    let entries = |range: std::ops::Range<usize>| -> Vec<(u32, &[u8], &[u8])> {
        records[range]
            .iter()
            .map(|(k, v)| (0, k.as_slice(), v.as_slice()))
            .collect()
    };
    let consistent_index = 9u64.to_be_bytes();
    let meta_bucket = bolt::inline_bucket(&[(0, b"consistent_index", &consistent_index)]);
    let key_bucket = bolt::bucket(4);
    let leaf_a = bolt::leaf(5, &entries(0..3), true);
    let leaf_b = bolt::leaf(6, &entries(3..8), true);
    assert_eq!(leaf_a.len(), bolt::PAGE);
    assert!(leaf_b.len() > bolt::PAGE, "the second leaf overflows");
    let high_water = 6 + (leaf_b.len() / bolt::PAGE) as u64;
    let file = [
        bolt::meta(0, 10, 3, 2, high_water),
        bolt::meta(1, 11, 3, 2, high_water),
        bolt::freelist(2),
        bolt::leaf(
            3,
            &[
                (bolt::BUCKET, b"key", &key_bucket),
                (bolt::BUCKET, b"meta", &meta_bucket),
            ],
            true,
        ),
        bolt::branch(4, &[(&records[0].0, 5), (&records[3].0, 6)]),
        leaf_a,
        leaf_b,
    ]
    .concat();
    let mut live: Vec<StoredValue> = history
        .into_iter()
        .filter(|(_, _, kv)| kv.key != gone.as_bytes() && kv.value != b"superseded")
        .map(|(_, _, kv)| kv)
        .collect();
    live.sort_by(|a, b| a.key.cmp(&b.key));
    (file, live)
}

/// SHA-256, from the one place the fuzz crate can reach it.
fn sha256(bytes: &[u8]) -> Vec<u8> {
    sceau_format::wire::sha256_name(bytes)[2..].to_vec()
}

/// A v1 ConfigMap as the apiserver's protobuf codec writes it: not a Secret.
fn configmap_plaintext() -> Vec<u8> {
    let mut type_meta = Vec::new();
    codec::bytes_field(&mut type_meta, 1, b"v1");
    codec::bytes_field(&mut type_meta, 2, b"ConfigMap");
    let mut meta = Vec::new();
    codec::bytes_field(&mut meta, 1, b"settings");
    codec::bytes_field(&mut meta, 3, b"default");
    let mut raw = Vec::new();
    codec::bytes_field(&mut raw, 1, &meta);
    codec::bytes_field(&mut raw, 2, &codec::map_entry(b"mode", b"fast"));
    let mut unknown = b"k8s\0".to_vec();
    codec::bytes_field(&mut unknown, 1, &type_meta);
    codec::bytes_field(&mut unknown, 2, &raw);
    unknown
}

fn recovery_input_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let vectors = vectors();
    let (db, live) = small_snapshot(&vectors);
    assert_eq!(
        values_from_snapshot(&db).expect("the small snapshot reads"),
        live
    );
    let with_trailer = [db.clone(), sha256(&db)].concat();
    assert_eq!(values_from_snapshot(&with_trailer).expect("reads"), live);

    let fixture_json =
        std::fs::read_to_string(format!("{FIXTURES}/etcdctl-get.json")).expect("etcdctl-get.json");
    let header = fixture_json
        .strip_prefix('{')
        .and_then(|t| t.split_once(",\"kvs\""))
        .expect("the fixture starts with its header")
        .0;
    let json_text = [
        codec::etcdctl_json(header, &live),
        codec::etcdctl_json(header, &[]),
    ]
    .concat();
    assert_eq!(values_from_etcdctl_json(&json_text).expect("parses"), live);

    let vector = |key: &str| {
        vectors
            .iter()
            .find(|v| v.etcd_key == key)
            .expect("a vector")
    };
    let stored = |key: &str| {
        let v = vector(key);
        recovery_input(
            RecoveryMode::StoredValue,
            &stored_value_payload(v.etcd_key.as_bytes(), &v.stored),
        )
    };
    let plaintext = |key: &str| recovery_input(RecoveryMode::Plaintext, &vector(key).plaintext);
    vec![
        (
            "snapshot-small",
            recovery_input(RecoveryMode::Snapshot, &db),
        ),
        (
            "snapshot-small-with-trailer",
            recovery_input(RecoveryMode::Snapshot, &with_trailer),
        ),
        (
            "etcdctl-json",
            recovery_input(RecoveryMode::EtcdctlJson, json_text.as_bytes()),
        ),
        (
            "stored-seed-protobuf",
            stored("/registry/secrets/default/alpha"),
        ),
        ("stored-aes-key", stored("/registry/secrets/legacy/old-key")),
        (
            "stored-json",
            stored("/registry/secrets/default/json-stored"),
        ),
        (
            "stored-empty-secret",
            stored("/registry/secrets/default/empty"),
        ),
        (
            "stored-in-the-clear",
            recovery_input(
                RecoveryMode::StoredValue,
                &stored_value_payload(b"/registry/configmaps/default/x", b"k8s\0plain"),
            ),
        ),
        (
            "plaintext-secret",
            plaintext("/registry/secrets/default/alpha"),
        ),
        (
            "plaintext-json",
            plaintext("/registry/secrets/default/json-stored"),
        ),
        (
            "plaintext-configmap",
            recovery_input(RecoveryMode::Plaintext, &configmap_plaintext()),
        ),
        (
            "regression-key-control-character",
            recovery_input(
                RecoveryMode::StoredValue,
                &stored_value_payload(
                    b"/registry/secrets/default/\x1b[2Jx",
                    b"k8s:enc:kms:v2:sceau:",
                ),
            ),
        ),
        (
            "review-overlapping-elements",
            recovery_input(RecoveryMode::Snapshot, &overlapping_snapshot(&db)),
        ),
        (
            "review-many-members",
            recovery_input(RecoveryMode::EtcdctlJson, many_members().as_bytes()),
        ),
    ]
}

/// The small snapshot with its first key-bucket leaf's second element
/// pointed at the first one's bytes: the shape of the snapshot an outside
/// review sent, which handed the same value out thousands of times. Refused.
fn overlapping_snapshot(db: &[u8]) -> Vec<u8> {
    let mut file = db.to_vec();
    let leaf = 5 * bolt::PAGE;
    let pos = |file: &[u8], i: usize| {
        let at = leaf + 16 + 16 * i + 4;
        u32::from_le_bytes(file[at..at + 4].try_into().expect("4 bytes"))
    };
    let first = pos(&file, 0) - 16;
    file[leaf + 36..leaf + 40].copy_from_slice(&first.to_le_bytes());
    let error = values_from_snapshot(&file).expect_err("overlapping elements are refused");
    assert!(error.to_string().contains("overlaps"), "{error}");
    file
}

/// An etcdctl response with one member more than the JSON reader takes
/// (an outside review found its repeated-name check quadratic). Refused.
fn many_members() -> String {
    let members: Vec<String> = (0..1024).map(|i| format!("\"m{i}\":0")).collect();
    let text = format!("{{\"kvs\":[],{}}}", members.join(","));
    let error = values_from_etcdctl_json(&text).expect_err("1025 members are refused");
    assert!(error.to_string().contains("too many members"), "{error}");
    text
}

/// A ledger as sceau writes it after two rotations and a retire, and two
/// of its lines alone.
fn kek_ledger_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use sceau_format::kek::{KeyIdRecord, Ledger, key_id, single_node_config};
    let config = single_node_config(None, None);
    let names: [&[u8]; 3] = [&[0x00, 0x0b, 1, 2, 3], &[0x00, 0x0b, 4, 5, 6], &[0x00, 0x0b, 7, 8, 9]];
    let mut ledger = Ledger::default();
    for (generation, name) in (0u32..).zip(names) {
        ledger.note_generation(generation, name, 1_780_000_000 + u64::from(generation));
        let epoch = u64::from(generation) + 1;
        ledger.note_key_id(KeyIdRecord {
            key_id: key_id(generation, epoch, name, &config),
            generation,
            epoch,
            config,
            at: 1_780_000_100 + epoch,
        });
    }
    ledger.note_retired(1, 1_780_000_500);
    let text = ledger.render();
    let key_id_line = text.lines().find(|l| l.starts_with("key_id")).unwrap_or_default().to_string();
    vec![
        ("two-rotations-one-retire", text.clone().into_bytes()),
        ("key-id-line", key_id_line.into_bytes()),
        ("generation-line", b"generation 0 name 000b010203 made 1780000000\n".to_vec()),
    ]
}
