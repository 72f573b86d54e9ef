//! PCR banks: the hash algorithms a log's digests and a quote's values
//! are in, and which of them this module can replay.

use super::*;

/// A PCR bank: the hash algorithm its PCRs are extended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bank {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Bank {
    /// The TPM_ALG_ID.
    pub const fn alg_id(self) -> u16 {
        match self {
            Bank::Sha1 => ALG_SHA1,
            Bank::Sha256 => ALG_SHA256,
            Bank::Sha384 => ALG_SHA384,
            Bank::Sha512 => ALG_SHA512,
        }
    }

    pub const fn from_alg_id(alg: u16) -> Option<Self> {
        match alg {
            ALG_SHA1 => Some(Bank::Sha1),
            ALG_SHA256 => Some(Bank::Sha256),
            ALG_SHA384 => Some(Bank::Sha384),
            ALG_SHA512 => Some(Bank::Sha512),
            _ => None,
        }
    }

    pub const fn digest_len(self) -> usize {
        match self {
            Bank::Sha1 => 20,
            Bank::Sha256 => 32,
            Bank::Sha384 => 48,
            Bank::Sha512 => 64,
        }
    }

    /// The name in selectors and configuration (`pcr:sha256:…`).
    pub const fn name(self) -> &'static str {
        match self {
            Bank::Sha1 => "sha1",
            Bank::Sha256 => "sha256",
            Bank::Sha384 => "sha384",
            Bank::Sha512 => "sha512",
        }
    }

    /// The hash of the concatenated `parts`.
    pub fn hash(self, parts: &[&[u8]]) -> Vec<u8> {
        fn run<D: sha2::Digest>(parts: &[&[u8]]) -> Vec<u8> {
            let mut hash = D::new();
            for part in parts {
                hash.update(part);
            }
            hash.finalize().to_vec()
        }
        match self {
            Bank::Sha1 => run::<Sha1>(parts),
            Bank::Sha256 => run::<Sha256>(parts),
            Bank::Sha384 => run::<Sha384>(parts),
            Bank::Sha512 => run::<Sha512>(parts),
        }
    }

    /// Every bank, in the order of their TPM_ALG_IDs.
    pub const ALL: [Bank; 4] = [Bank::Sha1, Bank::Sha256, Bank::Sha384, Bank::Sha512];
}

impl std::fmt::Display for Bank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The digest size of the algorithms whose size is fixed by their
/// definition; the Spec ID event may not declare another.
pub(super) const fn known_digest_len(alg: u16) -> Option<u16> {
    match alg {
        ALG_SHA1 => Some(20),
        ALG_SHA256 | ALG_SM3_256 | ALG_SHA3_256 => Some(32),
        ALG_SHA384 | ALG_SHA3_384 => Some(48),
        ALG_SHA512 | ALG_SHA3_512 => Some(64),
        _ => None,
    }
}
