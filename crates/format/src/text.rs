//! Text that came from outside (a client's request, a file) on its way into
//! an error or a log line: cut to a bound and with control characters
//! escaped, so that no input can make a message long or rewrite a terminal.

/// Characters of outside text shown before the cut.
pub const SHOWN_CHARS: usize = 80;

/// `text` cut at [`SHOWN_CHARS`] characters (then `…`) and escaped as Rust
/// escapes string contents; at most 10 bytes a character after escaping.
pub fn printable(text: &str) -> String {
    let shown: String = text.chars().take(SHOWN_CHARS).collect();
    let escaped = shown.escape_debug().to_string();
    if text.chars().count() > SHOWN_CHARS {
        format!("{escaped}…")
    } else {
        escaped
    }
}
