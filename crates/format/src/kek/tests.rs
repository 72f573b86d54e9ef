//! The key_id form, the ledger's round trip and its refusals, and the
//! rule that picks a Decrypt's generation.

use super::*;
use std::collections::BTreeMap;

const NAME_1: &[u8] = &[0x00, 0x0b, 1, 1, 1];
const NAME_2: &[u8] = &[0x00, 0x0b, 2, 2, 2];

fn record(generation: u32, epoch: u64, name: &[u8], config: [u8; 32]) -> KeyIdRecord {
    KeyIdRecord {
        key_id: key_id(generation, epoch, name, &config),
        generation,
        epoch,
        config,
        at: 1_700_000_000 + epoch,
    }
}

#[test]
fn key_ids_carry_generation_and_epoch_and_differ_in_each_input() {
    let config = single_node_config(None, None);
    let id = key_id(2, 17, NAME_2, &config);
    assert!(id.as_str().starts_with("sceau-2.17-"), "{id}");
    assert_eq!(parse_key_id(id.as_str()), Some((2, 17)));
    let others = [
        key_id(2, 18, NAME_2, &config),
        key_id(1, 17, NAME_2, &config),
        key_id(2, 17, NAME_1, &config),
        key_id(2, 17, NAME_2, &single_node_config(Some(NAME_1), None)),
    ];
    for other in others {
        assert_ne!(other, id);
    }
}

#[test]
fn only_the_canonical_form_parses() {
    for text in [
        "sceau-0123456789abcdef",
        "sceau-1.2-0123456789abcde",
        "sceau-1.2-0123456789ABCDEF",
        "sceau-01.2-0123456789abcdef",
        "sceau-1.02-0123456789abcdef",
        "sceau-4096.2-0123456789abcdef",
        "sceau-+1.2-0123456789abcdef",
        "sceau-1.-0123456789abcdef",
        "other-1.2-0123456789abcdef",
    ] {
        assert_eq!(parse_key_id(text), None, "{text}");
    }
    assert_eq!(parse_key_id("sceau-0.0-0123456789abcdef"), Some((0, 0)));
}

#[test]
fn the_ledger_round_trips_and_checks_every_key_id() {
    let config = single_node_config(None, None);
    let mut ledger = Ledger::default();
    ledger.note_generation(0, NAME_1, 10);
    ledger.note_key_id(record(0, 1, NAME_1, config));
    ledger.note_generation(1, NAME_2, 20);
    ledger.note_key_id(record(1, 2, NAME_2, config));
    ledger.note_retired(0, 30);
    let text = ledger.render();
    assert_eq!(Ledger::parse(&text).unwrap(), ledger);

    let forged = text.replace(
        key_id(1, 2, NAME_2, &config).as_str(),
        key_id(1, 2, NAME_1, &config).as_str(),
    );
    assert_eq!(
        Ledger::parse(&forged),
        Err(LedgerError::KeyIdMismatch { line: 6 })
    );
    let reordered: String = {
        let mut lines: Vec<&str> = text.lines().collect();
        lines.swap(4, 5);
        lines.join("\n")
    };
    assert!(matches!(
        Ledger::parse(&reordered),
        Err(LedgerError::EpochBackwards { .. })
    ));
    assert!(matches!(
        Ledger::parse("generation 1 name 00 made 01\n"),
        Err(LedgerError::BadLine { line: 1, .. })
    ));
    assert!(matches!(
        Ledger::parse("retired 3 at 4\n"),
        Err(LedgerError::RetiredUnknown { generation: 3, .. })
    ));
    assert_eq!(
        Ledger::parse(&"#".repeat(MAX_LEDGER_BYTES + 1)),
        Err(LedgerError::TooLarge)
    );
}

/// A, B, A: the last key_id is reused only while nothing changed and no
/// epoch was taken since; a configuration brought back is never matched
/// with its old record.
#[test]
fn only_the_last_unchanged_key_id_is_reused() {
    let plain = single_node_config(None, None);
    let bound = single_node_config(Some(NAME_2), None);
    let mut ledger = Ledger::default();
    ledger.note_generation(0, NAME_1, 1);
    ledger.note_key_id(record(0, 1, NAME_1, plain));
    assert!(ledger.reusable(1, 0, NAME_1, &plain).is_some());
    assert!(
        ledger.reusable(2, 0, NAME_1, &plain).is_none(),
        "an epoch was taken since"
    );
    assert!(ledger.reusable(1, 0, NAME_1, &bound).is_none());
    assert!(
        ledger.reusable(1, 0, NAME_2, &plain).is_none(),
        "another key at 0"
    );
    ledger.note_key_id(record(0, 2, NAME_1, bound));
    assert!(
        ledger.reusable(2, 0, NAME_1, &plain).is_none(),
        "A after B is new"
    );
}

#[test]
fn the_next_generation_is_above_every_one_seen() {
    let mut ledger = Ledger::default();
    assert_eq!(ledger.next_generation(&BTreeSet::new()), 1);
    ledger.note_generation(4, NAME_1, 1);
    ledger.note_retired(4, 2);
    assert_eq!(ledger.next_generation(&BTreeSet::from([0, 2])), 5);
    assert_eq!(ledger.next_generation(&BTreeSet::from([0, 7])), 8);
}

#[test]
fn a_key_id_opens_only_under_its_own_open_generation() {
    let config = single_node_config(None, None);
    let mut ledger = Ledger::default();
    ledger.note_generation(0, NAME_1, 1);
    ledger.note_generation(1, NAME_2, 2);
    let first = record(0, 3, NAME_1, config);
    ledger.note_key_id(first.clone());
    let current = record(1, 5, NAME_2, config);
    let legacy = KeyId::from_srk_name(NAME_1);
    let table = KeyIdTable::new(
        current.clone(),
        NAME_2,
        &BTreeMap::from([(0, NAME_1.to_vec()), (1, NAME_2.to_vec())]),
        5,
        ledger.key_ids(),
        [legacy.clone()],
    );
    assert_eq!(
        table.generation_for(table.current.key_id.as_str()),
        KeyIdVerdict::Opens(1)
    );
    assert_eq!(
        table.generation_for(first.key_id.as_str()),
        KeyIdVerdict::Opens(0)
    );
    assert_eq!(
        table.generation_for(legacy.as_str()),
        KeyIdVerdict::Opens(0)
    );
    // The same epoch with another digest: not what was reported.
    let forged = key_id(0, 3, NAME_2, &config);
    assert_eq!(table.generation_for(forged.as_str()), KeyIdVerdict::Unknown);
    // An epoch the ledger lost (restored from an older copy): by generation.
    let lost = key_id(1, 4, NAME_2, &config);
    assert_eq!(table.generation_for(lost.as_str()), KeyIdVerdict::Opens(1));
    assert_eq!(
        table.generation_for(key_id(2, 4, NAME_2, &config).as_str()),
        KeyIdVerdict::Retired(2)
    );
    assert_eq!(
        table.generation_for(key_id(1, 6, NAME_2, &config).as_str()),
        KeyIdVerdict::NotLoaded
    );
    assert_eq!(
        table.generation_for("sceau-0011223344556677"),
        KeyIdVerdict::Unknown
    );
    assert_eq!(table.generation_named(NAME_2), Some(1));
    assert_eq!(table.generation_named(&[0x00, 0x0b, 9]), None);
}

/// Years of rotations and restarts with changes stay under the size sceau
/// reads: the ledger keeps the newest records and still parses.
#[test]
fn a_long_history_renders_within_the_bound() {
    let config = single_node_config(None, None);
    let mut ledger = Ledger::default();
    for generation in 0..=MAX_GENERATION {
        let name = [0x00, 0x0b, (generation >> 8) as u8, generation as u8];
        ledger.note_generation(generation, &name, 1);
        for restart in 0..2 {
            let epoch = u64::from(generation) * 2 + restart + 1;
            ledger.note_key_id(record(generation, epoch, &name, config));
        }
        if generation > 3 {
            ledger.note_retired(generation - 3, 2);
        }
    }
    let text = ledger.render();
    assert!(text.len() <= MAX_LEDGER_BYTES, "{} bytes", text.len());
    let read = Ledger::parse(&text).unwrap();
    // Two key_ids for each generation kept: 4 open, 64 retired.
    assert_eq!(read.key_ids().len(), (4 + KEPT_RETIRED) * 2);
    assert_eq!(read.key_ids().last(), ledger.key_ids().last());
    assert_eq!(
        read.generations()
            .values()
            .filter(|g| g.retired.is_some())
            .count(),
        KEPT_RETIRED
    );
    assert_eq!(read.next_generation(&BTreeSet::new()), MAX_GENERATION + 1);
}
