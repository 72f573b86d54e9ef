//! Who made this TPM and which firmware it runs, from one GetCapability of
//! the fixed properties (TPM_PT_MANUFACTURER through
//! TPM_PT_FIRMWARE_VERSION_2): logged at start and exposed as a metric, so
//! that a fleet's TPMs can be matched against vendors' advisories.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::constants::{CapabilityType, PropertyTag};
use tss_esapi::structures::CapabilityData;

use super::fault::TpmError;
use super::tcti::Tcti;
use sceau_format::advisories::Version;
use sceau_format::tpm_info;

/// The TPM's own account of itself, as text (`sceau_format::tpm_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmIdentity {
    pub manufacturer: String,
    pub vendor: String,
    pub firmware: String,
    /// TPM_PT_FIRMWARE_VERSION_1 as vendors' advisories write it.
    pub firmware_version: Version,
}

/// From TPM_PT_MANUFACTURER (0x105) to TPM_PT_FIRMWARE_VERSION_2 (0x10C).
const FIRST: u32 = 0x105;
const COUNT: u32 = 8;

/// One GetCapability; a property the TPM leaves out reads as zero.
pub fn read(ctx: &mut Context) -> Result<TpmIdentity, TpmError> {
    let (data, _) = ctx
        .execute_without_session(|c| c.get_capability(CapabilityType::TpmProperties, FIRST, COUNT))
        .map_err(|e| TpmError::new("GetCapability", e))?;
    let CapabilityData::TpmProperties(properties) = data else {
        return Err(TpmError::refused(
            "the TPM answered GetCapability(TPM_PROPERTIES) with another capability".into(),
            super::Fault::Failure,
        ));
    };
    let value = |tag| properties.find(tag).map_or(0, |p| p.value());
    Ok(TpmIdentity {
        manufacturer: tpm_info::manufacturer(value(PropertyTag::Manufacturer)),
        vendor: tpm_info::vendor_string(&[
            value(PropertyTag::VendorString1),
            value(PropertyTag::VendorString2),
            value(PropertyTag::VendorString3),
            value(PropertyTag::VendorString4),
        ]),
        firmware: tpm_info::firmware_version(
            value(PropertyTag::FirmwareVersion1),
            value(PropertyTag::FirmwareVersion2),
        ),
        firmware_version: Version::from_first_word(value(PropertyTag::FirmwareVersion1)),
    })
}

/// [`read`] on a TPM of its own: no SRK, no session, nothing created, so it
/// runs beside a serving sceau through a resource manager.
pub fn read_at(tcti: &Tcti) -> Result<TpmIdentity, TpmError> {
    let mut ctx = super::start::started_context(tcti)?;
    read(&mut ctx)
}
