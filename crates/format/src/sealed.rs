//! The ciphertext sceau hands to the apiserver.
//!
//! Version 1 layout (all integers big-endian, as the TPM marshals them):
//!
//! ```text
//! 0x01 ‖ u16 L ‖ TPM2B_PUBLIC (L bytes) ‖ TPM2B_PRIVATE (rest)
//! ```
//!
//! Both blobs are byte-for-byte what `tpm2_create -u/-r` writes, so an operator
//! can open an envelope with `tpm2_load` and `tpm2_unseal` if sceau is gone.
//! Parsing is strict and pure: it never touches the TPM.

/// The version byte of single-node envelopes (sealed under this TPM's SRK).
pub const VERSION_SEALED: u8 = 0x01;

/// The apiserver refuses ciphertexts above 1 KiB, so nothing larger is ever ours.
pub const MAX_ENVELOPE_LEN: usize = 1024;

/// The two TPM blobs of a sealed-data object, each with its own u16 size prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedBlobs {
    /// A marshalled TPM2B_PUBLIC.
    pub public: Vec<u8>,
    /// A marshalled TPM2B_PRIVATE.
    pub private: Vec<u8>,
}

/// A parsed envelope. Later versions (multi-node) become new variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    Sealed(SealedBlobs),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("ciphertext is empty")]
    Empty,
    #[error("ciphertext is {0} bytes, above the {MAX_ENVELOPE_LEN}-byte limit")]
    TooLong(usize),
    #[error("unknown envelope version {0}")]
    UnknownVersion(u8),
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
}

impl Envelope {
    /// Parses a ciphertext, dispatching on its version byte.
    pub fn parse(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let (&version, body) = bytes.split_first().ok_or(EnvelopeError::Empty)?;
        if bytes.len() > MAX_ENVELOPE_LEN {
            return Err(EnvelopeError::TooLong(bytes.len()));
        }
        match version {
            VERSION_SEALED => parse_sealed(body).map(Envelope::Sealed),
            other => Err(EnvelopeError::UnknownVersion(other)),
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

fn parse_sealed(body: &[u8]) -> Result<SealedBlobs, EnvelopeError> {
    let (public_len, rest) = split_u16(body, "public length")?;
    if rest.len() < public_len {
        return Err(EnvelopeError::Truncated("public blob"));
    }
    let (public, private) = rest.split_at(public_len);
    check_tpm2b(public, "public")?;
    check_private(private)?;
    Ok(SealedBlobs {
        public: public.to_vec(),
        private: private.to_vec(),
    })
}

/// A TPM2B must be exactly its size field plus that many bytes, and not empty.
fn check_tpm2b(blob: &[u8], name: &'static str) -> Result<(), EnvelopeError> {
    let (declared, content) = split_u16(blob, name)?;
    if declared == 0 {
        return Err(EnvelopeError::EmptyBlob(name));
    }
    if declared != content.len() {
        return Err(EnvelopeError::SizeMismatch {
            blob: name,
            declared,
            actual: content.len(),
        });
    }
    Ok(())
}

/// The private blob runs to the end, so bytes beyond its declared size are
/// trailing garbage rather than a size mismatch.
fn check_private(blob: &[u8]) -> Result<(), EnvelopeError> {
    let (declared, content) = split_u16(blob, "private")?;
    if content.len() > declared {
        return Err(EnvelopeError::TrailingBytes(content.len() - declared));
    }
    check_tpm2b(blob, "private")
}

fn split_u16<'a>(bytes: &'a [u8], what: &'static str) -> Result<(usize, &'a [u8]), EnvelopeError> {
    match bytes {
        [hi, lo, rest @ ..] => Ok((usize::from(u16::from_be_bytes([*hi, *lo])), rest)),
        _ => Err(EnvelopeError::Truncated(what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn round_trips_and_has_the_documented_size() {
        let encoded = sample().encode();
        assert_eq!(encoded.len(), 1 + 2 + 48 + 160);
        assert_eq!(&encoded[..3], &[0x01, 0x00, 48]);
        assert_eq!(Envelope::parse(&encoded), Ok(Envelope::Sealed(sample())));
    }

    #[test]
    fn rejects_malformed_envelopes() {
        let good = sample().encode();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut bad_version = good.clone();
        bad_version[0] = 2;
        let mut long_public_len = good.clone();
        long_public_len[2] = 49;
        let mut short_public_len = good.clone();
        short_public_len[2] = 47;
        let mut zero_private = good[..51].to_vec();
        zero_private.extend_from_slice(&[0, 0]);
        let cases: Vec<(Vec<u8>, EnvelopeError)> = vec![
            (vec![], EnvelopeError::Empty),
            (vec![1], EnvelopeError::Truncated("public length")),
            (bad_version, EnvelopeError::UnknownVersion(2)),
            (good[..40].to_vec(), EnvelopeError::Truncated("public blob")),
            (good[..51].to_vec(), EnvelopeError::Truncated("private")),
            (
                good[..good.len() - 1].to_vec(),
                EnvelopeError::SizeMismatch {
                    blob: "private",
                    declared: 158,
                    actual: 157,
                },
            ),
            (trailing, EnvelopeError::TrailingBytes(1)),
            (zero_private, EnvelopeError::EmptyBlob("private")),
            (
                vec![0; MAX_ENVELOPE_LEN + 1],
                EnvelopeError::TooLong(MAX_ENVELOPE_LEN + 1),
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(Envelope::parse(&bytes), Err(expected), "{bytes:02x?}");
        }
        assert!(matches!(
            Envelope::parse(&long_public_len),
            Err(EnvelopeError::SizeMismatch { blob: "public", .. })
        ));
        assert!(Envelope::parse(&short_public_len).is_err());
    }
}
