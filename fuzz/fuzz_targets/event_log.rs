//! Measured-boot evidence: the TCG PC Client crypto-agile event log the
//! SPIRE server reads from an agent (`EventLog::parse`, `replay`, `matches`,
//! `unextended` and `Verified::facts`,
//! `crates/spire/src/server/event_log.rs`).
//!
//! Input: the log's bytes, parsed with `Limits::default()`.
//!
//! Invariants, besides "no panic":
//! - an accepted log is within the limits: at most `max_log_bytes`, at most
//!   `max_events` events (the Spec ID event included), each event's data at
//!   most `max_event_bytes`; its events are numbered 1, 2, … at increasing
//!   offsets, each in one of the 24 PCRs with exactly one digest of each
//!   algorithm the Spec ID event declares, of the declared size; the
//!   startup locality is at most 4;
//! - the limits are exact: the same bytes, under limits equal to what the
//!   log holds, parse to the same log, and under one less of any of the
//!   three are refused with that limit's error, naming the first event
//!   past it;
//! - each bank the log carries and this crate can hash (SHA-1, SHA-256,
//!   SHA-384, SHA-512) replays to 24 values of the bank's size, the same on
//!   every call (and `replay_sha256` agrees); a bank the log does not carry
//!   is `BankNotInLog`; `hashed_banks` and `declared_banks` (the header
//!   alone) name exactly the banks it carries, in the Spec ID order;
//! - in PCRs 0–7 of an accepted log, every EV_SEPARATOR carries
//!   `00000000`, `00000001` or `FFFFFFFF` (`parse` refuses relabelled and
//!   invented separators);
//! - `matches` of the replayed values themselves for PCRs 0–7 succeeds and
//!   covers exactly those PCRs; `facts()` does not panic and agrees with the
//!   events: a fact of PCR 4 or 7 (boot applications, which are PCR 4's;
//!   Secure Boot and the debugger) only when that PCR holds exactly one
//!   separator, of zeros, and a complete log only when every boot PCR
//!   does; one changed value is refused as a `Mismatch` of that PCR;
//! - `unextended` of the replayed values names the first boot PCR that no
//!   event extended (PCR 0 only when its startup locality is 0 too);
//! - re-parsing the same bytes gives the same log and the same replay;
//! - error messages, which reach SPIRE's log and the agent, have no control
//!   characters.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use sceau_spire::server::event_log::{
    BOOT_PCRS, Bank, EventLog, EventLogError, Limits, PCR_COUNT, PcrCheckError, declared_banks,
    event_type, unextended,
};

/// The banks `replay` can compute.
const REPLAYABLE: [Bank; 4] = Bank::ALL;

/// The header of event 0 (pcrIndex, eventType, SHA-1 digest, eventSize)
/// before the Spec ID event's data.
const SPEC_ID_HEADER: usize = 4 + 4 + 20 + 4;

fn assert_no_control(message: &str) {
    assert!(!message.chars().any(char::is_control), "{message:?}");
}

fuzz_target!(|bytes: &[u8]| {
    let limits = Limits::default();
    let log = match EventLog::parse(bytes, limits) {
        Ok(log) => log,
        Err(error) => return assert_no_control(&error.to_string()),
    };
    check_shape(&log, bytes, limits);
    check_exact_limits(&log, bytes);

    for bank in REPLAYABLE {
        if log.has_bank(bank) {
            check_bank(&log, bank);
        } else {
            assert_eq!(log.replay(bank), Err(PcrCheckError::BankNotInLog(bank)));
        }
    }
    let carried: Vec<Bank> = log
        .algorithms()
        .iter()
        .filter_map(|(alg, _)| Bank::from_alg_id(*alg))
        .collect();
    assert_eq!(log.hashed_banks(), carried);
    assert_eq!(declared_banks(bytes).as_ref(), Ok(&carried));

    let again = EventLog::parse(bytes, limits).expect("the same bytes parse again");
    assert_eq!(again, log);
    for bank in REPLAYABLE {
        assert_eq!(again.replay(bank), log.replay(bank));
    }
});

/// Within the limits, and each event as the Spec ID event declares.
fn check_shape(log: &EventLog, bytes: &[u8], limits: Limits) {
    assert!(bytes.len() <= limits.max_log_bytes);
    assert!(log.events().len() < limits.max_events);
    assert!(log.startup_locality() <= 4);
    let algorithms = log.algorithms();
    assert!(!algorithms.is_empty() && algorithms.len() <= 8);
    let mut previous = SPEC_ID_HEADER;
    for (i, event) in log.events().iter().enumerate() {
        assert_eq!(event.index, i + 1);
        assert!(event.offset > previous && event.offset < bytes.len());
        previous = event.offset;
        assert!(usize::from(event.pcr) < PCR_COUNT);
        assert!(event.data.len() <= limits.max_event_bytes);
        assert_eq!(event.digests.len(), algorithms.len());
        for &(alg, size) in algorithms {
            assert_eq!(event.digest(alg).map(<[u8]>::len), Some(usize::from(size)));
        }
        if BOOT_PCRS.contains(&event.pcr) && event.event_type == event_type::EV_SEPARATOR {
            assert!(
                [[0u8; 4], [0, 0, 0, 1], [0xff; 4]]
                    .iter()
                    .any(|v| event.data == v),
                "a separator of data {:?}",
                event.data
            );
        }
    }
}

/// Under limits equal to what the log holds it parses the same; one less
/// of any limit refuses it, with that limit's error.
fn check_exact_limits(log: &EventLog, bytes: &[u8]) {
    let events = log.events();
    // The Spec ID event's data ends where event 1 starts.
    let spec_id_end = events.first().map_or(bytes.len(), |e| e.offset);
    let spec_id_size = spec_id_end - SPEC_ID_HEADER;
    let largest = events
        .iter()
        .map(|e| e.data.len())
        .chain([spec_id_size])
        .max()
        .expect("the Spec ID event");
    let exact = Limits {
        max_log_bytes: bytes.len(),
        max_events: events.len() + 1,
        max_event_bytes: largest,
    };
    assert_eq!(EventLog::parse(bytes, exact).as_ref(), Ok(log));

    let fewer_bytes = Limits {
        max_log_bytes: bytes.len() - 1,
        ..exact
    };
    assert_eq!(
        EventLog::parse(bytes, fewer_bytes),
        Err(EventLogError::LogTooLarge {
            size: bytes.len(),
            max: bytes.len() - 1
        })
    );

    if let Some(last) = events.last() {
        let fewer_events = Limits {
            max_events: events.len(),
            ..exact
        };
        assert_eq!(
            EventLog::parse(bytes, fewer_events),
            Err(EventLogError::TooManyEvents {
                index: last.index,
                offset: last.offset,
                max: events.len()
            })
        );
    }

    let smaller_events = Limits {
        max_event_bytes: largest - 1,
        ..exact
    };
    let size = u32::try_from(largest).expect("within the 64 KiB limit");
    let expected = if spec_id_size == largest {
        EventLogError::EventTooLarge {
            index: 0,
            offset: 0,
            size,
            max: largest - 1,
        }
    } else {
        let first = events
            .iter()
            .find(|e| e.data.len() == largest)
            .expect("the largest event");
        EventLogError::EventTooLarge {
            index: first.index,
            offset: first.offset,
            size,
            max: largest - 1,
        }
    };
    assert_eq!(EventLog::parse(bytes, smaller_events), Err(expected));
}

/// Replay, `matches` of the replay itself, `facts` and `unextended`.
fn check_bank(log: &EventLog, bank: Bank) {
    let replayed = log.replay(bank).expect("a bank the log carries replays");
    assert_eq!(replayed.len(), PCR_COUNT);
    assert!(replayed.iter().all(|v| v.len() == bank.digest_len()));
    assert_eq!(
        log.replay(bank).as_ref(),
        Ok(&replayed),
        "replay is deterministic"
    );
    if bank == Bank::Sha256 {
        let fixed = log.replay_sha256().expect("the SHA-256 replay");
        assert!(fixed.iter().zip(&replayed).all(|(a, b)| a[..] == b[..]));
    }

    let mut quoted: Vec<(u8, &[u8])> = BOOT_PCRS
        .iter()
        .map(|&pcr| (pcr, replayed[usize::from(pcr)].as_slice()))
        .collect();
    let verified = log
        .matches(bank, &quoted)
        .unwrap_or_else(|e| panic!("the {bank} replay does not match itself: {e}"));
    assert_eq!(verified.bank(), bank);
    for pcr in 0..=u8::try_from(PCR_COUNT).expect("24") {
        assert_eq!(verified.covers(pcr), BOOT_PCRS.contains(&pcr));
    }

    let extending = |pcr: u8| {
        log.events()
            .iter()
            .filter(move |e| e.pcr == pcr && e.event_type != event_type::EV_NO_ACTION)
    };
    let facts = verified.facts();
    let applications: Vec<&[u8]> = extending(4)
        .filter(|e| e.event_type == event_type::EV_EFI_BOOT_SERVICES_APPLICATION)
        .map(|e| e.digest(bank.alg_id()).expect("every event has the bank"))
        .collect();
    // One separator, of zeros: what a sealed PCR holds at least.
    let one_clean_separator = |pcr: u8| {
        let mut separators = extending(pcr).filter(|e| e.event_type == event_type::EV_SEPARATOR);
        separators.next().is_some_and(|e| e.data == [0; 4]) && separators.next().is_none()
    };
    if let Some(facts_applications) = &facts.boot_applications {
        assert!(one_clean_separator(4));
        assert!(
            facts_applications
                .iter()
                .map(Vec::as_slice)
                .eq(applications)
        );
    }
    if facts.complete {
        assert!(BOOT_PCRS.iter().all(|&pcr| one_clean_separator(pcr)));
        assert!(facts.boot_applications.is_some() && facts.firmware_debugger.is_some());
    }
    if facts.secure_boot.is_some() || facts.firmware_debugger.is_some() {
        assert!(one_clean_separator(7));
    }

    let never_extended = BOOT_PCRS
        .iter()
        .copied()
        .find(|&pcr| extending(pcr).next().is_none() && (pcr != 0 || log.startup_locality() == 0));
    assert_eq!(unextended(&quoted), never_extended);

    let mut changed = replayed[7].clone();
    changed[0] ^= 1;
    quoted[7] = (7, &changed);
    match log.matches(bank, &quoted) {
        Err(error @ PcrCheckError::Mismatch { pcr: 7, .. }) => {
            assert_no_control(&error.to_string());
        }
        other => panic!("a changed PCR 7 value gave {other:?}"),
    }
}
