//! Measured-boot evidence: the TCG PC Client event log a node's firmware
//! wrote, parsed within bounds, replayed per PCR bank, checked against the
//! quoted PCR values, and read for what it says once it has been.
//!
//! Pure and self-contained: bytes in, values out; no TPM, no I/O.
//!
//! # The format (TCG PC Client Platform Firmware Profile, "PFP", event logging)
//!
//! Only crypto-agile logs (TPM 2.0 firmware; what Linux exposes in
//! `/sys/kernel/security/tpm0/binary_bios_measurements`) are accepted. All
//! integers are little-endian.
//!
//! - Event 0 is a `TCG_PCR_EVENT` in the SHA-1 format (pcrIndex 0,
//!   EV_NO_ACTION, a 20-byte digest, eventSize, event) whose event is the
//!   `TCG_EfiSpecIDEvent`: "Spec ID Event03\0", platformClass, version
//!   2.0, uintnSize, then the algorithms (algId, digestSize) every later
//!   event carries, then vendor information.
//! - Every later event is a `TCG_PCR_EVENT2`: pcrIndex u32, eventType u32,
//!   a digest count u32 and (algId u16, digest) pairs, eventSize u32, event.
//!   Each event must carry exactly one digest of each algorithm the Spec ID
//!   event declared, and no other; a log that does not is refused, never
//!   half-read. Algorithms this module cannot hash (SM3, SHA3) are carried
//!   with the size the Spec ID event gives them.
//!
//! Events are numbered as `tpm2_eventlog` numbers them (the Spec ID event is
//! 0); each [`EventLogError`] names the event and the byte offset it starts
//! at. The bounds ([`Limits`]) are checked before anything is allocated for
//! a size the log declares.
//!
//! # Replay
//!
//! Each event that is not EV_NO_ACTION extends its PCR: `pcr = H(pcr ||
//! digest)`. The initial values are the TPM's after TPM2_Startup (PC Client
//! Platform TPM Profile): zeros, except PCRs 17–22 (all ones until a dynamic
//! launch resets them) and PCR 0, whose last byte is the startup locality
//! (the PFP's "StartupLocality" EV_NO_ACTION event, before any PCR 0
//! extension; 4 when PCR 0's first event is an EV_EFI_HCRTM_EVENT, the
//! H-CRTM sequence of TPM 2.0 Part 1). This follows go-attestation's
//! `replayPCR` and tpm2-tools' `tpm2_eventlog` (which honours
//! StartupLocality and H-CRTM from 5.6; before it, it extends EV_NO_ACTION
//! events like any other).
//!
//! SHA-1, SHA-256, SHA-384 and SHA-512 banks can be replayed
//! ([`EventLog::hashed_banks`]); the server replays every one the log
//! declares, so that a bank software extended along a log of its choosing
//! disagrees with a bank the firmware extended (`verify::check_event_log`).
//! Digests of algorithms this module cannot hash (SM3, SHA3) are kept,
//! never checked.
//!
//! # Types and data
//!
//! A quote authenticates digests only: an event's type, and the data of an
//! event whose digest is not the hash of its data, are the agent's word.
//! So no fact depends on a type alone. `parse` refuses, in PCRs 0–7
//! ([`EventLogError::Mislabelled`]), and in every bank it can hash:
//!
//! - an extension by the hash of `00000000`, `00000001` or `FFFFFFFF` (a
//!   separator's data) whose type is not EV_SEPARATOR, and an EV_SEPARATOR
//!   whose data is not one of them or not what its digests measure: a
//!   separator cannot be relabelled, hidden or invented;
//! - an EV_EFI_ACTION whose string, or an EV_EFI_VARIABLE_DRIVER_CONFIG
//!   whose UEFI_VARIABLE_DATA, is not what its digests measure;
//! - an EV_EFI_VARIABLE_BOOT or BOOT2 whose data is not a UEFI variable
//!   whose whole, or VariableData alone, is what its digests measure (edk2
//!   measures the VariableData: `boot-variables-after-separator.bin`).
//!
//! "Its digests" are all of them, SHA-1 included: the data must hash to
//! the event's digest in every bank. So a log whose SHA-256 digests
//! software chose (a bank it extended itself) cannot carry the SHA-1
//! digests the firmware extended beside them unless the data of these
//! events is what the firmware measured.
//!
//! EV_EFI_VARIABLE_AUTHORITY data is not required to match: shim 15
//! measures one byte less than the event it logs (`partial-sb-on.bin`).
//! Nothing is read from such data unless it matches. The fixtures in
//! `tests/fixtures/event_log` (OVMF's among them) and the one further
//! crypto-agile log of go-attestation's test data
//! (`coreos_36_shielded_vm_no_secure_boot_eventlog`) pass these checks.
//!
//! # What a verified log says ([`Verified::facts`])
//!
//! Facts are read only from PCRs whose quoted value equalled the replay
//! ([`EventLog::matches`]) and that are *sealed*: exactly one separator,
//! of data `00000000` (an error separator is not a clean hand-off), and
//! after it only the events the firmware and the boot loader may still
//! measure there once the pre-boot phase is over. Anything else extended
//! after the separator (software can extend any PCR after boot) unseals
//! the PCR, and the facts read from it are unknown; a PCR without its
//! separator is not sealed either (nothing tells the firmware's events
//! from later ones). Data is read only when the digest, in the verified
//! bank, is its hash.
//!
//! - `secure_boot`, PCR 7 sealed: from every event whose data is the EFI
//!   global variable `SecureBoot` and is what was measured, whatever its
//!   type says (a relabelled measurement still counts). Exactly one, before
//!   the separator, of one byte 1 (enabled) or 0 (disabled); none, a
//!   second one, one after the separator, another size or value: unknown.
//!   go-attestation's `ParseSecurebootState` reads the one
//!   EV_EFI_VARIABLE_DRIVER_CONFIG instead.
//! - `boot_applications`, PCR 4 sealed: the digests of the
//!   EV_EFI_BOOT_SERVICES_APPLICATION events in PCR 4, in order (the
//!   Authenticode hashes of the PE images the firmware and shim started:
//!   boot manager, shim, boot loader, UKI or kernel), the measurements
//!   keylime's measured-boot policy checks.
//! - `firmware_debugger`, PCR 7 sealed: an extension of PCR 7 by the hash
//!   of "UEFI Debug Mode" (the PFP's EV_EFI_ACTION for a firmware debugger;
//!   go-attestation refuses such logs), whatever its type.
//! - `complete`: each of PCRs 0–7 sealed. What may follow a separator has
//!   no single rule in the references; this list combines keylime's
//!   (`keylime/mba/elchecking/tests.py`: `EvSeperatorTest`,
//!   `EvEfiActionTest`'s strings per PCR; the example policy's (PCR, type)
//!   dispatcher), go-attestation's for PCR 7 (`ParseSecurebootState`: one
//!   separator, variables only before it, authorities before or after it)
//!   and what 10 real firmware logs hold after their separators
//!   (go-attestation's and tpm2-tools' test logs):
//!   - PCR 1: EV_EFI_VARIABLE_BOOT / EV_EFI_VARIABLE_BOOT2 (boot managers
//!     that measure Boot#### when they try it: 3 of the 10 logs; keylime
//!     accepts them in PCR 1 wherever they are),
//!   - PCR 4: EV_EFI_BOOT_SERVICES_APPLICATION, and EV_EFI_ACTION "Calling
//!     EFI Application from Boot Option" / "Returning from EFI Application
//!     from Boot Option",
//!   - PCR 5: EV_EFI_GPT_EVENT, and EV_EFI_ACTION "Exit Boot Services
//!     Invocation" / "Exit Boot Services Returned with Success" / "... with
//!     Failure",
//!   - PCR 7: EV_EFI_VARIABLE_AUTHORITY (the db entry that verified the boot
//!     loader, shim's SbatLevel and MOK authorities), unless its data is a
//!     measured `SecureBoot` variable,
//!   - PCRs 0, 2, 3, 6: nothing.
//!
//!   The types of the events allowed after a separator remain the agent's
//!   word: software that extends PCR 4 after boot and logs the extension
//!   as a boot application keeps PCR 4 sealed (one more boot application).
//!
//! [`unextended`] is the check on the quoted values themselves: a boot PCR
//! (0–7) that is all zeros or all ones was never extended by the firmware
//! (after a boot each holds at least its separator), so its bank says
//! nothing about the boot, and software could extend such a bank to match a
//! log of its choosing. One such PCR is enough to refuse.
//!
//! # Sizes
//!
//! Measured on the 10 crypto-agile firmware logs in go-attestation's and
//! tpm2-tools' test data (GCE shielded VMs and other machines) and on
//! OVMF's (edk2, Secure Boot on, four banks); five of these are the
//! fixtures in `tests/fixtures/event_log`: 2.6–38 KB, 15–112 events (a
//! SHA-1-format log there is 73 KB; OVMF's is 12 KB, 25 events); the
//! largest event is 12 KB (a `dbx` variable in PCR 7), the next 6 KB (a
//! `db`). UEFI logs are commonly cited at 20–80 KB with 50–300 events; the
//! variables are the large events (each dbx SHA-256 entry is 48 bytes: 430
//! entries are ~20 KB), GRUB's PCR 8 command events the many.
//! [`Limits::default`] allows 1 MiB, 4096 events and 64 KiB per event: over
//! twenty times the largest log and event count seen, five times the
//! largest event.

use sceau_format::key_id::hex;
use sha1::Sha1;
use sha2::{Sha256, Sha384, Sha512};

/// PCRs in a PC Client TPM bank.
pub const PCR_COUNT: usize = 24;
/// The PCRs the firmware measures into before the boot loader starts.
pub const BOOT_PCRS: [u8; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

pub const ALG_SHA1: u16 = 0x0004;
pub const ALG_SHA256: u16 = 0x000B;
pub const ALG_SHA384: u16 = 0x000C;
pub const ALG_SHA512: u16 = 0x000D;
pub const ALG_SM3_256: u16 = 0x0012;
pub const ALG_SHA3_256: u16 = 0x0027;
pub const ALG_SHA3_384: u16 = 0x0028;
pub const ALG_SHA3_512: u16 = 0x0029;

/// Event types (PFP, "Events") this module reads or its tests write.
pub mod event_type {
    pub const EV_POST_CODE: u32 = 0x0000_0001;
    pub const EV_NO_ACTION: u32 = 0x0000_0003;
    pub const EV_SEPARATOR: u32 = 0x0000_0004;
    pub const EV_S_CRTM_VERSION: u32 = 0x0000_0008;
    pub const EV_IPL: u32 = 0x0000_000D;
    pub const EV_EFI_VARIABLE_DRIVER_CONFIG: u32 = 0x8000_0001;
    pub const EV_EFI_VARIABLE_BOOT: u32 = 0x8000_0002;
    pub const EV_EFI_BOOT_SERVICES_APPLICATION: u32 = 0x8000_0003;
    pub const EV_EFI_GPT_EVENT: u32 = 0x8000_0006;
    pub const EV_EFI_ACTION: u32 = 0x8000_0007;
    pub const EV_EFI_VARIABLE_BOOT2: u32 = 0x8000_000C;
    pub const EV_EFI_HCRTM_EVENT: u32 = 0x8000_0010;
    pub const EV_EFI_VARIABLE_AUTHORITY: u32 = 0x8000_00E0;
}
use event_type::*;

/// "Spec ID Event03\0" (the PFP's TCG_EfiSpecIDEvent).
const SPEC_ID_SIGNATURE: &[u8; 16] = b"Spec ID Event03\0";
/// "StartupLocality\0" then the locality (the PFP's
/// TCG_EfiStartupLocalityEvent).
const STARTUP_LOCALITY_SIGNATURE: &[u8; 16] = b"StartupLocality\0";
/// EFI_GLOBAL_VARIABLE, 8be4df61-93ca-11d2-aa0d-00e098032b8c, as EFI_GUID
/// lays it out (the first three fields little-endian).
const EFI_GLOBAL_VARIABLE: [u8; 16] = [
    0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c,
];
/// At most this many algorithms in the Spec ID event (there are 8 hash
/// algorithms a TPM may implement).
const MAX_ALGORITHMS: u32 = 8;

mod bank;
mod errors;
mod facts;
#[cfg(test)]
pub(crate) mod forgery;
mod parse;
mod replay;
#[cfg(test)]
mod tests;

pub use bank::Bank;
pub use errors::{EventLogError, Limits, PcrCheckError};
pub use parse::{Event, declared_banks};
pub use replay::unextended;

/// A parsed crypto-agile event log. Nothing in it is trusted until
/// [`EventLog::matches`] has compared its replay with quoted PCR values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    /// (algorithm, digest size), as the Spec ID event declares them.
    algorithms: Vec<(u16, u16)>,
    /// The events after the Spec ID event.
    events: Vec<Event>,
    /// PCR 0's initial locality (0 unless StartupLocality or H-CRTM says).
    locality: u8,
}

/// An event log whose replay equalled the quoted values of some PCRs.
#[derive(Debug, Clone, Copy)]
pub struct Verified<'a> {
    log: &'a EventLog,
    bank: Bank,
    /// Bit n: PCR n was checked.
    pcrs: u32,
}

/// What a verified log says about the boot (module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Secure Boot enabled or disabled; `None`: unknown (PCR 7 not verified
    /// or not sealed, no unambiguous measurement of the variable).
    pub secure_boot: Option<bool>,
    /// The boot applications' digests in the verified bank, in order;
    /// `None`: PCR 4 was not verified or not sealed.
    pub boot_applications: Option<Vec<Vec<u8>>>,
    /// Whether PCR 7 records a firmware debugger; `None`: PCR 7 was not
    /// verified or not sealed.
    pub firmware_debugger: Option<bool>,
    /// PCRs 0–7 were all verified and sealed.
    pub complete: bool,
}
