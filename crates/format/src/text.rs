//! Text that came from outside (a client's request, a file) on its way into
//! an error or a log line: cut to a bound and with control characters
//! escaped, so that no input can make a message long or rewrite a terminal.

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

#[cfg(test)]
mod tests {
    use super::*;

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
