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
//! So a challenge is issued only with a [`Slot`]: at most
//! [`MAX_PENDING_PER_EK`] for one EK, each held for at most
//! [`ANSWER_TIMEOUT`], and in two pools. An EK that has answered a
//! challenge since the plugin started has proven that its sender holds the
//! TPM; its challenges take places among [`MAX_PENDING_PROVEN`] kept for
//! such EKs. Every other EK's take places among [`MAX_PENDING`]. A sender
//! who only has public data never answers, so its EKs are never proven:
//! however many trusted EKs it sends, it fills the second pool only, and
//! the nodes that attested before (spire-agent re-attests them to renew
//! their SVIDs) keep theirs. Past a cap the attestation is refused at once
//! with RESOURCE_EXHAUSTED, which spire-agent retries with backoff (only
//! PERMISSION_DENIED is final). The slot is released when it is dropped,
//! so on every way out of an attestation: the answer, the deadline, a
//! refusal, the agent going away, the task being dropped.
//!
//! The proven EKs are remembered in memory only, up to [`MAX_PROVEN_EKS`]:
//! after a restart every node is in the shared pool until it attests once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
/// Challenges waiting for an answer for one EK. One agent has one
/// attestation in flight; two lets an agent that restarted mid-attestation
/// attest again at once while its abandoned attempt runs out.
pub const MAX_PENDING_PER_EK: usize = 2;
/// Challenges waiting for an answer for EKs not yet proven: a quarter of
/// the connection's stream limit (64), so that stalled attestations can
/// never take the streams that other agents' attestations, Configure and
/// health need.
pub const MAX_PENDING: usize = 16;
/// Challenges waiting for an answer for proven EKs: another quarter. Both
/// pools full leave half the streams (less go-plugin's two) to other calls.
pub const MAX_PENDING_PROVEN: usize = 16;
/// Proven EKs remembered: a 64-character hash each, about 1 MiB in all at
/// the limit, past which a new EK is no longer remembered (it still
/// attests, in the shared pool). Above the node count of any cluster one
/// SPIRE server serves.
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
    by_ek: HashMap<String, usize>,
    /// Pending in the pool of EKs not yet proven, and in the proven pool.
    pending: usize,
    pending_proven: usize,
    refused: u64,
    proven: HashSet<String>,
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

    /// A slot for one challenge to the EK `ek` (its hash), or the cap that
    /// is reached. Never waits.
    pub fn try_acquire(&self, ek: &str) -> Result<Slot, Full> {
        let mut state = self.lock();
        let for_ek = state.by_ek.get(ek).copied().unwrap_or(0);
        let proven = state.proven.contains(ek);
        let (in_pool, pool_cap, pool) = if proven {
            (state.pending_proven, self.limits.proven_total, Cap::Proven)
        } else {
            (state.pending, self.limits.total, Cap::Total)
        };
        let cap = if for_ek >= self.limits.per_ek {
            Some((Cap::PerEk, self.limits.per_ek))
        } else if in_pool >= pool_cap {
            Some((pool, pool_cap))
        } else {
            None
        };
        if let Some((cap, limit)) = cap {
            state.refused += 1;
            return Err(Full {
                cap,
                limit,
                refused: state.refused,
            });
        }
        *state.by_ek.entry(ek.to_owned()).or_insert(0) += 1;
        if proven {
            state.pending_proven += 1;
        } else {
            state.pending += 1;
        }
        Ok(Slot {
            state: self.state.clone(),
            ek: ek.to_owned(),
            proven,
        })
    }

    /// Records that `ek`'s sender answered a challenge with it (the
    /// credential activated, the quote verified): its later challenges
    /// take places in the proven pool. Call only after the whole answer
    /// passed; a refusal after the challenge proves nothing about who
    /// holds the TPM.
    pub fn prove(&self, ek: &str) {
        let mut state = self.lock();
        if state.proven.len() < MAX_PROVEN_EKS {
            state.proven.insert(ek.to_owned());
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

    /// EKs proven since the start.
    pub fn proven(&self) -> usize {
        self.lock().proven.len()
    }

    /// Challenges waiting for an answer for `ek` now.
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

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.proven {
            state.pending_proven = state.pending_proven.saturating_sub(1);
        } else {
            state.pending = state.pending.saturating_sub(1);
        }
        if let Some(count) = state.by_ek.get_mut(&self.ek) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.by_ek.remove(&self.ek);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(per_ek: usize, total: usize) -> ChallengeSlots {
        ChallengeSlots::new(Limits {
            per_ek,
            total,
            proven_total: total,
            ..Limits::default()
        })
    }

    const A: &str = "aa";
    const B: &str = "bb";

    #[test]
    fn one_ek_gets_at_most_its_cap_and_others_are_not_affected() {
        let slots = slots(2, 16);
        let first = slots.try_acquire(A).unwrap();
        let _second = slots.try_acquire(A).unwrap();
        let full = slots.try_acquire(A).unwrap_err();
        assert_eq!(
            full,
            Full {
                cap: Cap::PerEk,
                limit: 2,
                refused: 1
            }
        );
        assert!(full.to_string().contains("2 challenges for this EK"));
        let _other = slots.try_acquire(B).expect("another EK has its own places");
        assert_eq!((slots.pending(), slots.pending_for(A)), (3, 2));
        drop(first);
        assert_eq!(slots.pending_for(A), 1);
        let _again = slots.try_acquire(A).expect("a freed place is reusable");
    }

    #[test]
    fn the_total_cap_holds_across_eks_and_counts_refusals() {
        let slots = slots(2, 3);
        let held: Vec<Slot> = ["1", "2", "3"]
            .iter()
            .map(|ek| slots.try_acquire(ek).unwrap())
            .collect();
        for n in 1..=2 {
            let full = slots.try_acquire("4").unwrap_err();
            assert_eq!((full.cap, full.limit, full.refused), (Cap::Total, 3, n));
        }
        assert_eq!(slots.refused(), 2);
        assert_eq!(slots.pending(), 3);
        drop(held);
        assert_eq!(slots.pending(), 0);
        assert_eq!(slots.pending_for("1"), 0);
        let _ = slots.try_acquire("4").expect("every place is free again");
        assert_eq!(slots.refused(), 2, "a refusal is counted once");
    }

    #[test]
    fn a_slot_is_released_when_its_task_ends_any_way() {
        let slots = slots(1, 1);
        // A panic while the slot is held (unwinding drops it).
        let shared = slots.clone();
        let panicked = std::thread::spawn(move || {
            let _slot = shared.try_acquire(A).unwrap();
            panic!("the attestation task failed");
        })
        .join();
        assert!(panicked.is_err());
        assert_eq!(slots.pending(), 0);
        // A future dropped before it completes (a cancelled stream, the
        // runtime shutting down).
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = slots.clone();
        let task = runtime.spawn(async move {
            let _slot = shared.try_acquire(A).unwrap();
            std::future::pending::<()>().await;
        });
        runtime.block_on(tokio::task::yield_now());
        assert_eq!(slots.pending(), 1);
        task.abort();
        let _ = runtime.block_on(task);
        assert_eq!(slots.pending(), 0);
    }

    #[test]
    fn the_deadline_and_caps_are_the_documented_ones() {
        let limits = Limits::default();
        assert_eq!(limits.answer_timeout, Duration::from_secs(5));
        assert_eq!(
            (limits.per_ek, limits.total, limits.proven_total),
            (2, 16, 16)
        );
        // Both pools full take at most half the streams one connection
        // carries; the other half, less the broker's and stdio's, stays
        // free for other calls.
        assert!(
            (limits.total + limits.proven_total) * 2
                <= crate::plugin::MAX_CONCURRENT_STREAMS as usize
        );
    }

    // Without the second pool (every EK counted in `pending`), the proven
    // EK is refused here: seen failing with "a proven EK has its own
    // places".
    #[test]
    fn a_proven_ek_has_places_that_unproven_eks_cannot_take() {
        let slots = slots(2, 3);
        let stalls: Vec<Slot> = ["1", "2", "3"]
            .iter()
            .map(|ek| slots.try_acquire(ek).unwrap())
            .collect();
        assert_eq!(slots.try_acquire("4").unwrap_err().cap, Cap::Total);
        // An EK that has not answered is not proven by a challenge alone.
        assert_eq!(slots.try_acquire(A).unwrap_err().cap, Cap::Total);
        slots.prove(A);
        let first = slots
            .try_acquire(A)
            .expect("a proven EK has its own places");
        let _second = slots.try_acquire(A).unwrap();
        assert_eq!(slots.try_acquire(A).unwrap_err().cap, Cap::PerEk);
        assert_eq!((slots.pending(), slots.pending_proven()), (5, 2));
        drop(first);
        drop(stalls);
        assert_eq!((slots.pending(), slots.pending_proven()), (1, 1));
        // The proven pool has its own cap.
        for ek in ["b1", "b2", "b3"] {
            slots.prove(ek);
        }
        let _b1 = slots.try_acquire("b1").unwrap();
        let _b2 = slots.try_acquire("b2").unwrap();
        let full = slots.try_acquire("b3").unwrap_err();
        assert_eq!((full.cap, full.limit), (Cap::Proven, 3));
        assert!(full.to_string().contains("for EKs that attested before"));
        assert_eq!(slots.proven(), 4);
    }

    #[test]
    fn proven_eks_are_remembered_up_to_the_limit() {
        let slots = slots(2, 1);
        for n in 0..MAX_PROVEN_EKS + 10 {
            slots.prove(&format!("{n:064x}"));
        }
        assert_eq!(slots.proven(), MAX_PROVEN_EKS);
        let _held = slots.try_acquire("x").unwrap();
        // Past the limit an EK is not remembered: it shares the other pool.
        let late = format!("{:064x}", MAX_PROVEN_EKS + 1);
        assert_eq!(slots.try_acquire(&late).unwrap_err().cap, Cap::Total);
        let early = format!("{:064x}", 1);
        let _ = slots.try_acquire(&early).expect("remembered");
    }
}
