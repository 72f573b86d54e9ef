//! TPM resets between attestations: each quote carries the TPM's
//! `clockInfo` (TPMS_CLOCK_INFO), signed with it, and the server compares
//! it with the one of the same EK's last successful attestation here.
//!
//! The TPM obfuscates the counts for a signing key outside the endorsement
//! and platform hierarchies, so they are read only when the AK's certified
//! creation data names the EK as its parent
//! (`verify::VerifiedPayload::ak_under_ek`: the agent creates its AK under
//! the EK, as keylime does); an AK made under the SRK (agents before this)
//! gives `tpm_reset:unknown`, and is refused with `measured_boot =
//! "required"`, where it would hide a reset.
//!
//! - `resetCount` counts TPM Resets (TPM2_Startup(CLEAR) without a
//!   TPM2_Shutdown(STATE) before it), which reset every PCR: each reboot is
//!   one, and so is a TPM reset under a running OS (a suspend the firmware
//!   resumes with TPM2_Startup(CLEAR), the sleep bugs of that class). After
//!   one, software can extend PCRs 0–7 along a log of its choosing, and the
//!   server cannot tell that from a boot.
//! - `restartCount` counts TPM Restarts and Resumes since the last reset
//!   (hibernation, suspend), which keep the PCRs.
//! - `clock` only advances while the TPM is powered; TPM2_Clear sets it and
//!   both counts back to zero.
//!
//! Every reboot advances `resetCount`, so an advance is reported, not
//! refused: `tpm_reset:since_last_attestation` (against `tpm_reset:none`
//! for the same TPM Reset cycle, a resume included, and
//! `tpm_reset:unknown` for the first attestation this server sees of the
//! EK). An operator compares it with the node's own reboots: a reset the
//! node did not reboot for means its PCRs may have been extended by
//! software. One such case is told apart: an advance in a payload that
//! carries the place proof of the EK's last attestation (`server::limits`)
//! comes from an agent that kept its memory across the reset, so the OS
//! did not reboot (a TPM reset under a running OS, or a resume from
//! hibernation); `server::Attestation::run` refuses it with
//! `measured_boot = "required"`. Root that restarts the agent first loses
//! the proof, and its reset is reported, not refused. Counts, or a clock
//! within one reset cycle, that went back can only come from TPM2_Clear or
//! from a TPM whose state was restored from a copy (a virtual TPM's state
//! file: a snapshot taken after a good boot replays that boot's PCRs);
//! keylime refuses such quotes (`check_quote_timing`). Here they are
//! refused with `measured_boot = "required"` and reported as
//! `tpm_reset:rolled_back` otherwise.
//!
//! The last clockInfo is kept in memory per EK (SPIRE gives a plugin no
//! place to keep state), at most [`MAX_TRACKED_EKS`]: after a restart of
//! spire-server every node's first attestation is `unknown`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::config::MeasuredBoot;
use super::structures::ClockInfo;
use super::verify::Refusal;

/// EKs whose last clockInfo is remembered: a 64-character hash and 17
/// bytes each, about 1 MiB at the limit, past which a new EK is reported
/// `unknown`. As many as the proven EKs of `limits`.
pub const MAX_TRACKED_EKS: usize = super::limits::MAX_PROVEN_EKS;

/// How this quote's clockInfo compares with the EK's last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// No earlier attestation of this EK since the server started.
    Unknown,
    /// The same TPM Reset cycle (a Restart or Resume keeps the PCRs).
    None,
    /// A TPM Reset: a reboot, or a reset under a running OS.
    Reset,
    /// The counts or the clock went back: TPM2_Clear, or restored state.
    RolledBack,
}

impl Since {
    /// The selector (`tpm_reset:…`).
    pub fn selector(self) -> &'static str {
        match self {
            Since::Unknown => "tpm_reset:unknown",
            Since::None => "tpm_reset:none",
            Since::Reset => "tpm_reset:since_last_attestation",
            Since::RolledBack => "tpm_reset:rolled_back",
        }
    }
}

/// Compares `now` with `before` (the same TPM's earlier quote).
pub fn compare(before: Option<&ClockInfo>, now: &ClockInfo) -> Since {
    let Some(before) = before else {
        return Since::Unknown;
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    // Across a reset the clock may go back legitimately (it is saved to NV
    // from time to time, and a power loss keeps the last saved value).
    match (
        now.reset_count.cmp(&before.reset_count),
        now.restart_count.cmp(&before.restart_count),
    ) {
        (Less, _) | (Equal, Less) => Since::RolledBack,
        (Greater, _) => Since::Reset,
        (Equal, Greater) => Since::None,
        (Equal, Equal) if now.clock < before.clock => Since::RolledBack,
        (Equal, Equal) => Since::None,
    }
}

/// What an attestation that passed every other check carries.
#[derive(Debug, Clone, Copy)]
pub struct Observed {
    /// The quote's clockInfo; `None`: no quote was asked.
    pub clock: Option<ClockInfo>,
    /// The AK's creation data names the EK as its parent, so the counts
    /// are not obfuscated.
    pub ak_under_ek: bool,
    /// The payload carried the place proof of the EK's last attestation.
    pub proven: bool,
}

impl ResetTracker {
    /// The `tpm_reset:` selector of `ek`'s attestation (`None` without a
    /// quote), recorded as its last; or, with `mode` required, the
    /// refusal of counts that went back and of a reset the agent lived
    /// through (module documentation). Call once the attestation passed
    /// every other check.
    pub fn check(
        &self,
        ek: &str,
        observed: Observed,
        mode: MeasuredBoot,
    ) -> Result<Option<&'static str>, Refusal> {
        let Some(clock) = observed.clock else {
            return Ok(None);
        };
        if !observed.ak_under_ek {
            // Else an agent could hide a reset by making its AK elsewhere.
            if mode == MeasuredBoot::Required {
                return Err(Refusal::AkNotUnderEk);
            }
            return Ok(Some(Since::Unknown.selector()));
        }
        let before = self.last(ek);
        let since = compare(before.as_ref(), &clock);
        if mode == MeasuredBoot::Required {
            let before = before.unwrap_or(clock);
            match since {
                Since::RolledBack => {
                    return Err(Refusal::RolledBack {
                        reset_before: before.reset_count,
                        reset_now: clock.reset_count,
                        restart_before: before.restart_count,
                        restart_now: clock.restart_count,
                    });
                }
                Since::Reset if observed.proven => {
                    return Err(Refusal::ResetWithoutReboot {
                        reset_before: before.reset_count,
                        reset_now: clock.reset_count,
                    });
                }
                _ => {}
            }
        }
        self.record(ek, clock);
        Ok(Some(since.selector()))
    }
}

/// The last clockInfo of each EK that attested; clones share it.
#[derive(Debug, Clone, Default)]
pub struct ResetTracker {
    last: Arc<Mutex<HashMap<String, ClockInfo>>>,
}

impl ResetTracker {
    /// How `now` compares with `ek`'s last attestation here.
    pub fn since(&self, ek: &str, now: &ClockInfo) -> Since {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        compare(last.get(ek), now)
    }

    /// `ek`'s last clockInfo.
    pub fn last(&self, ek: &str) -> Option<ClockInfo> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(ek).copied()
    }

    /// Records `now` as `ek`'s last clockInfo. Call only once the
    /// attestation passed.
    pub fn record(&self, ek: &str, now: ClockInfo) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.len() < MAX_TRACKED_EKS || last.contains_key(ek) {
            last.insert(ek.to_owned(), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(reset_count: u32, restart_count: u32, clock: u64) -> ClockInfo {
        ClockInfo {
            clock,
            reset_count,
            restart_count,
            safe: true,
        }
    }

    #[test]
    fn resets_and_rollbacks_are_told_apart() {
        let before = clock(5, 2, 1000);
        assert_eq!(compare(None, &before), Since::Unknown);
        assert_eq!(compare(Some(&before), &clock(5, 2, 1500)), Since::None);
        // A reboot: resetCount up, restartCount back to 0, the clock
        // maybe back to its last saved value.
        assert_eq!(compare(Some(&before), &clock(6, 0, 2000)), Since::Reset);
        assert_eq!(compare(Some(&before), &clock(6, 0, 900)), Since::Reset);
        // A resume keeps the PCRs.
        assert_eq!(compare(Some(&before), &clock(5, 3, 2000)), Since::None);
        // Cleared, or an earlier state restored.
        assert_eq!(compare(Some(&before), &clock(0, 0, 10)), Since::RolledBack);
        assert_eq!(
            compare(Some(&before), &clock(5, 1, 2000)),
            Since::RolledBack
        );
        assert_eq!(compare(Some(&before), &clock(5, 2, 999)), Since::RolledBack);
    }

    fn observed(clock: ClockInfo, proven: bool) -> Observed {
        Observed {
            clock: Some(clock),
            ak_under_ek: true,
            proven,
        }
    }

    // Shown failing: with the refusals of `check` disabled, the reset with
    // a proof was reported, not refused.
    #[test]
    fn check_reports_resets_and_refuses_rollbacks_and_resets_the_agent_lived_through() {
        use MeasuredBoot::{Optional, Required};
        let tracker = ResetTracker::default();
        let check = |clock, proven, mode| tracker.check("a", observed(clock, proven), mode);
        assert_eq!(
            check(clock(5, 0, 10), true, Required),
            Ok(Some("tpm_reset:unknown"))
        );
        assert_eq!(
            check(clock(5, 0, 20), true, Required),
            Ok(Some("tpm_reset:none"))
        );
        assert_eq!(
            check(clock(6, 0, 5), true, Required),
            Err(Refusal::ResetWithoutReboot {
                reset_before: 5,
                reset_now: 6
            })
        );
        // Refused, so not recorded: the same reset, without the proof.
        assert_eq!(
            check(clock(6, 0, 6), false, Required),
            Ok(Some("tpm_reset:since_last_attestation"))
        );
        assert!(matches!(
            check(clock(6, 0, 1), false, Required),
            Err(Refusal::RolledBack { .. })
        ));
        assert_eq!(
            check(clock(6, 0, 1), false, Optional),
            Ok(Some("tpm_reset:rolled_back"))
        );
        // An AK under another parent: its counts say nothing.
        let elsewhere = Observed {
            ak_under_ek: false,
            ..observed(clock(0, 0, 0), false)
        };
        assert_eq!(
            tracker.check("a", elsewhere, Optional),
            Ok(Some("tpm_reset:unknown"))
        );
        assert_eq!(
            tracker.check("a", elsewhere, Required),
            Err(Refusal::AkNotUnderEk)
        );
        let unquoted = Observed {
            clock: None,
            ..observed(clock(0, 0, 0), false)
        };
        assert_eq!(tracker.check("a", unquoted, Required), Ok(None));
    }

    #[test]
    fn the_last_clock_is_kept_per_ek_up_to_the_limit() {
        let tracker = ResetTracker::default();
        assert_eq!(tracker.since("a", &clock(1, 0, 1)), Since::Unknown);
        tracker.record("a", clock(1, 0, 1));
        assert_eq!(tracker.since("a", &clock(1, 0, 2)), Since::None);
        assert_eq!(tracker.since("b", &clock(1, 0, 2)), Since::Unknown);
        for n in 0..MAX_TRACKED_EKS + 5 {
            tracker.record(&format!("{n}"), clock(1, 0, 1));
        }
        assert_eq!(tracker.last.lock().unwrap().len(), MAX_TRACKED_EKS);
        // One already kept is still updated at the limit.
        tracker.record("a", clock(2, 0, 5));
        assert_eq!(tracker.since("a", &clock(2, 0, 6)), Since::None);
    }
}
