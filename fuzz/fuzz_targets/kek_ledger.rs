//! The KEK ledger sceau reads from its state directory at every start
//! (`sceau_format::kek::Ledger::parse`, `crates/format/src/kek.rs`), and the
//! key_id form of KEK generations (`kek::parse_key_id`), which Decrypt reads
//! from every request.
//!
//! Input: the ledger's text, read as UTF-8 with invalid sequences replaced
//! (sceau reads it with `read_to_string`); each line is also tried as a
//! key_id.
//!
//! Invariants, besides "no panic":
//! - an accepted ledger renders to text that parses to the same ledger;
//! - its key_ids are those `kek::key_id` gives for their generation, epoch,
//!   generation Name and configuration, with strictly increasing epochs;
//! - `reusable` gives the last key_id or nothing;
//! - a key_id `parse_key_id` accepts starts `sceau-N.E-` for the generation
//!   and epoch it returns, in their canonical decimal spelling;
//! - error messages, which sceau logs, have no control characters.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use sceau_format::kek::{Ledger, key_id, parse_key_id};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Some((generation, epoch)) = parse_key_id(line) {
            assert!(line.starts_with(&format!("sceau-{generation}.{epoch}-")), "{line:?}");
        }
    }
    let ledger = match Ledger::parse(&text) {
        Ok(ledger) => ledger,
        Err(error) => {
            let message = error.to_string();
            assert!(!message.chars().any(char::is_control), "{message:?}");
            return;
        }
    };
    assert_eq!(Ledger::parse(&ledger.render()).as_ref(), Ok(&ledger));
    let mut previous = None;
    for record in ledger.key_ids() {
        let name = &ledger.generations()[&record.generation].name;
        assert_eq!(
            record.key_id,
            key_id(record.generation, record.epoch, name, &record.config)
        );
        assert!(previous < Some(record.epoch));
        previous = Some(record.epoch);
    }
    if let Some(last) = ledger.key_ids().last() {
        let name = &ledger.generations()[&last.generation].name;
        assert_eq!(
            ledger.reusable(last.epoch, last.generation, name, &last.config),
            Some(last)
        );
        assert_eq!(
            ledger.reusable(last.epoch + 1, last.generation, name, &last.config),
            None
        );
    }
});
