//! The unit tests of `limits` (limits.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

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
    let first = slots.try_acquire(A, None).unwrap();
    let _second = slots.try_acquire(A, None).unwrap();
    let full = slots.try_acquire(A, None).unwrap_err();
    assert_eq!(
        full,
        Full {
            cap: Cap::PerEk,
            limit: 2,
            refused: 1
        }
    );
    assert!(full.to_string().contains("2 challenges for this EK"));
    let _other = slots
        .try_acquire(B, None)
        .expect("another EK has its own places");
    assert_eq!((slots.pending(), slots.pending_for(A)), (3, 2));
    drop(first);
    assert_eq!(slots.pending_for(A), 1);
    let _again = slots
        .try_acquire(A, None)
        .expect("a freed place is reusable");
}

#[test]
fn the_total_cap_holds_across_eks_and_counts_refusals() {
    let slots = slots(2, 3);
    let held: Vec<Slot> = ["1", "2", "3"]
        .iter()
        .map(|ek| slots.try_acquire(ek, None).unwrap())
        .collect();
    for n in 1..=2 {
        let full = slots.try_acquire("4", None).unwrap_err();
        assert_eq!((full.cap, full.limit, full.refused), (Cap::Total, 3, n));
    }
    assert_eq!(slots.refused(), 2);
    assert_eq!(slots.pending(), 3);
    drop(held);
    assert_eq!(slots.pending(), 0);
    assert_eq!(slots.pending_for("1"), 0);
    let _ = slots
        .try_acquire("4", None)
        .expect("every place is free again");
    assert_eq!(slots.refused(), 2, "a refusal is counted once");
}

#[test]
fn a_slot_is_released_when_its_task_ends_any_way() {
    let slots = slots(1, 1);
    // A panic while the slot is held (unwinding drops it).
    let shared = slots.clone();
    let panicked = std::thread::spawn(move || {
        let _slot = shared.try_acquire(A, None).unwrap();
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
        let _slot = shared.try_acquire(A, None).unwrap();
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
        (limits.total + limits.proven_total) * 2 <= crate::plugin::MAX_CONCURRENT_STREAMS as usize
    );
}

const PROOF: PlaceProof = [0x70; PLACE_PROOF_LEN];

// Without the second pool (every EK counted in `pending`), the proven
// EK is refused here: seen failing with "a proven EK has its own
// places".
#[test]
fn a_proven_ek_has_places_that_unproven_eks_cannot_take() {
    let slots = slots(2, 3);
    let stalls: Vec<Slot> = ["1", "2", "3"]
        .iter()
        .map(|ek| slots.try_acquire(ek, None).unwrap())
        .collect();
    assert_eq!(slots.try_acquire("4", None).unwrap_err().cap, Cap::Total);
    // An EK that has not answered is not proven by a challenge alone.
    assert_eq!(
        slots.try_acquire(A, Some(&PROOF)).unwrap_err().cap,
        Cap::Total
    );
    slots.prove(A, &PROOF);
    let first = slots
        .try_acquire(A, Some(&PROOF))
        .expect("a proven EK has its own places");
    // The proof is used once.
    assert_eq!(
        slots.try_acquire(A, Some(&PROOF)).unwrap_err().cap,
        Cap::Total
    );
    assert_eq!((slots.pending(), slots.pending_proven()), (4, 1));
    drop(first);
    drop(stalls);
    assert_eq!((slots.pending(), slots.pending_proven()), (0, 0));
    // The proven pool has its own cap.
    for ek in ["b1", "b2", "b3", "b4"] {
        slots.prove(ek, &PROOF);
    }
    let _b: Vec<Slot> = ["b1", "b2", "b3"]
        .iter()
        .map(|ek| slots.try_acquire(ek, Some(&PROOF)).unwrap())
        .collect();
    let full = slots.try_acquire("b4", Some(&PROOF)).unwrap_err();
    assert_eq!((full.cap, full.limit), (Cap::Proven, 3));
    assert!(full.to_string().contains("for EKs that attested before"));
    // Refused, its proof was not used: it gets the next free place.
    assert_eq!(slots.proven(), 1);
}

// The fill with public data: payloads naming the EKs of nodes that
// attested before (their certificates are public), with AKs made in
// software, as many as the caps allow. They carry no place proof, so
// they take shared places only, and each proven node still gets its
// place, the per-EK cap of the shared pool notwithstanding. Shown
// failing: with the pool chosen by the EK alone (proven =
// `state.proven.contains_key(ek)`), the forged payloads took the 3
// proven places (pending (3, 3)), leaving none to the proven nodes.
#[test]
fn public_data_cannot_fill_the_proven_pool() {
    let slots = slots(2, 3);
    let nodes = ["n1", "n2", "n3"];
    for node in nodes {
        slots.prove(node, &PROOF);
    }
    let mut forged = Vec::new();
    for node in nodes.iter().cycle().take(12) {
        if let Ok(slot) = slots.try_acquire(node, None) {
            forged.push(slot);
        }
    }
    assert_eq!((slots.pending(), slots.pending_proven()), (3, 0));
    let genuine: Vec<Slot> = nodes
        .iter()
        .map(|node| {
            slots
                .try_acquire(node, Some(&PROOF))
                .expect("a proven node keeps its place")
        })
        .collect();
    assert_eq!(slots.pending_proven(), 3);
    // A wrong proof is no proof.
    slots.prove("n4", &PROOF);
    assert_eq!(
        slots.try_acquire("n4", Some(&[0; 32])).unwrap_err().cap,
        Cap::Total
    );
    drop((forged, genuine));
}

#[test]
fn proven_eks_are_remembered_up_to_the_limit() {
    let slots = slots(2, 1);
    for n in 0..MAX_PROVEN_EKS + 10 {
        slots.prove(&format!("{n:064x}"), &PROOF);
    }
    assert_eq!(slots.proven(), MAX_PROVEN_EKS);
    let _held = slots.try_acquire("x", None).unwrap();
    // Past the limit an EK is not remembered: it shares the other pool.
    let late = format!("{:064x}", MAX_PROVEN_EKS + 1);
    assert_eq!(
        slots.try_acquire(&late, Some(&PROOF)).unwrap_err().cap,
        Cap::Total
    );
    // One remembered gets its next proof at the limit.
    let early = format!("{:064x}", 1);
    slots.prove(&early, &[1; 32]);
    let _ = slots
        .try_acquire(&early, Some(&[1; 32]))
        .expect("remembered");
}
