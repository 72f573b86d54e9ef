//! Reading PCRs of the SHA-256 bank, the one sceau binds DEKs to: `sceau
//! pcrs` prints them for the operator to sign (`sceau-recover policy
//! sign`), and the daemon compares them with its signed policies.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::structures::{PcrSelectionList, PcrSelectionListBuilder, PcrSlot};

use super::fault::{INITIALIZE, TpmError};
use super::tcti::Tcti;
use sceau_format::pcr_policy::{PcrSelection, PcrValues};

#[derive(Debug, thiserror::Error)]
pub enum PcrReadError {
    #[error(transparent)]
    Tpm(#[from] TpmError),
    /// TPM2_PCR_Read answers with an empty selection for a bank the TPM has
    /// not allocated (or PCRs it does not have).
    #[error(
        "the TPM returned no sha256 value for PCR {0}: its sha256 bank is not allocated \
         (tpm2_getcap pcrs lists the banks; tpm2_pcrallocate changes them)"
    )]
    NotAllocated(u8),
    #[error("the TPM returned a {0}-byte value where SHA-256 has 32")]
    Size(usize),
}

/// The values of `selection`, read in as many TPM2_PCR_Read calls as the
/// TPM needs (it returns at most eight PCRs a call).
pub fn read(ctx: &mut Context, selection: PcrSelection) -> Result<PcrValues, PcrReadError> {
    let mut values = PcrValues::default();
    let mut wanted: Vec<u8> = selection.indices().collect();
    while let Some(&first) = wanted.first() {
        let remaining = PcrSelection::from_indices(wanted.iter().map(|&i| u64::from(i)))
            .expect("PCRs 0 to 23, each once");
        let list = sha256_selection(remaining)?;
        let (_, read, digests) = ctx
            .execute_without_session(|c| c.pcr_read(list))
            .map_err(|e| TpmError::new("PCR_Read", e))?;
        let indices: Vec<u8> = read
            .get_selections()
            .iter()
            .filter(|s| s.hashing_algorithm() == HashingAlgorithm::Sha256)
            .flat_map(|s| s.selected())
            .map(|slot| u32::from(slot).trailing_zeros() as u8)
            .collect();
        // No progress would loop forever (tss-esapi's own read_all does).
        if indices.is_empty() {
            return Err(PcrReadError::NotAllocated(first));
        }
        for (index, digest) in indices.iter().zip(digests.value()) {
            let value: [u8; 32] = digest
                .value()
                .try_into()
                .map_err(|_| PcrReadError::Size(digest.value().len()))?;
            values.insert(*index, value);
        }
        wanted.retain(|i| !indices.contains(i));
    }
    Ok(values)
}

/// `selection` as ESAPI takes it: the SHA-256 bank only.
pub(crate) fn sha256_selection(selection: PcrSelection) -> Result<PcrSelectionList, TpmError> {
    let slots: Vec<PcrSlot> = selection
        .indices()
        .map(|i| PcrSlot::try_from(1u32 << i).expect("PCRs 0 to 23 are slots"))
        .collect();
    PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &slots)
        .build()
        .map_err(|e| TpmError::new("PCR selection", e))
}

/// [`read`] on a TPM of its own: no SRK, no session, nothing created.
pub fn read_at(tcti: &Tcti, selection: PcrSelection) -> Result<PcrValues, PcrReadError> {
    let mut ctx = Context::new(tcti.name_conf()).map_err(|e| TpmError::new(INITIALIZE, e))?;
    super::device::ensure_started(&mut ctx)?;
    read(&mut ctx, selection)
}
