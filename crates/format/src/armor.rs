//! The text form of sceau's key files: `# ` comment lines, `field: value`
//! header lines, and one base64 block between BEGIN and END lines, so that an
//! operator can read a member's Name in the file and compare it out of band.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

const LINE_WIDTH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArmorError {
    #[error("no '-----BEGIN {0}-----' line")]
    MissingBegin(&'static str),
    #[error("no '-----END {0}-----' line")]
    MissingEnd(&'static str),
    #[error("the {0} block is not valid base64")]
    Base64(&'static str),
}

/// Writes comments, headers and the armored block.
pub fn encode(label: &str, comments: &[&str], headers: &[(&str, String)], bytes: &[u8]) -> String {
    let mut out = String::new();
    for comment in comments {
        out.push_str(&format!("# {comment}\n"));
    }
    for (field, value) in headers {
        out.push_str(&format!("{field}: {value}\n"));
    }
    out.push_str(&format!("-----BEGIN {label}-----\n"));
    let encoded = Zeroizing::new(STANDARD.encode(bytes));
    for line in encoded.as_bytes().chunks(LINE_WIDTH) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The decoded block and the value of one header field, if present.
pub struct Armored {
    pub bytes: Zeroizing<Vec<u8>>,
    headers: Vec<(String, String)>,
}

impl Armored {
    pub fn header(&self, field: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, value)| value.as_str())
    }
}

pub fn decode(text: &str, label: &'static str) -> Result<Armored, ArmorError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut lines = text.lines().map(str::trim);
    let headers = lines
        .by_ref()
        .take_while(|line| *line != begin)
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(field, value)| (field.trim().to_string(), value.trim().to_string()))
        .collect();
    if !text.lines().any(|line| line.trim() == begin) {
        return Err(ArmorError::MissingBegin(label));
    }
    let mut body = Zeroizing::new(String::new());
    let mut ended = false;
    for line in lines {
        if line == end {
            ended = true;
            break;
        }
        body.push_str(line);
    }
    if !ended {
        return Err(ArmorError::MissingEnd(label));
    }
    let bytes = STANDARD
        .decode(body.as_bytes())
        .map_err(|_| ArmorError::Base64(label))?;
    Ok(Armored {
        bytes: Zeroizing::new(bytes),
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_headers_and_comments() {
        let bytes: Vec<u8> = (0..=255).collect();
        let text = encode(
            "TEST",
            &["a comment: not a header"],
            &[("name", "abc".into())],
            &bytes,
        );
        let armored = decode(&text, "TEST").unwrap();
        assert_eq!(armored.bytes.as_slice(), bytes.as_slice());
        assert_eq!(armored.header("name"), Some("abc"));
        assert_eq!(armored.header("a comment"), None);
        assert!(text.lines().all(|l| l.len() <= 64 || l.starts_with('#')));
    }

    #[test]
    fn refuses_missing_markers_and_bad_base64() {
        assert_eq!(
            decode("x", "TEST").err(),
            Some(ArmorError::MissingBegin("TEST"))
        );
        let open = "-----BEGIN TEST-----\nAAAA\n";
        assert_eq!(
            decode(open, "TEST").err(),
            Some(ArmorError::MissingEnd("TEST"))
        );
        let bad = "-----BEGIN TEST-----\n!!!!\n-----END TEST-----\n";
        assert_eq!(decode(bad, "TEST").err(), Some(ArmorError::Base64("TEST")));
    }
}
