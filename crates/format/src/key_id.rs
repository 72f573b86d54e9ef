//! The key_id sceau reports to the apiserver, and the hex spelling of TPM
//! Names used in logs, member files and errors.

use sha2::{Digest as _, Sha256};

/// The key_id reported to the apiserver: `sceau-` and the first 8 bytes of
/// SHA-256 over the SRK's Name (nameAlg ‖ digest of its TPMT_PUBLIC), in hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyId(String);

impl KeyId {
    pub fn from_srk_name(name: &[u8]) -> Self {
        let digest = Sha256::digest(name);
        Self(format!("sceau-{}", hex(&digest[..8])))
    }

    /// A single node's key_id with `--policy-key`: over the SRK's Name and
    /// the policy key's, so that binding to a key (or changing it) is a new
    /// key_id. The apiserver then makes a new DEK seed, sealed to the key,
    /// and reads what was written before as stale, so that rewriting the
    /// Secrets binds them all.
    pub fn bound_to_policy(srk_name: &[u8], policy_key_name: &[u8]) -> Self {
        let digest = Sha256::new()
            .chain_update(b"sceau boot policy\0")
            .chain_update(srk_name)
            .chain_update(policy_key_name)
            .finalize();
        Self(format!("sceau-{}", hex(&digest[..8])))
    }

    /// A cluster key_id: `sceau-` and the first 16 bytes of the digest over
    /// the membership (see `cluster::membership::cluster_key_id`).
    pub fn from_cluster_digest(digest: &[u8]) -> Self {
        Self(format!("sceau-{}", hex(&digest[..16])))
    }

    /// A key_id already in its final form (`kek::key_id`'s).
    pub(crate) fn from_text(text: String) -> Self {
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_id_is_prefix_and_16_hex_digits() {
        let id = KeyId::from_srk_name(&[0x00, 0x0b, 1, 2, 3]);
        assert!(id.as_str().starts_with("sceau-"));
        assert_eq!(id.as_str().len(), "sceau-".len() + 16);
        assert_eq!(id, KeyId::from_srk_name(&[0x00, 0x0b, 1, 2, 3]));
        let bound = KeyId::bound_to_policy(&[0x00, 0x0b, 1, 2, 3], &[0x00, 0x0b, 4]);
        assert_eq!(bound.as_str().len(), id.as_str().len());
        assert_ne!(bound, id);
        assert_ne!(
            bound,
            KeyId::bound_to_policy(&[0x00, 0x0b, 1, 2, 3], &[0x00, 0x0b, 5])
        );
    }
}
