//! The one parser of the ciphertexts sceau hands to the apiserver.
//!
//! Every envelope starts with a version byte (docs/envelope.md):
//!
//! - `0x01`, [`Envelope::Sealed`] (`sealed`): a TPM sealed-data object
//!   under this node's SRK; it carries no annotations.
//! - `0x03` and `0x02`, [`Envelope::Wrapped`] (`wrapped`): one sealed
//!   object wrapped for every cluster member and the recovery key, signed by
//!   the member that made it (`0x03`) or, as sceau wrote before, unsigned
//!   (`0x02`); its recipients travel inline or in the `recipients.sceau.io`
//!   annotation.
//!
//! [`Envelope::parse`] checks the length limit and the version, then hands
//! one [`Reader`] to that version's body parser. A new version is a new
//! variant here and a new module beside `sealed` and `wrapped`.

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

use crate::sealed::{self, SealedBlobs, SealedError, VERSION_SEALED};
pub use crate::wire::MAX_CIPHERTEXT_LEN;
use crate::wire::{Reader, WireError};
use crate::wrapped::{
    self, ClusterEnvelope, ClusterEnvelopeError, VERSION_CLUSTER, VERSION_SIGNED,
};

/// Bytes of SHA-256 an envelope's fingerprint keeps: enough to tell every
/// envelope of a cluster apart (a collision among a million envelopes has
/// odds of 2^-25), too few to be mistaken for the envelope.
const FINGERPRINT_LEN: usize = 8;

/// An envelope's fingerprint, as a call's log line and `sceau-recover
/// inventory --list-values` write it: the first 8 bytes of the SHA-256 of the
/// ciphertext, in hex. It names an envelope without saying anything of the
/// DEK inside: an auditor ties a Decrypt to the stored values it opened.
pub fn fingerprint(ciphertext: &[u8]) -> String {
    crate::key_id::hex(&Sha256::digest(ciphertext)[..FINGERPRINT_LEN])
}

/// A parsed ciphertext, of either version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// Version 1: sealed under one node's SRK.
    Sealed(SealedBlobs),
    /// Versions 2 and 3: wrapped for every member of a cluster.
    Wrapped(ClusterEnvelope),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("ciphertext is empty")]
    Empty,
    #[error("ciphertext is {0} bytes, above the {MAX_CIPHERTEXT_LEN}-byte limit")]
    TooLong(usize),
    #[error("unknown envelope version {0}")]
    UnknownVersion(u8),
    /// Nothing binds an annotation to a version 1 envelope, so none may
    /// ride along (not even sceau's own recipients annotation).
    #[error("version 1 envelopes carry no annotations, but the request has some")]
    AnnotationsOnSealed,
    #[error(transparent)]
    Sealed(#[from] SealedError),
    #[error(transparent)]
    Wrapped(#[from] ClusterEnvelopeError),
}

impl Envelope {
    /// Parses a Decrypt request's ciphertext and annotations, dispatching on
    /// the version byte. Cheap checks first: length, version, annotations.
    pub fn parse(
        ciphertext: &[u8],
        annotations: &HashMap<String, Vec<u8>>,
    ) -> Result<Self, EnvelopeError> {
        let mut r = Reader::new(ciphertext);
        let version = r.u8("version").map_err(|_| EnvelopeError::Empty)?;
        if ciphertext.len() > MAX_CIPHERTEXT_LEN {
            return Err(EnvelopeError::TooLong(ciphertext.len()));
        }
        match version {
            VERSION_SEALED => {
                if !annotations.is_empty() {
                    return Err(EnvelopeError::AnnotationsOnSealed);
                }
                Ok(Envelope::Sealed(sealed::parse_body(r)?))
            }
            VERSION_CLUSTER | VERSION_SIGNED => Ok(Envelope::Wrapped(wrapped::parse_body(
                version,
                ciphertext,
                annotations,
            )?)),
            other => Err(EnvelopeError::UnknownVersion(other)),
        }
    }
}

impl ClusterEnvelope {
    /// [`Envelope::parse`] for callers that open cluster envelopes only
    /// (recovery, tests), with its errors in their terms.
    pub fn parse(
        ciphertext: &[u8],
        annotations: &HashMap<String, Vec<u8>>,
    ) -> Result<Self, ClusterEnvelopeError> {
        match Envelope::parse(ciphertext, annotations) {
            Ok(Envelope::Wrapped(envelope)) => Ok(envelope),
            Err(EnvelopeError::Wrapped(error)) => Err(error),
            Err(EnvelopeError::Empty) => Err(WireError::Truncated("version").into()),
            Err(EnvelopeError::TooLong(len)) => Err(ClusterEnvelopeError::CiphertextTooLong(len)),
            Ok(Envelope::Sealed(_))
            | Err(
                EnvelopeError::UnknownVersion(_)
                | EnvelopeError::AnnotationsOnSealed
                | EnvelopeError::Sealed(_),
            ) => Err(ClusterEnvelopeError::NotVersion2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrapped::RECIPIENTS_ANNOTATION;

    fn sealed_sample() -> Vec<u8> {
        SealedBlobs {
            public: vec![0, 2, 0xAA, 0xAA],
            private: vec![0, 1, 0xBB],
        }
        .encode()
    }

    /// Today's behaviour, kept: a version 1 envelope refuses every
    /// annotation, sceau's own recipients annotation included.
    #[test]
    fn version_1_refuses_any_annotation() {
        let good = sealed_sample();
        assert!(matches!(
            Envelope::parse(&good, &HashMap::new()),
            Ok(Envelope::Sealed(_))
        ));
        for key in [RECIPIENTS_ANNOTATION, "other.example.com"] {
            let annotations = HashMap::from([(key.to_string(), vec![1])]);
            assert_eq!(
                Envelope::parse(&good, &annotations),
                Err(EnvelopeError::AnnotationsOnSealed)
            );
        }
    }

    /// One limit for both versions, checked before the version is read.
    #[test]
    fn one_length_limit_for_both_versions() {
        for version in [VERSION_SEALED, VERSION_CLUSTER, 0xff] {
            let mut long = vec![0; MAX_CIPHERTEXT_LEN + 1];
            long[0] = version;
            assert_eq!(
                Envelope::parse(&long, &HashMap::new()),
                Err(EnvelopeError::TooLong(MAX_CIPHERTEXT_LEN + 1))
            );
        }
    }

    /// The version 2 view keeps the errors its callers (recovery) match on.
    #[test]
    fn the_version_2_view_names_what_is_not_version_2() {
        let none = HashMap::new();
        assert_eq!(
            ClusterEnvelope::parse(&[], &none),
            Err(ClusterEnvelopeError::Wire(WireError::Truncated("version")))
        );
        assert_eq!(
            ClusterEnvelope::parse(&sealed_sample(), &none),
            Err(ClusterEnvelopeError::NotVersion2)
        );
        assert_eq!(
            ClusterEnvelope::parse(&[1], &none),
            Err(ClusterEnvelopeError::NotVersion2)
        );
        assert_eq!(
            ClusterEnvelope::parse(&[9; MAX_CIPHERTEXT_LEN + 1], &none),
            Err(ClusterEnvelopeError::CiphertextTooLong(
                MAX_CIPHERTEXT_LEN + 1
            ))
        );
        assert_eq!(
            ClusterEnvelope::parse(&[VERSION_CLUSTER], &none),
            Err(ClusterEnvelopeError::Wire(WireError::Truncated("layout")))
        );
    }
}
