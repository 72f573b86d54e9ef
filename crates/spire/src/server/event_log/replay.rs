//! Replaying a log per bank and comparing it with quoted PCR values; the
//! check that a quoted boot PCR was extended at all.

use super::*;

impl EventLog {
    /// The values the 24 PCRs of `bank` hold if the log is what happened.
    pub fn replay(&self, bank: Bank) -> Result<Vec<Vec<u8>>, PcrCheckError> {
        if !self.has_bank(bank) {
            return Err(PcrCheckError::BankNotInLog(bank));
        }
        let len = bank.digest_len();
        let mut pcrs: Vec<Vec<u8>> = (0..PCR_COUNT)
            .map(|i| vec![if (17..=22).contains(&i) { 0xff } else { 0 }; len])
            .collect();
        pcrs[0][len - 1] = self.locality;
        for event in self.events.iter().filter(|e| e.extends()) {
            // Present and of the bank's size: `parse` checked both.
            let digest = event.digest(bank.alg_id()).unwrap_or_default();
            let pcr = &mut pcrs[usize::from(event.pcr)];
            *pcr = bank.hash(&[pcr.as_slice(), digest]);
        }
        Ok(pcrs)
    }

    /// The SHA-256 bank's replay.
    pub fn replay_sha256(&self) -> Result<[[u8; 32]; PCR_COUNT], PcrCheckError> {
        let replayed = self.replay(Bank::Sha256)?;
        let mut out = [[0; 32]; PCR_COUNT];
        for (out, value) in out.iter_mut().zip(&replayed) {
            out.copy_from_slice(value);
        }
        Ok(out)
    }

    /// Checks quoted `(PCR, value)` pairs of `bank` against the replay: each
    /// must equal it. The [`Verified`] log answers [`Verified::facts`] from
    /// the PCRs checked here, and only from them.
    pub fn matches(
        &self,
        bank: Bank,
        quoted: &[(u8, &[u8])],
    ) -> Result<Verified<'_>, PcrCheckError> {
        if quoted.is_empty() {
            return Err(PcrCheckError::NothingQuoted);
        }
        let mut checked: u32 = 0;
        for (pcr, value) in quoted {
            if usize::from(*pcr) >= PCR_COUNT || checked & (1 << pcr) != 0 {
                return Err(PcrCheckError::Selection(*pcr));
            }
            checked |= 1 << pcr;
            if value.len() != bank.digest_len() {
                return Err(PcrCheckError::Length {
                    pcr: *pcr,
                    bank,
                    len: value.len(),
                });
            }
        }
        let replayed = self.replay(bank)?;
        for (pcr, value) in quoted {
            let replayed = &replayed[usize::from(*pcr)];
            if replayed.as_slice() != *value {
                return Err(PcrCheckError::Mismatch {
                    pcr: *pcr,
                    bank,
                    expected: value.to_vec(),
                    replayed: replayed.clone(),
                });
            }
        }
        Ok(Verified {
            log: self,
            bank,
            pcrs: checked,
        })
    }
}

/// The first boot PCR (0–7) among the quoted `(PCR, value)` pairs whose
/// value is all zeros or all ones: the firmware never extended it (every
/// boot PCR holds at least its separator after a boot), so the bank's
/// values say nothing about the boot. `None`: none is. The caller quotes
/// PCRs 0–7 to make this meaningful.
pub fn unextended(quoted: &[(u8, &[u8])]) -> Option<u8> {
    quoted
        .iter()
        .filter(|(pcr, _)| BOOT_PCRS.contains(pcr))
        .find(|(_, value)| value.iter().all(|b| *b == 0) || value.iter().all(|b| *b == 0xff))
        .map(|(pcr, _)| *pcr)
}
