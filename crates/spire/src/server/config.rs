//! The server plugin's `plugin_data`:
//!
//! ```hcl
//! ek_hashes_path        = "/etc/spire/sceau/ek-hashes"        # allow list
//! ek_roots_path         = "/etc/spire/sceau/ek-roots.pem"     # manufacturer roots
//! ek_intermediates_path = "/etc/spire/sceau/ek-intermediates.pem"
//! ek_trust              = "either"                            # or "both"
//! quote_pcrs            = [0, 7]                              # optional
//! ```
//!
//! At least one trust source is required. The files are read when SPIRE
//! configures the plugin (at load, and again on reconfiguration), so a
//! changed allow list takes effect on SIGUSR1 with `plugin_data_file`.

use std::collections::HashSet;
use std::path::Path;

use super::x509::TrustStore;
use crate::payload::PCR_COUNT;
use crate::plugin::hcl::Body;
use crate::plugin::{ConfigError, CoreConfig};

const KEYS: [&str; 5] = [
    "ek_hashes_path",
    "ek_roots_path",
    "ek_intermediates_path",
    "ek_trust",
    "quote_pcrs",
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

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub trust_domain: String,
    pub ek_hashes: Option<HashSet<String>>,
    pub trust_store: Option<TrustStore>,
    pub ek_trust: EkTrust,
    /// SHA-256 PCRs to quote, increasing; empty: no quote.
    pub quote_pcrs: Vec<u8>,
}

impl ServerConfig {
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
        let trust_store = match (roots, intermediates) {
            (Some(roots), intermediates) => {
                let roots_text = read_text(Path::new(&roots), "ek_roots_path")?;
                let intermediates_text = match intermediates {
                    Some(path) => read_text(Path::new(&path), "ek_intermediates_path")?,
                    None => String::new(),
                };
                Some(
                    TrustStore::from_pem(&roots_text, &intermediates_text).map_err(|e| {
                        ConfigError(format!("ek_roots_path or ek_intermediates_path: {e}"))
                    })?,
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
        quote_pcrs.sort_unstable();
        quote_pcrs.dedup();
        Ok(Self {
            trust_domain: core.trust_domain.clone(),
            ek_hashes,
            trust_store,
            ek_trust,
            quote_pcrs,
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
        }
        if self.quote_pcrs.is_empty() {
            notes.push("no quote is asked (quote_pcrs is empty)".into());
        }
        notes
    }
}

fn read_text(path: &Path, key: &str) -> Result<String, ConfigError> {
    let unreadable =
        |e: std::io::Error| ConfigError(format!("{key}: cannot read {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let metadata = file.metadata().map_err(unreadable)?;
    if !metadata.is_file() {
        return Err(ConfigError(format!(
            "{key}: {} is not a regular file",
            path.display()
        )));
    }
    if metadata.len() > MAX_FILE_LEN {
        return Err(ConfigError(format!(
            "{key}: {} is larger than {MAX_FILE_LEN} bytes",
            path.display()
        )));
    }
    std::fs::read_to_string(path).map_err(unreadable)
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
