//! The offline recovery key: a P-256 key pair made on an offline machine.
//! Its public half is described with the TCG SRK template, so Encrypt wraps
//! the DEK for it exactly as for a member TPM (audit/recovery-key.md says why
//! this construction was chosen); its private half opens any envelope in
//! software, with the checks TPM2_Import makes.

use std::collections::HashMap;

use p256::SecretKey;
use zeroize::Zeroizing;

use super::armor::{self, ArmorError};
use super::duplicate::{ImportError, WrappingKeys, import_in_software};
use super::storage_key::StorageKey;
use crate::key_id::hex;
use crate::members::RECOVERY_PUBLIC_LABEL;
use crate::wrapped::{ClusterEnvelope, ClusterEnvelopeError, Recipient, Role};

pub const IDENTITY_LABEL: &str = "SCEAU RECOVERY IDENTITY";

#[derive(Debug, thiserror::Error)]
pub enum RecoveryKeyError {
    #[error("identity file: {0}")]
    Armor(ArmorError),
    #[error("identity file: not a P-256 private key")]
    NotAKey,
    #[error("identity file: the name line does not match the key")]
    PinMismatch,
    #[error("malformed envelope: {0}")]
    Envelope(ClusterEnvelopeError),
    #[error("this recovery key is not a recipient of the envelope (its recovery key: {0})")]
    NotARecipient(String),
    #[error("the recovery entry does not open: {0}")]
    Import(ImportError),
}

crate::inner_errors!(RecoveryKeyError {
    Armor(ArmorError),
    Envelope(ClusterEnvelopeError),
    Import(ImportError),
});

/// The private half, held only by the recovery tool.
pub struct RecoveryIdentity {
    /// Boxed: the identity is returned and moved by value, and each move of
    /// an inline key would leave a copy of the scalar behind that its wipe
    /// on drop never reaches (the recovery tool's memory scan found them).
    secret: Box<SecretKey>,
    public: StorageKey,
}

impl RecoveryIdentity {
    pub fn generate() -> Self {
        Self::from_secret(SecretKey::random(&mut crate::random::SystemRandom))
    }

    pub(crate) fn from_secret(secret: SecretKey) -> Self {
        let public = StorageKey::from_point(&secret.public_key());
        Self {
            secret: Box::new(secret),
            public,
        }
    }

    pub fn public(&self) -> &StorageKey {
        &self.public
    }

    /// The scalar, for splitting it into shares.
    pub(crate) fn secret_scalar(&self) -> Zeroizing<p256::Scalar> {
        Zeroizing::new(*self.secret.to_nonzero_scalar())
    }

    /// The identity file: the scalar, armored, with the key's Name.
    pub fn identity_file(&self) -> Zeroizing<String> {
        let scalar = Zeroizing::new(self.secret.to_bytes().to_vec());
        Zeroizing::new(armor::encode(
            IDENTITY_LABEL,
            &[
                "sceau recovery identity: opens every envelope wrapped for this key.",
                "Keep it offline (printed, or on removable media in a safe).",
            ],
            &[("name", hex(self.public.name()))],
            &scalar,
        ))
    }

    /// The public file given to `sceau serve --recovery-key`.
    pub fn public_file(&self) -> String {
        armor::encode(
            RECOVERY_PUBLIC_LABEL,
            &["sceau recovery key: public half, for serve --recovery-key."],
            &[("name", hex(self.public.name()))],
            &self.public.to_tpm2b_public(),
        )
    }

    pub fn parse(text: &str) -> Result<Self, RecoveryKeyError> {
        let armored = armor::decode(text, IDENTITY_LABEL)?;
        let secret =
            SecretKey::from_slice(&armored.bytes).map_err(|_| RecoveryKeyError::NotAKey)?;
        let identity = Self::from_secret(secret);
        match armored.header("name") {
            Some(name) if name.eq_ignore_ascii_case(&hex(identity.public.name())) => Ok(identity),
            _ => Err(RecoveryKeyError::PinMismatch),
        }
    }

    /// Opens a version 2 envelope: the DEK seed the apiserver gave Encrypt.
    pub fn open(
        &self,
        ciphertext: &[u8],
        annotations: &HashMap<String, Vec<u8>>,
    ) -> Result<Zeroizing<Vec<u8>>, RecoveryKeyError> {
        let envelope = ClusterEnvelope::parse(ciphertext, annotations)?;
        let entry = self.own_entry(&envelope)?;
        Ok(import_in_software(
            &self.secret,
            &envelope.object_public,
            &entry.blob,
        )?)
    }

    /// The seed and keys the recovery entry of an envelope was wrapped with:
    /// each of them opens the DEK, so a memory scan of the daemon that made
    /// the envelope must find none of them.
    pub fn wrapping_keys(
        &self,
        ciphertext: &[u8],
        annotations: &HashMap<String, Vec<u8>>,
    ) -> Result<WrappingKeys, RecoveryKeyError> {
        let envelope = ClusterEnvelope::parse(ciphertext, annotations)?;
        let entry = self.own_entry(&envelope)?;
        Ok(WrappingKeys::recover(
            &self.secret,
            &envelope.object_public,
            &entry.blob,
        )?)
    }

    fn own_entry<'a>(
        &self,
        envelope: &'a ClusterEnvelope,
    ) -> Result<&'a Recipient, RecoveryKeyError> {
        envelope
            .recipients
            .iter()
            .find(|r| r.role == Role::Recovery && &r.name == self.public.name())
            .ok_or_else(|| {
                let theirs = envelope
                    .recipients
                    .iter()
                    .find(|r| r.role == Role::Recovery)
                    .map_or_else(|| "none".to_string(), |r| hex(&r.name));
                RecoveryKeyError::NotARecipient(theirs)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::as_printed;

    /// A bad identity file or envelope is named in one clear line. Without
    /// this, this fails with "identity file: no '-----BEGIN SCEAU RECOVERY
    /// IDENTITY-----' line: no '-----BEGIN ...' line" (and an envelope's
    /// cause came three times).
    #[test]
    fn errors_name_their_cause_once() {
        let identity = RecoveryIdentity::generate();
        let errors = [
            RecoveryIdentity::parse("no armor here").err().unwrap(),
            identity.open(&[], &HashMap::new()).err().unwrap(),
        ];
        for error in errors {
            let printed = as_printed(&error);
            assert_eq!(printed, error.to_string(), "{printed}");
        }
    }

    #[test]
    fn identity_file_round_trips_and_is_pinned() {
        let identity = RecoveryIdentity::generate();
        let text = identity.identity_file();
        let parsed = RecoveryIdentity::parse(&text).unwrap();
        assert_eq!(parsed.public(), identity.public());
        let tampered = text.replace("name: 000b", "name: 000c");
        assert!(matches!(
            RecoveryIdentity::parse(&tampered),
            Err(RecoveryKeyError::PinMismatch)
        ));
    }
}
