//! Envelope version 1: a TPM sealed-data object under one node's SRK.
//!
//! Layout (all integers big-endian, as the TPM marshals them):
//!
//! ```text
//! 0x01 ‖ u16 L ‖ TPM2B_PUBLIC (L bytes) ‖ TPM2B_PRIVATE (rest)
//! ```
//!
//! Both blobs are byte-for-byte what `tpm2_create -u/-r` writes, so an operator
//! can open an envelope with `tpm2_load` and `tpm2_unseal` if sceau is gone.
//! Ciphertexts are parsed by `envelope::Envelope::parse`, which reads the
//! version byte and the length limit and hands the rest to [`parse_body`].
//! Parsing is strict and pure: it never touches the TPM.

use crate::wire::{Reader, WireError};

/// The version byte of single-node envelopes (sealed under this TPM's SRK).
pub const VERSION_SEALED: u8 = 0x01;

/// The two TPM blobs of a sealed-data object, each with its own u16 size prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedBlobs {
    /// A marshalled TPM2B_PUBLIC.
    pub public: Vec<u8>,
    /// A marshalled TPM2B_PRIVATE.
    pub private: Vec<u8>,
}

/// What is wrong with the body of a version 1 envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealedError {
    #[error("envelope is truncated in its {0}")]
    Truncated(&'static str),
    #[error("the {0} blob is empty")]
    EmptyBlob(&'static str),
    #[error("the {blob} blob declares {declared} bytes but carries {actual}")]
    SizeMismatch {
        blob: &'static str,
        declared: usize,
        actual: usize,
    },
    #[error("{0} trailing bytes after the private blob")]
    TrailingBytes(usize),
    /// The reader's other errors, which `take` and `u16` never return.
    #[error(transparent)]
    Wire(WireError),
}

/// A short field keeps the message version 1 has always given.
impl From<WireError> for SealedError {
    fn from(error: WireError) -> Self {
        match error {
            WireError::Truncated(what) => SealedError::Truncated(what),
            other => SealedError::Wire(other),
        }
    }
}

impl SealedBlobs {
    /// Encodes a version 1 envelope.
    pub fn encode(&self) -> Vec<u8> {
        let public_len = u16::try_from(self.public.len())
            .expect("a TPM2B_PUBLIC always fits its own u16 size field");
        let mut out = Vec::with_capacity(3 + self.public.len() + self.private.len());
        out.push(VERSION_SEALED);
        out.extend_from_slice(&public_len.to_be_bytes());
        out.extend_from_slice(&self.public);
        out.extend_from_slice(&self.private);
        out
    }
}

/// Everything after the version byte, which `r` has already read.
pub(crate) fn parse_body(mut r: Reader<'_>) -> Result<SealedBlobs, SealedError> {
    let public_len = usize::from(r.u16("public length")?);
    let public = r.take(public_len, "public blob")?;
    let private = r.take(r.remaining(), "private blob")?;
    check_tpm2b(public, "public")?;
    check_private(private)?;
    Ok(SealedBlobs {
        public: public.to_vec(),
        private: private.to_vec(),
    })
}

/// A TPM2B must be exactly its size field plus that many bytes, and not empty.
fn check_tpm2b(blob: &[u8], name: &'static str) -> Result<(), SealedError> {
    let mut r = Reader::new(blob);
    let declared = usize::from(r.u16(name)?);
    if declared == 0 {
        return Err(SealedError::EmptyBlob(name));
    }
    if declared != r.remaining() {
        return Err(SealedError::SizeMismatch {
            blob: name,
            declared,
            actual: r.remaining(),
        });
    }
    Ok(())
}

/// The private blob runs to the end, so bytes beyond its declared size are
/// trailing garbage rather than a size mismatch.
fn check_private(blob: &[u8]) -> Result<(), SealedError> {
    let mut r = Reader::new(blob);
    let declared = usize::from(r.u16("private")?);
    if r.remaining() > declared {
        return Err(SealedError::TrailingBytes(r.remaining() - declared));
    }
    check_tpm2b(blob, "private")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::envelope::{Envelope, EnvelopeError};
    use crate::wire::MAX_CIPHERTEXT_LEN;

    fn tpm2b(content: &[u8]) -> Vec<u8> {
        let mut v = (content.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(content);
        v
    }

    fn sample() -> SealedBlobs {
        SealedBlobs {
            public: tpm2b(&[0xAA; 46]),
            private: tpm2b(&[0xBB; 158]),
        }
    }

    fn parse(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        Envelope::parse(bytes, &HashMap::new())
    }

    #[test]
    fn round_trips_and_has_the_documented_size() {
        let encoded = sample().encode();
        assert_eq!(encoded.len(), 1 + 2 + 48 + 160);
        assert_eq!(&encoded[..3], &[0x01, 0x00, 48]);
        assert_eq!(parse(&encoded), Ok(Envelope::Sealed(sample())));
    }

    #[test]
    fn rejects_malformed_envelopes() {
        let good = sample().encode();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut bad_version = good.clone();
        bad_version[0] = 4;
        let mut long_public_len = good.clone();
        long_public_len[2] = 49;
        let mut short_public_len = good.clone();
        short_public_len[2] = 47;
        let mut zero_private = good[..51].to_vec();
        zero_private.extend_from_slice(&[0, 0]);
        let body = |e: SealedError| EnvelopeError::Sealed(e);
        let cases: Vec<(Vec<u8>, EnvelopeError)> = vec![
            (vec![], EnvelopeError::Empty),
            (vec![1], body(SealedError::Truncated("public length"))),
            (bad_version, EnvelopeError::UnknownVersion(4)),
            (
                good[..40].to_vec(),
                body(SealedError::Truncated("public blob")),
            ),
            (good[..51].to_vec(), body(SealedError::Truncated("private"))),
            (
                good[..good.len() - 1].to_vec(),
                body(SealedError::SizeMismatch {
                    blob: "private",
                    declared: 158,
                    actual: 157,
                }),
            ),
            (trailing, body(SealedError::TrailingBytes(1))),
            (zero_private, body(SealedError::EmptyBlob("private"))),
            (
                vec![0; MAX_CIPHERTEXT_LEN + 1],
                EnvelopeError::TooLong(MAX_CIPHERTEXT_LEN + 1),
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(parse(&bytes), Err(expected), "{bytes:02x?}");
        }
        assert!(matches!(
            parse(&long_public_len),
            Err(EnvelopeError::Sealed(SealedError::SizeMismatch {
                blob: "public",
                ..
            }))
        ));
        assert!(parse(&short_public_len).is_err());
    }

    /// The messages clients read inside "malformed ciphertext: …" are the
    /// ones sceau sent before the two parsers became one.
    #[test]
    fn messages_are_unchanged() {
        let good = sample().encode();
        let cases = [
            (vec![], "ciphertext is empty"),
            (
                vec![1; MAX_CIPHERTEXT_LEN + 1],
                "ciphertext is 1025 bytes, above the 1024-byte limit",
            ),
            (vec![7, 0], "unknown envelope version 7"),
            (vec![1], "envelope is truncated in its public length"),
            (
                good[..40].to_vec(),
                "envelope is truncated in its public blob",
            ),
            (good[..51].to_vec(), "envelope is truncated in its private"),
            (
                [&good[..], &[0]].concat(),
                "1 trailing bytes after the private blob",
            ),
        ];
        for (bytes, message) in cases {
            assert_eq!(parse(&bytes).unwrap_err().to_string(), message);
        }
    }
}
