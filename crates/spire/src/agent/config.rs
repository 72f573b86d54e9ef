//! The agent plugin's `plugin_data`:
//!
//! ```hcl
//! tcti         = "device:/dev/tpmrm0"   # as `sceau --tcti`
//! ek_algorithm = "rsa"                  # or "ecc"
//! ```
//!
//! Both keys are optional; any other key is refused, so a typo does not
//! silently fall back to a default.

use sceau::tpm::Tcti;

use super::tpm::{EkAlgorithm, TpmSettings};
use crate::plugin::ConfigError;
// TODO(plumbing): switch to `crate::plugin::hcl` once it lands; the
// stand-in below has the same names.
use standin_hcl as hcl;

/// The TPM the agent uses when `tcti` is not set: the kernel's resource
/// manager, which the second connection for CertifyCreation needs.
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";
const KEYS: &[&str] = &["tcti", "ek_algorithm"];

/// Parses `plugin_data`.
pub fn parse(hcl_text: &str) -> Result<TpmSettings, ConfigError> {
    let refused = |e: hcl::HclError| ConfigError(e.to_string());
    let body = hcl::Body::parse(hcl_text).map_err(refused)?;
    body.check_keys(KEYS).map_err(refused)?;
    let tcti_text = body
        .string("tcti")
        .map_err(refused)?
        .unwrap_or_else(|| DEFAULT_TCTI.into());
    let tcti = tcti_text
        .parse::<Tcti>()
        .map_err(|e| ConfigError(format!("tcti {tcti_text:?}: {e}")))?;
    let ek_algorithm = match body.string("ek_algorithm").map_err(refused)?.as_deref() {
        None | Some("rsa") => EkAlgorithm::Rsa2048,
        Some("ecc") => EkAlgorithm::EccP256,
        Some(other) => {
            return Err(ConfigError(format!(
                "ek_algorithm {other:?}: expected \"rsa\" (RSA-2048 EK) or \"ecc\" (P-256 EK)"
            )));
        }
    };
    Ok(TpmSettings { tcti, ek_algorithm })
}

/// A stand-in for `crate::plugin::hcl` with the calls this module makes:
/// `key = "string"` lines, `#` and `//` comments. Removed when the real
/// parser lands.
mod standin_hcl {
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    pub struct HclError(String);
    use HclError as ConfigError;

    pub struct Body(Vec<(String, String)>);

    impl Body {
        pub fn parse(text: &str) -> Result<Self, ConfigError> {
            let mut pairs = Vec::new();
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') || line.starts_with("//") {
                    continue;
                }
                let (key, value) = line.split_once('=').ok_or_else(|| {
                    ConfigError(format!("expected key = \"value\", not {line:?}"))
                })?;
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .ok_or_else(|| ConfigError(format!("{}: expected a string", key.trim())))?;
                pairs.push((key.trim().to_owned(), value.to_owned()));
            }
            Ok(Self(pairs))
        }

        pub fn check_keys(&self, allowed: &[&str]) -> Result<(), ConfigError> {
            match self
                .0
                .iter()
                .find(|(key, _)| !allowed.contains(&key.as_str()))
            {
                Some((key, _)) => Err(ConfigError(format!(
                    "unknown key {key:?}; expected one of {}",
                    allowed.join(", ")
                ))),
                None => Ok(()),
            }
        }

        pub fn string(&self, key: &str) -> Result<Option<String>, ConfigError> {
            Ok(self
                .0
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_resource_manager_and_rsa() {
        let settings = parse("").unwrap();
        assert_eq!(settings.tcti.to_string(), DEFAULT_TCTI);
        assert_eq!(settings.ek_algorithm, EkAlgorithm::Rsa2048);
    }

    #[test]
    fn both_keys_are_read() {
        let settings =
            parse("tcti = \"swtpm:host=127.0.0.1,port=2321\"\nek_algorithm = \"ecc\"\n").unwrap();
        assert_eq!(settings.tcti.to_string(), "swtpm:host=127.0.0.1,port=2321");
        assert_eq!(settings.ek_algorithm, EkAlgorithm::EccP256);
    }

    #[test]
    fn bad_values_and_unknown_keys_are_named() {
        let err = parse("tcti = \"usb:/dev/x\"").unwrap_err();
        assert!(err.0.starts_with("tcti \"usb:/dev/x\": "), "{err}");
        let err = parse("ek_algorithm = \"dsa\"").unwrap_err();
        assert!(err.0.contains("ek_algorithm \"dsa\""), "{err}");
        let err = parse("tctl = \"device:/dev/tpmrm0\"").unwrap_err();
        assert!(err.0.contains("tctl"), "{err}");
    }
}
