//! TPMT_PUBLIC (TPM 2.0 Part 2, §12.2.4), the one reader of a public area in
//! the workspace: a member's SRK (`storage_key`), a cluster envelope's
//! sealed object (`duplicate`), and an agent's EK and AK (the SPIRE server
//! plugin) are each read here, then checked by their own rules. It reads
//! RSA, ECC and keyed-hash objects, refuses trailing bytes, and checks
//! nothing else: what a caller accepts is the caller's to say.

use super::wire::{ALG_ECC, ALG_KEYEDHASH, ALG_NULL, Reader, WireError};

pub const ALG_RSA: u16 = 0x0001;
pub const ALG_XOR: u16 = 0x000A;
pub const ALG_ECDAA: u16 = 0x001A;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublicAreaError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("unsupported {0}")]
    Unsupported(&'static str),
}

/// A public area, field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicArea {
    pub name_alg: u16,
    pub attributes: u32,
    pub auth_policy: Vec<u8>,
    /// TPMT_SYM_DEF_OBJECT: (algorithm, key bits, mode), or NULL; always
    /// `None` for a keyed-hash object, which has none.
    pub symmetric: Option<(u16, u16, u16)>,
    /// The signing, key-exchange or keyed-hash scheme and its hash, or NULL.
    pub scheme: Option<(u16, u16)>,
    pub key: PublicKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    Rsa {
        bits: u16,
        /// The public exponent (a TPM writes 0 for 65537).
        exponent: u32,
        modulus: Vec<u8>,
    },
    Ecc {
        curve: u16,
        kdf: Option<(u16, u16)>,
        x: Vec<u8>,
        y: Vec<u8>,
    },
    /// A sealed-data or HMAC object: its unique is the digest that binds
    /// the sensitive area.
    KeyedHash { unique: Vec<u8> },
}

impl PublicArea {
    /// Whether every bit of `bits` is set in objectAttributes.
    pub fn has(&self, bits: u32) -> bool {
        self.attributes & bits == bits
    }

    pub fn parse(tpmt_public: &[u8]) -> Result<Self, PublicAreaError> {
        let mut r = Reader::new(tpmt_public);
        let key_type = r.u16("type")?;
        let name_alg = r.u16("nameAlg")?;
        let attributes = r.u32("objectAttributes")?;
        let auth_policy = r.tpm2b("authPolicy")?.to_vec();
        let symmetric = match key_type {
            ALG_KEYEDHASH => None,
            _ => match r.u16("symmetric algorithm")? {
                ALG_NULL => None,
                algorithm => Some((
                    algorithm,
                    r.u16("symmetric key bits")?,
                    r.u16("symmetric mode")?,
                )),
            },
        };
        let scheme = match r.u16("scheme")? {
            ALG_NULL => None,
            ALG_ECDAA => return Err(PublicAreaError::Unsupported("ECDAA scheme")),
            ALG_XOR => return Err(PublicAreaError::Unsupported("XOR scheme")),
            scheme => Some((scheme, r.u16("scheme hash")?)),
        };
        let key = match key_type {
            ALG_RSA => {
                let bits = r.u16("RSA key bits")?;
                let exponent = r.u32("RSA exponent")?;
                let modulus = r.tpm2b("RSA modulus")?.to_vec();
                PublicKey::Rsa {
                    bits,
                    exponent,
                    modulus,
                }
            }
            ALG_ECC => {
                let curve = r.u16("curve")?;
                let kdf = match r.u16("kdf")? {
                    ALG_NULL => None,
                    kdf => Some((kdf, r.u16("kdf hash")?)),
                };
                let x = r.tpm2b("unique.x")?.to_vec();
                let y = r.tpm2b("unique.y")?.to_vec();
                PublicKey::Ecc { curve, kdf, x, y }
            }
            ALG_KEYEDHASH => PublicKey::KeyedHash {
                unique: r.tpm2b("unique")?.to_vec(),
            },
            _ => {
                return Err(PublicAreaError::Unsupported(
                    "key type (RSA, ECC or keyed hash)",
                ));
            }
        };
        r.finish("TPMT_PUBLIC")?;
        Ok(Self {
            name_alg,
            attributes,
            auth_policy,
            symmetric,
            scheme,
            key,
        })
    }
}

/// `found` must be `expected`; else the wire error a reader's `expect_u16`
/// gives, naming the field.
pub fn expect(what: &'static str, found: u16, expected: u16) -> Result<(), WireError> {
    if found == expected {
        return Ok(());
    }
    Err(WireError::Unexpected {
        what,
        found: u32::from(found),
        expected: u32::from(expected),
    })
}
