//! Bounds on attestations that wait for the agent's answer.
//!
//! A payload made from public data (a genuine EK certificate, which anyone
//! can read off a TPM or a manufacturer's site, and an AK made in software)
//! passes every check before the challenge. Its sender then need never
//! answer, and each such attestation holds one of the plugin connection's
//! HTTP/2 streams ([`crate::plugin::MAX_CONCURRENT_STREAMS`], two of them
//! taken by go-plugin's broker and stdio streams) until the answer deadline.
//! Without bounds, 62 stalled attestations made SPIRE queue every other
//! agent's call behind them.
//!
//! So a challenge is issued only with a [`Slot`], held for at most
//! [`ANSWER_TIMEOUT`], in one of two pools. A payload that proves its
//! sender answered this server before for its EK takes a place among
//! [`MAX_PENDING_PROVEN`]; every other payload takes one among
//! [`MAX_PENDING`], at most [`MAX_PENDING_PER_EK`] for one EK.
//!
//! What proves it is a place proof
//! ([`crate::payload::place_proof`]): the hash of the secret of the
//! credential that EK's last successful attestation here activated, which
//! only the TPM holding the EK could open. The server keeps the one it
//! expects next for each EK ([`ChallengeSlots::prove`], called only after a
//! whole answer passed); the agent keeps it in memory and sends it in the
//! outsideInfo of its next AK's creation data. A payload's EK is not
//! proof: EK certificates are public, and a payload naming the EK of a node
//! that attested before, with an AK made in software, passes every check
//! before the challenge. Such payloads carry no place proof, so whatever
//! EKs they name they take places in the shared pool only, and the proven
//! pool stays for the nodes that attested before (spire-agent re-attests
//! them to renew their SVIDs). A proof is used once: the place it gets
//! consumes it, so a proof seen once cannot hold a place again, and the
//! node's next successful attestation sets the next one. Proven places
//! are not counted against the per-EK cap of the shared pool, so stalls
//! naming a node's EK do not keep that node out either.
//!
//! Past a cap the attestation is refused at once with RESOURCE_EXHAUSTED,
//! which spire-agent retries with backoff (only PERMISSION_DENIED is
//! final). The slot is released when it is dropped, so on every way out of
//! an attestation: the answer, the deadline, a refusal, the agent going
//! away, the task being dropped.
//!
//! The expected proofs are kept in memory only, up to [`MAX_PROVEN_EKS`],
//! and so are the agent's: after a restart of either, a node is in the
//! shared pool until it attests once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

use crate::payload::PLACE_PROOF_LEN;

/// A place proof ([`crate::payload::place_proof`]).
pub type PlaceProof = [u8; PLACE_PROOF_LEN];

/// How long the agent has to answer the challenge. The agent's side is 8
/// TPM commands: two StartAuthSession, PolicySecret, ActivateCredential,
/// Quote, PCR_Read, two FlushContext. Through the test kit's discrete-TPM
/// latency model (TpmProxy, `discrete-tpm.profile`) the answer takes
/// 0.49-0.62 s with an ECC or RSA EK, 0.48 s of it modelled TPM time
/// (`attest_limits::an_answer_through_a_discrete_tpm_model_fits_well_within_the_deadline`).
/// That profile has no figure of its own for ActivateCredential, PolicySecret
/// or Quote (100 ms each by default); published discrete-TPM figures put one
/// private-key operation at a few hundred ms in the worst case (the
/// profile's sources: ECDSA signing 17-190 ms over 11 parts, 600 ms at the
/// 95th percentile in one study). Three such operations at 600 ms and the
/// five light commands at 100 ms make 2.3 s; 5 s leaves twice that, and
/// the round trips between spire-server, spire-agent and the plugins,
/// while a stalled attestation holds its slot for 5 s, not a minute.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the host has to send the payload once the stream is open.
/// SPIRE's server sends it as it opens the stream (it has the payload from
/// the agent before it calls the plugin), so an agent cannot make this
/// wait; it only bounds a broken host.
pub const PAYLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Challenges waiting for an answer for one EK in the shared pool. One
/// agent has one attestation in flight; two lets an agent that restarted
/// mid-attestation attest again at once while its abandoned attempt runs
/// out.
pub const MAX_PENDING_PER_EK: usize = 2;
/// Challenges waiting for an answer for EKs not yet proven: a quarter of
/// the connection's stream limit (64), so that stalled attestations can
/// never take the streams that other agents' attestations, Configure and
/// health need.
pub const MAX_PENDING: usize = 16;
/// Challenges waiting for an answer with a place proof: another quarter.
/// Both pools full leave half the streams (less go-plugin's two) to other
/// calls.
pub const MAX_PENDING_PROVEN: usize = 16;
/// EKs whose next place proof is remembered: a 64-character hash and a
/// 32-byte proof each, about 1.5 MiB in all at the limit, past which a new
/// EK is no longer remembered (it still attests, in the shared pool). Above
/// the node count of any cluster one SPIRE server serves.
pub const MAX_PROVEN_EKS: usize = 8192;

/// The bounds one server plugin applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub payload_timeout: Duration,
    pub answer_timeout: Duration,
    pub per_ek: usize,
    /// Pending challenges for EKs not yet proven.
    pub total: usize,
    /// Pending challenges for proven EKs.
    pub proven_total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            payload_timeout: PAYLOAD_TIMEOUT,
            answer_timeout: ANSWER_TIMEOUT,
            per_ek: MAX_PENDING_PER_EK,
            total: MAX_PENDING,
            proven_total: MAX_PENDING_PROVEN,
        }
    }
}

/// Which cap refused a challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    PerEk,
    /// The pool of EKs not yet proven.
    Total,
    /// The pool of proven EKs.
    Proven,
}

/// A challenge refused because a cap is reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", match .cap {
    Cap::PerEk => format!("{} challenges for this EK already wait for an answer (the limit); try again later", .limit),
    Cap::Total => format!("{} challenges already wait for an answer (the server's limit for EKs that have not attested since it started); try again later", .limit),
    Cap::Proven => format!("{} challenges already wait for an answer (the server's limit for EKs that attested before); try again later", .limit),
})]
pub struct Full {
    pub cap: Cap,
    pub limit: usize,
    /// Challenges refused for capacity since the plugin started, this one
    /// included.
    pub refused: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Pending in the shared pool, per EK.
    by_ek: HashMap<String, usize>,
    /// Pending in the shared pool, and in the proven pool.
    pending: usize,
    pending_proven: usize,
    refused: u64,
    /// The place proof each EK's next payload must carry.
    proven: HashMap<String, Zeroizing<PlaceProof>>,
}

/// The pending challenges of one server plugin; clones share the count.
#[derive(Debug, Clone)]
pub struct ChallengeSlots {
    limits: Limits,
    state: Arc<Mutex<State>>,
}

impl ChallengeSlots {
    pub fn new(limits: Limits) -> Self {
        ChallengeSlots {
            limits,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for one challenge to the EK `ek` (its hash) whose payload
    /// carries `proof`, or the cap that is reached. Never waits. The slot
    /// is in the proven pool when `proof` is the one [`Self::prove`] left
    /// for `ek`, which it then consumes.
    pub fn try_acquire(&self, ek: &str, proof: Option<&PlaceProof>) -> Result<Slot, Full> {
        let mut state = self.lock();
        let proven = match (state.proven.get(ek), proof) {
            (Some(expected), Some(proof)) => bool::from(expected.ct_eq(proof)),
            _ => false,
        };
        let cap = if proven {
            (state.pending_proven >= self.limits.proven_total)
                .then_some((Cap::Proven, self.limits.proven_total))
        } else if state.by_ek.get(ek).copied().unwrap_or(0) >= self.limits.per_ek {
            Some((Cap::PerEk, self.limits.per_ek))
        } else {
            (state.pending >= self.limits.total).then_some((Cap::Total, self.limits.total))
        };
        if let Some((cap, limit)) = cap {
            state.refused += 1;
            return Err(Full {
                cap,
                limit,
                refused: state.refused,
            });
        }
        if proven {
            state.proven.remove(ek);
            state.pending_proven += 1;
        } else {
            *state.by_ek.entry(ek.to_owned()).or_insert(0) += 1;
            state.pending += 1;
        }
        Ok(Slot {
            state: self.state.clone(),
            ek: ek.to_owned(),
            proven,
        })
    }

    /// Records that `ek`'s sender answered a challenge with it (the
    /// credential activated, the quote verified), and the place proof its
    /// next payload carries to take a proven place: the one derived from
    /// that credential's secret. Call only after the whole answer passed; a
    /// refusal after the challenge proves nothing about who holds the TPM.
    pub fn prove(&self, ek: &str, next: &PlaceProof) {
        let mut state = self.lock();
        if state.proven.len() < MAX_PROVEN_EKS || state.proven.contains_key(ek) {
            state.proven.insert(ek.to_owned(), Zeroizing::new(*next));
        }
    }

    /// Challenges waiting for an answer now, in both pools.
    pub fn pending(&self) -> usize {
        let state = self.lock();
        state.pending + state.pending_proven
    }

    /// Challenges waiting for an answer now for proven EKs.
    pub fn pending_proven(&self) -> usize {
        self.lock().pending_proven
    }

    /// EKs whose next place proof is remembered: those that attested since
    /// the start, less those whose proof is in use.
    pub fn proven(&self) -> usize {
        self.lock().proven.len()
    }

    /// Challenges waiting for an answer for `ek` now in the shared pool.
    pub fn pending_for(&self, ek: &str) -> usize {
        self.lock().by_ek.get(ek).copied().unwrap_or(0)
    }

    /// Challenges refused for capacity since the start.
    pub fn refused(&self) -> u64 {
        self.lock().refused
    }
}

/// One pending challenge; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    state: Arc<Mutex<State>>,
    ek: String,
    /// Which pool the place is in.
    proven: bool,
}

impl Slot {
    /// Whether the payload carried the place proof expected for its EK:
    /// its agent answered this server's last challenge for that EK and
    /// kept that in memory since (`server::resets`).
    pub fn is_proven(&self) -> bool {
        self.proven
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.proven {
            state.pending_proven = state.pending_proven.saturating_sub(1);
            return;
        }
        state.pending = state.pending.saturating_sub(1);
        if let Some(count) = state.by_ek.get_mut(&self.ek) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.by_ek.remove(&self.ek);
            }
        }
    }
}

#[cfg(test)]
mod tests;
