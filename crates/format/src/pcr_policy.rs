//! Signed PCR policies: the boot state in which a sealed DEK seed may open,
//! as its operator signed it.
//!
//! A sealed object whose authPolicy is [`PolicyKey::authorized_policy`]
//! opens only in a policy session that has passed TPM2_PolicyAuthorize,
//! which needs a TPM ticket proving that the policy key signed the session's
//! digest so far. sceau makes that digest with TPM2_PolicyPCR, so what the
//! key signs is the PolicyPCR digest of some PCR values
//! ([`policy_pcr_digest`]): the DEKs open in every boot state the operator
//! signed, and an update needs a new signature, not a new seal.
//!
//! The files are the ones systemd uses, so that either tool reads the
//! other's:
//! - signed policies ([`SignedPolicy`]): what `systemd-measure sign` writes,
//!   `{"sha256":[{"pcrs":[11],"pkfp":"…","pol":"…","sig":"…"}]}`, where
//!   `pol` is the PolicyPCR digest (hex), `sig` the signature over
//!   `SHA-256(pol)` (base64: RSASSA-PKCS1-v1_5, or DER ECDSA) and `pkfp`
//!   the key's fingerprint ([`PolicyKey::fingerprint`]);
//! - PCR values ([`PcrValues`]): the text `tpm2_pcrread` prints, which
//!   `sceau pcrs` prints too.
//!
//! A policy signed by `sceau-recover policy sign` also carries the values
//! it was signed at, `"sceau-pcr-values":{"7":"…"}`, so that a mismatch can
//! be logged PCR by PCR (expected, actual): `pol` is only a digest of
//! them. The values are not signed; they are accepted only when they give
//! `pol`, which is. systemd reads the members it knows by name and
//! ignores this one.
//!
//! A policy signed with a revocation serial (`"sceau-revocation-serial":N`,
//! [`crate::revocation`]) is the PolicyPCR digest followed by TPM2_PolicySecret
//! on that serial's NV index: `pol` is then the digest after both, and the
//! policy stops opening anything once the serial is revoked in the TPM. Such
//! a policy always carries its values, so that its serial, which only the
//! digest commits to, is checked like them.
//!
//! Two kinds of policy bind to nothing another OS cannot reproduce, and are
//! refused where they are signed and where they are served: a PCR the
//! booted OS may reset (16 and 23: [`PcrSelection::resettable`]), and a
//! policy that covers no PCR the firmware extends before any OS runs (0–7:
//! [`PcrSelection::covers_firmware`]), such as systemd-measure's PCR 11 alone, which any OS
//! booted without systemd-stub extends from userspace with the published
//! section hashes. The second is allowed where the operator says so by a
//! flag that names what it gives up.
//!
//! sceau binds to the SHA-256 bank only: every TPM 2.0 of the PC Client
//! profile has it, and a SHA-1 bank would bind to a hash with known
//! collisions.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::text::decode_hex;
use sha2::{Digest as _, Sha256};

use super::json::{self, Json, JsonError};
use super::key_id::hex;
use super::policy_key::{PolicyKey, PolicySigner};
use super::revocation::Serial;
use super::text::printable;
use super::wire::{ALG_SHA256, Writer};

/// TPM_CC_PolicyPCR, as its policy digest update hashes it.
pub const TPM_CC_POLICY_PCR: u32 = 0x0000_017F;
/// PCRs 0 to 23: the PC Client profile's.
pub const PCR_COUNT: u8 = 24;
/// The bank sceau binds to, as systemd's JSON and `tpm2_pcrread` name it.
pub const BANK: &str = "sha256";
/// A signed policy file larger than this is refused: systemd-measure's
/// files are about 1 KiB a boot phase.
pub const MAX_POLICY_FILE_LEN: usize = 64 * 1024;
/// Policies a file may hold (systemd-measure writes four, one a phase).
pub const MAX_POLICIES: usize = 64;
/// The longest signature accepted: RSA-4096's 512 bytes (RSA-2048 and
/// P-256 need 256 and at most 72).
const MAX_SIGNATURE_LEN: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("PCR {0} does not exist (PCRs are 0 to 23)")]
    NoSuchPcr(u64),
    #[error("no PCR selected")]
    EmptySelection,
    #[error("'{0}' is not a PCR list such as 7,11")]
    PcrList(String),
    #[error("PCR {0} is listed twice")]
    RepeatedPcr(u8),
    #[error("line {line}: {what}")]
    PcrValues { line: usize, what: &'static str },
    #[error("no sha256 PCR value: expected a 'sha256:' line, then '  N : 0xHEX' lines")]
    NoValues,
    #[error("no value for PCR {0} in the sha256 bank")]
    MissingValue(u8),
    #[error("the signed policy file is {0} bytes; at most {MAX_POLICY_FILE_LEN} are read")]
    TooLarge(usize),
    #[error(transparent)]
    Json(#[from] JsonError),
    #[error("the signed policy file is not {what}")]
    Shape { what: &'static str },
    #[error("no policy for the sha256 bank in the file (sceau binds to sha256 only)")]
    NoSha256,
    #[error("the file holds more than {MAX_POLICIES} policies")]
    TooMany,
    #[error("its sceau-pcr-values do not give its pol digest: they were altered")]
    ValuesNotSigned,
    #[error(
        "PCR {0} can be reset by software on a running machine, so a policy over it binds to \
         nothing; leave out PCRs 16 and 23"
    )]
    Resettable(u8),
    #[error("a sceau-revocation-serial needs the sceau-pcr-values it was signed at")]
    SerialWithoutValues,
}

/// A set of PCRs of the SHA-256 bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcrSelection(u32);

impl PcrSelection {
    /// The PCRs `indices` (at least one, each below 24, none twice).
    pub fn from_indices(indices: impl IntoIterator<Item = u64>) -> Result<Self, PolicyError> {
        let mut bits = 0u32;
        for index in indices {
            if index >= u64::from(PCR_COUNT) {
                return Err(PolicyError::NoSuchPcr(index));
            }
            let bit = 1u32 << index;
            if bits & bit != 0 {
                return Err(PolicyError::RepeatedPcr(index as u8));
            }
            bits |= bit;
        }
        if bits == 0 {
            return Err(PolicyError::EmptySelection);
        }
        Ok(Self(bits))
    }

    /// `7,11` (as systemd's `--tpm2-pcrs` and tpm2-tools write lists).
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let indices = text
            .split(',')
            .map(|part| {
                let part = part.trim();
                // Digits only: no sign, no "0x", nothing a reader could read
                // as another number.
                if part.is_empty() || part.len() > 2 || !part.bytes().all(|b| b.is_ascii_digit()) {
                    // Echoed escaped and bounded: the list may come from a
                    // file, and the error goes to a terminal.
                    return Err(PolicyError::PcrList(printable(text)));
                }
                Ok(part.parse::<u64>().expect("one or two digits"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_indices(indices)
    }

    /// The PCRs in ascending order, the order TPM2_PolicyPCR hashes them in.
    pub fn indices(&self) -> impl Iterator<Item = u8> + '_ {
        (0..PCR_COUNT).filter(|i| self.0 & (1 << i) != 0)
    }

    pub fn contains(&self, index: u8) -> bool {
        index < PCR_COUNT && self.0 & (1 << index) != 0
    }

    /// The first PCR of the selection that software on the running machine
    /// can reset (TPM2_PCR_Reset from locality 0 in the PC Client profile:
    /// 16, the debug PCR, and 23, the application PCR): reset, then one
    /// extend, gives back any value a policy was signed at.
    pub fn resettable(&self) -> Option<u8> {
        RESETTABLE_PCRS.into_iter().find(|&i| self.contains(i))
    }

    /// Refuses a selection with a [`Self::resettable`] PCR.
    pub fn check_bindable(&self) -> Result<(), PolicyError> {
        match self.resettable() {
            Some(index) => Err(PolicyError::Resettable(index)),
            None => Ok(()),
        }
    }

    /// Whether it covers a PCR the firmware extends before any OS runs
    /// (0–7): one whose value an OS booted afterwards can only extend
    /// further, never set.
    pub fn covers_firmware(&self) -> bool {
        self.0 & FIRMWARE_PCRS != 0
    }

    /// TPML_PCR_SELECTION with one TPMS_PCR_SELECTION: the SHA-256 bank and
    /// a 3-byte bitmap (PCR n is bit n mod 8 of byte n / 8).
    pub fn tpml(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(1).u16(ALG_SHA256).u8(3);
        w.raw(&self.0.to_le_bytes()[..3]);
        w.finish()
    }
}

impl std::fmt::Display for PcrSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.indices().map(|i| i.to_string()).collect();
        f.write_str(&list.join(","))
    }
}

/// PCRs 16 and 23: resettable from locality 0.
const RESETTABLE_PCRS: [u8; 2] = [16, 23];
/// PCRs 0 to 7, measured by the firmware.
const FIRMWARE_PCRS: u32 = 0xFF;

/// TPM2_PolicyPCR's digest from a fresh session: `H(0³² ‖ TPM_CC_PolicyPCR ‖
/// TPML_PCR_SELECTION ‖ H(the values in ascending PCR order))`.
pub fn policy_pcr_digest(
    selection: PcrSelection,
    values: &PcrValues,
) -> Result<[u8; 32], PolicyError> {
    let mut pcr_digest = Sha256::new();
    for index in selection.indices() {
        pcr_digest.update(values.get(index).ok_or(PolicyError::MissingValue(index))?);
    }
    Ok(Sha256::new()
        .chain_update([0u8; 32])
        .chain_update(TPM_CC_POLICY_PCR.to_be_bytes())
        .chain_update(selection.tpml())
        .chain_update(pcr_digest.finalize())
        .finalize()
        .into())
}

/// "zeros" or "ones" for a PCR value no extension can give: the reset
/// values. A PCR still at one was never extended this boot (or not by the
/// firmware), and whatever boots next can extend it to the value a policy
/// expects, so binding to it binds to nothing.
pub fn unextended(value: &[u8; 32]) -> Option<&'static str> {
    if value.iter().all(|&b| b == 0) {
        Some("zeros")
    } else if value.iter().all(|&b| b == 0xFF) {
        Some("ones")
    } else {
        None
    }
}

/// Values of PCRs in the SHA-256 bank.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PcrValues(BTreeMap<u8, [u8; 32]>);

impl PcrValues {
    pub fn get(&self, index: u8) -> Option<&[u8; 32]> {
        self.0.get(&index)
    }

    pub fn insert(&mut self, index: u8, value: [u8; 32]) {
        self.0.insert(index, value);
    }

    pub fn iter(&self) -> impl Iterator<Item = (u8, &[u8; 32])> {
        self.0.iter().map(|(i, v)| (*i, v))
    }

    /// The values `selection` names, for a policy over them.
    pub fn select(&self, selection: PcrSelection) -> Result<Self, PolicyError> {
        let mut out = Self::default();
        for index in selection.indices() {
            out.insert(
                index,
                *self.get(index).ok_or(PolicyError::MissingValue(index))?,
            );
        }
        Ok(out)
    }

    /// `tpm2_pcrread`'s text: a `sha256:` line, then `  N : 0xHEX` lines;
    /// other banks' lines are skipped.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut values = Self::default();
        let mut in_sha256 = false;
        for (number, line) in text.lines().enumerate() {
            let line_error = |what| PolicyError::PcrValues {
                line: number + 1,
                what,
            };
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            if let Some(bank) = trimmed.strip_suffix(':') {
                in_sha256 = bank.trim() == BANK;
                continue;
            }
            if !in_sha256 {
                continue;
            }
            let (index, value) = trimmed
                .split_once(':')
                .ok_or(line_error("not 'N : 0xHEX'"))?;
            let index: u8 = index
                .trim()
                .parse()
                .ok()
                .filter(|i| *i < PCR_COUNT)
                .ok_or(line_error("not a PCR number from 0 to 23"))?;
            let value = value.trim();
            let value = value
                .strip_prefix("0x")
                .or_else(|| value.strip_prefix("0X"))
                .unwrap_or(value);
            let bytes = decode_hex(value).ok_or(line_error("not 32 bytes in hex"))?;
            let value: [u8; 32] = bytes
                .try_into()
                .map_err(|_| line_error("not 32 bytes in hex"))?;
            if values.0.insert(index, value).is_some() {
                return Err(line_error("a PCR listed twice"));
            }
        }
        if values.0.is_empty() {
            return Err(PolicyError::NoValues);
        }
        Ok(values)
    }

    /// The text [`Self::parse`] reads, as `tpm2_pcrread` prints it.
    pub fn to_text(&self) -> String {
        let mut out = format!("  {BANK}:\n");
        for (index, value) in &self.0 {
            out.push_str(&format!(
                "    {index:<2}: 0x{}\n",
                hex(value).to_ascii_uppercase()
            ));
        }
        out
    }
}

/// One signed policy: the PCRs it covers, the PolicyPCR digest of their
/// values, and the policy key's signature over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPolicy {
    pub pcrs: PcrSelection,
    /// systemd writes it when it knows the key; sceau always does.
    pub key_fingerprint: Option<[u8; 32]>,
    pub policy: [u8; 32],
    pub signature: Vec<u8>,
    /// The values it was signed at, when the file carries them (sceau's
    /// files do; systemd's do not), checked to give `policy`.
    pub values: Option<PcrValues>,
    /// The revocation serial whose NV index the policy runs PolicySecret
    /// on after PolicyPCR (sceau's files since revocation; never systemd's).
    pub serial: Option<Serial>,
}

/// The digest a policy key signs for `pcrs` at `values`: PolicyPCR's, then,
/// with a serial, PolicySecret's on its unwritten index.
pub fn approved_digest(
    pcrs: PcrSelection,
    values: &PcrValues,
    serial: Option<Serial>,
) -> Result<[u8; 32], PolicyError> {
    let digest = policy_pcr_digest(pcrs, values)?;
    Ok(match serial {
        Some(serial) => serial.policy_secret(&digest),
        None => digest,
    })
}

impl SignedPolicy {
    /// `signer`'s policy over `pcrs` at `values`, revocable by `serial`
    /// (what `sceau-recover policy sign` writes): the [`approved_digest`],
    /// signed, and the key named by its fingerprint. A resettable PCR is
    /// refused.
    pub fn sign(
        signer: &PolicySigner,
        pcrs: PcrSelection,
        values: &PcrValues,
        serial: Serial,
    ) -> Result<Self, PolicyError> {
        pcrs.check_bindable()?;
        let policy = approved_digest(pcrs, values, Some(serial))?;
        Ok(Self {
            pcrs,
            key_fingerprint: Some(signer.public().fingerprint()),
            policy,
            signature: signer.sign(&policy),
            values: Some(values.select(pcrs)?),
            serial: Some(serial),
        })
    }

    /// Whether `key` could have signed it: the fingerprint, when present,
    /// must be the key's (the signature itself is checked by the TPM, or in
    /// software with [`PolicyKey::verify`]).
    pub fn names_key(&self, key: &PolicyKey) -> bool {
        self.key_fingerprint
            .is_none_or(|fingerprint| fingerprint == key.fingerprint())
    }
}

/// Reads a signed policy file: its sha256 entries, in file order.
pub fn parse_signed_policies(text: &str) -> Result<Vec<SignedPolicy>, PolicyError> {
    if text.len() > MAX_POLICY_FILE_LEN {
        return Err(PolicyError::TooLarge(text.len()));
    }
    let shape = |what| PolicyError::Shape { what };
    let root = json::parse(text)?;
    if !matches!(root, Json::Object(_)) {
        return Err(shape("a JSON object of banks"));
    }
    let Json::Array(entries) = root.get(BANK).ok_or(PolicyError::NoSha256)? else {
        return Err(shape("a list of policies under \"sha256\""));
    };
    if entries.len() > MAX_POLICIES {
        return Err(PolicyError::TooMany);
    }
    if entries.is_empty() {
        return Err(PolicyError::NoSha256);
    }
    entries.iter().map(parse_entry).collect()
}

fn parse_entry(entry: &Json) -> Result<SignedPolicy, PolicyError> {
    let shape = |what| PolicyError::Shape { what };
    let Json::Object(members) = entry else {
        return Err(shape("a list of objects under \"sha256\""));
    };
    if members.iter().any(|(name, _)| {
        !["pcrs", "pkfp", "pol", "sig", VALUES_MEMBER, SERIAL_MEMBER].contains(&name.as_str())
    }) {
        return Err(shape(
            "made of pcrs, pkfp, pol, sig, sceau-pcr-values and sceau-revocation-serial only",
        ));
    }
    let Some(Json::Array(pcrs)) = entry.get("pcrs") else {
        return Err(shape("a policy with a \"pcrs\" list"));
    };
    let indices = pcrs
        .iter()
        .map(|pcr| {
            pcr.as_i64()
                .and_then(|i| u64::try_from(i).ok())
                .ok_or(shape("a policy whose PCRs are numbers"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pcrs = PcrSelection::from_indices(indices)?;
    let hex32 = |name, what| -> Result<Option<[u8; 32]>, PolicyError> {
        match entry.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_str()
                .and_then(decode_hex)
                .and_then(|bytes| bytes.try_into().ok())
                .map(Some)
                .ok_or(shape(what)),
        }
    };
    let policy = hex32("pol", "a policy whose \"pol\" is 32 bytes in hex")?
        .ok_or(shape("a policy with a \"pol\" digest"))?;
    let key_fingerprint = hex32("pkfp", "a policy whose \"pkfp\" is 32 bytes in hex")?;
    let signature = entry
        .get("sig")
        .ok_or(shape("a signed policy (no \"sig\")"))?
        .as_str()
        .and_then(|text| STANDARD.decode(text).ok())
        .filter(|sig| !sig.is_empty() && sig.len() <= MAX_SIGNATURE_LEN)
        .ok_or(shape("a policy whose \"sig\" is a signature in base64"))?;
    let serial = match entry.get(SERIAL_MEMBER) {
        None => None,
        Some(serial) => Some(
            serial
                .as_i64()
                .and_then(|n| u16::try_from(n).ok())
                .map(Serial::new)
                .ok_or(shape(
                    "a policy whose sceau-revocation-serial is 0 to 65535",
                ))?,
        ),
    };
    let values = match entry.get(VALUES_MEMBER) {
        None if serial.is_some() => return Err(PolicyError::SerialWithoutValues),
        None => None,
        Some(values) => {
            let values = parse_values(values, pcrs)?;
            if approved_digest(pcrs, &values, serial)? != policy {
                return Err(PolicyError::ValuesNotSigned);
            }
            Some(values)
        }
    };
    Ok(SignedPolicy {
        pcrs,
        key_fingerprint,
        policy,
        signature,
        values,
        serial,
    })
}

/// The member that carries the values a policy was signed at.
const VALUES_MEMBER: &str = "sceau-pcr-values";
/// The member that carries a policy's revocation serial.
const SERIAL_MEMBER: &str = "sceau-revocation-serial";

/// `{"7":"hex",…}`: one value for each PCR of `pcrs`, no other.
fn parse_values(values: &Json, pcrs: PcrSelection) -> Result<PcrValues, PolicyError> {
    let shape = PolicyError::Shape {
        what: "a policy whose sceau-pcr-values name each of its PCRs once, with 32 bytes in hex",
    };
    let Json::Object(members) = values else {
        return Err(shape);
    };
    let mut out = PcrValues::default();
    for (index, value) in members {
        let index: u8 = index.parse().map_err(|_| shape.clone())?;
        let value: [u8; 32] = value
            .as_str()
            .and_then(decode_hex)
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(shape.clone())?;
        if !pcrs.contains(index) || out.get(index).is_some() {
            return Err(shape.clone());
        }
        out.insert(index, value);
    }
    if out.iter().count() != pcrs.indices().count() {
        return Err(shape);
    }
    Ok(out)
}

/// The file [`parse_signed_policies`] reads, in systemd's layout.
pub fn write_signed_policies(policies: &[SignedPolicy]) -> String {
    let entries: Vec<String> = policies
        .iter()
        .map(|p| {
            let pcrs: Vec<String> = p.pcrs.indices().map(|i| i.to_string()).collect();
            let mut entry = format!("{{\"pcrs\":[{}]", pcrs.join(","));
            if let Some(fingerprint) = &p.key_fingerprint {
                entry.push_str(&format!(",\"pkfp\":\"{}\"", hex(fingerprint)));
            }
            entry.push_str(&format!(
                ",\"pol\":\"{}\",\"sig\":\"{}\"",
                hex(&p.policy),
                STANDARD.encode(&p.signature)
            ));
            if let Some(values) = &p.values {
                let values: Vec<String> = values
                    .iter()
                    .map(|(index, value)| format!("\"{index}\":\"{}\"", hex(value)))
                    .collect();
                entry.push_str(&format!(",\"{VALUES_MEMBER}\":{{{}}}", values.join(",")));
            }
            if let Some(serial) = p.serial {
                entry.push_str(&format!(",\"{SERIAL_MEMBER}\":{serial}"));
            }
            entry.push('}');
            entry
        })
        .collect();
    format!("{{\"{BANK}\":[{}]}}\n", entries.join(","))
}

#[cfg(test)]
mod tests;
