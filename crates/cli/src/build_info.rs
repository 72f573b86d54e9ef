//! What a binary says about its own build: `--version` prints it, and the
//! daemon logs it once at start-up, so that a bug report or a journal names
//! the exact commit. The values are set at build time by the package's
//! `build.rs` through [`crate::build_script::emit`], and read with `env!` by
//! [`build_info!`](crate::build_info!) in the binary's own crate.

use std::fmt::Write as _;

/// One binary's build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub program: &'static str,
    /// `CARGO_PKG_VERSION`.
    pub version: &'static str,
    /// The short git commit, `-dirty` appended when tracked files had
    /// changes; `unknown` when built outside git (a source tarball).
    pub commit: &'static str,
    /// `debug` or `release` (Cargo's `PROFILE`).
    pub profile: &'static str,
    /// The enabled Cargo features, comma-separated; empty for none.
    pub features: &'static str,
    /// The tss2-esys version pkg-config reported when the binary was built
    /// (`None` for a binary that links no tpm2-tss). The library loaded at
    /// run time is the one the system has, normally the same release.
    pub tpm2_tss: Option<&'static str>,
}

impl BuildInfo {
    /// `--version`: the program and version on the first line (for
    /// scripts), then one `name: value` line each.
    pub fn version_text(&self) -> String {
        let mut out = format!("{} {}\n", self.program, self.version);
        let _ = writeln!(out, "commit: {}", self.commit);
        let _ = writeln!(out, "profile: {}", self.profile);
        let _ = writeln!(out, "features: {}", self.feature_list());
        if let Some(tss) = self.tpm2_tss {
            let _ = writeln!(out, "tpm2-tss: built against tss2-esys {tss}");
        }
        out
    }

    /// The same on one line, for the start-up log.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{} {} (commit {}, {} build, features: {}",
            self.program,
            self.version,
            self.commit,
            self.profile,
            self.feature_list()
        );
        if let Some(tss) = self.tpm2_tss {
            let _ = write!(out, ", built against tss2-esys {tss}");
        }
        out.push(')');
        out
    }

    fn feature_list(&self) -> &'static str {
        if self.features.is_empty() {
            "none"
        } else {
            self.features
        }
    }
}

/// The calling crate's [`BuildInfo`], from the variables its `build.rs` set
/// with [`crate::build_script::emit`]: `build_info!("sceau", tpm2_tss)`.
#[macro_export]
macro_rules! build_info {
    ($program:expr, $tpm2_tss:expr) => {
        $crate::build_info::BuildInfo {
            program: $program,
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("SCEAU_BUILD_COMMIT"),
            profile: env!("SCEAU_BUILD_PROFILE"),
            features: env!("SCEAU_BUILD_FEATURES"),
            tpm2_tss: $tpm2_tss,
        }
    };
}

/// The date of the commit the calling crate was built from, `YYYY-MM-DD`
/// (empty when unknown), for the man page's title line.
#[macro_export]
macro_rules! build_date {
    () => {
        env!("SCEAU_BUILD_DATE")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text_and_summary() {
        let info = BuildInfo {
            program: "demo",
            version: "1.2.3",
            commit: "0123456789ab-dirty",
            profile: "release",
            features: "",
            tpm2_tss: Some("3.2.1"),
        };
        assert_eq!(
            info.version_text(),
            "demo 1.2.3\ncommit: 0123456789ab-dirty\nprofile: release\nfeatures: none\n\
             tpm2-tss: built against tss2-esys 3.2.1\n"
        );
        assert_eq!(
            info.summary(),
            "demo 1.2.3 (commit 0123456789ab-dirty, release build, features: none, \
             built against tss2-esys 3.2.1)"
        );
        let no_tss = BuildInfo {
            tpm2_tss: None,
            features: "a,b",
            ..info
        };
        assert!(!no_tss.version_text().contains("tpm2-tss"));
        assert!(no_tss.summary().contains("features: a,b)"));
    }
}
