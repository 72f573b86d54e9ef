//! TPM2_MakeCredential in software: a fresh 32-byte secret that only the TPM
//! holding the EK's private key, with an object of the AK's Name loaded, can
//! recover with TPM2_ActivateCredential (TPM 2.0 Part 1 §24, "Credential
//! Protection").
//!
//! The seed reaches the EK by the EK's own algorithm: for an ECC EK, ECDH
//! with an ephemeral key and KDFe (label "IDENTITY"), the project's own
//! outer wrapper in `sceau_format::duplicate`; for an RSA EK, RSA-OAEP with
//! SHA-256 and the label "IDENTITY\0". From the seed on both are the same:
//! AES-128-CFB under KDFa("STORAGE", AK Name) and an HMAC under
//! KDFa("INTEGRITY") (`sceau_format::duplicate::wrap_with_seed`).

use rsa::{Oaep, RsaPublicKey};
use sceau_format::credential::CREDENTIAL_LEN;
use sceau_format::storage_key::StorageKey;
use sceau_format::wire::{NAME_LEN, Writer};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::keys::Key;

/// The RSA seed: the EK's nameAlg digest size, the most a TPM accepts.
const RSA_SEED_LEN: usize = 32;

/// A credential for one attestation: what the agent must answer with, and
/// the two inputs of TPM2_ActivateCredential.
pub struct Credential {
    pub expected: Zeroizing<[u8; CREDENTIAL_LEN]>,
    /// TPM2B_ID_OBJECT contents.
    pub blob: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET contents.
    pub secret: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot make a credential for this EK: {0}")]
pub struct CredentialError(&'static str);

/// MakeCredential(ek, fresh secret, ak_name).
pub fn make(ek: &Key, ak_name: &[u8; NAME_LEN]) -> Result<Credential, CredentialError> {
    match ek {
        Key::P256(point) => {
            let challenge =
                sceau_format::credential::make_credential(&StorageKey::from_point(point), ak_name);
            Ok(Credential {
                expected: challenge.expected,
                blob: challenge.blob.duplicate,
                secret: challenge.blob.in_sym_seed,
            })
        }
        Key::Rsa(key) => Ok(make_rsa(key, ak_name)),
        Key::P384(_) => Err(CredentialError("EKs on P-384 are not supported")),
    }
}

fn make_rsa(ek: &RsaPublicKey, ak_name: &[u8; NAME_LEN]) -> Credential {
    let mut expected = Zeroizing::new([0u8; CREDENTIAL_LEN]);
    sceau_format::random::fill(expected.as_mut());
    let mut seed = Zeroizing::new(vec![0u8; RSA_SEED_LEN]);
    sceau_format::random::fill(&mut seed);
    let padding = Oaep::new_with_label::<Sha256, _>("IDENTITY\0");
    let secret = ek
        .encrypt(&mut RsaRandom, padding, &seed)
        .expect("a 32-byte seed fits RSA-OAEP-SHA256 for any key of 2048 bits or more");
    let mut plaintext = Writer::default();
    plaintext.tpm2b(expected.as_ref());
    let plaintext = Zeroizing::new(plaintext.finish());
    Credential {
        blob: sceau_format::duplicate::wrap_with_seed(seed, ak_name, &plaintext),
        secret,
        expected,
    }
}

/// The operating system's generator for OAEP's random padding, through the
/// same source as every other random value sceau makes.
struct RsaRandom;

impl rsa::rand_core::RngCore for RsaRandom {
    fn next_u32(&mut self) -> u32 {
        let mut bytes = [0u8; 4];
        self.fill_bytes(&mut bytes);
        u32::from_le_bytes(bytes)
    }

    fn next_u64(&mut self) -> u64 {
        let mut bytes = [0u8; 8];
        self.fill_bytes(&mut bytes);
        u64::from_le_bytes(bytes)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        sceau_format::random::fill(dest);
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for RsaRandom {}
