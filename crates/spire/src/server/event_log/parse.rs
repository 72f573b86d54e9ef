//! Reading a crypto-agile log within its bounds: the Spec ID event, each
//! `TCG_PCR_EVENT2`, and the checks that an event's type and data are what
//! its digests measure (module documentation, "Types and data").

use super::bank::known_digest_len;
use super::*;

/// One `TCG_PCR_EVENT2`, as the log states it (nothing here is verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its number in the log (the Spec ID event is 0).
    pub index: usize,
    /// Where it starts in the log.
    pub offset: usize,
    pub pcr: u8,
    pub event_type: u32,
    /// (algorithm, digest), one per algorithm of the Spec ID event, in the
    /// order the event lists them.
    pub digests: Vec<(u16, Vec<u8>)>,
    pub data: Vec<u8>,
}

impl Event {
    pub fn digest(&self, alg: u16) -> Option<&[u8]> {
        self.digests
            .iter()
            .find(|(id, _)| *id == alg)
            .map(|(_, digest)| digest.as_slice())
    }

    /// Whether it extends its PCR (every event but EV_NO_ACTION does).
    pub fn extends(&self) -> bool {
        self.event_type != EV_NO_ACTION
    }
}

impl EventLog {
    /// Parses a crypto-agile log, refusing it whole if any part is malformed
    /// or out of `limits`.
    pub fn parse(bytes: &[u8], limits: Limits) -> Result<Self, EventLogError> {
        if bytes.len() > limits.max_log_bytes {
            return Err(EventLogError::LogTooLarge {
                size: bytes.len(),
                max: limits.max_log_bytes,
            });
        }
        // The Spec ID event is one of the `max_events`.
        if limits.max_events == 0 {
            return Err(EventLogError::TooManyEvents {
                index: 0,
                offset: 0,
                max: 0,
            });
        }
        let mut r = Cursor { bytes, pos: 0 };
        let algorithms = spec_id(&mut r, limits)?;
        let mut events: Vec<Event> = Vec::new();
        let mut locality: Option<u8> = None;
        let mut pcr0_extended = false;
        while !r.done() {
            let index = events.len() + 1;
            let offset = r.pos;
            if index >= limits.max_events {
                return Err(EventLogError::TooManyEvents {
                    index,
                    offset,
                    max: limits.max_events,
                });
            }
            let truncated = |what| EventLogError::Truncated {
                index,
                offset,
                what,
            };
            let pcr = r.u32().ok_or(truncated("PCR index"))?;
            let event_type = r.u32().ok_or(truncated("event type"))?;
            let count = r.u32().ok_or(truncated("digest count"))?;
            let pcr = match u8::try_from(pcr) {
                Ok(p) if usize::from(p) < PCR_COUNT => p,
                _ => {
                    return Err(EventLogError::PcrIndex { index, offset, pcr });
                }
            };
            if usize::try_from(count).ok() != Some(algorithms.len()) {
                return Err(EventLogError::DigestCount {
                    index,
                    offset,
                    count,
                    expected: algorithms.len(),
                });
            }
            let mut digests: Vec<(u16, Vec<u8>)> = Vec::with_capacity(algorithms.len());
            for _ in 0..algorithms.len() {
                let alg = r.u16().ok_or(truncated("digest algorithm"))?;
                let Some(&(_, size)) = algorithms.iter().find(|(id, _)| *id == alg) else {
                    return Err(EventLogError::UnknownAlgorithm { index, offset, alg });
                };
                if digests.iter().any(|(id, _)| *id == alg) {
                    return Err(EventLogError::DuplicateDigest { index, offset, alg });
                }
                let digest = r.take(usize::from(size)).ok_or(truncated("digest"))?;
                digests.push((alg, digest.to_vec()));
            }
            let data = event_data(&mut r, limits, index, offset)?;

            if pcr == 0
                && event_type == EV_NO_ACTION
                && data.starts_with(STARTUP_LOCALITY_SIGNATURE)
            {
                let locality_error = |reason| EventLogError::Locality {
                    index,
                    offset,
                    reason,
                };
                let value = match data {
                    [.., value] if data.len() == STARTUP_LOCALITY_SIGNATURE.len() + 1 => *value,
                    _ => return Err(locality_error("a StartupLocality event of another size")),
                };
                if pcr0_extended || locality.is_some() {
                    return Err(locality_error(
                        "a StartupLocality event after PCR 0 was extended, or a second one",
                    ));
                }
                if value > 4 {
                    return Err(locality_error("a StartupLocality above 4"));
                }
                locality = Some(value);
            }
            if pcr == 0 && event_type != EV_NO_ACTION {
                if event_type == EV_EFI_HCRTM_EVENT {
                    if pcr0_extended || locality.is_some_and(|l| l != 4) {
                        return Err(EventLogError::Locality {
                            index,
                            offset,
                            reason: "an H-CRTM event that is not PCR 0's first, or after another StartupLocality",
                        });
                    }
                    locality = Some(4);
                }
                pcr0_extended = true;
            }
            let event = Event {
                index,
                offset,
                pcr,
                event_type,
                digests,
                data: data.to_vec(),
            };
            check_labelled(&event).map_err(|reason| EventLogError::Mislabelled {
                index,
                offset,
                reason,
            })?;
            events.push(event);
        }
        Ok(Self {
            algorithms,
            events,
            locality: locality.unwrap_or(0),
        })
    }

    /// (algorithm, digest size) as the Spec ID event declares them.
    pub fn algorithms(&self) -> &[(u16, u16)] {
        &self.algorithms
    }

    /// Whether every event carries a digest for `bank`.
    pub fn has_bank(&self, bank: Bank) -> bool {
        self.algorithms.iter().any(|(id, _)| *id == bank.alg_id())
    }

    /// The banks the log declares that can be replayed here, in the Spec
    /// ID event's order (SM3 and SHA3 are left out).
    pub fn hashed_banks(&self) -> Vec<Bank> {
        hashed_banks(&self.algorithms)
    }

    /// The events after the Spec ID event, unverified.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// PCR 0's startup locality.
    pub fn startup_locality(&self) -> u8 {
        self.locality
    }
}

/// What a separator's data may be: `00000000` (the normal hand-off),
/// `00000001` and `FFFFFFFF` (errors). In PCRs 0–7 an extension by the
/// hash of one of them is a separator, whatever the log calls it.
pub(super) const SEPARATOR_VALUES: [[u8; 4]; 3] = [[0; 4], [0, 0, 0, 1], [0xff; 4]];

/// Whether every digest of `event` in a bank this module can hash is the
/// hash of `data` (an algorithm it cannot hash is not checked).
fn measures(event: &Event, data: &[u8]) -> bool {
    event.digests.iter().all(|(alg, digest)| {
        Bank::from_alg_id(*alg).is_none_or(|bank| bank.hash(&[data]) == *digest)
    })
}

/// Whether some digest of `event` (in a bank this module can hash) is the
/// hash of `data`.
fn has_digest_of(event: &Event, data: &[u8]) -> bool {
    event.digests.iter().any(|(alg, digest)| {
        Bank::from_alg_id(*alg).is_some_and(|bank| bank.hash(&[data]) == *digest)
    })
}

/// The checks that make an event's type and data in PCRs 0–7 say what its
/// digests measured, where the facts depend on it (module documentation,
/// "Types and data"). `Err`: why the log is refused.
fn check_labelled(event: &Event) -> Result<(), &'static str> {
    if !BOOT_PCRS.contains(&event.pcr) || !event.extends() {
        return Ok(());
    }
    let separator_digest = SEPARATOR_VALUES.iter().any(|v| has_digest_of(event, v));
    if separator_digest && event.event_type != EV_SEPARATOR {
        return Err("a separator's digest on an event that is not an EV_SEPARATOR");
    }
    let whole = || measures(event, &event.data);
    let refused = match event.event_type {
        EV_SEPARATOR => (!SEPARATOR_VALUES.iter().any(|v| event.data == v) || !whole()).then_some(
            "an EV_SEPARATOR whose data is not 00000000, 00000001 or FFFFFFFF, or not what its digests measure",
        ),
        EV_EFI_ACTION => (!whole())
            .then_some("an EV_EFI_ACTION whose string is not what its digests measure"),
        EV_EFI_VARIABLE_DRIVER_CONFIG => (Variable::parse(&event.data).is_none() || !whole())
            .then_some(
                "an EV_EFI_VARIABLE_DRIVER_CONFIG whose data is not a UEFI variable, or not what its digests measure",
            ),
        // edk2 measures a boot variable's VariableData alone (the fixture
        // boot-variables-after-separator.bin), other firmware the whole
        // UEFI_VARIABLE_DATA.
        EV_EFI_VARIABLE_BOOT | EV_EFI_VARIABLE_BOOT2 => {
            let measured = Variable::parse(&event.data)
                .is_some_and(|variable| whole() || measures(event, variable.data));
            (!measured).then_some(
                "an EFI boot variable event whose data is not a UEFI variable, or not what its digests measure",
            )
        }
        _ => None,
    };
    refused.map_or(Ok(()), Err)
}

/// A UEFI_VARIABLE_DATA (PFP): VariableName (GUID), UnicodeNameLength
/// and VariableDataLength (UINT64), UnicodeName (UTF-16LE), VariableData.
pub(super) struct Variable<'a> {
    pub(super) guid: &'a [u8],
    pub(super) name: &'a [u8],
    pub(super) data: &'a [u8],
}

impl<'a> Variable<'a> {
    pub(super) fn parse(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Cursor { bytes, pos: 0 };
        let guid = r.take(16)?;
        let name_len = usize::try_from(r.u64()?).ok()?;
        let data_len = usize::try_from(r.u64()?).ok()?;
        let name = r.take(name_len.checked_mul(2)?)?;
        let data = r.take(data_len)?;
        r.done().then_some(Self { guid, name, data })
    }

    pub(super) fn is(&self, guid: &[u8; 16], name: &str) -> bool {
        self.guid == guid
            && self.name.len() == 2 * name.encode_utf16().count()
            && self
                .name
                .chunks_exact(2)
                .zip(name.encode_utf16())
                .all(|(unit, c)| u16::from_le_bytes([unit[0], unit[1]]) == c)
    }
}

/// The banks among `algorithms` that can be replayed here, in order.
fn hashed_banks(algorithms: &[(u16, u16)]) -> Vec<Bank> {
    algorithms
        .iter()
        .filter_map(|(alg, _)| Bank::from_alg_id(*alg))
        .collect()
}

/// The banks a log's Spec ID event declares that can be replayed here,
/// read from its header alone (the agent quotes them before it sends the
/// log); an error if the header is not a crypto-agile log's.
pub fn declared_banks(bytes: &[u8]) -> Result<Vec<Bank>, EventLogError> {
    let limits = Limits {
        max_log_bytes: usize::MAX,
        ..Limits::default()
    };
    spec_id(&mut Cursor { bytes, pos: 0 }, limits).map(|algorithms| hashed_banks(&algorithms))
}

/// Event 0: the SHA-1-format header carrying the Spec ID event. Returns
/// the (algorithm, digest size) pairs.
fn spec_id(r: &mut Cursor<'_>, limits: Limits) -> Result<Vec<(u16, u16)>, EventLogError> {
    let (index, offset) = (0, 0);
    let truncated = |what| EventLogError::Truncated {
        index,
        offset,
        what,
    };
    let not_agile = |reason| EventLogError::NotCryptoAgile {
        index,
        offset,
        reason,
    };
    let invalid = |reason| EventLogError::SpecId {
        index,
        offset,
        reason,
    };
    let pcr = r.u32().ok_or(truncated("PCR index"))?;
    let event_type = r.u32().ok_or(truncated("event type"))?;
    r.take(20).ok_or(truncated("SHA-1 digest"))?;
    let data = event_data(r, limits, index, offset)?;
    if pcr != 0 || event_type != EV_NO_ACTION || !data.starts_with(SPEC_ID_SIGNATURE) {
        return Err(not_agile(
            "the first event is not the Spec ID Event03 (a TPM 1.2 SHA-1 log?)",
        ));
    }
    let mut s = Cursor {
        bytes: data,
        pos: SPEC_ID_SIGNATURE.len(),
    };
    let short = || invalid("too short");
    s.u32().ok_or_else(short)?; // platformClass
    let minor = s.u8().ok_or_else(short)?;
    let major = s.u8().ok_or_else(short)?;
    s.u8().ok_or_else(short)?; // specErrata
    let uintn = s.u8().ok_or_else(short)?;
    if (major, minor) != (2, 0) {
        return Err(invalid("not version 2.0"));
    }
    if uintn != 1 && uintn != 2 {
        return Err(invalid("uintnSize is neither 1 nor 2"));
    }
    let count = s.u32().ok_or_else(short)?;
    if count == 0 || count > MAX_ALGORITHMS {
        return Err(invalid("no algorithms, or more than 8"));
    }
    let mut algorithms: Vec<(u16, u16)> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let alg = s.u16().ok_or_else(short)?;
        let size = s.u16().ok_or_else(short)?;
        if algorithms.iter().any(|(id, _)| *id == alg) {
            return Err(invalid("an algorithm declared twice"));
        }
        match known_digest_len(alg) {
            Some(known) if known != size => {
                return Err(invalid("a digest size that is not its algorithm's"));
            }
            None if size == 0 || size > 64 => {
                return Err(invalid(
                    "an unknown algorithm with a digest size of 0 or above 64",
                ));
            }
            _ => {}
        }
        algorithms.push((alg, size));
    }
    let vendor = s.u8().ok_or_else(short)?;
    s.take(usize::from(vendor))
        .ok_or(invalid("vendorInfo shorter than vendorInfoSize"))?;
    if !s.done() {
        return Err(invalid("bytes after vendorInfo"));
    }
    Ok(algorithms)
}

/// eventSize then the event data, bounded before it is taken.
fn event_data<'a>(
    r: &mut Cursor<'a>,
    limits: Limits,
    index: usize,
    offset: usize,
) -> Result<&'a [u8], EventLogError> {
    let truncated = |what| EventLogError::Truncated {
        index,
        offset,
        what,
    };
    let size = r.u32().ok_or(truncated("event size"))?;
    match usize::try_from(size) {
        Ok(n) if n <= limits.max_event_bytes => r.take(n).ok_or(truncated("event data")),
        _ => Err(EventLogError::EventTooLarge {
            index,
            offset,
            size,
            max: limits.max_event_bytes,
        }),
    }
}

/// A little-endian reader that never reads past its slice.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N).and_then(|b| b.try_into().ok())
    }

    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}
