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
//! - `restartCount` counts TPM Restarts and Resumes since the last reset.
//!   A Resume (TPM2_Shutdown(STATE), then TPM2_Startup(STATE): suspend to
//!   RAM) keeps the PCRs; a Restart (TPM2_Shutdown(STATE), then
//!   TPM2_Startup(CLEAR): hibernation, or root that can send both) resets
//!   them, and the quote cannot tell the two apart.
//! - `clock` only advances while the TPM is powered; TPM2_Clear sets it and
//!   both counts back to zero.
//!
//! Every reboot advances `resetCount`, so an advance is reported, not
//! refused: `tpm_reset:since_last_attestation`. Against it, `tpm_reset:none`
//! (both counts as at the EK's last attestation here: the same boot, no
//! suspend) and `tpm_reset:unknown` (the first attestation this server
//! sees of the EK). An operator compares it with the node's own reboots.
//! Two cases are told apart and kept for the rest of the TPM Reset cycle,
//! so that attesting again does not turn them into `none`:
//! - `tpm_reset:without_reboot`: a reset in a payload that carries the
//!   place proof of the EK's last attestation (`server::limits`), which
//!   only an agent that kept its memory across the reset has: the OS did
//!   not reboot (a TPM reset under a running OS). Root that restarts the
//!   agent first loses the proof, and its reset reads
//!   `since_last_attestation`.
//! - `tpm_reset:restart_since_last_attestation`: `restartCount` advanced,
//!   a Resume or a Restart (above).
//!
//! With `measured_boot = "required"` both are refused, for the rest of
//! their cycle (a node that suspended must reboot), and so are counts, or
//! a clock within one reset cycle, that went back: only TPM2_Clear or a
//! TPM whose state was restored from a copy gives them (a virtual TPM's
//! state file: a snapshot taken after a good boot replays that boot's
//! PCRs); keylime refuses such quotes (`check_quote_timing`). Without
//! `required`, a rollback reads `tpm_reset:rolled_back`.
//!
//! `tpm_reset:none` is no admission condition against root: after a reset
//! with the agent restarted, a second attestation in the same cycle reads
//! `none`. It says the TPM was not reset between two attestations here.
//!
//! The last clockInfo is kept in memory per EK (SPIRE gives a plugin no
//! place to keep state), at most [`MAX_TRACKED_EKS`], the least recently
//! seen forgotten first: after a restart of spire-server every node's first
//! attestation is `unknown`. A check and its record happen under one lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::config::MeasuredBoot;
use super::structures::ClockInfo;
use super::verify::Refusal;

/// EKs whose last clockInfo is remembered: a 64-character hash and a few
/// dozen bytes each, about 1 MiB at the limit, past which the EK seen
/// longest ago is forgotten. As many as the proven EKs of `limits`.
pub const MAX_TRACKED_EKS: usize = super::limits::MAX_PROVEN_EKS;

/// How this quote's clockInfo compares with the EK's last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// No earlier attestation of this EK since the server started.
    Unknown,
    /// Both counts as before: the same boot, no suspend.
    None,
    /// A TPM Reset: a reboot, or a reset under a running OS.
    Reset,
    /// A TPM Reset the agent lived through: no reboot.
    WithoutReboot,
    /// A TPM Restart or Resume: the PCRs were kept or reset.
    Restart,
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
            Since::WithoutReboot => "tpm_reset:without_reboot",
            Since::Restart => "tpm_reset:restart_since_last_attestation",
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
        (Equal, Greater) => Since::Restart,
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
    /// refusal of counts that went back and of a reset without reboot or a
    /// restart in this cycle (module documentation). Call once the
    /// attestation passed every other check.
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
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let before = records.get(ek).copied();
        let mut since = compare(before.map(|r| r.clock).as_ref(), &clock);
        if since == Since::Reset && observed.proven {
            since = Since::WithoutReboot;
        }
        // What the counts are compared from: the last attestation, or for a
        // cycle marked once, the one before the mark.
        let mut from = before.map_or(clock, |r| r.clock);
        // A cycle marked once stays marked: attesting again in it must not
        // read `none`.
        if let Some(Record {
            marked: Some((mark, marked_from)),
            clock: earlier,
            ..
        }) = before
            && earlier.reset_count == clock.reset_count
            && since == Since::None
        {
            since = mark;
            from = marked_from;
        }
        if since == Since::RolledBack {
            if mode == MeasuredBoot::Required {
                return Err(Refusal::RolledBack {
                    reset_before: from.reset_count,
                    reset_now: clock.reset_count,
                    restart_before: from.restart_count,
                    restart_now: clock.restart_count,
                });
            }
            return Ok(Some(since.selector()));
        }
        let marked =
            matches!(since, Since::WithoutReboot | Since::Restart).then_some((since, from));
        let seen = self.next_seen();
        insert(
            &mut records,
            ek,
            Record {
                clock,
                marked,
                seen,
            },
        );
        drop(records);
        if mode == MeasuredBoot::Required {
            match since {
                Since::WithoutReboot => {
                    return Err(Refusal::ResetWithoutReboot {
                        reset_before: from.reset_count,
                        reset_now: clock.reset_count,
                    });
                }
                Since::Restart => {
                    return Err(Refusal::RestartSinceAttestation {
                        restart_before: from.restart_count,
                        restart_now: clock.restart_count,
                    });
                }
                _ => {}
            }
        }
        Ok(Some(since.selector()))
    }
}

/// One EK's last attestation here.
#[derive(Debug, Clone, Copy)]
struct Record {
    clock: ClockInfo,
    /// A reset without reboot or a restart seen in this reset cycle, and
    /// the clockInfo it was seen against.
    marked: Option<(Since, ClockInfo)>,
    /// When it was last recorded, for forgetting the oldest at the limit.
    seen: u64,
}

/// Records `record` for `ek`; at the limit, the EK seen longest ago is
/// forgotten first (its next attestation reads `unknown`).
fn insert(records: &mut HashMap<String, Record>, ek: &str, record: Record) {
    if records.len() >= MAX_TRACKED_EKS
        && !records.contains_key(ek)
        && let Some(oldest) = records
            .iter()
            .min_by_key(|(_, r)| r.seen)
            .map(|(key, _)| key.clone())
    {
        records.remove(&oldest);
    }
    records.insert(ek.to_owned(), record);
}

/// The last attestation of each EK that attested; clones share it.
#[derive(Debug, Clone, Default)]
pub struct ResetTracker {
    records: Arc<Mutex<HashMap<String, Record>>>,
    seen: Arc<std::sync::atomic::AtomicU64>,
}

impl ResetTracker {
    fn next_seen(&self) -> u64 {
        self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// How `now` compares with `ek`'s last attestation here.
    pub fn since(&self, ek: &str, now: &ClockInfo) -> Since {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        compare(records.get(ek).map(|r| &r.clock), now)
    }

    /// Records `now` as `ek`'s last clockInfo, unmarked.
    pub fn record(&self, ek: &str, now: ClockInfo) {
        let seen = self.next_seen();
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        insert(
            &mut records,
            ek,
            Record {
                clock: now,
                marked: None,
                seen,
            },
        );
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
        // A resume keeps the PCRs, a restart resets them: the counts do
        // not tell which.
        assert_eq!(compare(Some(&before), &clock(5, 3, 2000)), Since::Restart);
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
        // The cycle stays marked: the agent's retry, whose proof was used
        // up, is refused as well, and without `required` it keeps reading
        // `without_reboot`, never `none`. Shown failing: with the mark left
        // out, the retry attested with `none`.
        assert_eq!(
            check(clock(6, 0, 6), false, Required),
            Err(Refusal::ResetWithoutReboot {
                reset_before: 5,
                reset_now: 6
            })
        );
        assert_eq!(
            check(clock(6, 0, 7), false, Optional),
            Ok(Some("tpm_reset:without_reboot"))
        );
        assert!(matches!(
            check(clock(6, 0, 1), false, Required),
            Err(Refusal::RolledBack { .. })
        ));
        assert_eq!(
            check(clock(6, 0, 1), false, Optional),
            Ok(Some("tpm_reset:rolled_back"))
        );
        // A reboot starts a new cycle, reported once.
        assert_eq!(
            check(clock(7, 0, 9), false, Required),
            Ok(Some("tpm_reset:since_last_attestation"))
        );
        assert_eq!(
            check(clock(7, 0, 10), false, Required),
            Ok(Some("tpm_reset:none"))
        );
        // A TPM Restart (Shutdown(STATE), Startup(CLEAR): the PCRs reset)
        // counts as a restart: refused with `required`, and its cycle
        // stays marked. Shown failing: it read `none` before restarts were
        // told apart.
        assert_eq!(
            check(clock(7, 1, 11), false, Required),
            Err(Refusal::RestartSinceAttestation {
                restart_before: 0,
                restart_now: 1
            })
        );
        assert_eq!(
            check(clock(7, 1, 12), false, Optional),
            Ok(Some("tpm_reset:restart_since_last_attestation"))
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
        assert_eq!(tracker.records.lock().unwrap().len(), MAX_TRACKED_EKS);
        // The EKs seen longest ago were forgotten ("a" first), the newest
        // kept: new nodes are tracked at the limit.
        assert_eq!(tracker.since("a", &clock(1, 0, 2)), Since::Unknown);
        let newest = format!("{}", MAX_TRACKED_EKS + 4);
        assert_eq!(tracker.since(&newest, &clock(1, 0, 2)), Since::None);
        tracker.record("a", clock(2, 0, 5));
        assert_eq!(tracker.since("a", &clock(2, 0, 6)), Since::None);
    }
}
