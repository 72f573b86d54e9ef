//! Recovery share files (`Share::parse`, `Share::file` and `combine`,
//! `crates/format/src/recovery_share.rs`, over `armor.rs`): what
//! `sceau-recover share verify` and `recover --share` read once a
//! custodian's age file is open, and what a custodian may have edited.
//!
//! Input: the file, read as UTF-8 with invalid sequences replaced.
//!
//! Invariants, besides "no panic":
//! - an accepted share has 1 ≤ threshold ≤ custodians ≤ 16 and
//!   1 ≤ index ≤ custodians, and a custodian name with no control
//!   characters, at most `PRINTABLE_MAX_BYTES` long;
//! - it is written back (`file`) to text that parses to the same index,
//!   threshold, custodian count, recovery key, key set and block bytes, and
//!   the same custodian name when that name is already as `printable` shows
//!   it (the parser escapes and cuts the name line, so an escaped name is
//!   escaped again);
//! - alone, it gives its own recovery key when its threshold is 1, and
//!   `TooFew` (1 of K) otherwise;
//! - a share of the pinned 2-of-3 key set (`fuzz/pinned/*.share`) that
//!   parses is a genuine one: with a pinned sibling it combines to the
//!   pinned key (the commitments leave one value per index);
//! - error messages, which `sceau-recover` prints to a terminal, have no
//!   control characters.
#![no_main]
#![forbid(unsafe_code)]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sceau_format::armor;
use sceau_format::recovery_share::{CombineError, MAX_CUSTODIANS, SHARE_LABEL, Share, combine};
use sceau_format::text::{PRINTABLE_MAX_BYTES, printable};
use sceau_fuzz::pinned;

/// The pinned key set's shares, parsed once.
static PINNED: LazyLock<Vec<Share>> = LazyLock::new(pinned::shares);

fn assert_no_control(text: &str) {
    assert!(
        !text.chars().any(char::is_control),
        "control character in {text:?}"
    );
}

fn block(text: &str) -> Vec<u8> {
    armor::decode(text, SHARE_LABEL)
        .expect("a written share file has its block")
        .bytes
        .to_vec()
}

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let share = match Share::parse(&text) {
        Ok(share) => share,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    let (index, threshold, custodians) = (share.index(), share.threshold(), share.custodians());
    assert!(1 <= threshold && threshold <= custodians && custodians <= MAX_CUSTODIANS);
    assert!(1 <= index && index <= custodians);
    assert_no_control(share.custodian());
    assert!(share.custodian().len() <= PRINTABLE_MAX_BYTES);

    let file = share.file();
    let again = Share::parse(&file).expect("a written share file reads back");
    assert_eq!(
        (again.index(), again.threshold(), again.custodians()),
        (index, threshold, custodians)
    );
    assert_eq!(again.recovery_key(), share.recovery_key());
    assert!(again.same_key_set(&share));
    assert_eq!(block(&again.file()), block(&file));
    if printable(share.custodian()) == share.custodian() {
        assert_eq!(again.custodian(), share.custodian());
    }

    let key = share.recovery_key();
    match combine(std::slice::from_ref(&share)) {
        Ok(identity) => {
            assert_eq!(threshold, 1);
            assert_eq!(identity.public(), &key);
        }
        Err(CombineError::TooFew { have, need, .. }) => {
            assert_eq!((have, need), (1, usize::from(threshold)));
            assert!(threshold > 1);
        }
        Err(error) => panic!("one share refused as {error}"),
    }

    if let Some(sibling) = PINNED
        .iter()
        .position(|pinned| pinned.same_key_set(&share) && pinned.index() != index)
    {
        let sibling = Share::parse(pinned::SHARE_FILES[sibling]).expect("a pinned share");
        let identity = match combine(&[again, sibling]) {
            Ok(identity) => identity,
            Err(error) => panic!("a verified share of the pinned set refused: {error}"),
        };
        assert_eq!(identity.public(), &PINNED[0].recovery_key());
    }
});
