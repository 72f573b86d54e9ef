//! Reading PCRs of the SHA-256 bank, the one sceau binds DEKs to: `sceau
//! pcrs` prints them for the operator to sign (`sceau-recover policy
//! sign`), and the daemon compares them with its signed policies.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::structures::{PcrSelectionList, PcrSelectionListBuilder, PcrSlot};

use super::fault::TpmError;
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
    /// A TPM that selects PCRs in its answer must return one digest each;
    /// fewer would leave a PCR without a value (and more, a value without a
    /// PCR), so the answer is refused rather than paired as far as it goes.
    #[error(
        "the TPM's PCR_Read answer names {selected} PCRs but carries {digests} digests; \
         the TPM is faulty: run `tpm2_pcrread sha256` to see what it returns"
    )]
    Count { selected: usize, digests: usize },
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
        let digests: Vec<&[u8]> = digests.value().iter().map(|d| d.value()).collect();
        for (index, value) in pair(&indices, &digests)? {
            values.insert(index, value);
        }
        wanted.retain(|i| !indices.contains(i));
    }
    Ok(values)
}

/// The PCRs a PCR_Read answer selected, each with its digest: exactly one
/// 32-byte digest a PCR, in the answer's order.
fn pair(indices: &[u8], digests: &[&[u8]]) -> Result<Vec<(u8, [u8; 32])>, PcrReadError> {
    if indices.len() != digests.len() {
        return Err(PcrReadError::Count {
            selected: indices.len(),
            digests: digests.len(),
        });
    }
    indices
        .iter()
        .zip(digests)
        .map(|(&index, digest)| {
            let value: [u8; 32] = (*digest)
                .try_into()
                .map_err(|_| PcrReadError::Size(digest.len()))?;
            Ok((index, value))
        })
        .collect()
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
    let mut ctx = super::start::started_context(tcti)?;
    read(&mut ctx, selection)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shown failing: with the count check removed, the short answer paired
    // PCR 7 alone and PCR 11 went without a value.
    #[test]
    fn an_answer_with_fewer_digests_than_pcrs_is_refused() {
        let one = [1u8; 32];
        let error = pair(&[7, 11], &[&one]).unwrap_err();
        assert!(
            matches!(
                error,
                PcrReadError::Count {
                    selected: 2,
                    digests: 1
                }
            ),
            "{error}"
        );
        assert!(matches!(
            pair(&[7], &[&one, &one]),
            Err(PcrReadError::Count { .. })
        ));
        assert!(matches!(
            pair(&[7], &[&[1u8; 20]]),
            Err(PcrReadError::Size(20))
        ));
        assert_eq!(pair(&[7], &[&one]).unwrap(), vec![(7, one)]);
    }
}
