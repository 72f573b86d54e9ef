//! Boot-state binding's files, which `sceau serve --policy-key/--policy`
//! reads at start and `sceau-recover policy` reads offline: signed policy
//! files in systemd's JSON (`parse_signed_policies`,
//! `crates/format/src/pcr_policy.rs`), `tpm2_pcrread` text
//! (`PcrValues::parse`), PCR lists (`PcrSelection::parse`), the policy key's
//! PEM files and DER signatures (`PolicyKey::from_pem`,
//! `PolicySigner::from_pem`, `ecdsa_from_der`,
//! `crates/format/src/policy_key.rs`, over `crates/format/src/der.rs`).
//!
//! Revocation serials (`Serial::parse`, `crates/format/src/revocation.rs`)
//! are read from the command line, and from signed policy files inside
//! `parse_signed_policies`, whose round trip then also carries them.
//!
//! Input: a mode byte (its value modulo 7 picks the reader), then the file,
//! read as UTF-8 with invalid sequences replaced (except the DER signature,
//! which is bytes).
//!
//! Invariants, besides "no panic":
//! - an accepted signed policy file is written back
//!   (`write_signed_policies`) to a file that reads as the same policies;
//! - accepted PCR values print (`to_text`) as text that reads back the same;
//! - an accepted PCR list prints as a list that parses to the same set;
//! - an accepted public key re-encodes (`to_pem`) to a file that reads as
//!   the same key, with the same fingerprint, TPM Name and authPolicy;
//! - an accepted private key writes back a file with the same public key;
//! - an accepted DER signature gives back two 32-byte halves;
//! - an accepted serial prints as decimal that reads back the same, and
//!   its NV index lies in sceau's range;
//! - error messages, which `sceau` prints to a terminal, have no control
//!   characters.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use sceau_format::pcr_policy::{
    PcrSelection, PcrValues, parse_signed_policies, write_signed_policies,
};
use sceau_format::policy_key::{PolicyKey, PolicySigner, ecdsa_from_der};
use sceau_format::revocation::{MAX_SERIAL, NV_BASE, Serial};

fn assert_no_control(text: &str) {
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "control character in {text:?}"
    );
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, body)) = input.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(body);
    match mode % 7 {
        0 => match parse_signed_policies(&text) {
            Ok(policies) => {
                let again = parse_signed_policies(&write_signed_policies(&policies))
                    .expect("a written policy file reads back");
                assert_eq!(again, policies);
            }
            Err(error) => assert_no_control(&error.to_string()),
        },
        1 => match PcrValues::parse(&text) {
            Ok(values) => {
                let again = PcrValues::parse(&values.to_text()).expect("printed values read back");
                assert_eq!(again, values);
            }
            Err(error) => assert_no_control(&error.to_string()),
        },
        2 => match PcrSelection::parse(&text) {
            Ok(selection) => {
                assert_eq!(PcrSelection::parse(&selection.to_string()), Ok(selection));
                assert!(selection.indices().all(|i| selection.contains(i)));
            }
            Err(error) => assert_no_control(&error.to_string()),
        },
        3 => match PolicyKey::from_pem(&text) {
            Ok(key) => {
                let again = PolicyKey::from_pem(&key.to_pem()).expect("a written key reads back");
                assert_eq!(again, key);
                assert_eq!(again.fingerprint(), key.fingerprint());
                assert_eq!(again.name(), key.name());
                assert_eq!(again.authorized_policy(), key.authorized_policy());
            }
            Err(error) => assert_no_control(&error.to_string()),
        },
        4 => match PolicySigner::from_pem(&text) {
            Ok(signer) => {
                let again =
                    PolicySigner::from_pem(&signer.to_pem()).expect("a written key reads back");
                assert_eq!(again.public(), signer.public());
            }
            Err(error) => assert_no_control(&error.to_string()),
        },
        5 => match Serial::parse(&text) {
            Ok(serial) => {
                assert_eq!(Serial::parse(&serial.to_string()), Ok(serial));
                let index = serial.index_handle();
                assert!((NV_BASE..=NV_BASE + MAX_SERIAL).contains(&index));
            }
            Err(error) => assert_no_control(&error.to_string()),
        },
        _ => {
            if let Ok((r, s)) = ecdsa_from_der(body) {
                assert_eq!((r.len(), s.len()), (32, 32));
            }
        }
    }
});
