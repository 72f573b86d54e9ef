//! The envelope parser (`Envelope::parse`, `crates/format/src/envelope.rs`,
//! versions 1, 2 and 3) and the blob checks behind version 1
//! (`LoadableObject::from_blobs`, which unmarshals the public blob with
//! tpm2-tss), fed arbitrary bytes as a Decrypt request's ciphertext with no
//! annotations.
//!
//! Invariants, besides "no panic":
//! - an accepted envelope re-encodes to exactly the input bytes, so no two
//!   byte strings parse to the same envelope;
//! - each rejection names a reason that the bytes really have;
//! - an envelope that passes the blob checks re-marshals, from the decoded
//!   TPM structures ESAPI would send to the TPM, to exactly the same blobs
//!   (this target found that tpm2-tss can decode a public blob to less than
//!   it holds, and `from_blobs` now refuses that: audit/fuzzing.md,
//!   «The public blob tpm2-tss misreads»).
#![no_main]
#![forbid(unsafe_code)]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use sceau_format::envelope::{Envelope, EnvelopeError, MAX_CIPHERTEXT_LEN};
use sceau_format::sealed::{SealedBlobs, VERSION_SEALED};
use sceau_format::wrapped::{ClusterEnvelope, Encoded, VERSION_CLUSTER, VERSION_SIGNED};
use sceau_tpm::sealed::{LoadableObject, blobs_from_created};

fuzz_target!(|data: &[u8]| {
    match Envelope::parse(data, &HashMap::new()) {
        Ok(Envelope::Sealed(blobs)) => check_accepted(data, &blobs),
        Ok(Envelope::Wrapped(envelope)) => check_wrapped(data, envelope),
        Err(error) => check_rejected(data, &error),
    }
});

/// A cluster envelope (version 2, or 3 with its signer and signature) with
/// its recipients inline: it too has one encoding.
fn check_wrapped(data: &[u8], envelope: ClusterEnvelope) {
    let encoded = envelope.encode().expect("an accepted envelope encodes");
    assert_eq!(
        encoded,
        Encoded {
            ciphertext: data.to_vec(),
            annotations: HashMap::new(),
        }
    );
}

fn check_accepted(data: &[u8], blobs: &SealedBlobs) {
    assert!(data.len() <= MAX_CIPHERTEXT_LEN);
    assert_eq!(blobs.encode(), data, "an envelope has one encoding");
    for blob in [&blobs.public, &blobs.private] {
        let declared = usize::from(u16::from_be_bytes([blob[0], blob[1]]));
        assert!(declared > 0 && declared == blob.len() - 2, "{blob:02x?}");
    }
    if let Ok(object) = LoadableObject::from_blobs(blobs) {
        let remarshalled = blobs_from_created(object.public, &object.private)
            .expect("a decoded public area marshals again");
        // tpm2-tss may decode a public blob to less than it holds (this
        // target's finding, audit/fuzzing.md, «The public blob tpm2-tss
        // misreads»); from_blobs refuses any blob that does not marshal back
        // to itself.
        assert_eq!(remarshalled, *blobs);
    }
}

fn check_rejected(data: &[u8], error: &EnvelopeError) {
    match *error {
        EnvelopeError::Empty => assert!(data.is_empty()),
        EnvelopeError::TooLong(len) => assert!(len == data.len() && len > MAX_CIPHERTEXT_LEN),
        EnvelopeError::UnknownVersion(version) => {
            assert_eq!(data.first(), Some(&version));
            assert!(![VERSION_SEALED, VERSION_CLUSTER, VERSION_SIGNED].contains(&version));
            assert!(data.len() <= MAX_CIPHERTEXT_LEN);
        }
        EnvelopeError::AnnotationsOnSealed => panic!("refused annotations it was not given"),
        EnvelopeError::Sealed(_) => {
            assert_eq!(data.first(), Some(&VERSION_SEALED));
            assert!(data.len() <= MAX_CIPHERTEXT_LEN);
        }
        EnvelopeError::Wrapped(_) => {
            assert!(matches!(
                data.first(),
                Some(&VERSION_CLUSTER | &VERSION_SIGNED)
            ));
            assert!(data.len() <= MAX_CIPHERTEXT_LEN);
        }
    }
    // The message reaches clients inside "malformed ciphertext: …".
    let message = error.to_string();
    assert!(!message.is_empty() && !message.chars().any(char::is_control));
}
