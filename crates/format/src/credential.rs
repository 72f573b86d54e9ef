//! Enrollment by credential activation: proof that a member file's SRK lives
//! in the same TPM as an endorsement key (EK), and so in a real TPM when the
//! EK is certified by its manufacturer.
//!
//! The verifier runs TPM2_MakeCredential's computation in software: a random
//! credential wrapped (outer wrapper, label "IDENTITY") to the EK and bound to
//! the SRK's Name. Only a TPM that holds both the EK's private key and a
//! loaded object with that Name can answer it with TPM2_ActivateCredential.

use zeroize::Zeroizing;

use super::duplicate::{ImportBlob, outer_wrap};
use super::storage_key::StorageKey;
use super::wire::{NAME_LEN, Writer};

pub const CREDENTIAL_LEN: usize = 32;

/// What the member answers, and what only the verifier knows beforehand.
pub struct Challenge {
    /// credentialBlob (TPM2B_ID_OBJECT contents) and secret (the ephemeral point).
    pub blob: ImportBlob,
    pub expected: Zeroizing<[u8; CREDENTIAL_LEN]>,
}

/// TPM2_MakeCredential(ek, credential, object Name), in software.
pub fn make_credential(ek: &StorageKey, srk_name: &[u8; NAME_LEN]) -> Challenge {
    let mut expected = Zeroizing::new([0u8; CREDENTIAL_LEN]);
    crate::random::fill(expected.as_mut());
    let mut digest = Writer::default();
    digest.tpm2b(expected.as_ref());
    let plaintext = Zeroizing::new(digest.finish());
    Challenge {
        blob: outer_wrap(ek, "IDENTITY", srk_name, &plaintext),
        expected,
    }
}
