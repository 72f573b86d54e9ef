//! The unit tests of `event_log`: parsing, replay and facts, on the
//! fixtures of tests/fixtures/event_log, synthetic logs and forgeries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest as _;

use super::forgery::{Forgery, forge, variable};
use super::parse::SEPARATOR_VALUES;
use super::*;

/// EFI_IMAGE_SECURITY_DATABASE_GUID (d719b2cb-3d3a-4596-a3bc-dad00e67656f).
const IMAGE_SECURITY_DATABASE: [u8; 16] = [
    0xcb, 0xb2, 0x19, 0xd7, 0x3a, 0x3d, 0x96, 0x45, 0xa3, 0xbc, 0xda, 0xd0, 0x0e, 0x67, 0x65, 0x6f,
];
const SHIM: [u8; 32] = [0x51; 32];
const GRUB: [u8; 32] = [0x62; 32];

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Writes crypto-agile logs, independently of the parser: the Spec ID
/// header, then events with one digest per declared algorithm.
struct Encoder {
    algs: Vec<(u16, u16)>,
    out: Vec<u8>,
    /// (PCR, SHA-256 digest) of every extending event, for the
    /// independent replay.
    extends: Vec<(u8, [u8; 32])>,
}

impl Encoder {
    fn new(algs: &[(u16, u16)]) -> Self {
        let mut spec = SPEC_ID_SIGNATURE.to_vec();
        spec.extend(0u32.to_le_bytes()); // platformClass
        spec.extend([0, 2, 0, 2]); // minor, major, errata, uintnSize
        spec.extend((algs.len() as u32).to_le_bytes());
        for (alg, size) in algs {
            spec.extend(alg.to_le_bytes());
            spec.extend(size.to_le_bytes());
        }
        spec.push(0); // vendorInfoSize
        let mut out = Vec::new();
        out.extend(0u32.to_le_bytes());
        out.extend(EV_NO_ACTION.to_le_bytes());
        out.extend([0; 20]);
        out.extend((spec.len() as u32).to_le_bytes());
        out.extend(spec);
        Self {
            algs: algs.to_vec(),
            out,
            extends: Vec::new(),
        }
    }

    fn sha256_only() -> Self {
        Self::new(&[(ALG_SHA256, 32)])
    }

    /// An event with the given digests, as written.
    fn raw(&mut self, pcr: u32, kind: u32, digests: &[(u16, Vec<u8>)], data: &[u8]) {
        self.out.extend(pcr.to_le_bytes());
        self.out.extend(kind.to_le_bytes());
        self.out.extend((digests.len() as u32).to_le_bytes());
        for (alg, digest) in digests {
            self.out.extend(alg.to_le_bytes());
            self.out.extend(digest);
        }
        self.out.extend((data.len() as u32).to_le_bytes());
        self.out.extend(data);
    }

    /// An event whose digest in each bank is `digest(bank)`.
    fn with(&mut self, pcr: u8, kind: u32, data: &[u8], digest: impl Fn(u16) -> Vec<u8>) {
        let digests: Vec<(u16, Vec<u8>)> = self
            .algs
            .iter()
            .map(|(alg, _)| (*alg, digest(*alg)))
            .collect();
        if kind != EV_NO_ACTION {
            let d = digests.iter().find(|(a, _)| *a == ALG_SHA256).unwrap();
            self.extends.push((pcr, d.1.clone().try_into().unwrap()));
        }
        self.raw(u32::from(pcr), kind, &digests, data);
    }

    /// An event measuring its own data.
    fn measure(&mut self, pcr: u8, kind: u32, data: &[u8]) {
        let sizes = self.algs.clone();
        self.with(pcr, kind, data, |alg| match alg {
            ALG_SHA1 => sha1::Sha1::digest(data).to_vec(),
            ALG_SHA256 => Sha256::digest(data).to_vec(),
            ALG_SHA384 => Sha384::digest(data).to_vec(),
            _ => {
                let (_, size) = sizes.iter().find(|(a, _)| *a == alg).unwrap();
                vec![0xaa; usize::from(*size)]
            }
        });
    }

    /// An event of another digest than its data's (an image's
    /// Authenticode hash).
    fn digest(&mut self, pcr: u8, kind: u32, digest: [u8; 32], data: &[u8]) {
        self.with(pcr, kind, data, |alg| {
            assert_eq!(alg, ALG_SHA256, "test images carry SHA-256 only");
            digest.to_vec()
        });
    }

    fn no_action(&mut self, pcr: u8, data: &[u8]) {
        let sizes = self.algs.clone();
        self.with(pcr, EV_NO_ACTION, data, |alg| {
            let (_, size) = sizes.iter().find(|(a, _)| *a == alg).unwrap();
            vec![0; usize::from(*size)]
        });
    }

    fn separators(&mut self, pcrs: std::ops::RangeInclusive<u8>) {
        for pcr in pcrs {
            self.measure(pcr, EV_SEPARATOR, &[0; 4]);
        }
    }
}

/// A UEFI_IMAGE_LOAD_EVENT with an empty device path (its end node).
fn image_load(address: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for field in [address, 0x10_0000, 0, 4] {
        out.extend(field.to_le_bytes());
    }
    out.extend([0x7f, 0xff, 0x04, 0x00]);
    out
}

/// A UEFI boot as edk2 logs it: firmware, Secure Boot variables, boot
/// variable, separators, shim and GRUB, the db authority, ExitBootServices,
/// a GRUB command in PCR 8.
fn boot(secure_boot: u8, locality: Option<u8>) -> Encoder {
    let mut e = Encoder::sha256_only();
    if let Some(locality) = locality {
        let mut data = STARTUP_LOCALITY_SIGNATURE.to_vec();
        data.push(locality);
        e.no_action(0, &data);
    }
    e.measure(0, EV_S_CRTM_VERSION, &[0x31, 0, 0x2e, 0, 0x30, 0, 0, 0]);
    e.measure(
        7,
        EV_EFI_VARIABLE_DRIVER_CONFIG,
        &variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[secure_boot]),
    );
    for (guid, name) in [
        (&EFI_GLOBAL_VARIABLE, "PK"),
        (&EFI_GLOBAL_VARIABLE, "KEK"),
        (&IMAGE_SECURITY_DATABASE, "db"),
        (&IMAGE_SECURITY_DATABASE, "dbx"),
    ] {
        e.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable(guid, name, &[]));
    }
    e.measure(
        1,
        EV_EFI_VARIABLE_BOOT,
        &variable(&EFI_GLOBAL_VARIABLE, "BootOrder", &[0, 0]),
    );
    e.measure(
        4,
        EV_EFI_ACTION,
        b"Calling EFI Application from Boot Option",
    );
    e.separators(0..=7);
    e.digest(
        4,
        EV_EFI_BOOT_SERVICES_APPLICATION,
        SHIM,
        &image_load(0x1000),
    );
    e.measure(
        7,
        EV_EFI_VARIABLE_AUTHORITY,
        &variable(&IMAGE_SECURITY_DATABASE, "db", &[0x30; 40]),
    );
    e.digest(
        4,
        EV_EFI_BOOT_SERVICES_APPLICATION,
        GRUB,
        &image_load(0x2000),
    );
    e.measure(5, EV_EFI_ACTION, b"Exit Boot Services Invocation");
    e.measure(
        5,
        EV_EFI_ACTION,
        b"Exit Boot Services Returned with Success",
    );
    e.measure(8, EV_IPL, b"grub_cmd: linux /vmlinuz root=/dev/sda1");
    e
}

fn parse(bytes: &[u8]) -> Result<EventLog, EventLogError> {
    EventLog::parse(bytes, Limits::default())
}

/// The replay, written from the TPM's definitions without the module.
fn independent_replay(extends: &[(u8, [u8; 32])], locality: u8) -> [[u8; 32]; PCR_COUNT] {
    let mut pcrs = [[0u8; 32]; PCR_COUNT];
    for pcr in &mut pcrs[17..=22] {
        *pcr = [0xff; 32];
    }
    pcrs[0][31] = locality;
    for (index, digest) in extends {
        let pcr = &mut pcrs[usize::from(*index)];
        let mut h = Sha256::new();
        h.update(*pcr);
        h.update(digest);
        *pcr = h.finalize().into();
    }
    pcrs
}

fn quote_of(values: &[[u8; 32]], pcrs: impl IntoIterator<Item = u8>) -> Vec<(u8, &[u8])> {
    pcrs.into_iter()
        .map(|p| (p, values[usize::from(p)].as_slice()))
        .collect()
}

/// Verifies the log against its own replay for `pcrs`, as a quote of
/// the same boot would.
fn facts_of(log: &EventLog, bank: Bank, pcrs: impl IntoIterator<Item = u8>) -> Facts {
    let replayed = log.replay(bank).unwrap();
    let quoted: Vec<(u8, &[u8])> = pcrs
        .into_iter()
        .map(|p| (p, replayed[usize::from(p)].as_slice()))
        .collect();
    log.matches(bank, &quoted).unwrap().facts()
}

#[test]
fn the_replay_equals_an_independent_replay() {
    for (locality, expected_locality) in [(None, 0), (Some(0), 0), (Some(3), 3)] {
        let e = boot(1, locality);
        let log = parse(&e.out).unwrap();
        assert_eq!(log.startup_locality(), expected_locality);
        assert_eq!(
            log.events().len(),
            e.extends.len() + usize::from(locality.is_some())
        );
        let expected = independent_replay(&e.extends, expected_locality);
        assert_eq!(log.replay_sha256().unwrap(), expected);
        // PCRs without events keep their initial values.
        assert_eq!(expected[10], [0; 32]);
        assert_eq!(expected[17], [0xff; 32]);
    }
}

#[test]
fn an_h_crtm_event_starts_pcr_0_at_locality_4() {
    let mut e = Encoder::sha256_only();
    e.measure(0, EV_EFI_HCRTM_EVENT, b"HCRTM");
    e.separators(0..=7);
    let log = parse(&e.out).unwrap();
    assert_eq!(log.startup_locality(), 4);
    assert_eq!(
        log.replay_sha256().unwrap(),
        independent_replay(&e.extends, 4)
    );

    let mut late = Encoder::sha256_only();
    late.measure(0, EV_S_CRTM_VERSION, b"v");
    late.measure(0, EV_EFI_HCRTM_EVENT, b"HCRTM");
    assert!(matches!(
        parse(&late.out),
        Err(EventLogError::Locality { index: 2, .. })
    ));
}

#[test]
fn a_startup_locality_after_pcr_0_was_extended_is_refused() {
    let mut e = Encoder::sha256_only();
    e.measure(0, EV_S_CRTM_VERSION, b"v");
    let mut data = STARTUP_LOCALITY_SIGNATURE.to_vec();
    data.push(3);
    e.no_action(0, &data);
    let offset = e.out.len() - (8 + 4 + 2 + 32 + 4 + data.len());
    assert_eq!(
        parse(&e.out),
        Err(EventLogError::Locality {
            index: 2,
            offset,
            reason: "a StartupLocality event after PCR 0 was extended, or a second one",
        })
    );
}

#[test]
fn quoted_values_are_checked_against_the_replay() {
    let e = boot(1, Some(3));
    let log = parse(&e.out).unwrap();
    let values = independent_replay(&e.extends, 3);

    let verified = log
        .matches(Bank::Sha256, &quote_of(&values, 0..=7))
        .unwrap();
    assert_eq!(verified.bank(), Bank::Sha256);
    assert!(verified.covers(7) && !verified.covers(8));

    let mut wrong = values;
    wrong[4][0] ^= 1;
    assert_eq!(
        log.matches(Bank::Sha256, &quote_of(&wrong, 0..=7))
            .unwrap_err(),
        PcrCheckError::Mismatch {
            pcr: 4,
            bank: Bank::Sha256,
            expected: wrong[4].to_vec(),
            replayed: values[4].to_vec(),
        }
    );
    let message = log
        .matches(Bank::Sha256, &quote_of(&wrong, [4]))
        .unwrap_err()
        .to_string();
    assert!(message.starts_with("PCR 4 (sha256): quoted "), "{message}");

    let short = [0u8; 20];
    assert_eq!(
        log.matches(Bank::Sha256, &[(0, &short[..])]).unwrap_err(),
        PcrCheckError::Length {
            pcr: 0,
            bank: Bank::Sha256,
            len: 20
        }
    );
    assert_eq!(
        log.matches(Bank::Sha256, &quote_of(&values, [0, 0]))
            .unwrap_err(),
        PcrCheckError::Selection(0)
    );
    assert_eq!(
        log.matches(Bank::Sha256, &[(24, &values[0][..])])
            .unwrap_err(),
        PcrCheckError::Selection(24)
    );
    assert_eq!(
        log.matches(Bank::Sha256, &[]).unwrap_err(),
        PcrCheckError::NothingQuoted
    );
    let sha384 = [0u8; 48];
    assert_eq!(
        log.matches(Bank::Sha384, &[(0, &sha384[..])]).unwrap_err(),
        PcrCheckError::BankNotInLog(Bank::Sha384)
    );
}

#[test]
fn sha1_banks_are_replayed() {
    let mut e = Encoder::new(&[(ALG_SHA1, 20), (ALG_SHA256, 32)]);
    e.measure(0, EV_S_CRTM_VERSION, b"v");
    e.separators(0..=7);
    let log = parse(&e.out).unwrap();
    assert_eq!(log.hashed_banks(), [Bank::Sha1, Bank::Sha256]);
    assert_eq!(declared_banks(&e.out).unwrap(), [Bank::Sha1, Bank::Sha256]);
    let replayed = log.replay(Bank::Sha1).unwrap();
    let extend = |pcr: &[u8], digest: &[u8]| {
        let mut h = sha1::Sha1::new();
        h.update(pcr);
        h.update(digest);
        h.finalize().to_vec()
    };
    let pcr0 = extend(&[0; 20], &sha1::Sha1::digest(b"v"));
    let pcr0 = extend(&pcr0, &sha1::Sha1::digest([0u8; 4]));
    assert_eq!(replayed[0], pcr0);
    assert_eq!(replayed[17], vec![0xff; 20]);
    let quoted = quote_of_vecs(&replayed, &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(log.matches(Bank::Sha1, &quoted).is_ok());
    assert_eq!(
        log.replay_sha256().unwrap(),
        independent_replay(&e.extends, 0)
    );
}

// Firmware extended SHA-1 and SHA-256; software, after a TPM reset,
// extends the SHA-256 bank alone along a log of its choosing and keeps
// the firmware's SHA-1 digests beside its own, so that both banks
// replay. The SecureBoot variable's data (1) is what its SHA-256 digest
// measures, not what its SHA-1 digest does (the firmware measured 0):
// refused. Shown failing: with SHA-1 digests not checked (as before
// this crate hashed SHA-1) the log parsed and read Secure Boot enabled.
#[test]
fn data_must_hash_to_its_digest_in_every_bank_sha1_included() {
    let mut e = Encoder::new(&[(ALG_SHA1, 20), (ALG_SHA256, 32)]);
    let claimed = variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[1]);
    let measured = variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[0]);
    let offset = e.out.len();
    e.with(
        7,
        EV_EFI_VARIABLE_DRIVER_CONFIG,
        &claimed,
        |alg| match alg {
            ALG_SHA1 => sha1::Sha1::digest(&measured).to_vec(),
            _ => Sha256::digest(&claimed).to_vec(),
        },
    );
    e.separators(0..=7);
    assert_eq!(
        parse(&e.out),
        Err(EventLogError::Mislabelled {
            index: 1,
            offset,
            reason: "an EV_EFI_VARIABLE_DRIVER_CONFIG whose data is not a UEFI variable, or not what its digests measure",
        })
    );
    // A separator whose SHA-1 digest is not a separator's.
    let mut e = Encoder::new(&[(ALG_SHA1, 20), (ALG_SHA256, 32)]);
    let offset = e.out.len();
    e.with(0, EV_SEPARATOR, &[0; 4], |alg| match alg {
        ALG_SHA1 => vec![0x5a; 20],
        _ => Sha256::digest([0u8; 4]).to_vec(),
    });
    assert!(matches!(
        parse(&e.out),
        Err(EventLogError::Mislabelled { index: 1, offset: o, .. }) if o == offset
    ));
}

// An authority's data is not tied to its digests, so a SecureBoot
// variable relabelled one may be measured in one bank and not in
// another: the banks then disagree, and the fact is unknown.
#[test]
fn facts_are_what_every_bank_agrees_on() {
    let facts = |secure_boot, apps: Option<usize>, debugger, complete| Facts {
        secure_boot,
        boot_applications: apps.map(|n| vec![vec![0x51; 32]; n]),
        firmware_debugger: debugger,
        complete,
    };
    let sha256 = facts(Some(true), Some(2), Some(false), true);
    assert_eq!(
        Facts::agreed(sha256.clone(), std::slice::from_ref(&sha256)),
        sha256
    );
    let sha1 = facts(Some(false), None, Some(true), false);
    assert_eq!(
        Facts::agreed(sha256.clone(), &[sha1]),
        facts(None, None, Some(true), false)
    );
    let unknown = facts(None, Some(2), None, true);
    assert_eq!(
        Facts::agreed(sha256, &[unknown]),
        facts(None, Some(2), None, true)
    );
}

#[test]
fn sha384_banks_are_replayed() {
    let mut e = Encoder::new(&[(ALG_SHA256, 32), (ALG_SHA384, 48)]);
    e.measure(0, EV_S_CRTM_VERSION, b"v");
    e.separators(0..=7);
    let log = parse(&e.out).unwrap();
    let replayed = log.replay(Bank::Sha384).unwrap();
    let mut pcr0 = Sha384::new();
    pcr0.update([0u8; 48]);
    pcr0.update(Sha384::digest(b"v"));
    let mut pcr0_after = Sha384::new();
    pcr0_after.update(pcr0.finalize());
    pcr0_after.update(Sha384::digest([0u8; 4]));
    assert_eq!(replayed[0], pcr0_after.finalize().to_vec());
    assert_eq!(replayed[17], vec![0xff; 48]);
}

#[test]
fn a_verified_boot_says_secure_boot_applications_and_completeness() {
    for (secure_boot, enabled) in [(1, true), (0, false)] {
        let e = boot(secure_boot, Some(3));
        let log = parse(&e.out).unwrap();
        let values = independent_replay(&e.extends, 3);
        let facts = log
            .matches(Bank::Sha256, &quote_of(&values, 0..=7))
            .unwrap()
            .facts();
        assert_eq!(
            facts,
            Facts {
                secure_boot: Some(enabled),
                boot_applications: Some(vec![SHIM.to_vec(), GRUB.to_vec()]),
                firmware_debugger: Some(false),
                complete: true,
            }
        );
    }
}

#[test]
fn facts_come_only_from_verified_pcrs() {
    let e = boot(1, None);
    let log = parse(&e.out).unwrap();
    let values = independent_replay(&e.extends, 0);
    let facts = log
        .matches(Bank::Sha256, &quote_of(&values, [0, 7]))
        .unwrap()
        .facts();
    assert_eq!(facts.secure_boot, Some(true));
    assert_eq!(facts.boot_applications, None);
    assert!(!facts.complete);
    let facts = log
        .matches(Bank::Sha256, &quote_of(&values, [4]))
        .unwrap()
        .facts();
    assert_eq!(facts.secure_boot, None);
    assert_eq!(facts.boot_applications.map(|a| a.len()), Some(2));
}

/// `boot` with `change` applied just before the separators or after.
fn variant(change: impl Fn(&mut Encoder), before_separators: bool) -> Facts {
    let mut e = Encoder::sha256_only();
    e.measure(0, EV_S_CRTM_VERSION, b"v");
    e.measure(
        7,
        EV_EFI_VARIABLE_DRIVER_CONFIG,
        &variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[1]),
    );
    if before_separators {
        change(&mut e);
    }
    e.separators(0..=7);
    e.digest(
        4,
        EV_EFI_BOOT_SERVICES_APPLICATION,
        SHIM,
        &image_load(0x1000),
    );
    if !before_separators {
        change(&mut e);
    }
    let log = parse(&e.out).unwrap();
    facts_of(&log, Bank::Sha256, 0..=7)
}

#[test]
fn events_where_none_may_be_make_the_log_incomplete() {
    let complete = |facts: Facts| facts.complete;
    assert!(complete(variant(|_| {}, false)));
    // Allowed after the separators.
    assert!(complete(variant(
        |e| e.measure(
            1,
            EV_EFI_VARIABLE_BOOT,
            &variable(&EFI_GLOBAL_VARIABLE, "Boot0001", &[1])
        ),
        false
    )));
    assert!(complete(variant(
        |e| e.measure(5, EV_EFI_GPT_EVENT, &[0; 100]),
        false
    )));
    assert!(complete(variant(
        |e| e.measure(
            4,
            EV_EFI_ACTION,
            b"Returning from EFI Application from Boot Option"
        ),
        false
    )));
    assert!(complete(variant(
        |e| e.measure(
            7,
            EV_EFI_VARIABLE_AUTHORITY,
            &variable(&IMAGE_SECURITY_DATABASE, "db", &[1])
        ),
        false
    )));
    // Not allowed after them.
    assert!(!complete(variant(
        |e| e.measure(0, EV_POST_CODE, b"late"),
        false
    )));
    assert!(!complete(variant(
        |e| e.measure(2, 0x8000_0004, b"driver"),
        false
    )));
    assert!(!complete(variant(
        |e| e.measure(4, EV_EFI_ACTION, b"anything else"),
        false
    )));
    assert!(!complete(variant(
        |e| e.measure(
            7,
            EV_EFI_VARIABLE_DRIVER_CONFIG,
            &variable(&IMAGE_SECURITY_DATABASE, "db", &[])
        ),
        false
    )));
    assert!(!complete(variant(
        |e| e.measure(3, EV_SEPARATOR, &[0; 4]),
        false
    )));
    // A relabelled allowed string: the data of an EV_EFI_ACTION under
    // another type's digest is refused when parsed
    // (an_event_whose_type_or_data_is_not_what_was_measured_is_refused).
    // A missing separator, an error separator.
    let mut e = Encoder::sha256_only();
    e.separators(0..=2);
    e.separators(4..=7);
    assert!(!facts_of(&parse(&e.out).unwrap(), Bank::Sha256, 0..=7).complete);
    let mut e = Encoder::sha256_only();
    e.separators(0..=6);
    e.measure(7, EV_SEPARATOR, &[0xff; 4]);
    assert!(!facts_of(&parse(&e.out).unwrap(), Bank::Sha256, 0..=7).complete);
}

#[test]
fn secure_boot_is_unknown_unless_measured_once_before_the_separator() {
    let sb = |data: &[u8]| variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", data);
    let secure_boot = |facts: Facts| facts.secure_boot;
    assert_eq!(secure_boot(variant(|_| {}, true)), Some(true));
    // A second SecureBoot measurement.
    assert_eq!(
        secure_boot(variant(
            |e| e.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &sb(&[0])),
            true
        )),
        None
    );
    // One after the separator.
    assert_eq!(
        secure_boot(variant(
            |e| e.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &sb(&[0])),
            false
        )),
        None
    );
    // Data that is not what was measured, under a type whose data is
    // not checked when parsed (EV_EFI_VARIABLE_DRIVER_CONFIG's is).
    let mut e = Encoder::sha256_only();
    e.digest(7, EV_EFI_VARIABLE_AUTHORITY, sha256(&sb(&[0])), &sb(&[1]));
    e.separators(0..=7);
    assert_eq!(
        facts_of(&parse(&e.out).unwrap(), Bank::Sha256, 0..=7).secure_boot,
        None
    );
    // The measurement under another type still counts, and a second
    // one (whatever its type) makes the state unknown.
    let mut e = Encoder::sha256_only();
    e.measure(7, EV_EFI_VARIABLE_AUTHORITY, &sb(&[0]));
    e.separators(0..=7);
    assert_eq!(
        facts_of(&parse(&e.out).unwrap(), Bank::Sha256, 0..=7).secure_boot,
        Some(false)
    );
    assert_eq!(
        secure_boot(variant(
            |e| e.measure(7, EV_EFI_VARIABLE_AUTHORITY, &sb(&[0])),
            true
        )),
        None
    );
    // One relabelled as an allowed type after the separator: unknown.
    // Shown failing: with the type-based reading (only
    // EV_EFI_VARIABLE_DRIVER_CONFIG counts) this said Some(true).
    assert_eq!(
        secure_boot(variant(
            |e| e.measure(7, EV_EFI_VARIABLE_AUTHORITY, &sb(&[1])),
            false
        )),
        None
    );
    // Another value, another variable of the name, none at all.
    for data in [
        sb(&[2]),
        sb(&[1, 0]),
        variable(&IMAGE_SECURITY_DATABASE, "SecureBoot", &[1]),
    ] {
        let mut e = Encoder::sha256_only();
        e.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &data);
        e.separators(0..=7);
        assert_eq!(
            facts_of(&parse(&e.out).unwrap(), Bank::Sha256, 0..=7).secure_boot,
            None
        );
    }
}

#[test]
fn forged_real_logs_claim_neither_secure_boot_nor_completeness() {
    for name in [
        "gce-ubuntu-2104-sb-off.bin",
        "boot-variables-after-separator.bin",
        "shim-mok-sb-on.bin",
        "ovmf-sb-on.bin",
    ] {
        let (_, genuine) = fixture(name);
        // As the reviewer made it: refused, the relabelled separator
        // named. Shown failing: with separators known by their type,
        // this parsed, and gce-ubuntu-2104-sb-off.bin (Secure Boot off)
        // and boot-variables-after-separator.bin (no SecureBoot
        // variable) both gave Some(true) and complete.
        let forged = forge(&genuine, Forgery::FULL);
        let separator = parse(&genuine)
            .unwrap()
            .events()
            .iter()
            .find(|e| e.pcr == 7 && e.event_type == EV_SEPARATOR)
            .unwrap()
            .clone();
        assert_eq!(
            parse(&forged),
            Err(EventLogError::Mislabelled {
                index: separator.index,
                offset: separator.offset,
                reason: "a separator's digest on an event that is not an EV_SEPARATOR",
            }),
            "{name}"
        );
        // The same without relabelling the separator: what is
        // extended after PCR 7's separator unseals it, so its facts
        // are unknown and the log incomplete.
        for how in [
            Forgery {
                relabel_separator: false,
                ..Forgery::FULL
            },
            Forgery {
                relabel_separator: false,
                append_separator: false,
                ..Forgery::FULL
            },
            Forgery {
                relabel_variable: false,
                relabel_separator: false,
                append_separator: false,
            },
        ] {
            let log = parse(&forge(&genuine, how)).unwrap();
            let facts = facts_of(&log, Bank::Sha256, 0..=7);
            assert_eq!(facts.secure_boot, None, "{name} {how:?}");
            assert!(!facts.complete, "{name} {how:?}");
            assert_eq!(facts.firmware_debugger, None, "{name} {how:?}");
            if log.has_bank(Bank::Sha384) {
                let sha384 = facts_of(&log, Bank::Sha384, 0..=7);
                assert_eq!((sha384.secure_boot, sha384.complete), (None, false));
            }
        }
    }
}

#[test]
fn an_event_whose_type_or_data_is_not_what_was_measured_is_refused() {
    let mislabelled = |change: &dyn Fn(&mut Encoder)| {
        let mut e = Encoder::sha256_only();
        e.separators(0..=6);
        change(&mut e);
        match parse(&e.out) {
            Err(EventLogError::Mislabelled {
                index: 8, reason, ..
            }) => reason,
            other => panic!("{other:?}"),
        }
    };
    // A separator's digest under another type, each of the three values.
    for value in SEPARATOR_VALUES {
        assert_eq!(
            mislabelled(&|e| e.measure(7, EV_EFI_ACTION, &value)),
            "a separator's digest on an event that is not an EV_SEPARATOR"
        );
    }
    assert_eq!(
        mislabelled(&|e| e.digest(7, EV_POST_CODE, sha256(&[0; 4]), b"anything")),
        "a separator's digest on an event that is not an EV_SEPARATOR"
    );
    // A separator of other data, or of data not its digest's.
    let separator = "an EV_SEPARATOR whose data is not 00000000, 00000001 or FFFFFFFF, or not what its digests measure";
    assert_eq!(
        mislabelled(&|e| e.measure(7, EV_SEPARATOR, b"sep")),
        separator
    );
    assert_eq!(
        mislabelled(&|e| e.digest(7, EV_SEPARATOR, sha256(&[0xff; 4]), &[0; 4])),
        separator
    );
    // Actions and variables whose data is not what was measured.
    assert_eq!(
        mislabelled(&|e| e.digest(7, EV_EFI_ACTION, [7; 32], b"Exit Boot Services Invocation")),
        "an EV_EFI_ACTION whose string is not what its digests measure"
    );
    let sb = variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[1]);
    let other = variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[0]);
    assert_eq!(
        mislabelled(&|e| e.digest(7, EV_EFI_VARIABLE_DRIVER_CONFIG, sha256(&other), &sb)),
        "an EV_EFI_VARIABLE_DRIVER_CONFIG whose data is not a UEFI variable, or not what its digests measure"
    );
    assert_eq!(
        mislabelled(&|e| e.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, b"not a variable")),
        "an EV_EFI_VARIABLE_DRIVER_CONFIG whose data is not a UEFI variable, or not what its digests measure"
    );
    assert_eq!(
        mislabelled(&|e| e.digest(1, EV_EFI_VARIABLE_BOOT, sha256(&other), &sb)),
        "an EFI boot variable event whose data is not a UEFI variable, or not what its digests measure"
    );
    // A boot variable measured by its VariableData alone (edk2) is
    // accepted; so is anything outside PCRs 0-7.
    let mut e = Encoder::sha256_only();
    e.digest(1, EV_EFI_VARIABLE_BOOT, sha256(&[1]), &sb);
    e.digest(8, EV_EFI_ACTION, sha256(&[0; 4]), b"x");
    e.separators(0..=7);
    parse(&e.out).unwrap();
}

#[test]
fn a_firmware_debugger_is_reported() {
    assert_eq!(variant(|_| {}, true).firmware_debugger, Some(false));
    assert_eq!(
        variant(|e| e.measure(7, EV_EFI_ACTION, b"UEFI Debug Mode"), true).firmware_debugger,
        Some(true)
    );
    // Relabelled, it is still the measurement of that string. Shown
    // failing: with the type-based reading (an EV_EFI_ACTION whose
    // data is the string) this said Some(false).
    assert_eq!(
        variant(|e| e.measure(7, EV_POST_CODE, b"UEFI Debug Mode"), true).firmware_debugger,
        Some(true)
    );
    // Something extended into PCR 7 after its separator: unknown.
    assert_eq!(
        variant(|e| e.measure(7, EV_POST_CODE, b"late"), false).firmware_debugger,
        None
    );
}

#[test]
fn unextended_boot_pcrs_are_found() {
    let e = boot(1, None);
    let values = independent_replay(&e.extends, 0);
    assert_eq!(unextended(&quote_of(&values, 0..=7)), None);
    let zeros = [[0u8; 32]; PCR_COUNT];
    assert_eq!(unextended(&quote_of(&zeros, 0..=7)), Some(0));
    let ones = [[0xffu8; 32]; PCR_COUNT];
    assert_eq!(unextended(&quote_of(&ones, 0..=7)), Some(0));
    let mut one_bank_pcr = values;
    one_bank_pcr[6] = [0; 32];
    assert_eq!(unextended(&quote_of(&one_bank_pcr, 0..=7)), Some(6));
    // Only boot PCRs count: PCR 10 is zero before IMA runs.
    assert_eq!(unextended(&quote_of(&values, [0, 7, 10])), None);
}

#[test]
fn bounds_are_enforced() {
    let e = boot(1, Some(3));
    let events = e.extends.len() + 1 + 1; // and StartupLocality, Spec ID
    let limits = Limits {
        max_events: events - 1,
        ..Limits::default()
    };
    assert!(matches!(
        EventLog::parse(&e.out, limits),
        Err(EventLogError::TooManyEvents { index, max, .. }) if index == events - 1 && max == events - 1
    ));
    EventLog::parse(
        &e.out,
        Limits {
            max_events: events,
            ..Limits::default()
        },
    )
    .unwrap();
    // The Spec ID event counts: a log of it alone is one event. Shown
    // failing: without the count of it, max_events 0 accepted it.
    let spec_id_only = Encoder::sha256_only().out;
    let at_most = |max_events| {
        EventLog::parse(
            &spec_id_only,
            Limits {
                max_events,
                ..Limits::default()
            },
        )
    };
    assert_eq!(
        at_most(0),
        Err(EventLogError::TooManyEvents {
            index: 0,
            offset: 0,
            max: 0
        })
    );
    assert_eq!(at_most(1).unwrap().events().len(), 0);

    let limits = Limits {
        max_log_bytes: e.out.len() - 1,
        ..Limits::default()
    };
    assert_eq!(
        EventLog::parse(&e.out, limits),
        Err(EventLogError::LogTooLarge {
            size: e.out.len(),
            max: e.out.len() - 1
        })
    );

    let mut big = Encoder::sha256_only();
    big.measure(0, EV_S_CRTM_VERSION, b"v");
    let offset = big.out.len();
    big.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &vec![0; 64 * 1024 + 1]);
    assert_eq!(
        parse(&big.out),
        Err(EventLogError::EventTooLarge {
            index: 2,
            offset,
            size: 64 * 1024 + 1,
            max: 64 * 1024
        })
    );
    // A declared size far beyond the log is refused before any copy.
    let mut huge = Encoder::sha256_only().out;
    huge.extend(0u32.to_le_bytes());
    huge.extend(EV_POST_CODE.to_le_bytes());
    huge.extend(1u32.to_le_bytes());
    huge.extend(ALG_SHA256.to_le_bytes());
    huge.extend([0; 32]);
    huge.extend(u32::MAX.to_le_bytes());
    assert!(matches!(
        parse(&huge),
        Err(EventLogError::EventTooLarge {
            index: 1,
            size: u32::MAX,
            ..
        })
    ));
}

#[test]
fn every_truncation_is_refused() {
    let e = boot(1, Some(3));
    let log = parse(&e.out).unwrap();
    let boundaries: Vec<usize> = log.events().iter().map(|e| e.offset).collect();
    for len in 0..e.out.len() {
        match parse(&e.out[..len]) {
            Ok(partial) => {
                assert!(boundaries.contains(&len), "a parse ending at {len}");
                assert!(partial.events().len() < log.events().len());
            }
            Err(EventLogError::Truncated { index, offset, .. }) => {
                assert!(offset <= len, "{index} {offset} {len}");
            }
            Err(other) => panic!("{len} bytes: {other}"),
        }
    }
    assert!(matches!(
        parse(&e.out[..e.out.len() - 1]),
        Err(EventLogError::Truncated {
            what: "event data",
            ..
        })
    ));
}

#[test]
fn corrupted_logs_are_refused_or_read_without_panicking() {
    let e = boot(1, Some(3));
    let values = independent_replay(&e.extends, 3);
    for position in 0..e.out.len() {
        for value in [0x00, 0xff] {
            let mut bytes = e.out.clone();
            bytes[position] = value;
            let Ok(log) = parse(&bytes) else { continue };
            for bank in [Bank::Sha1, Bank::Sha256, Bank::Sha384] {
                let _ = log.replay(bank);
            }
            if let Ok(verified) = log.matches(Bank::Sha256, &quote_of(&values, 0..=7)) {
                let _ = verified.facts();
            }
        }
    }
}

#[test]
fn digests_must_be_the_spec_id_algorithms() {
    let two = || Encoder::new(&[(ALG_SHA256, 32), (ALG_SHA384, 48)]);
    let mut e = two();
    let offset = e.out.len();
    e.raw(0, EV_POST_CODE, &[(ALG_SHA256, vec![0; 32])], b"x");
    assert_eq!(
        parse(&e.out),
        Err(EventLogError::DigestCount {
            index: 1,
            offset,
            count: 1,
            expected: 2
        })
    );
    let mut e = two();
    e.raw(
        0,
        EV_POST_CODE,
        &[(ALG_SHA256, vec![0; 32]), (ALG_SHA512, vec![0; 64])],
        b"x",
    );
    assert!(matches!(
        parse(&e.out),
        Err(EventLogError::UnknownAlgorithm {
            index: 1,
            alg: ALG_SHA512,
            ..
        })
    ));
    let mut e = two();
    e.raw(
        0,
        EV_POST_CODE,
        &[(ALG_SHA256, vec![0; 32]), (ALG_SHA256, vec![0; 32])],
        b"x",
    );
    assert!(matches!(
        parse(&e.out),
        Err(EventLogError::DuplicateDigest {
            index: 1,
            alg: ALG_SHA256,
            ..
        })
    ));
    let mut e = Encoder::sha256_only();
    e.separators(0..=0);
    let offset = e.out.len();
    e.raw(24, EV_POST_CODE, &[(ALG_SHA256, vec![0; 32])], b"x");
    assert_eq!(
        parse(&e.out),
        Err(EventLogError::PcrIndex {
            index: 2,
            offset,
            pcr: 24
        })
    );
    // An algorithm unknown here but declared with its size is carried.
    let mut e = Encoder::new(&[(ALG_SHA256, 32), (ALG_SM3_256, 32)]);
    e.separators(0..=7);
    let log = parse(&e.out).unwrap();
    assert_eq!(log.algorithms(), &[(ALG_SHA256, 32), (ALG_SM3_256, 32)]);
    assert_eq!(
        log.replay_sha256().unwrap(),
        independent_replay(&e.extends, 0)
    );
}

#[test]
fn only_crypto_agile_logs_with_a_sound_spec_id_event_are_read() {
    // A TPM 1.2 (SHA-1 format) log: its first event is a measurement.
    let mut sha1 = Vec::new();
    sha1.extend(0u32.to_le_bytes());
    sha1.extend(EV_S_CRTM_VERSION.to_le_bytes());
    sha1.extend([0x11; 20]);
    sha1.extend(1u32.to_le_bytes());
    sha1.push(b'v');
    assert!(matches!(
        parse(&sha1),
        Err(EventLogError::NotCryptoAgile {
            index: 0,
            offset: 0,
            ..
        })
    ));
    assert!(matches!(
        parse(&[]),
        Err(EventLogError::Truncated { index: 0, .. })
    ));
    for (algs, reason) in [
        (
            vec![(ALG_SHA256, 20)],
            "a digest size that is not its algorithm's",
        ),
        (
            vec![(ALG_SHA256, 32), (ALG_SHA256, 32)],
            "an algorithm declared twice",
        ),
        (vec![], "no algorithms, or more than 8"),
        (
            vec![(0x0099, 65)],
            "an unknown algorithm with a digest size of 0 or above 64",
        ),
    ] {
        assert_eq!(
            parse(&Encoder::new(&algs).out),
            Err(EventLogError::SpecId {
                index: 0,
                offset: 0,
                reason
            })
        );
    }
}

// Cross-checks with tpm2_eventlog (tpm2-tools), an independent parser.

/// (bank name, PCR) to value, as `tpm2_eventlog` prints them.
type ToolPcrs = HashMap<(String, u8), Vec<u8>>;

/// The number of events `tpm2_eventlog` prints and its final PCR values,
/// or `None` when the tool is not installed.
fn tpm2_eventlog(path: &Path) -> Option<(usize, ToolPcrs)> {
    let output = match Command::new("tpm2_eventlog").arg(path).output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: tpm2_eventlog (tpm2-tools) is not installed; no cross-check");
            return None;
        }
        Err(e) => panic!("tpm2_eventlog: {e}"),
    };
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "tpm2_eventlog {}: {}\n{stdout}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let events = stdout
        .lines()
        .filter(|l| l.starts_with("- EventNum: "))
        .count();
    let mut pcrs = HashMap::new();
    let mut bank = None;
    let mut in_pcrs = false;
    for line in stdout.lines() {
        if line == "pcrs:" {
            in_pcrs = true;
        } else if in_pcrs && line.starts_with("  ") && !line.starts_with("    ") {
            bank = Some(line.trim().trim_end_matches(':').to_string());
        } else if in_pcrs && let (Some(bank), Some((index, value))) = (&bank, line.split_once(':'))
        {
            let value = value.trim().trim_start_matches("0x");
            let bytes = (0..value.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&value[i..i + 2], 16).unwrap())
                .collect();
            pcrs.insert((bank.clone(), index.trim().parse().unwrap()), bytes);
        }
    }
    Some((events, pcrs))
}

/// Compares the tool's PCR values with the replay, for every bank the
/// tool prints but SHA-1. Returns how many values were compared.
fn agree_with_tool(path: &Path, log: &EventLog) -> Option<usize> {
    let (events, pcrs) = tpm2_eventlog(path)?;
    assert_eq!(events, log.events().len() + 1, "{}", path.display());
    assert!(
        !pcrs.is_empty(),
        "{}: no pcrs in the output",
        path.display()
    );
    let mut compared = 0;
    for ((bank, pcr), value) in &pcrs {
        let bank = match bank.as_str() {
            "sha256" => Bank::Sha256,
            "sha384" => Bank::Sha384,
            "sha512" => Bank::Sha512,
            _ => continue,
        };
        let replayed = log.replay(bank).unwrap();
        assert_eq!(
            &replayed[usize::from(*pcr)],
            value,
            "{} {bank} PCR {pcr}",
            path.display()
        );
        compared += 1;
    }
    Some(compared)
}

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let path =
            std::env::temp_dir().join(format!("sceau-event-log-{}-{name}.bin", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn tpm2_eventlog_agrees_on_encoded_logs() {
    // No StartupLocality event here: tpm2-tools before 5.5 extends
    // EV_NO_ACTION events into their PCR and ignores the locality (both
    // are checked against the independent replay above).
    for secure_boot in [0, 1] {
        let e = boot(secure_boot, None);
        let log = parse(&e.out).unwrap();
        let file = TempFile::new(&format!("sb{secure_boot}"), &e.out);
        let Some(compared) = agree_with_tool(&file.0, &log) else {
            return;
        };
        // PCRs 0-8 have events; the tool prints those.
        assert_eq!(compared, 9);
        let output = Command::new("tpm2_eventlog").arg(&file.0).output().unwrap();
        let yaml = String::from_utf8(output.stdout).unwrap();
        assert!(
            yaml.contains(&format!(
                "UnicodeName: SecureBoot\n    VariableData: \"0{secure_boot}\""
            )),
            "{yaml}"
        );
    }
}

fn fixture(name: &str) -> (PathBuf, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/event_log")
        .join(name);
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn hex32(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn real_firmware_logs() {
    struct Expected {
        name: &'static str,
        events: usize,
        /// SHA-256 PCRs 0 and 7 as tpm2_eventlog replays them.
        pcr0: &'static str,
        pcr7: &'static str,
        quoted: &'static [u8],
        secure_boot: Option<bool>,
        /// `None`: PCR 4 is not sealed.
        boot_applications: Option<&'static [&'static str]>,
        complete: bool,
    }
    let all: &[u8] = &[0, 1, 2, 3, 4, 5, 6, 7];
    for expected in [
        Expected {
            name: "gce-ubuntu-2104-sb-off.bin",
            events: 105,
            pcr0: "24af52a4f429b71a3184a6d64cddad17e54ea030e2aa6576bf3a5a3d8bd3328f",
            pcr7: "0d8847bc5eca06452df10e2f214363845c7ac11d47525a5474e225e72ce25dfe",
            quoted: all,
            secure_boot: Some(false),
            boot_applications: Some(&[
                "6265b732b005b3f330bcd1843374e5ec6ec5aef27cdb97a23daeb8580abbf526",
                "b0a836fec2faf4a9bea0e1a5f1945bc86ddc03ac98ce0ae172ed9b1e536d7595",
            ]),
            complete: true,
        },
        Expected {
            name: "shim-mok-sb-on.bin",
            events: 96,
            pcr0: "fcb620568efe4ac4e15f6dcbc6431cad79bc85c7f2f592e08dde0bf37da6df39",
            pcr7: "56c7ba6010e0a8a20c92e3d08baebcf2a7e6544fed33c3ea9523eaa6cd74537a",
            quoted: all,
            secure_boot: Some(true),
            boot_applications: Some(&[
                "5af24fa7419a5bb4cebe934221c3155cb3918773c5b7033d59cddda344f3ebf5",
                "a4858d1a47abce57039f498475d96b1e29c9c0489458ea45fc1c3ef2599eea16",
                "55ca5219d41971e1dcdb75b3624e63f96f8bafd4edf57007f60343b9dec3a4da",
                "55ca5219d41971e1dcdb75b3624e63f96f8bafd4edf57007f60343b9dec3a4da",
            ]),
            complete: true,
        },
        Expected {
            name: "boot-variables-after-separator.bin",
            events: 26,
            pcr0: "1536de221b2187a421602cd81f43aa04496b0bd5a424d3b25b637a942080d0fa",
            pcr7: "3d6207f9a2c3fa1db729f06e71b09d2e7ca7c0c198f6c1410c2186bbe2cc1826",
            quoted: all,
            secure_boot: None,
            boot_applications: Some(&[
                "81da15d6acdfb7868ecea44d41c869c2295603af9a44a2d106d4c0e57d669087",
                "28710f04aacfa162ba595334efab0222868421073469a6a4cc215bd53c49d2cb",
            ]),
            complete: true,
        },
        Expected {
            name: "ovmf-sb-on.bin",
            events: 24,
            pcr0: "5acbf17aa473fe44f359a9ac7d07f77ea83eb190c3245749d955a442e6a036a2",
            pcr7: "4387f18f9308e9a61cf5cd7685196e15b8c410ee1405d0f07fb3bee71530619d",
            quoted: all,
            secure_boot: Some(true),
            // The EFI shell, measured, then refused by Secure Boot.
            boot_applications: Some(&[
                "d6cb71f2c6241bd0fd4c7a0765103406efe2d2b886bac12d992c12b1b803c908",
            ]),
            complete: true,
        },
        Expected {
            name: "partial-sb-on.bin",
            events: 14,
            pcr0: "fcecb56acc303862b30eb342c4990beb50b5e0ab89722449c2d9a73f37b019fe",
            pcr7: "51b30488c9e6255d822bdc1b20d9a92c32bde6c3e7bc02bcdd32825eb5ef069a",
            quoted: &[0, 4, 5, 7],
            secure_boot: Some(true),
            // Three boot applications in PCR 4, but no separator there:
            // nothing tells the firmware's from ones extended later.
            boot_applications: None,
            complete: false,
        },
    ] {
        let (path, bytes) = fixture(expected.name);
        let log = parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", expected.name));
        assert_eq!(log.events().len(), expected.events, "{}", expected.name);
        let replayed = log.replay(Bank::Sha256).unwrap();
        assert_eq!(replayed[0], hex32(expected.pcr0), "{}", expected.name);
        assert_eq!(replayed[7], hex32(expected.pcr7), "{}", expected.name);
        let facts = facts_of(&log, Bank::Sha256, expected.quoted.iter().copied());
        assert_eq!(facts.secure_boot, expected.secure_boot, "{}", expected.name);
        assert_eq!(
            facts.boot_applications,
            expected
                .boot_applications
                .map(|apps| apps.iter().map(|d| hex32(d)).collect()),
            "{}",
            expected.name
        );
        assert_eq!(facts.complete, expected.complete, "{}", expected.name);
        assert_ne!(facts.firmware_debugger, Some(true), "{}", expected.name);
        if log.has_bank(Bank::Sha384) {
            let sha384 = facts_of(&log, Bank::Sha384, expected.quoted.iter().copied());
            assert_eq!(sha384.secure_boot, facts.secure_boot);
            assert_eq!(sha384.complete, facts.complete);
            assert_eq!(
                sha384.boot_applications.map(|a| a.len()),
                expected.boot_applications.map(<[_]>::len)
            );
            assert_eq!(sha384.firmware_debugger, facts.firmware_debugger);
        }
        assert_eq!(unextended(&quote_of_vecs(&replayed, expected.quoted)), None);
        // `None`: the tool is absent, and said so.
        let _ = agree_with_tool(&path, &log);
    }
}

fn quote_of_vecs<'a>(values: &'a [Vec<u8>], pcrs: &[u8]) -> Vec<(u8, &'a [u8])> {
    pcrs.iter()
        .map(|p| (*p, values[usize::from(*p)].as_slice()))
        .collect()
}

#[test]
fn errors_are_one_line_naming_the_event_and_offset() {
    let error = EventLogError::DigestCount {
        index: 12,
        offset: 3456,
        count: 1,
        expected: 2,
    };
    assert_eq!(
        error.to_string(),
        "event 12 at offset 3456: 1 digests, but the Spec ID event declares 2 algorithms"
    );
}
