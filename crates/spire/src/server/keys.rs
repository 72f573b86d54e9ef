//! The public keys the server meets are `sceau_ekcert::keys` (shared with
//! `sceau-recover`'s enrollment); what only the attestor needs is here: a
//! TPMT_SIGNATURE checked with such a key (the AK's quote and creation
//! certification).

use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use rsa::Pkcs1v15Sign;
use sha2::{Digest as _, Sha256};

pub use sceau_ekcert::keys::*;

use super::structures;

/// A TPM's signature, checked with a key.
pub trait TpmSignatureCheck {
    /// Checks a TPMT_SIGNATURE by this key over SHA-256(`message`).
    fn verify_tpm(&self, message: &[u8], signature: &structures::Signature)
    -> Result<(), KeyError>;
}

impl TpmSignatureCheck for Key {
    /// Checks a TPMT_SIGNATURE by this key over SHA-256(`message`): RSASSA
    /// for an RSA key, ECDSA for a P-256 key.
    fn verify_tpm(
        &self,
        message: &[u8],
        signature: &structures::Signature,
    ) -> Result<(), KeyError> {
        if signature.hash() != sceau_format::wire::ALG_SHA256 {
            return Err(KeyError::Unsupported("signature hash other than SHA-256"));
        }
        let digest = Sha256::digest(message);
        let verified = match (self, signature) {
            (
                Key::Rsa(key),
                structures::Signature::Rsa {
                    scheme: structures::ALG_RSASSA,
                    signature,
                    ..
                },
            ) => key
                .verify(Pkcs1v15Sign::new::<Sha256>(), &digest, signature)
                .is_ok(),
            (Key::P256(key), structures::Signature::Ecdsa { r, s, .. }) => {
                let (Some(r), Some(s)) = (scalar_bytes(r), scalar_bytes(s)) else {
                    return Err(KeyError::BadSignature);
                };
                p256::ecdsa::Signature::from_scalars(r, s).is_ok_and(|sig| {
                    p256::ecdsa::VerifyingKey::from(key)
                        .verify_prehash(&digest, &sig)
                        .is_ok()
                })
            }
            _ => return Err(KeyError::Unsupported("signature scheme for this key")),
        };
        verified.then_some(()).ok_or(KeyError::BadSignature)
    }
}

/// A TPM ECDSA scalar as 32 big-endian bytes (the TPM may drop leading
/// zeros).
fn scalar_bytes(value: &[u8]) -> Option<p256::FieldBytes> {
    let trimmed = &value[value.iter().take_while(|b| **b == 0).count()..];
    if trimmed.len() > 32 {
        return None;
    }
    let mut out = p256::FieldBytes::default();
    out[32 - trimmed.len()..].copy_from_slice(trimmed);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_scalars_are_left_padded() {
        let bytes = scalar_bytes(&[0, 0, 1, 2]).unwrap();
        assert_eq!(&bytes[30..], &[1, 2]);
        assert!(scalar_bytes(&[1; 33]).is_none());
    }
}
