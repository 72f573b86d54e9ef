//! hclog-style JSON log lines on stderr, which SPIRE's host turns into its
//! own structured log lines at the same level (go-plugin reads the plugin's
//! stderr line by line; ../shared/notes/spire.md §1.4).
//!
//! Each record is one line:
//! `{"@level":"info","@message":"…","@module":"sceau-spire-server","@timestamp":"2026-12-01T10:00:00.000000Z"}`.
//! The host casts `@level`, `@message` and `@timestamp` to strings without
//! checking (a non-string panics its reader), so they are always written as
//! JSON strings; the timestamp uses Go's layout
//! `2006-01-02T15:04:05.000000Z07:00`, in UTC. Nothing is ever written to
//! stdout, which carries the handshake line only.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The environment variable that raises the level to `debug` (or `trace`).
pub const LEVEL_VARIABLE: &str = "SCEAU_SPIRE_LOG";

/// Writes each record as one hclog JSON line on stderr.
#[derive(Debug)]
pub struct Logger {
    module: &'static str,
    level: LevelFilter,
}

impl Logger {
    /// A logger naming `module` (the program) in each line, passing records
    /// at `level` and above.
    pub fn new(module: &'static str, level: LevelFilter) -> Self {
        Logger { module, level }
    }
}

/// The level [`LEVEL_VARIABLE`] asks for: `debug` or `trace`; anything
/// else (or nothing) is `info`.
pub fn level_from(setting: Option<&str>) -> LevelFilter {
    match setting.map(str::trim) {
        Some(s) if s.eq_ignore_ascii_case("trace") => LevelFilter::Trace,
        Some(s) if s.eq_ignore_ascii_case("debug") => LevelFilter::Debug,
        _ => LevelFilter::Info,
    }
}

/// Installs the logger for the process, at the level [`LEVEL_VARIABLE`]
/// asks for. A second call changes nothing.
pub fn install(module: &'static str) {
    let level = level_from(std::env::var(LEVEL_VARIABLE).ok().as_deref());
    if log::set_boxed_logger(Box::new(Logger::new(module, level))).is_ok() {
        log::set_max_level(level);
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // Libraries' own records only at warn and above, so that debug shows
        // sceau's view of the protocol. tss-esapi's are TSS text (it logs an
        // absent EK certificate as an error, for example): the agent reports
        // TPM failures in its own words, so those appear only at debug.
        let target = metadata.target();
        let shown = if target.starts_with("sceau") {
            true
        } else if target.starts_with("tss_esapi") {
            self.level >= LevelFilter::Debug
        } else {
            metadata.level() <= Level::Warn
        };
        shown && metadata.level() <= self.level
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format_line(
            record.level(),
            self.module,
            &record.args().to_string(),
            SystemTime::now(),
        );
        // One write per line, so that lines from several threads never
        // interleave; a lost log line is not worth failing a call for.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The most bytes of one attacker-controlled field (a certificate's DN, an
/// error text from the peer) that a log line or a refusal carries.
pub const MAX_FIELD_BYTES: usize = 256;

/// `text` cut to [`MAX_FIELD_BYTES`] at a character boundary, with what was
/// cut said (`…(4130 bytes)`); escaping is [`format_line`]'s job.
pub fn cap_field(text: &str) -> String {
    sceau_format::text::cap(text, MAX_FIELD_BYTES)
}

/// One log line, newline included. Newlines inside `message` become
/// spaces: the host reads stderr line by line.
pub fn format_line(level: Level, module: &str, message: &str, at: SystemTime) -> String {
    let level = match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    };
    let mut line = String::with_capacity(96 + message.len());
    line.push_str("{\"@level\":\"");
    line.push_str(level);
    line.push_str("\",\"@message\":");
    let one_line = message.replace("\r\n", " ").replace(['\n', '\r'], " ");
    sceau_format::text::push_json_string(&mut line, &one_line);
    line.push_str(",\"@module\":");
    sceau_format::text::push_json_string(&mut line, module);
    line.push_str(",\"@timestamp\":\"");
    line.push_str(&timestamp(at));
    line.push_str("\"}\n");
    line
}

/// `at` in UTC as Go's `2006-01-02T15:04:05.000000Z07:00` writes it (which
/// is `Z` for UTC). Times before 1970 cannot occur on a running host; they
/// are written as the epoch.
pub fn timestamp(at: SystemTime) -> String {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let (year, month, day) = sceau_format::text::civil_from_days(seconds / 86_400);
    let of_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        since_epoch.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(seconds: u64, micros: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(seconds, micros * 1000)
    }

    #[test]
    fn timestamps_use_gos_layout_in_utc() {
        for (seconds, micros, shown) in [
            (0, 0, "1970-01-01T00:00:00.000000Z"),
            (1_796_119_200, 42, "2026-12-01T10:00:00.000042Z"),
            // Leap days, the end of a century year that is not a leap year
            // and one that is.
            (951_782_400, 0, "2000-02-29T00:00:00.000000Z"),
            (1_709_251_199, 999_999, "2024-02-29T23:59:59.999999Z"),
            (4_107_542_400, 0, "2100-03-01T00:00:00.000000Z"),
            (4_107_542_399, 0, "2100-02-28T23:59:59.000000Z"),
            (1_735_689_599, 0, "2024-12-31T23:59:59.000000Z"),
        ] {
            assert_eq!(timestamp(at(seconds, micros)), shown);
        }
        assert_eq!(
            timestamp(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn every_day_of_four_centuries_follows_the_one_before() {
        let days_in = |year: u64, month: u64| match month {
            2 if year.is_multiple_of(4)
                && (!year.is_multiple_of(100) || year.is_multiple_of(400)) =>
            {
                29
            }
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut expected = (1970, 1, 1);
        for days in 0..146_097 {
            assert_eq!(
                sceau_format::text::civil_from_days(days),
                expected,
                "day {days}"
            );
            let (y, m, d) = expected;
            expected = if d < days_in(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
        }
    }

    #[test]
    fn a_line_is_one_json_object_with_string_fields() {
        let line = format_line(
            Level::Warn,
            "sceau-spire-server",
            "hello",
            at(1_796_119_200, 0),
        );
        assert_eq!(
            line,
            "{\"@level\":\"warn\",\"@message\":\"hello\",\"@module\":\"sceau-spire-server\",\"@timestamp\":\"2026-12-01T10:00:00.000000Z\"}\n"
        );
        for (level, name) in [
            (Level::Trace, "trace"),
            (Level::Debug, "debug"),
            (Level::Info, "info"),
            (Level::Error, "error"),
        ] {
            let line = format_line(level, "m", "x", at(0, 0));
            assert!(
                line.starts_with(&format!("{{\"@level\":\"{name}\",")),
                "{line}"
            );
        }
    }

    #[test]
    fn messages_are_escaped_and_kept_on_one_line() {
        let message = "a \"quoted\" \\path\\ \u{1}\u{1f}\u{7f}\ttab\nsecond\r\nthird\u{2028} é ü";
        let line = format_line(Level::Info, "m", message, at(0, 0));
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with("}\n"));
        let expected = "\"@message\":\"a \\\"quoted\\\" \\\\path\\\\ \\u0001\\u001f\\u007f\\ttab second third\\u2028 é ü\"";
        assert!(line.contains(expected), "{line}");
        // Read back as JSON (the HCL parser's JSON form), every field is a
        // string and the message comes back whole.
        let body = crate::plugin::hcl::Body::parse(&line).expect("a JSON object");
        let one_line = message.replace("\r\n", " ").replace('\n', " ");
        assert_eq!(body.string("@message").unwrap(), Some(one_line));
        assert_eq!(body.string("@level").unwrap().as_deref(), Some("info"));
        assert_eq!(body.string("@module").unwrap().as_deref(), Some("m"));
        assert_eq!(
            body.string("@timestamp").unwrap().as_deref(),
            Some("1970-01-01T00:00:00.000000Z")
        );
        assert_eq!(
            body.keys().collect::<Vec<_>>(),
            ["@level", "@message", "@module", "@timestamp"]
        );
    }

    #[test]
    fn long_fields_are_capped_at_a_character_boundary() {
        assert_eq!(cap_field("short"), "short");
        let exact = "x".repeat(MAX_FIELD_BYTES);
        assert_eq!(cap_field(&exact), exact);
        let long = "d".repeat(4096);
        let capped = cap_field(&long);
        assert_eq!(capped, format!("{}…(4096 bytes)", "d".repeat(256)));
        // A two-byte character across the limit is left out whole.
        let straddling = format!("{}é{}", "x".repeat(255), "y".repeat(10));
        let capped = cap_field(&straddling);
        assert!(capped.starts_with(&"x".repeat(255)));
        assert!(capped.ends_with("…(267 bytes)"), "{capped}");
        assert!(!capped.contains('é'));
    }

    #[test]
    fn the_level_is_info_unless_debug_is_asked_for() {
        assert_eq!(level_from(None), LevelFilter::Info);
        assert_eq!(level_from(Some("")), LevelFilter::Info);
        assert_eq!(level_from(Some("info")), LevelFilter::Info);
        assert_eq!(level_from(Some("verbose")), LevelFilter::Info);
        assert_eq!(level_from(Some("debug")), LevelFilter::Debug);
        assert_eq!(level_from(Some("DEBUG ")), LevelFilter::Debug);
        assert_eq!(level_from(Some("trace")), LevelFilter::Trace);
    }

    #[test]
    fn records_below_the_level_and_libraries_debug_are_dropped() {
        let logger = Logger::new("m", LevelFilter::Debug);
        let metadata = |level, target| Metadata::builder().level(level).target(target).build();
        assert!(logger.enabled(&metadata(Level::Debug, "sceau_spire::plugin")));
        assert!(!logger.enabled(&metadata(Level::Trace, "sceau_spire::plugin")));
        assert!(!logger.enabled(&metadata(Level::Debug, "h2::codec")));
        assert!(logger.enabled(&metadata(Level::Warn, "h2::codec")));
        let quiet = Logger::new("m", LevelFilter::Info);
        assert!(!quiet.enabled(&metadata(Level::Debug, "sceau_spire::plugin")));
        assert!(quiet.enabled(&metadata(Level::Info, "sceau_spire::server")));
    }

    #[test]
    fn tss_esapi_records_show_only_at_debug() {
        let metadata = |level, target| Metadata::builder().level(level).target(target).build();
        let info = Logger::new("sceau-spire-agent", LevelFilter::Info);
        assert!(!info.enabled(&metadata(Level::Error, "tss_esapi::context")));
        assert!(info.enabled(&metadata(Level::Warn, "other_library")));
        assert!(info.enabled(&metadata(Level::Info, "sceau_spire::agent")));
        let debug = Logger::new("sceau-spire-agent", LevelFilter::Debug);
        assert!(debug.enabled(&metadata(Level::Error, "tss_esapi::context")));
    }
}
