//! The agent plugin's `plugin_data`:
//!
//! ```hcl
//! tcti           = "device:/dev/tpmrm0"   # as `sceau --tcti`
//! ek_algorithm   = "rsa"                  # or "ecc"
//! event_log_path = "/sys/kernel/security/tpm0/binary_bios_measurements"
//! ```
//!
//! Every key is optional; any other key is refused, so a typo does not
//! silently fall back to a default. `event_log_path = ""` sends no event
//! log; otherwise the file is read when a challenge asks a quote of PCRs
//! 0–7 (a server with `measured_boot` on), and a missing file sends none.

use sceau_tpm::Tcti;

use super::tpm::{EkAlgorithm, TpmSettings};
use crate::plugin::{ConfigError, hcl};

/// The TPM the agent uses when `tcti` is not set: the kernel's resource
/// manager, which the second connection for CertifyCreation needs.
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";
/// Where Linux exposes the firmware's TCG event log (securityfs; root, or
/// a group the administrator grants, may read it).
pub const DEFAULT_EVENT_LOG_PATH: &str = "/sys/kernel/security/tpm0/binary_bios_measurements";
const KEYS: &[&str] = &["tcti", "ek_algorithm", "event_log_path"];

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
    let event_log_path = match body.string("event_log_path").map_err(refused)? {
        None => Some(DEFAULT_EVENT_LOG_PATH.into()),
        Some(path) if path.is_empty() => None,
        Some(path) if !path.starts_with('/') => {
            return Err(ConfigError(format!(
                "event_log_path {path:?}: an absolute path, or \"\" to send no event log"
            )));
        }
        Some(path) => Some(path.into()),
    };
    Ok(TpmSettings {
        tcti,
        ek_algorithm,
        event_log_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_resource_manager_and_rsa() {
        let settings = parse("").unwrap();
        assert_eq!(settings.tcti.to_string(), DEFAULT_TCTI);
        assert_eq!(settings.ek_algorithm, EkAlgorithm::Rsa2048);
        assert_eq!(
            settings.event_log_path.as_deref(),
            Some(std::path::Path::new(DEFAULT_EVENT_LOG_PATH))
        );
    }

    #[test]
    fn the_event_log_path_is_set_or_disabled() {
        let settings = parse("event_log_path = \"/run/log.bin\"").unwrap();
        assert_eq!(
            settings.event_log_path.as_deref(),
            Some(std::path::Path::new("/run/log.bin"))
        );
        assert_eq!(parse("event_log_path = \"\"").unwrap().event_log_path, None);
        let err = parse("event_log_path = \"log.bin\"").unwrap_err();
        assert!(err.0.starts_with("event_log_path \"log.bin\": "), "{err}");
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
