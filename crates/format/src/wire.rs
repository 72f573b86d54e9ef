//! The few TPM 2.0 wire structures cluster mode builds and reads in software.
//! Integers are big-endian and every TPM2B is a u16 size then that many bytes,
//! as in TPM 2.0 Part 2. Reading is strict: no trailing bytes, no short fields.

/// TPM_ALG_ID values used here (TPM 2.0 Part 2, table 9).
pub const ALG_AES: u16 = 0x0006;
pub const ALG_KEYEDHASH: u16 = 0x0008;
pub const ALG_SHA256: u16 = 0x000B;
pub const ALG_NULL: u16 = 0x0010;
pub const ALG_ECC: u16 = 0x0023;
pub const ALG_CFB: u16 = 0x0043;
/// TPM_ECC_NIST_P256.
pub const ECC_NIST_P256: u16 = 0x0003;

/// A TPM2B_NAME of a SHA-256 object: nameAlg then the 32-byte digest.
pub const NAME_LEN: usize = 34;

/// The apiserver refuses ciphertexts above 1 KiB, so no envelope of either
/// version is larger: `envelope::Envelope::parse` refuses longer input and
/// the version 2 encoder moves recipients out to stay within it. It lives
/// here, below both envelope modules, so that neither imports the other.
pub const MAX_CIPHERTEXT_LEN: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated in {0}")]
    Truncated(&'static str),
    #[error("{0} trailing bytes after {1}")]
    Trailing(usize, &'static str),
    #[error("{what} is {found:04x} (hex), expected {expected:04x}")]
    Unexpected {
        what: &'static str,
        found: u32,
        expected: u32,
    },
    #[error("{0} does not fit a TPM2B")]
    TooLong(&'static str),
}

/// Appends TPM-marshalled fields to a buffer.
#[derive(Default)]
pub struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.bytes.push(value);
        self
    }

    pub fn u16(&mut self, value: u16) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// A u16 size and the bytes. Every caller passes fields far below 64 KiB
    /// (names, digests, TPM blobs), so a longer one is a programming error.
    pub fn tpm2b(&mut self, bytes: &[u8]) -> &mut Self {
        let size = u16::try_from(bytes.len()).expect("TPM2B fields are below 64 KiB");
        self.u16(size).raw(bytes)
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads TPM-marshalled fields from a slice, naming the field that is short.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.rest.len() < len {
            return Err(WireError::Truncated(what));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn tpm2b(&mut self, what: &'static str) -> Result<&'a [u8], WireError> {
        let size = self.u16(what)?;
        self.take(usize::from(size), what)
    }

    /// Reads a u16 and insists on one value (an algorithm or a curve).
    pub fn expect_u16(&mut self, expected: u16, what: &'static str) -> Result<(), WireError> {
        let found = self.u16(what)?;
        if found != expected {
            return Err(WireError::Unexpected {
                what,
                found: u32::from(found),
                expected: u32::from(expected),
            });
        }
        Ok(())
    }

    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub fn finish(self, what: &'static str) -> Result<(), WireError> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n, what)),
        }
    }
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(bytes).into()
}

/// The TPM Name of an object with nameAlg SHA-256: the algorithm ID and the
/// digest of its marshalled TPMT_PUBLIC.
pub fn sha256_name(tpmt_public: &[u8]) -> [u8; NAME_LEN] {
    use sha2::{Digest as _, Sha256};
    let mut name = [0u8; NAME_LEN];
    name[..2].copy_from_slice(&ALG_SHA256.to_be_bytes());
    name[2..].copy_from_slice(&Sha256::digest(tpmt_public));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_is_strict_about_sizes() {
        let mut w = Writer::default();
        w.u16(7).tpm2b(b"abc").u8(1);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u16("a").unwrap(), 7);
        assert_eq!(r.tpm2b("b").unwrap(), b"abc");
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.finish("c"), Err(WireError::Trailing(1, "c")));
        let mut short = Reader::new(&[0, 5, 1]);
        assert_eq!(short.tpm2b("blob"), Err(WireError::Truncated("blob")));
    }
}
