//! The TPM structures the server reads from an agent, parsed with the
//! project's bounded wire `Reader` (TPM 2.0 Part 2): TPMS_ATTEST for creation
//! certifications and quotes, and TPMT_SIGNATURE; TPMT_PUBLIC is read by the
//! workspace's one reader, `sceau_format::public`. Every parser refuses
//! trailing bytes, so the bytes that were hashed or signed are exactly the
//! bytes that were read.

use sceau_format::public::PublicAreaError;
pub use sceau_format::public::{ALG_ECDAA, ALG_RSA, PublicArea, PublicKey};
use sceau_format::wire::{Reader, WireError};

pub const ALG_RSASSA: u16 = 0x0014;
pub const ALG_RSAPSS: u16 = 0x0016;
pub const ALG_ECDSA: u16 = 0x0018;
pub const ECC_NIST_P256: u16 = 0x0003;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StructureError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("unsupported {0}")]
    Unsupported(&'static str),
}

impl From<PublicAreaError> for StructureError {
    fn from(error: PublicAreaError) -> Self {
        match error {
            PublicAreaError::Wire(e) => StructureError::Wire(e),
            PublicAreaError::Unsupported(what) => StructureError::Unsupported(what),
        }
    }
}

/// TPMA_OBJECT bits (Part 2 §8.3).
pub mod attributes {
    pub const FIXED_TPM: u32 = 1 << 1;
    pub const FIXED_PARENT: u32 = 1 << 4;
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    pub const RESTRICTED: u32 = 1 << 16;
    pub const DECRYPT: u32 = 1 << 17;
    pub const SIGN: u32 = 1 << 18;
}

/// TPM_GENERATED_VALUE: only the TPM itself puts this in front of what a
/// restricted signing key signs.
pub const TPM_GENERATED: u32 = 0xff54_4347;
pub const ST_ATTEST_QUOTE: u16 = 0x8018;
pub const ST_ATTEST_CREATION: u16 = 0x801A;

/// A TPMS_ATTEST, with the parts of a creation or quote attestation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestation {
    pub magic: u32,
    pub kind: u16,
    pub extra_data: Vec<u8>,
    /// Obfuscated (its counts) unless the signing key is in the
    /// endorsement or platform hierarchy.
    pub clock: ClockInfo,
    /// TPM_PT_FIRMWARE_VERSION_1 and _2; obfuscated as the counts are.
    pub firmware_version: u64,
    pub attested: Attested,
}

/// A TPMS_CLOCK_INFO (Part 2 §10.11.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockInfo {
    /// Milliseconds the TPM has been powered since TPM2_Clear.
    pub clock: u64,
    /// TPM Resets (TPM2_Startup(CLEAR) without an orderly
    /// TPM2_Shutdown(STATE)) since TPM2_Clear: every reboot, and a reset
    /// under a running OS.
    pub reset_count: u32,
    /// TPM Restarts and Resumes since the last TPM Reset.
    pub restart_count: u32,
    pub safe: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attested {
    Creation {
        object_name: Vec<u8>,
        creation_hash: Vec<u8>,
    },
    Quote {
        /// (hash algorithm, selection bitmap) per bank.
        selections: Vec<(u16, Vec<u8>)>,
        pcr_digest: Vec<u8>,
    },
}

impl Attestation {
    pub fn parse(tpms_attest: &[u8]) -> Result<Self, StructureError> {
        let mut r = Reader::new(tpms_attest);
        let magic = r.u32("magic")?;
        let kind = r.u16("type")?;
        r.tpm2b("qualifiedSigner")?;
        let extra_data = r.tpm2b("extraData")?.to_vec();
        // The counts and the firmware version are obfuscated for a signing
        // key outside the endorsement and platform hierarchies: read by
        // `server::resets` only for an AK whose creation data names the EK
        // as its parent.
        let clock = ClockInfo {
            clock: (u64::from(r.u32("clock")?) << 32) | u64::from(r.u32("clock")?),
            reset_count: r.u32("resetCount")?,
            restart_count: r.u32("restartCount")?,
            safe: r.u8("safe")? != 0,
        };
        let firmware_version =
            (u64::from(r.u32("firmwareVersion")?) << 32) | u64::from(r.u32("firmwareVersion")?);
        let attested = match kind {
            ST_ATTEST_CREATION => Attested::Creation {
                object_name: r.tpm2b("objectName")?.to_vec(),
                creation_hash: r.tpm2b("creationHash")?.to_vec(),
            },
            ST_ATTEST_QUOTE => {
                let count = r.u32("PCR selection count")?;
                if count > 16 {
                    return Err(StructureError::Unsupported("at most 16 PCR banks"));
                }
                let mut selections = Vec::new();
                for _ in 0..count {
                    let hash = r.u16("PCR bank")?;
                    let size = r.u8("sizeofSelect")?;
                    selections.push((hash, r.take(usize::from(size), "pcrSelect")?.to_vec()));
                }
                Attested::Quote {
                    selections,
                    pcr_digest: r.tpm2b("pcrDigest")?.to_vec(),
                }
            }
            _ => {
                return Err(StructureError::Unsupported(
                    "attestation type (creation or quote)",
                ));
            }
        };
        r.finish("attestation")?;
        Ok(Self {
            magic,
            kind,
            extra_data,
            clock,
            firmware_version,
            attested,
        })
    }
}

/// The outsideInfo of a TPMS_CREATION_DATA (Part 2 §15.1): the data the
/// creator of an object asked TPM2_Create to record with it.
pub fn creation_outside_info(tpms_creation_data: &[u8]) -> Result<&[u8], StructureError> {
    creation_fields(tpms_creation_data).map(|(_, outside_info)| outside_info)
}

/// The parentName of a TPMS_CREATION_DATA: the Name of the key the object
/// was created under.
pub fn creation_parent_name(tpms_creation_data: &[u8]) -> Result<&[u8], StructureError> {
    creation_fields(tpms_creation_data).map(|(parent_name, _)| parent_name)
}

/// (parentName, outsideInfo) of a TPMS_CREATION_DATA.
fn creation_fields(tpms_creation_data: &[u8]) -> Result<(&[u8], &[u8]), StructureError> {
    let mut r = Reader::new(tpms_creation_data);
    let count = r.u32("PCR selection count")?;
    if count > 16 {
        return Err(StructureError::Unsupported("at most 16 PCR banks"));
    }
    for _ in 0..count {
        r.u16("PCR bank")?;
        let size = r.u8("sizeofSelect")?;
        r.take(usize::from(size), "pcrSelect")?;
    }
    r.tpm2b("pcrDigest")?;
    r.u8("locality")?;
    r.u16("parentNameAlg")?;
    let parent_name = r.tpm2b("parentName")?;
    r.tpm2b("parentQualifiedName")?;
    let outside_info = r.tpm2b("outsideInfo")?;
    r.finish("creation data")?;
    Ok((parent_name, outside_info))
}

/// A TPMT_SIGNATURE of one of the schemes an AK may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    Rsa {
        scheme: u16,
        hash: u16,
        signature: Vec<u8>,
    },
    Ecdsa {
        hash: u16,
        r: Vec<u8>,
        s: Vec<u8>,
    },
}

impl Signature {
    pub fn parse(tpmt_signature: &[u8]) -> Result<Self, StructureError> {
        let mut r = Reader::new(tpmt_signature);
        let signature = match r.u16("signature algorithm")? {
            scheme @ (ALG_RSASSA | ALG_RSAPSS) => Signature::Rsa {
                scheme,
                hash: r.u16("signature hash")?,
                signature: r.tpm2b("RSA signature")?.to_vec(),
            },
            ALG_ECDSA => Signature::Ecdsa {
                hash: r.u16("signature hash")?,
                r: r.tpm2b("ECDSA r")?.to_vec(),
                s: r.tpm2b("ECDSA s")?.to_vec(),
            },
            _ => {
                return Err(StructureError::Unsupported(
                    "signature scheme (RSASSA, RSAPSS, ECDSA)",
                ));
            }
        };
        r.finish("signature")?;
        Ok(signature)
    }

    pub fn hash(&self) -> u16 {
        match self {
            Signature::Rsa { hash, .. } | Signature::Ecdsa { hash, .. } => *hash,
        }
    }
}

/// The selection bitmap for `pcrs` (3 bytes, PCR 0 in bit 0 of the first
/// byte), as TPM2_Quote reports it for each bank.
pub fn selection_bitmap(pcrs: &[u8]) -> Vec<u8> {
    let mut bitmap = vec![0u8; 3];
    for index in pcrs {
        bitmap[usize::from(index / 8)] |= 1 << (index % 8);
    }
    bitmap
}
