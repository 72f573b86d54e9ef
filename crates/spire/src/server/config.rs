//! The server plugin's `plugin_data`:
//!
//! ```hcl
//! ek_hashes_path        = "/etc/spire/sceau/ek-hashes"        # allow list
//! ek_roots_path         = "/etc/spire/sceau/ek-roots.pem"     # manufacturer roots
//! ek_intermediates_path = "/etc/spire/sceau/ek-intermediates.pem"
//! ek_crls_path          = "/etc/spire/sceau/ek-crls.pem"      # optional: offline CRLs
//! ek_trust              = "either"                            # or "both"
//! quote_pcrs            = [0, 7]                              # optional
//! measured_boot         = "off"                               # or "optional", "required"
//! measured_boot_bank    = "sha256"
//! measured_boot_banks   = ["sha1", "sha256"]                 # optional
//! tpm_advisories        = "warn"                              # or "refuse"
//! tpm_advisories_path   = "/etc/spire/sceau/tpm-advisories"   # optional: more advisories
//! ```
//!
//! At least one trust source is required. With `measured_boot` on, PCRs
//! 0–7 are added to `quote_pcrs` (the event log's facts come from them,
//! and an unextended bank is seen on them); Validate says so. Every bank
//! the agent's log declares is quoted and replayed; `measured_boot_banks`
//! names banks that must be, whatever the log declares (the agent writes
//! the log, so it chooses what it declares). The files are read when SPIRE
//! configures the plugin (at load, and again on reconfiguration), so a
//! changed allow list takes effect on SIGUSR1 with `plugin_data_file`.
//!
//! Vendor advisories (`sceau_format::advisories`, the built-in list and
//! `tpm_advisories_path`) are held against the manufacturer of a verified
//! EK certificate and the firmware version of a quote signed by an AK under
//! the EK (the TPM's own, not obfuscated): with "warn" a match adds an
//! `advisory:CVE-…` selector and a log line, with "refuse" it refuses the
//! node, as it does a node for which either fact is missing. "refuse"
//! therefore needs `ek_roots_path` and `quote_pcrs`.

use std::collections::HashSet;
use std::path::Path;

use sceau_format::advisories::{self, Advisory};

use super::event_log::{BOOT_PCRS, Bank};
use super::x509::{Crl, TrustStore};
use crate::payload::PCR_COUNT;
use crate::plugin::file::read_bounded;
use crate::plugin::hcl::Body;
use crate::plugin::{ConfigError, CoreConfig};

const KEYS: [&str; 11] = [
    "ek_hashes_path",
    "ek_roots_path",
    "ek_intermediates_path",
    "ek_crls_path",
    "ek_trust",
    "quote_pcrs",
    "measured_boot",
    "measured_boot_bank",
    "measured_boot_banks",
    "tpm_advisories",
    "tpm_advisories_path",
];
/// The largest allow list or PEM bundle read.
const MAX_FILE_LEN: u64 = 4 * 1024 * 1024;

/// How the two trust sources combine when both are configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EkTrust {
    /// The EK passes if it is on the allow list or its certificate chains.
    Either,
    /// The EK must be on the allow list and its certificate must chain.
    Both,
}

/// Whether the agent's firmware event log is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MeasuredBoot {
    /// Never read; an agent's log is ignored.
    #[default]
    Off,
    /// Checked when the agent sends one (a log that does not replay to the
    /// quote is refused); an agent without one attests without the log's
    /// selectors.
    Optional,
    /// An agent without a log is refused.
    Required,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub trust_domain: String,
    pub ek_hashes: Option<HashSet<String>>,
    pub trust_store: Option<TrustStore>,
    pub ek_trust: EkTrust,
    /// SHA-256 PCRs to quote, increasing; empty: no quote. PCRs 0–7 are in
    /// it when `measured_boot` is on.
    pub quote_pcrs: Vec<u8>,
    pub measured_boot: MeasuredBoot,
    /// The bank the `boot_app:` selectors are read in (SHA-256).
    pub measured_boot_bank: Bank,
    /// The banks the log must declare and the quote cover, besides every
    /// other bank the log declares; `measured_boot_bank` is among them.
    pub measured_boot_banks: Vec<Bank>,
    /// The built-in advisories and `tpm_advisories_path`'s.
    pub advisories: Vec<Advisory>,
    /// `tpm_advisories = "refuse"`.
    pub refuse_advised_tpms: bool,
}

impl ServerConfig {
    /// The configuration `plugin_data` with these trust sources and
    /// `quote_pcrs` would give, every other key at its default (either
    /// source, no measured boot, the built-in advisories, warned of): for
    /// the tests, the fuzz target and the example, which build it without
    /// HCL.
    pub fn with_trust(
        trust_domain: &str,
        ek_hashes: Option<HashSet<String>>,
        trust_store: Option<TrustStore>,
        quote_pcrs: Vec<u8>,
    ) -> Self {
        Self {
            trust_domain: trust_domain.into(),
            ek_hashes,
            trust_store,
            ek_trust: EkTrust::Either,
            quote_pcrs,
            measured_boot: MeasuredBoot::Off,
            measured_boot_bank: Bank::Sha256,
            measured_boot_banks: vec![Bank::Sha256],
            advisories: advisories::parse(advisories::BUILTIN).expect("the built-in list parses"),
            refuse_advised_tpms: false,
        }
    }

    pub fn parse(core: &CoreConfig, hcl: &str) -> Result<Self, ConfigError> {
        let error = |e: crate::plugin::hcl::HclError| ConfigError(e.to_string());
        let body = Body::parse(hcl).map_err(error)?;
        body.check_keys(&KEYS).map_err(error)?;
        if core.trust_domain.is_empty() {
            return Err(ConfigError("SPIRE sent no trust domain".into()));
        }
        let ek_hashes = match body.string("ek_hashes_path").map_err(error)? {
            Some(path) => Some(read_hashes(Path::new(&path))?),
            None => None,
        };
        let roots = body.string("ek_roots_path").map_err(error)?;
        let intermediates = body.string("ek_intermediates_path").map_err(error)?;
        let crls = body.string("ek_crls_path").map_err(error)?;
        if roots.is_none() && crls.is_some() {
            return Err(ConfigError(
                "ek_crls_path is set without ek_roots_path: CRLs revoke certificates of a chain, and there is none to check"
                    .into(),
            ));
        }
        let trust_store = match (roots, intermediates) {
            (Some(roots), intermediates) => {
                let roots_text = read_text(Path::new(&roots), "ek_roots_path")?;
                let intermediates_text = match intermediates {
                    Some(path) => read_text(Path::new(&path), "ek_intermediates_path")?,
                    None => String::new(),
                };
                let store =
                    TrustStore::from_pem(&roots_text, &intermediates_text).map_err(|e| {
                        ConfigError(format!("ek_roots_path or ek_intermediates_path: {e}"))
                    })?;
                let crls = match crls {
                    Some(path) => {
                        let bytes = read_bounded(Path::new(&path), MAX_FILE_LEN)
                            .map_err(|e| ConfigError(format!("ek_crls_path: {e}")))?;
                        Crl::from_file_bytes(&bytes, &path)
                            .map_err(|e| ConfigError(format!("ek_crls_path: {e}")))?
                    }
                    None => Vec::new(),
                };
                Some(
                    store
                        .with_crls(crls)
                        .map_err(|e| ConfigError(format!("ek_crls_path: {e}")))?,
                )
            }
            (None, Some(_)) => {
                return Err(ConfigError(
                    "ek_intermediates_path is set without ek_roots_path; intermediates are never trusted as roots"
                        .into(),
                ));
            }
            (None, None) => None,
        };
        if ek_hashes.is_none() && trust_store.is_none() {
            return Err(ConfigError(
                "no trust source: set ek_hashes_path (an allow list of EK hashes), ek_roots_path (manufacturer roots), or both"
                    .into(),
            ));
        }
        let ek_trust = match body.string("ek_trust").map_err(error)?.as_deref() {
            None | Some("either") => EkTrust::Either,
            Some("both") => {
                if ek_hashes.is_none() || trust_store.is_none() {
                    return Err(ConfigError(
                        "ek_trust = \"both\" needs both ek_hashes_path and ek_roots_path".into(),
                    ));
                }
                EkTrust::Both
            }
            Some(other) => {
                return Err(ConfigError(format!(
                    "ek_trust is `{other}`; it must be \"either\" or \"both\""
                )));
            }
        };
        let mut quote_pcrs = Vec::new();
        for index in body
            .integers("quote_pcrs")
            .map_err(error)?
            .unwrap_or_default()
        {
            let index = u8::try_from(index)
                .ok()
                .filter(|i| *i < PCR_COUNT)
                .ok_or_else(|| {
                    ConfigError(format!("quote_pcrs: PCR {index} does not exist (0 to 23)"))
                })?;
            quote_pcrs.push(index);
        }
        let measured_boot = match body.string("measured_boot").map_err(error)?.as_deref() {
            None | Some("off") => MeasuredBoot::Off,
            Some("optional") => MeasuredBoot::Optional,
            Some("required") => MeasuredBoot::Required,
            Some(other) => {
                return Err(ConfigError(format!(
                    "measured_boot is `{other}`; it must be \"off\", \"optional\" or \"required\""
                )));
            }
        };
        // The `pcr:` and `boot_app:` selectors are SHA-256 values, the
        // bank every agent quotes; the key exists so that a configuration
        // states it.
        let measured_boot_bank = match body.string("measured_boot_bank").map_err(error)?.as_deref()
        {
            None | Some("sha256") => Bank::Sha256,
            Some(other) => {
                return Err(ConfigError(format!(
                    "measured_boot_bank is `{other}`; only \"sha256\" is supported (the bank of the selectors)"
                )));
            }
        };
        let mut measured_boot_banks = vec![measured_boot_bank];
        for name in body
            .strings("measured_boot_banks")
            .map_err(error)?
            .unwrap_or_default()
        {
            let bank = Bank::ALL
                .into_iter()
                .find(|b| b.name() == name)
                .ok_or_else(|| {
                    ConfigError(format!(
                        "measured_boot_banks: `{name}` is not a bank; use \"sha1\", \"sha256\", \"sha384\" or \"sha512\""
                    ))
                })?;
            if !measured_boot_banks.contains(&bank) {
                measured_boot_banks.push(bank);
            }
        }
        let quote_pcrs = pcrs_to_quote(quote_pcrs, measured_boot);
        let refuse_advised_tpms = match body.string("tpm_advisories").map_err(error)?.as_deref() {
            None | Some("warn") => false,
            Some("refuse") => true,
            Some(other) => {
                return Err(ConfigError(format!(
                    "tpm_advisories is `{other}`; it must be \"warn\" or \"refuse\""
                )));
            }
        };
        if refuse_advised_tpms && (trust_store.is_none() || quote_pcrs.is_empty()) {
            return Err(ConfigError(
                "tpm_advisories = \"refuse\" needs ek_roots_path (the manufacturer comes from the EK certificate) and quote_pcrs (the firmware version from the quote)"
                    .into(),
            ));
        }
        let mut advisories = advisories::parse(advisories::BUILTIN)
            .map_err(|e| ConfigError(format!("the built-in advisory list: {e}")))?;
        if let Some(path) = body.string("tpm_advisories_path").map_err(error)? {
            let text = read_text(Path::new(&path), "tpm_advisories_path")?;
            advisories.extend(advisories::parse(&text).map_err(|e| {
                ConfigError(format!(
                    "tpm_advisories_path: {path} is not an advisory list (CVE MANUFACTURER FIRMWARE SUMMARY a line): {e}"
                ))
            })?);
        }
        Ok(Self {
            trust_domain: core.trust_domain.clone(),
            ek_hashes,
            trust_store,
            ek_trust,
            quote_pcrs,
            measured_boot,
            measured_boot_bank,
            measured_boot_banks,
            advisories,
            refuse_advised_tpms,
        })
    }

    /// What Validate reports besides errors.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(hashes) = &self.ek_hashes {
            notes.push(format!("{} EK hashes on the allow list", hashes.len()));
        }
        if let Some(store) = &self.trust_store {
            notes.push(format!("{} manufacturer roots", store.root_count()));
            if store.crl_count() > 0 {
                notes.push(format!("{} CRLs", store.crl_count()));
            }
        }
        if self.quote_pcrs.is_empty() {
            notes.push("no quote is asked (quote_pcrs is empty)".into());
        }
        notes.push(format!(
            "{} TPM advisories, {}",
            self.advisories.len(),
            if self.refuse_advised_tpms {
                "refused"
            } else {
                "warned of"
            }
        ));
        match self.measured_boot {
            MeasuredBoot::Off => {}
            mode => notes.push(format!(
                "measured boot {}: the event log is replayed in every bank it declares, and must declare {}; PCRs 0-7 are quoted (quote_pcrs {:?})",
                if mode == MeasuredBoot::Required {
                    "required"
                } else {
                    "optional"
                },
                self.measured_boot_banks
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.quote_pcrs
            )),
        }
        notes
    }
}

/// A configuration file as text, read through [`read_bounded`] (no
/// blocking open, regular files only, at most [`MAX_FILE_LEN`] bytes).
fn read_text(path: &Path, key: &str) -> Result<String, ConfigError> {
    let bytes = read_bounded(path, MAX_FILE_LEN).map_err(|e| ConfigError(format!("{key}: {e}")))?;
    String::from_utf8(bytes)
        .map_err(|_| ConfigError(format!("{key}: {} is not UTF-8 text", path.display())))
}

/// One lowercase hex SHA-256 per line; blank lines and `#` comments allowed.
fn read_hashes(path: &Path) -> Result<HashSet<String>, ConfigError> {
    let text = read_text(path, "ek_hashes_path")?;
    let mut hashes = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let hash = line.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConfigError(format!(
                "ek_hashes_path: {} line {}: not a SHA-256 in hex (64 characters)",
                path.display(),
                number + 1
            )));
        }
        hashes.insert(hash);
    }
    Ok(hashes)
}

/// The PCRs the challenge asks for: `asked` (`quote_pcrs`), increasing,
/// each once, and PCRs 0–7 whenever measured boot is on. Added rather than
/// demanded: the log's facts come from PCRs 0–7 and the unextended-bank
/// check looks at them, so a measured-boot configuration without them
/// would mean nothing.
pub fn pcrs_to_quote(mut asked: Vec<u8>, measured_boot: MeasuredBoot) -> Vec<u8> {
    if measured_boot != MeasuredBoot::Off {
        asked.extend(BOOT_PCRS);
    }
    asked.sort_unstable();
    asked.dedup();
    asked
}

#[cfg(test)]
mod tests;
