//! Revocable boot policies: one TPM NV index per revocation serial, whose
//! Name a signed policy commits to.
//!
//! A signed policy (`pcr_policy`) cannot be withdrawn by deleting its file:
//! anyone who kept a copy builds the PolicyAuthorize ticket again with
//! tpm2-tools, because the signature is all the TPM checks. So a policy
//! signed with a serial `n` also runs TPM2_PolicySecret on the NV index
//! [`index_handle`]`(n)`: that command extends the session digest with the
//! index's **Name**, which is a hash of its public area, and the public area
//! holds the TPMA_NV_WRITTEN bit. The index is defined unwritten; the signed
//! digest is taken over that Name. Revoking serial `n` writes one byte into
//! the index: the bit is set, the Name changes, and every session that runs
//! PolicySecret on it from then on reaches a digest no policy key signed.
//!
//! Nothing outside the TPM takes part, so restoring every file of the node
//! does not undo a revocation. The bit is cleared only by deleting the index
//! and defining it again, which takes the owner authorization (the index is
//! owner-written and only the owner, or TPM2_Clear, which also destroys the
//! SRK and every sealed object, can delete it): revocation holds exactly as
//! far as the owner authorization is kept from the attacker.
//!
//! The index carries TPMA_NV_AUTHREAD with an empty authValue, so any
//! process can run PolicySecret on it with a password session (the policy
//! session needs no secret of its own), and TPMA_NV_NO_DA, so that doing so
//! never counts towards dictionary-attack lockout.

use sha2::{Digest as _, Sha256};

use super::wire::{ALG_SHA256, Writer};

/// The first NV index sceau's revocation serials use: serial `n` is at
/// `NV_BASE + n`, inside the owner's range of the TCG handle registry
/// (0x01000000–0x013FFFFF).
pub const NV_BASE: u32 = 0x013A_0000;
/// The highest serial: 65,536 serials span `NV_BASE`…`NV_BASE + 0xFFFF`.
pub const MAX_SERIAL: u32 = 0xFFFF;
/// TPM_CC_PolicySecret, as its policy digest update hashes it.
pub const TPM_CC_POLICY_SECRET: u32 = 0x0000_0151;
/// The index's data: one byte, written once to revoke.
pub const DATA_SIZE: u16 = 1;

/// TPMA_NV bits: OWNERWRITE (only the owner hierarchy writes), AUTHREAD
/// (its empty authValue authorizes PolicySecret), NO_DA, and the type
/// TPM_NT_ORDINARY (0). WRITTEN is what a revocation sets.
pub const ATTRIBUTES: u32 = OWNERWRITE | AUTHREAD | NO_DA;
pub const OWNERWRITE: u32 = 1 << 1;
pub const AUTHREAD: u32 = 1 << 18;
pub const NO_DA: u32 = 1 << 25;
pub const WRITTEN: u32 = 1 << 29;

/// A revocation serial: a number the operator gives every policy signed for
/// one boot state, and gives `sceau revoke-policy` to withdraw them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Serial(u16);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SerialError {
    #[error("'{0}' is not a revocation serial: a number from 0 to {MAX_SERIAL}")]
    Invalid(String),
}

impl Serial {
    pub fn new(serial: u16) -> Self {
        Self(serial)
    }

    /// Decimal digits only, 0 to [`MAX_SERIAL`].
    pub fn parse(text: &str) -> Result<Self, SerialError> {
        let invalid = || SerialError::Invalid(super::text::printable(text));
        if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        text.parse::<u16>().map(Self).map_err(|_| invalid())
    }

    pub fn value(self) -> u16 {
        self.0
    }

    /// The NV index that holds this serial's state.
    pub fn index_handle(self) -> u32 {
        NV_BASE + u32::from(self.0)
    }

    /// The index's TPMS_NV_PUBLIC: nvIndex, nameAlg, attributes, an empty
    /// authPolicy, dataSize.
    pub fn nv_public(self, written: bool) -> Vec<u8> {
        let attributes = ATTRIBUTES | if written { WRITTEN } else { 0 };
        let mut w = Writer::default();
        w.u32(self.index_handle())
            .u16(ALG_SHA256)
            .u32(attributes)
            .u16(0)
            .u16(DATA_SIZE);
        w.finish()
    }

    /// The index's Name, `nameAlg ‖ SHA-256(TPMS_NV_PUBLIC)`: unwritten
    /// while the serial stands, written once it is revoked.
    pub fn nv_name(self, written: bool) -> [u8; 34] {
        let mut name = [0u8; 34];
        name[..2].copy_from_slice(&ALG_SHA256.to_be_bytes());
        name[2..].copy_from_slice(&Sha256::digest(self.nv_public(written)));
        name
    }

    /// TPM2_PolicySecret's update of `digest` with this serial's unwritten
    /// index and an empty policyRef: `H(H(digest ‖ TPM_CC_PolicySecret ‖
    /// Name) ‖ "")`.
    pub fn policy_secret(self, digest: &[u8; 32]) -> [u8; 32] {
        let first: [u8; 32] = Sha256::new()
            .chain_update(digest)
            .chain_update(TPM_CC_POLICY_SECRET.to_be_bytes())
            .chain_update(self.nv_name(false))
            .finalize()
            .into();
        Sha256::digest(first).into()
    }
}

impl std::fmt::Display for Serial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What the TPM's index for a serial says about it, from its Name as
/// TPM2_NV_ReadPublic returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerialState {
    /// Defined, unwritten: policies with this serial open.
    Standing,
    /// Written: revoked for good (short of the owner deleting the index).
    Revoked,
    /// Something else sits at the handle (other attributes, size or
    /// policy): no policy with this serial can ever open.
    Foreign,
}

/// The state of `serial` from the Name the TPM gives its index.
pub fn state_from_name(serial: Serial, name: &[u8]) -> SerialState {
    if name == serial.nv_name(false) {
        SerialState::Standing
    } else if name == serial.nv_name(true) {
        SerialState::Revoked
    } else {
        SerialState::Foreign
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_id::hex;

    /// Names and the PolicySecret digest as a swtpm gave them, through
    /// `tpm2_nvdefine 0x013A0005 -C o -s 1 -a "ownerwrite|authread|no_da"`,
    /// `tpm2_nvreadpublic`, `tpm2_policysecret` in a trial session, then the
    /// same after `tpm2_nvwrite`: the Name of the written index differs, so
    /// does the digest. The integration tests check the same on a live TPM.
    #[test]
    fn names_and_digests_are_the_tpms() {
        let serial = Serial::new(5);
        assert_eq!(serial.index_handle(), 0x013A_0005);
        assert_eq!(
            hex(&serial.nv_name(false)),
            "000b4d97307b2e88f9ec7c86fef85ed524210e9c57ec6ac0fa25f07e2b333b4fae67"
        );
        assert_eq!(
            hex(&serial.nv_name(true)),
            "000bf5eb75e6519c70375f8e1aa56bacd9d3adcdf5e265b56d4889312d0be753112a"
        );
        assert_eq!(
            hex(&serial.policy_secret(&[0; 32])),
            "4f46d9bb1a2127a6d7fd752aa0705ff8484cfe3ce1498797fbb6b07fe4d965b4"
        );
        assert_eq!(
            state_from_name(serial, &serial.nv_name(false)),
            SerialState::Standing
        );
        assert_eq!(
            state_from_name(serial, &serial.nv_name(true)),
            SerialState::Revoked
        );
        assert_eq!(
            state_from_name(serial, &Serial::new(6).nv_name(false)),
            SerialState::Foreign
        );
    }

    #[test]
    fn serials_are_plain_numbers() {
        assert_eq!(Serial::parse("0").unwrap().value(), 0);
        assert_eq!(Serial::parse("65535").unwrap().value(), 65535);
        for bad in ["", "65536", "-1", "+1", "0x10", "1 ", "123456"] {
            assert!(Serial::parse(bad).is_err(), "{bad:?}");
        }
    }
}
