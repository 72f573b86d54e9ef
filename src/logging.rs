//! sceau's logger: one line per event on stderr, where journald (or the
//! terminal) picks it up. Under systemd each line starts with a `<N>`
//! syslog priority so that journald records the level.
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
        let limit = if metadata.target().starts_with("tss_esapi") && self.level < LevelFilter::Debug
        {
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

/// Parses `SCEAU_LOG` (`error`, `warn`, `info`, `debug`, `trace`, `off`).
pub fn level_from_env(value: Option<&str>) -> LevelFilter {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or(LevelFilter::Info)
}

/// Installs the logger. `journald` selects `<N>` priority prefixes, which
/// systemd sets up by exporting JOURNAL_STREAM.
pub fn init(level: LevelFilter, journald: bool) {
    if log::set_boxed_logger(Box::new(StderrLogger { level, journald })).is_ok() {
        log::set_max_level(level);
    }
}
