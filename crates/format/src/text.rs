//! Text that came from outside (a client's request, a file) on its way into
//! an error or a log line: cut to a bound and with control characters
//! escaped, so that no input can make a message long or rewrite a terminal.

/// Appends `text` as a JSON string literal: quote, backslash and every
/// control character escaped (C0, DEL and C1, which a terminal may act on),
/// and U+2028 and U+2029, valid JSON that breaks some line readers;
/// everything else as it is (a `&str` is UTF-8). The one escaper of the
/// workspace: `sceau-recover`'s JSON output and the SPIRE plugins' log
/// lines.
pub fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Bytes of escaped outside text shown before the cut. The bound is on the
/// escaped bytes, not on characters: a character escapes to up to 10 bytes
/// (`\u{10ffff}`), and a character bound once let two echoes push a status
/// message past the service's 512-byte cut (found by the `kms_request` fuzz
/// target, which checks that no message is ever cut there).
pub const SHOWN_BYTES: usize = 160;

/// The longest [`printable`] result: [`SHOWN_BYTES`] and the 3-byte `…`.
pub const PRINTABLE_MAX_BYTES: usize = SHOWN_BYTES + '…'.len_utf8();

/// `text` escaped as Rust escapes string contents, cut after the last whole
/// escaped character that fits in [`SHOWN_BYTES`], then `…` if anything was
/// left out.
pub fn printable(text: &str) -> String {
    let mut shown = String::new();
    for c in text.chars() {
        let escaped = c.escape_debug().to_string();
        if shown.len() + escaped.len() > SHOWN_BYTES {
            shown.push('…');
            return shown;
        }
        shown.push_str(&escaped);
    }
    shown
}

/// `text` cut at a character boundary past `max` bytes, with what was
/// cut said: for text from input that goes into a message.
pub fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &text[..end], text.len())
}

/// Bytes from hex digits, two per byte, either case; `None` for an odd
/// length or any other character (`from_str_radix` alone would take a sign,
/// "+f").
pub fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// `seconds` after the epoch in UTC, to the second, as RFC 3339 writes
/// it: `2026-12-04T18:07:48Z`.
pub fn utc(seconds: u64) -> String {
    let (year, month, day) = civil_from_days(seconds / 86_400);
    let of_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01, by counting
/// 400-year eras of 146 097 days from 0000-03-01 (so that the leap day
/// ends each counted year).
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let days = days + 719_468; // 0000-03-01 to 1970-01-01
    let era = days / 146_097;
    let day_of_era = days % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_what_a_terminal_or_a_line_reader_acts_on() {
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\nd\u{7f}e\u{85}f\u{2028}g é");
        assert_eq!(out, r#""a\"b\\c\nd\u007fe\u0085f\u2028g é""#);
    }

    #[test]
    fn short_text_is_only_escaped() {
        assert_eq!(printable("a\nb\"c"), "a\\nb\\\"c");
        assert_eq!(printable(""), "");
        assert_eq!(printable(&"x".repeat(SHOWN_BYTES)), "x".repeat(SHOWN_BYTES));
    }

    /// Without the byte bound, 80 characters of U+10FFFF became 800 bytes.
    #[test]
    fn escaped_text_is_bounded_in_bytes_whatever_the_characters() {
        for c in ['x', '\u{1a}', '\u{10ffff}', 'é', '\n'] {
            let shown = printable(&c.to_string().repeat(1000));
            assert!(shown.len() <= PRINTABLE_MAX_BYTES, "{c:?}: {}", shown.len());
            assert!(shown.ends_with('…'), "{c:?}");
            assert!(!shown.chars().any(char::is_control), "{c:?}");
        }
    }
}
