//! Vendors' advisories against TPM firmware, and the one question asked of
//! them: does this TPM's manufacturer and firmware version fall under one?
//!
//! The list is text, one advisory a line (`CVE MANUFACTURER FIRMWARE
//! SUMMARY`, the format `builtin.txt` documents), so that the list built
//! into sceau and an operator's own file (`--tpm-advisories-file`, for an
//! advisory newer than the release) are read by the same parser and can be
//! reviewed as they stand. A version is the pair of 16-bit halves of
//! TPM_PT_FIRMWARE_VERSION_1, the form the vendors publish; the second word
//! (a build number for most vendors) is not compared.
//!
//! A TPM chooses what it reports, so a match is evidence and the absence of
//! one proves nothing: firmware that lies about its version passes. The
//! list answers the operator's question "is this fleet running firmware a
//! vendor has called broken", not "is this TPM sound".
#![forbid(unsafe_code)]

use std::fmt;

/// The list built into sceau.
pub const BUILTIN: &str = include_str!("advisories/builtin.txt");

/// The longest line or summary kept: an advisory file is configuration, not
/// a place for essays, and its text reaches a log line.
const MAX_LINE: usize = 512;
/// More lines than any vendor has published: a bound on what a file may
/// make sceau hold.
const MAX_ADVISORIES: usize = 256;
/// Ranges on one line.
const MAX_RANGES: usize = 64;

/// A firmware version as vendors write it: major.minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
}

impl Version {
    /// From TPM_PT_FIRMWARE_VERSION_1.
    pub fn from_first_word(word: u32) -> Version {
        Version {
            major: (word >> 16) as u16,
            minor: word as u16,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One vendor advisory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    /// `CVE-YYYY-N…`, checked for that shape.
    pub cve: String,
    /// TPM_PT_MANUFACTURER as [`crate::tpm_info::manufacturer`] prints it.
    pub manufacturer: String,
    /// Inclusive ranges; a single version is a range of one.
    pub affected: Vec<(Version, Version)>,
    pub summary: String,
}

impl Advisory {
    /// Whether a TPM of `manufacturer` running `firmware` falls under it.
    pub fn covers(&self, manufacturer: &str, firmware: Version) -> bool {
        self.manufacturer == manufacturer
            && self
                .affected
                .iter()
                .any(|(first, last)| (*first..=*last).contains(&firmware))
    }
}

/// A line of an advisory list that is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {problem}")]
pub struct ListError {
    pub line: usize,
    pub problem: String,
}

/// The advisories of `text` (the format of [`BUILTIN`]): blank lines and
/// `#` comments are skipped; anything else must be a whole advisory.
pub fn parse(text: &str) -> Result<Vec<Advisory>, ListError> {
    let mut advisories = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let error = |problem: String| ListError { line, problem };
        let content = raw.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if content.len() > MAX_LINE {
            return Err(error(format!("longer than {MAX_LINE} bytes")));
        }
        if !content
            .chars()
            .all(|c| c == ' ' || c == '\t' || c.is_ascii_graphic())
        {
            return Err(error("only printable ASCII is allowed".into()));
        }
        let mut words = content.split_whitespace();
        let (Some(cve), Some(manufacturer), Some(firmware)) =
            (words.next(), words.next(), words.next())
        else {
            return Err(error(
                "expected CVE MANUFACTURER FIRMWARE SUMMARY (e.g. `CVE-2017-15361 IFX \
                 7.0-7.61 ROCA`)"
                    .into(),
            ));
        };
        let summary = words.collect::<Vec<_>>().join(" ");
        if summary.is_empty() {
            return Err(error(format!("{cve} has no summary after its versions")));
        }
        if !is_cve(cve) {
            return Err(error(format!(
                "{} is not a CVE identifier (CVE-YYYY-NNNN)",
                crate::text::printable(cve)
            )));
        }
        if manufacturer.is_empty() || manufacturer.len() > 4 {
            return Err(error(format!(
                "{} is not a TPM manufacturer ID (one to four characters, as IFX or STM)",
                crate::text::printable(manufacturer)
            )));
        }
        let affected = ranges(firmware).map_err(error)?;
        if advisories.len() == MAX_ADVISORIES {
            return Err(error(format!("more than {MAX_ADVISORIES} advisories")));
        }
        advisories.push(Advisory {
            cve: cve.to_string(),
            manufacturer: manufacturer.to_string(),
            affected,
            summary,
        });
    }
    Ok(advisories)
}

/// The advisories of `list` that cover this TPM.
pub fn matching<'a>(
    list: &'a [Advisory],
    manufacturer: &str,
    firmware: Version,
) -> Vec<&'a Advisory> {
    list.iter()
        .filter(|a| a.covers(manufacturer, firmware))
        .collect()
}

fn is_cve(word: &str) -> bool {
    let Some(rest) = word.strip_prefix("CVE-") else {
        return false;
    };
    let Some((year, number)) = rest.split_once('-') else {
        return false;
    };
    year.len() == 4
        && (4..=8).contains(&number.len())
        && year
            .bytes()
            .chain(number.bytes())
            .all(|b| b.is_ascii_digit())
}

fn ranges(field: &str) -> Result<Vec<(Version, Version)>, String> {
    let mut out = Vec::new();
    for part in field.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (version(first)?, version(last)?),
            None => {
                let only = version(part)?;
                (only, only)
            }
        };
        if last < first {
            return Err(format!("{part}: the range ends before it starts"));
        }
        if out.len() == MAX_RANGES {
            return Err(format!("more than {MAX_RANGES} versions on one line"));
        }
        out.push((first, last));
    }
    Ok(out)
}

fn version(text: &str) -> Result<Version, String> {
    let bad = || {
        format!(
            "{} is not a firmware version (major.minor, as 7.61)",
            crate::text::printable(text)
        )
    };
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    let number = |s: &str| -> Result<u16, String> {
        if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    Ok(Version {
        major: number(major)?,
        minor: number(minor)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u16, minor: u16) -> Version {
        Version { major, minor }
    }

    #[test]
    fn the_builtin_list_parses_and_matches_the_published_versions() {
        let list = parse(BUILTIN).expect("the built-in list");
        assert_eq!(list.len(), 2);
        let roca = |firmware| {
            matching(&list, "IFX", firmware)
                .iter()
                .map(|a| a.cve.as_str())
                .collect::<Vec<_>>()
        };
        // Infineon 7.61 is the last affected 7.x, 7.62 and later are fixed;
        // 4.34 to 4.39 never shipped as affected; 133.32 is the last of 133.
        assert_eq!(roca(v(7, 61)), ["CVE-2017-15361"]);
        assert!(roca(v(7, 62)).is_empty());
        assert_eq!(roca(v(4, 33)), ["CVE-2017-15361"]);
        assert!(roca(v(4, 34)).is_empty());
        assert_eq!(roca(v(4, 41)), ["CVE-2017-15361"]);
        assert_eq!(roca(v(133, 32)), ["CVE-2017-15361"]);
        assert!(roca(v(133, 33)).is_empty());
        // The same version from another manufacturer is not Infineon's.
        assert!(matching(&list, "NTC", v(7, 61)).is_empty());
        // ST lists exact versions: 73.4 affected, 73.20 its fix.
        assert_eq!(matching(&list, "STM", v(73, 4)).len(), 1);
        assert!(matching(&list, "STM", v(73, 20)).is_empty());
        assert_eq!(
            Version::from_first_word(0x0007_003D),
            v(7, 61),
            "7.61 as TPM_PT_FIRMWARE_VERSION_1"
        );
    }

    #[test]
    fn a_list_that_is_not_one_says_which_line_and_why() {
        let problem = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            problem("# fine\n\nCVE-2017-15361 IFX 7.0-7.61\n"),
            "line 3: CVE-2017-15361 has no summary after its versions"
        );
        assert!(problem("CVE-17-1 IFX 7.0 x").contains("not a CVE identifier"));
        assert!(problem("CVE-2017-15361 INFINEON 7.0 x").contains("not a TPM manufacturer"));
        assert!(problem("CVE-2017-15361 IFX 7 x").contains("not a firmware version"));
        assert!(problem("CVE-2017-15361 IFX 7.61-7.0 x").contains("ends before it starts"));
        assert!(problem("CVE-2017-15361 IFX 70000.1 x").contains("not a firmware version"));
        assert!(problem("CVE-2017-15361 IFX 7.0 caf\u{e9}").contains("printable ASCII"));
        assert!(problem(&format!("CVE-2017-15361 IFX 7.0 {}", "x".repeat(600))).contains("longer"));
        let many = "CVE-2017-15361 IFX 7.0 x\n".repeat(MAX_ADVISORIES + 1);
        assert!(problem(&many).contains("more than"));
        let ranges = vec!["1.0"; MAX_RANGES + 1].join(",");
        assert!(problem(&format!("CVE-2017-15361 IFX {ranges} x")).contains("more than"));
    }
}
