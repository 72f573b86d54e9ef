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

    /// A cluster key_id: `sceau-` and the first 16 bytes of the digest over
    /// the membership (see `cluster::membership::cluster_key_id`).
    pub fn from_cluster_digest(digest: &[u8]) -> Self {
        Self(format!("sceau-{}", hex(&digest[..16])))
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
    }
}
