//! What sceau last learned about the TPM, so that Status can answer from a
//! cache and the TPM is probed at most once per [`PROBE_INTERVAL`].
//!
//! Each verdict is also told to the observer (the daemon's
//! `sceau_tpm_healthy` gauge). A scrape reads the
//! last verdict and never probes: a metrics request causes no TPM command.
//! Under systemd the watchdog's probes keep it at most `WatchdogSec=`/2 old.
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::fault::Fault;
use super::observe::Observer;

/// How long an answer from the TPM keeps Status healthy without a new probe.
/// The apiserver polls Status every 10 s to 1 min, and its health endpoints
/// at most every 3 s; 5 s keeps probes rare without hiding a dead TPM long.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub struct HealthRecord {
    /// Told every verdict (the daemon's `sceau_tpm_healthy` gauge).
    observer: Observer,
    last: Mutex<Option<(Instant, Result<(), Fault>)>>,
    /// Held while a probe runs, so concurrent Status calls share one probe.
    pub(crate) probing: tokio::sync::Mutex<()>,
}

impl HealthRecord {
    pub fn new(observer: Observer) -> Self {
        Self {
            observer,
            ..Self::default()
        }
    }

    /// Records the outcome of any TPM operation. An envelope the TPM refused
    /// still proves the TPM answered. A boot state no signed policy matches
    /// is kept as the verdict (Status reports it), but the TPM answered.
    pub fn record(&self, outcome: Result<(), Fault>) {
        let verdict = match outcome {
            Err(Fault::EnvelopeRejected) => Ok(()),
            other => other,
        };
        self.observer
            .health(matches!(verdict, Ok(()) | Err(Fault::PolicyMismatch)));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), verdict));
    }

    /// The last verdict, if it is recent enough to trust without a probe.
    pub fn fresh(&self) -> Option<Result<(), Fault>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some((at, verdict)) if at.elapsed() < PROBE_INTERVAL => Some(verdict),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_envelope_is_a_healthy_answer() {
        let record = HealthRecord::default();
        assert_eq!(record.fresh(), None);
        record.record(Err(Fault::EnvelopeRejected));
        assert_eq!(record.fresh(), Some(Ok(())));
        record.record(Err(Fault::Unreachable));
        assert_eq!(record.fresh(), Some(Err(Fault::Unreachable)));
    }
}
