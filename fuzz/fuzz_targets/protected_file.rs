//! Private files at rest (`custody::open` and `custody::is_age`,
//! `crates/recover/src/custody.rs`, over the `age` crate: armor, header,
//! X25519 stanzas, the STREAM payload): what `sceau-recover` reads from
//! `--share`, `--identity` and `--policy-private` files before anything else
//! looks at them.
//!
//! Input: the file's bytes. The target holds one X25519 identity,
//! `pinned::AGE_IDENTITY`, a constant made once with `age-keygen` for
//! fuzzing (alice's pinned share file is encrypted to it).
//!
//! Never a prompt, never scrypt: `open` asks for a passphrase when age reads
//! the header as a passphrase file (`Decryptor::is_scrypt`), and
//! `Passphrases::new(None)` would ask on /dev/tty. The target reads the
//! header the same way first; such inputs get a passphrase source that is a
//! descriptor never open (`u32::MAX`), so `open` stops at the passphrase
//! with `PassphraseFd`, before scrypt (whose work factor the file chooses)
//! runs. Every other input gets `Passphrases::new(None)`, which then must
//! never be asked.
//!
//! Invariants, besides "no panic":
//! - a file that opens is one `is_age` recognises, and its plaintext is
//!   alice's share file, byte for byte: no mutation of the pinned file opens
//!   to anything else (the armor's line ends and the binary form may vary);
//! - what `is_age` refuses, age refuses too (`Damaged`), so no age file is
//!   ever taken for a plaintext private key (`read_protected`);
//! - a passphrase file stops at the passphrase (`PassphraseFd`); any other
//!   file is never `NeedIdentity`, `NoTerminal`, `WrongPassphrase` or
//!   `TooMuchWork`, and its error names the file;
//! - error messages, which `sceau-recover` prints to a terminal, are one
//!   line with no control characters (`custody` keeps the first line of
//!   age's localized paragraphs).
#![no_main]
#![forbid(unsafe_code)]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sceau_fuzz::pinned;
use sceau_recover::custody::{AgeIdentities, CustodyError, Passphrases, is_age, open};

/// A descriptor number no process has open.
const NO_FD: u32 = u32::MAX;
const FILE: &str = "fuzz.share.age";

static IDENTITIES: LazyLock<AgeIdentities> = LazyLock::new(pinned::age_identities);

/// What `open` does first, to see whether it would ask for a passphrase.
fn is_passphrase_file(data: &[u8]) -> bool {
    age::Decryptor::new_buffered(age::armor::ArmoredReader::new(data))
        .is_ok_and(|decryptor| decryptor.is_scrypt())
}

fuzz_target!(|data: &[u8]| {
    let looks_like_age = is_age(data);
    let result = if is_passphrase_file(data) {
        let result = open(data, FILE, &IDENTITIES, &mut Passphrases::new(Some(NO_FD)));
        assert!(
            matches!(result, Err(CustodyError::PassphraseFd { fd: NO_FD, .. })),
            "a passphrase file went past its passphrase"
        );
        result
    } else {
        let result = open(data, FILE, &IDENTITIES, &mut Passphrases::new(None));
        if let Err(error) = &result {
            assert!(
                !matches!(
                    error,
                    CustodyError::NeedIdentity(_)
                        | CustodyError::NoTerminal { .. }
                        | CustodyError::WrongPassphrase(_)
                        | CustodyError::TooMuchWork { .. }
                ),
                "{error}"
            );
            assert!(error.to_string().contains(FILE), "{error}");
        }
        result
    };
    match result {
        Ok(plaintext) => {
            assert!(looks_like_age, "opened a file is_age refuses");
            assert_eq!(plaintext.as_slice(), pinned::SHARE_FILES[0].as_bytes());
        }
        Err(error) => {
            if !looks_like_age {
                assert!(
                    matches!(error, CustodyError::Damaged { .. }),
                    "age read a file is_age refuses: {error}"
                );
            }
            let message = sceau_format::as_printed(&error);
            assert!(
                !message.chars().any(char::is_control),
                "control character in {message:?}"
            );
        }
    }
});
