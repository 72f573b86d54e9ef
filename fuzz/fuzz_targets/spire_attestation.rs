//! The SPIRE attestor's server side on what an agent sends
//! (`crates/spire/src/payload.rs`, `crates/spire/src/server/verify.rs`).
//!
//! Input: a mode byte, then the message.
//! - 0: a payload. Decoded; an accepted one re-encodes to exactly its
//!   input, then goes through every payload check (the allow list holds the
//!   pinned forgery's EK, so the AK and creation checks are reached).
//! - 1: a challenge (what the agent parses): decoded and re-encoded.
//! - 2: a challenge response, against a pending challenge made for the
//!   pinned forgery: decoded, re-encoded, then checked. The credential is
//!   fresh and random, so a response can only be refused.
//!
//! Invariants, besides "no panic": round trips are exact; refusal texts,
//! which go to SPIRE's log and the agent, carry no control characters.
#![no_main]
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use sceau_spire::payload::{Challenge, ChallengeResponse, Payload};
use sceau_spire::server::config::ServerConfig;
use sceau_spire::server::verify::{check_payload, check_response, issue_challenge, test_support};

struct Fixture {
    config: ServerConfig,
    forged: Payload,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let (forged, ek) = test_support::forgery_with_ek(3);
        Fixture {
            config: ServerConfig::with_trust(
                "example.org",
                Some(HashSet::from([ek.pub_hash()])),
                None,
                vec![0, 7],
            ),
            forged,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, message)) = data.split_first() else {
        return;
    };
    let f = fixture();
    match mode % 3 {
        0 => {
            let Ok(payload) = Payload::decode(message) else {
                return;
            };
            assert_eq!(payload.encode(), message);
            if let Err(refusal) = check_payload(&f.config, &payload, SystemTime::now()) {
                assert_no_control(&refusal.to_string());
            }
        }
        1 => {
            if let Ok(challenge) = Challenge::decode(message) {
                assert_eq!(challenge.encode(), message);
            }
        }
        _ => {
            let Ok(response) = ChallengeResponse::decode(message) else {
                return;
            };
            assert_eq!(response.encode(), message);
            let verified = check_payload(&f.config, &f.forged, SystemTime::now())
                .expect("the pinned forgery passes the payload checks");
            let (pending, _) = issue_challenge(&f.config, verified).expect("a challenge");
            let refusal = check_response(pending, &response)
                .expect_err("a fresh random credential cannot be guessed");
            assert_no_control(&refusal.to_string());
        }
    }
});

fn assert_no_control(message: &str) {
    assert!(!message.chars().any(char::is_control), "{message:?}");
}
