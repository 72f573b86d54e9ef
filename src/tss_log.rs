//! What `TSS2_LOG` may ask of tpm2-tss's own log.
//!
//! tpm2-tss logs through its own code, not sceau's logger, to stderr, which
//! under systemd is the journal. At debug and trace its ESAPI and SAPI
//! modules dump the parameters they encrypt and decrypt, in clear: after one
//! Encrypt and Decrypt with `TSS2_LOG=esys+debug`, the journal holds the DEK
//! ("param to encrypt"), the session key and the KDFa key. So `serve` refuses
//! such a setting unless the operator names the risk with
//! `--tss-log-reveals-secrets` (docs/troubleshooting.md).
//!
//! The one module allowed at debug and trace is `tcti`: it logs the command
//! and response bytes as they cross the bus, which the salted session
//! already encrypts for every DEK, as a bus sniffer would see them.
//!
//! tpm2-tss reads the variable loosely, and this reading is stricter than
//! its own in every case: entries are `module+level` separated by commas,
//! a module matches any entry whose text before `+` ends with its name
//! (`esys+debug` raises `sys` too), `all` matches every module, and the
//! level is the level name the text after `+` starts with, in any case.
#![forbid(unsafe_code)]

/// The one module whose debug and trace lines carry only what crosses the
/// bus.
const WIRE_ONLY_MODULE: &str = "tcti";
/// The levels at which tpm2-tss dumps parameters and keys.
const REVEALING_LEVELS: [&str; 2] = ["debug", "trace"];

/// `TSS2_LOG` asks tpm2-tss to log what holds secrets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "TSS2_LOG={value} makes tpm2-tss log DEKs and session keys in clear (at debug or trace, \
     every module but tcti does)"
)]
pub struct RevealsSecrets {
    /// The value, escaped and cut to a bound.
    value: String,
}

/// Checks a `TSS2_LOG` value: every entry that raises a module other than
/// `tcti` to debug or trace is refused.
pub fn check(value: &str) -> Result<(), RevealsSecrets> {
    let refused = plus_signs(value).any(|(module, level)| {
        let level = level.to_ascii_lowercase();
        REVEALING_LEVELS.iter().any(|l| level.starts_with(l))
            && !module.eq_ignore_ascii_case(WIRE_ONLY_MODULE)
    });
    match refused {
        true => Err(RevealsSecrets {
            value: sceau_format::text::printable(value),
        }),
        false => Ok(()),
    }
}

/// For each `+` in `value`, as tpm2-tss walks them: the text before it
/// back to the previous comma (the module part) and the text after it up to
/// the next comma (the level part). A `+` inside either part is kept there,
/// which can only make the module part longer and so never `tcti`.
fn plus_signs(value: &str) -> impl Iterator<Item = (&str, &str)> {
    value.match_indices('+').map(move |(at, _)| {
        let before = &value[..at];
        let module = before.rsplit(',').next().unwrap_or_default();
        let after = &value[at + 1..];
        let level = after.split(',').next().unwrap_or_default();
        (module, level)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_trace_are_refused_for_every_module_but_tcti() {
        for refused in [
            "esys+debug",
            "ESYS+DEBUG",
            "all+trace",
            "sys+debug",
            "all+warning,esys+debug",
            "tcti+debug,marshal+trace",
            "esys_crypto+debug",
            // tpm2-tss matches module names by suffix: `xtcti` is not tcti.
            "xtcti+debug",
            // and level names by prefix.
            "esys+debugging",
            "tcti+debug+esys+debug",
            " esys+debug",
        ] {
            assert!(check(refused).is_err(), "{refused:?} must be refused");
        }
    }

    #[test]
    fn quiet_levels_and_the_wire_are_allowed() {
        for allowed in [
            "",
            "all+none",
            "all+warning",
            "all+info,tcti+debug",
            "tcti+trace",
            "TCTI+DEBUG",
            "esys+error",
            "no plus sign at all",
        ] {
            assert_eq!(check(allowed), Ok(()), "{allowed:?} must be allowed");
        }
    }

    #[test]
    fn the_refusal_escapes_the_value() {
        let error = check("esys+debug\n").unwrap_err().to_string();
        assert!(error.starts_with("TSS2_LOG=esys+debug"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
