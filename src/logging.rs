//! sceau's logger: one line per event on stderr, where journald (or the
//! terminal) picks it up. Under systemd each line starts with a `<N>`
//! syslog priority so that journald records the level.
//!
//! Lines meant for machines (each completed call, `server::observe`) carry
//! their facts as `key=value` fields (logfmt) in the message, not as
//! journald's native fields. Native fields need the journal's own socket
//! and `sendmsg` (or a memfd for long entries): after start-up sceau can
//! create no socket and its seccomp filter refuses `sendmsg` and
//! `memfd_create`, and a socket opened before the sandbox would be a second
//! way out of the process for every line. `key=value` text on stderr goes
//! through the one stream journald already reads, reads the same off systemd
//! (a terminal, a container log), and is parsed as it stands by Loki's
//! `logfmt`, Vector and `journalctl -g 'code=Internal'`.
//!
//! `SCEAU_LOG` must be one of [`LEVELS`]; anything else is a usage error
//! (`main` exits 2), not a silent fall-back to `info`.
#![forbid(unsafe_code)]

use std::io::Write;

use log::{Level, LevelFilter, Log, Metadata, Record};

struct StderrLogger {
    level: LevelFilter,
    journald: bool,
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        // tss-esapi logs every failed call at error level, including the
        // Load of an envelope a client altered, so any client could raise
        // ERROR lines. sceau logs its own account of each failure, at the
        // level it deserves; the TSS's own lines appear only when debugging.
        let tss = metadata.target().starts_with("tss_esapi");
        let limit = if tss && (self.level < LevelFilter::Debug || sceau_tpm::tss_log_muted()) {
            LevelFilter::Off
        } else {
            self.level
        };
        metadata.level() <= limit
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = if self.journald {
            format!("<{}>{}\n", syslog_priority(record.level()), record.args())
        } else {
            format!("sceau {:5} {}\n", record.level(), record.args())
        };
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// The values `SCEAU_LOG` takes.
pub const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// `SCEAU_LOG` holds none of [`LEVELS`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "SCEAU_LOG={value} is not a log level; use one of error, warn, info (the default), debug, \
     trace, off"
)]
pub struct UnknownLevel {
    /// The value, escaped and cut to a bound.
    value: String,
}

/// Parses `SCEAU_LOG`: unset or empty is `info`; the names are those of
/// [`LEVELS`], in any case.
pub fn level_from_env(value: Option<&str>) -> Result<LevelFilter, UnknownLevel> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(LevelFilter::Info);
    };
    match LEVELS
        .iter()
        .position(|level| level.eq_ignore_ascii_case(value))
    {
        Some(index) => Ok([
            LevelFilter::Error,
            LevelFilter::Warn,
            LevelFilter::Info,
            LevelFilter::Debug,
            LevelFilter::Trace,
            LevelFilter::Off,
        ][index]),
        None => Err(UnknownLevel {
            value: sceau_format::text::printable(value),
        }),
    }
}

/// Installs the logger. `journald` selects `<N>` priority prefixes, which
/// systemd sets up by exporting JOURNAL_STREAM.
pub fn init(level: LevelFilter, journald: bool) {
    if log::set_boxed_logger(Box::new(StderrLogger { level, journald })).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_levels_parse_and_anything_else_is_refused() {
        assert_eq!(level_from_env(None), Ok(LevelFilter::Info));
        assert_eq!(level_from_env(Some("")), Ok(LevelFilter::Info));
        assert_eq!(level_from_env(Some("debug")), Ok(LevelFilter::Debug));
        assert_eq!(level_from_env(Some("WARN")), Ok(LevelFilter::Warn));
        assert_eq!(level_from_env(Some("off")), Ok(LevelFilter::Off));
        let error = level_from_env(Some("verbose")).unwrap_err().to_string();
        assert_eq!(
            error,
            "SCEAU_LOG=verbose is not a log level; use one of error, warn, info (the default), \
             debug, trace, off"
        );
        assert!(level_from_env(Some("1")).is_err());
        assert!(
            !level_from_env(Some("a\nb"))
                .unwrap_err()
                .to_string()
                .contains('\n')
        );
    }

    #[test]
    fn journald_priorities_follow_the_level() {
        assert_eq!(syslog_priority(Level::Error), 3);
        assert_eq!(syslog_priority(Level::Warn), 4);
        assert_eq!(syslog_priority(Level::Info), 6);
        assert_eq!(syslog_priority(Level::Debug), 7);
    }
}
