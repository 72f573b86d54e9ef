//! The forgery an agent with root can make of its node's real log
//! (audit/threat-model.md): relabel the genuine SecureBoot measurement and
//! PCR 7's separator, then extend PCR 7 after boot with a SecureBoot
//! variable of 1 and a separator, and append both to the log. The log
//! stays consistent with the TPM: every digest the firmware extended is
//! still there, in order, and the appended ones are what software
//! extended. For the tests of this module and of `verify`.

use super::parse::Variable;
use super::*;

/// A UEFI_VARIABLE_DATA.
pub(crate) fn variable(guid: &[u8; 16], name: &str, data: &[u8]) -> Vec<u8> {
    let mut out = guid.to_vec();
    out.extend((name.encode_utf16().count() as u64).to_le_bytes());
    out.extend((data.len() as u64).to_le_bytes());
    for unit in name.encode_utf16() {
        out.extend(unit.to_le_bytes());
    }
    out.extend(data);
    out
}

/// Which steps of the forgery to take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Forgery {
    /// The genuine SecureBoot measurement relabelled
    /// EV_EFI_VARIABLE_AUTHORITY.
    pub relabel_variable: bool,
    /// PCR 7's genuine separator relabelled EV_EFI_ACTION.
    pub relabel_separator: bool,
    /// A separator extended and appended after the forged variable.
    pub append_separator: bool,
}

impl Forgery {
    /// All of it, as the reviewer made it.
    pub(crate) const FULL: Self = Self {
        relabel_variable: true,
        relabel_separator: true,
        append_separator: true,
    };
}

/// `bytes` (a log that parses) forged as `how` says.
pub(crate) fn forge(bytes: &[u8], how: Forgery) -> Vec<u8> {
    let log = EventLog::parse(bytes, Limits::default()).expect("a log that parses");
    let mut out = bytes.to_vec();
    let mut relabel = |event: &Event, kind: u32| {
        out[event.offset + 4..event.offset + 8].copy_from_slice(&kind.to_le_bytes());
    };
    let in_pcr_7 = |kind: u32| {
        log.events()
            .iter()
            .filter(move |e| e.pcr == 7 && e.event_type == kind)
    };
    if how.relabel_variable
        && let Some(genuine) = in_pcr_7(EV_EFI_VARIABLE_DRIVER_CONFIG).find(|e| {
            Variable::parse(&e.data).is_some_and(|v| v.is(&EFI_GLOBAL_VARIABLE, "SecureBoot"))
        })
    {
        relabel(genuine, EV_EFI_VARIABLE_AUTHORITY);
    }
    if how.relabel_separator {
        let separator = in_pcr_7(EV_SEPARATOR).next().expect("PCR 7's separator");
        relabel(separator, EV_EFI_ACTION);
    }
    let mut append = |kind: u32, data: &[u8]| {
        out.extend(7u32.to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend((log.algorithms().len() as u32).to_le_bytes());
        for &(alg, size) in log.algorithms() {
            out.extend(alg.to_le_bytes());
            // An algorithm this module cannot hash is not checked.
            let digest = Bank::from_alg_id(alg)
                .map(|bank| bank.hash(&[data]))
                .unwrap_or_else(|| vec![0; usize::from(size)]);
            out.extend(digest);
        }
        out.extend((data.len() as u32).to_le_bytes());
        out.extend(data);
    };
    append(
        EV_EFI_VARIABLE_DRIVER_CONFIG,
        &variable(&EFI_GLOBAL_VARIABLE, "SecureBoot", &[1]),
    );
    if how.append_separator {
        append(EV_SEPARATOR, &[0; 4]);
    }
    out
}
