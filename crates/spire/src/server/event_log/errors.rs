//! What a log may hold (`Limits`) and why a log or quoted values were
//! refused: the bounds and errors of parsing and replay.

use super::*;

/// What a log may hold. Every bound is checked before the bytes it covers
/// are copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The whole log, in bytes.
    pub max_log_bytes: usize,
    /// Events, the Spec ID event included.
    pub max_events: usize,
    /// One event's data (eventSize).
    pub max_event_bytes: usize,
}

impl Default for Limits {
    /// 1 MiB, 4096 events, 64 KiB per event (module documentation,
    /// "Sizes").
    fn default() -> Self {
        Self {
            max_log_bytes: 1 << 20,
            max_events: 4096,
            max_event_bytes: 64 << 10,
        }
    }
}

/// Why a log was refused. One line each, naming the event and its offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventLogError {
    #[error("the event log is {size} bytes, more than the {max} allowed")]
    LogTooLarge { size: usize, max: usize },
    #[error("event {index} at offset {offset}: the log holds more than {max} events")]
    TooManyEvents {
        index: usize,
        offset: usize,
        max: usize,
    },
    #[error(
        "event {index} at offset {offset}: {size} bytes of event data, more than the {max} allowed"
    )]
    EventTooLarge {
        index: usize,
        offset: usize,
        size: u32,
        max: usize,
    },
    #[error("event {index} at offset {offset}: the log ends inside its {what}")]
    Truncated {
        index: usize,
        offset: usize,
        what: &'static str,
    },
    #[error("event {index} at offset {offset}: not a crypto-agile log: {reason}")]
    NotCryptoAgile {
        index: usize,
        offset: usize,
        reason: &'static str,
    },
    #[error("event {index} at offset {offset}: invalid Spec ID event: {reason}")]
    SpecId {
        index: usize,
        offset: usize,
        reason: &'static str,
    },
    #[error(
        "event {index} at offset {offset}: {count} digests, but the Spec ID event declares {expected} algorithms"
    )]
    DigestCount {
        index: usize,
        offset: usize,
        count: u32,
        expected: usize,
    },
    #[error(
        "event {index} at offset {offset}: a digest of algorithm {alg:#06x}, which the Spec ID event does not declare"
    )]
    UnknownAlgorithm {
        index: usize,
        offset: usize,
        alg: u16,
    },
    #[error("event {index} at offset {offset}: two digests of algorithm {alg:#06x}")]
    DuplicateDigest {
        index: usize,
        offset: usize,
        alg: u16,
    },
    #[error("event {index} at offset {offset}: PCR index {pcr} is not one of the 24 PCRs")]
    PcrIndex {
        index: usize,
        offset: usize,
        pcr: u32,
    },
    #[error("event {index} at offset {offset}: {reason}")]
    Locality {
        index: usize,
        offset: usize,
        reason: &'static str,
    },
    /// An event in PCRs 0–7 whose type or data disagrees with what its
    /// digests measure: a relabelled separator, or an event whose data the
    /// facts would read although it is not what was extended.
    #[error("event {index} at offset {offset}: {reason}")]
    Mislabelled {
        index: usize,
        offset: usize,
        reason: &'static str,
    },
}

/// Why quoted PCR values were not accepted against a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PcrCheckError {
    #[error("the event log carries no {0} digests")]
    BankNotInLog(Bank),
    #[error("no PCRs were quoted")]
    NothingQuoted,
    #[error("PCR {0} is not one of the 24 PCRs, or is quoted twice")]
    Selection(u8),
    #[error("PCR {pcr}: a quoted value of {len} bytes, not a {bank} digest")]
    Length { pcr: u8, bank: Bank, len: usize },
    #[error("PCR {pcr} ({bank}): quoted {}, the event log replays to {}", hex(.expected), hex(.replayed))]
    Mismatch {
        pcr: u8,
        bank: Bank,
        expected: Vec<u8>,
        replayed: Vec<u8>,
    },
}
