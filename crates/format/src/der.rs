//! The little DER that standard key files need: the SubjectPublicKeyInfo of
//! a P-256 or RSA key (what `openssl pkey -pubout` and systemd's
//! `tpm2-pcr-public-key.pem` hold), PKCS#1 RSAPublicKey, a P-256 PKCS#8
//! private key, and ECDSA-Sig-Value. Definite lengths of at most four bytes
//! only; anything else is refused, so that no input can make the reader
//! guess.

/// Universal tags used here (X.690).
pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const NULL: u8 = 0x05;
pub const OID: u8 = 0x06;
pub const SEQUENCE: u8 = 0x30;
/// `[1] EXPLICIT`, the public key of an ECPrivateKey (RFC 5915).
pub const CONTEXT_1: u8 = 0xA1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DerError {
    #[error("truncated DER")]
    Truncated,
    #[error("DER tag {found:#04x} where {expected:#04x} was expected")]
    Tag { expected: u8, found: u8 },
    #[error("a DER length that is indefinite, not minimal or too large")]
    Length,
    #[error("{0} trailing bytes after the DER value")]
    Trailing(usize),
    #[error("a DER INTEGER that is negative or not minimally encoded")]
    Integer,
}

/// Reads one value after another from a DER byte string.
pub struct DerReader<'a> {
    bytes: &'a [u8],
}

impl<'a> DerReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// The content of the next value, which must have tag `tag`.
    pub fn read(&mut self, tag: u8) -> Result<&'a [u8], DerError> {
        let (&found, rest) = self.bytes.split_first().ok_or(DerError::Truncated)?;
        if found != tag {
            return Err(DerError::Tag {
                expected: tag,
                found,
            });
        }
        let (&first, mut rest) = rest.split_first().ok_or(DerError::Truncated)?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7F);
            if count == 0 || count > 4 || rest.len() < count {
                return Err(DerError::Length);
            }
            let (digits, after) = rest.split_at(count);
            rest = after;
            let len = digits
                .iter()
                .fold(0usize, |len, &b| (len << 8) | usize::from(b));
            // Minimal: no leading zero byte, and the short form when it fits.
            if digits[0] == 0 || len < 0x80 {
                return Err(DerError::Length);
            }
            len
        };
        if rest.len() < len {
            return Err(DerError::Truncated);
        }
        let (content, after) = rest.split_at(len);
        self.bytes = after;
        Ok(content)
    }

    /// A non-negative INTEGER's magnitude, big-endian without the sign byte.
    pub fn unsigned_integer(&mut self) -> Result<&'a [u8], DerError> {
        let content = self.read(INTEGER)?;
        match content {
            [] => Err(DerError::Integer),
            [first, ..] if first & 0x80 != 0 => Err(DerError::Integer),
            [0, second, ..] if second & 0x80 == 0 => Err(DerError::Integer),
            [0, rest @ ..] if !rest.is_empty() => Ok(rest),
            _ => Ok(content),
        }
    }

    /// Nothing may follow.
    pub fn finish(self) -> Result<(), DerError> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(DerError::Trailing(n)),
        }
    }
}

/// One value: `tag`, the minimal length, `content`.
pub fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let digits: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | digits.len() as u8);
        out.extend_from_slice(&digits);
    }
    out.extend_from_slice(content);
    out
}

/// A non-negative INTEGER from a big-endian magnitude (leading zeros
/// dropped, a sign byte added when the top bit is set).
pub fn encode_unsigned(magnitude: &[u8]) -> Vec<u8> {
    let digits = match magnitude.iter().position(|&b| b != 0) {
        Some(first) => &magnitude[first..],
        None => &[0u8][..],
    };
    let mut content = Vec::with_capacity(digits.len() + 1);
    if digits[0] & 0x80 != 0 {
        content.push(0);
    }
    content.extend_from_slice(digits);
    encode(INTEGER, &content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip_and_only_minimal_ones_are_read() {
        for len in [0usize, 1, 127, 128, 255, 256, 4000] {
            let value = encode(OCTET_STRING, &vec![7; len]);
            let mut reader = DerReader::new(&value);
            assert_eq!(reader.read(OCTET_STRING).unwrap().len(), len);
            reader.finish().unwrap();
        }
        // 5 in the long form, a leading zero length byte, indefinite.
        for bad in [
            &[0x04, 0x81, 0x05][..],
            &[0x04, 0x82, 0x00, 0x85],
            &[0x04, 0x80],
        ] {
            assert_eq!(
                DerReader::new(bad).read(OCTET_STRING),
                Err(DerError::Length)
            );
        }
    }

    #[test]
    fn integers_are_unsigned_and_minimal() {
        for magnitude in [&[0u8][..], &[1], &[0x7F], &[0x80], &[0, 0, 0xFF, 1]] {
            let value = encode_unsigned(magnitude);
            let got = DerReader::new(&value).unsigned_integer().unwrap();
            let want = match magnitude.iter().position(|&b| b != 0) {
                Some(first) => &magnitude[first..],
                None => &[0u8][..],
            };
            assert_eq!(got, want);
        }
        for bad in [
            &[0x02, 0x01, 0x80][..],
            &[0x02, 0x02, 0x00, 0x01],
            &[0x02, 0x00],
        ] {
            assert_eq!(
                DerReader::new(bad).unsigned_integer(),
                Err(DerError::Integer)
            );
        }
    }
}
