//! The test's own, independent reading of sceau's envelope format:
//!
//! ```text
//! 0x01 ‖ u16be L ‖ TPM2B_PUBLIC (L bytes, starting with its own u16be size) ‖ TPM2B_PRIVATE (u16be size ‖ bytes)
//! ```
//!
//! The two TPM2B blobs are exactly what `tpm2_create -u/-r` write, which is
//! how the tpm2-tools cross-check feeds them to `tpm2_load`.

pub const VERSION: u8 = 0x01;
/// Version byte plus the u16 length of the public part.
pub const HEADER_LEN: usize = 3;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// TPM2B_PUBLIC, including its size prefix.
    pub public: Vec<u8>,
    /// TPM2B_PRIVATE, including its size prefix.
    pub private: Vec<u8>,
}

impl Envelope {
    /// Splits a well-formed envelope; panics (naming the defect) on anything
    /// else, since it is only applied to what sceau itself produced.
    pub fn parse(bytes: &[u8]) -> Envelope {
        assert!(
            bytes.len() > HEADER_LEN,
            "envelope too short: {} bytes",
            bytes.len()
        );
        assert_eq!(bytes[0], VERSION, "envelope version");
        let public_len = usize::from(be16(&bytes[1..3]));
        let (public, private) = bytes[HEADER_LEN..]
            .split_at_checked(public_len)
            .expect("public part fits");
        assert_eq!(
            tpm2b_len(public),
            public.len(),
            "TPM2B_PUBLIC size disagrees with the envelope's length"
        );
        assert_eq!(
            tpm2b_len(private),
            private.len(),
            "TPM2B_PRIVATE size disagrees with the envelope's end"
        );
        Envelope {
            public: public.to_vec(),
            private: private.to_vec(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let public_len = u16::try_from(self.public.len()).expect("public part fits u16");
        let mut out = vec![VERSION];
        out.extend_from_slice(&public_len.to_be_bytes());
        out.extend_from_slice(&self.public);
        out.extend_from_slice(&self.private);
        out
    }
}

pub fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

/// Total length of a TPM2B (size prefix + body) according to its own prefix.
fn tpm2b_len(tpm2b: &[u8]) -> usize {
    assert!(tpm2b.len() >= 2, "TPM2B shorter than its size prefix");
    2 + usize::from(be16(tpm2b))
}
