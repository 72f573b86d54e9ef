//! Concurrent requests for the same key share one computation.
//!
//! After a restart the apiserver may send many Decrypts of one ciphertext at
//! once (it does not de-duplicate them), and each would cost a Load and an
//! Unseal on a TPM that runs one command at a time.
//!
//! Each call that joins a computation already running is reported to the
//! coalescer's `on_join` (the service counts them in
//! `sceau_decrypt_coalesced_total`).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OnceCell;

pub struct Coalescer<K, V> {
    in_flight: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
    on_join: fn(),
}

impl<K: Eq + Hash + Clone, V: Clone> Coalescer<K, V> {
    pub fn new() -> Self {
        Self::counting_joins(|| {})
    }

    /// A coalescer that calls `on_join` whenever a call shares a computation
    /// another call started.
    pub fn counting_joins(on_join: fn()) -> Self {
        Self {
            in_flight: Mutex::new(HashMap::new()),
            on_join,
        }
    }

    /// Runs `compute` unless a call for `key` is already running, in which
    /// case it waits for that call's result. Results are not cached: once a
    /// computation has finished, the next call computes afresh.
    pub async fn run<F, Fut>(&self, key: K, compute: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let waiter = Waiter::join(self, key);
        waiter.cell.get_or_init(compute).await.clone()
    }

    fn map(&self) -> MutexGuard<'_, HashMap<K, Arc<OnceCell<V>>>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn in_flight(&self) -> usize {
        self.map().len()
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Default for Coalescer<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

/// One caller's share of an entry. The entry holds one reference to the cell
/// and each waiter one more, so the count says who is still waiting.
struct Waiter<'a, K: Eq + Hash + Clone, V: Clone> {
    coalescer: &'a Coalescer<K, V>,
    key: K,
    cell: Arc<OnceCell<V>>,
}

impl<'a, K: Eq + Hash + Clone, V: Clone> Waiter<'a, K, V> {
    fn join(coalescer: &'a Coalescer<K, V>, key: K) -> Self {
        let cell = match coalescer.map().entry(key.clone()) {
            Entry::Occupied(running) => {
                (coalescer.on_join)();
                running.get().clone()
            }
            Entry::Vacant(new) => new.insert(Arc::default()).clone(),
        };
        Self {
            coalescer,
            key,
            cell,
        }
    }
}

/// Removes the entry once its computation has finished, or when the last
/// waiter gives up; a waiter that leaves early (its client timed out) leaves
/// the computation to the others. If the computing waiter is cancelled,
/// another waiter takes over the computation (`OnceCell` semantics).
impl<K: Eq + Hash + Clone, V: Clone> Drop for Waiter<'_, K, V> {
    fn drop(&mut self) {
        let mut map = self.coalescer.map();
        let ours = map
            .get(&self.key)
            .is_some_and(|c| Arc::ptr_eq(c, &self.cell));
        let last_waiter = Arc::strong_count(&self.cell) == 2;
        if ours && (self.cell.initialized() || last_waiter) {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn concurrent_calls_share_one_computation() {
        let coalescer = Arc::new(Coalescer::<u8, u32>::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let calls = (0..16).map(|_| {
            let (coalescer, runs) = (coalescer.clone(), runs.clone());
            tokio::spawn(async move {
                coalescer
                    .run(1, || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        42
                    })
                    .await
            })
        });
        for call in calls.collect::<Vec<_>>() {
            assert_eq!(call.await.unwrap(), 42);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(coalescer.in_flight(), 0);
    }

    #[tokio::test]
    async fn joins_are_counted() {
        static JOINS: AtomicUsize = AtomicUsize::new(0);
        let coalescer = Arc::new(Coalescer::<u8, u32>::counting_joins(|| {
            JOINS.fetch_add(1, Ordering::SeqCst);
        }));
        let calls = (0..4).map(|_| {
            let coalescer = coalescer.clone();
            tokio::spawn(async move {
                coalescer
                    .run(1, || async {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        1
                    })
                    .await
            })
        });
        for call in calls.collect::<Vec<_>>() {
            call.await.unwrap();
        }
        assert_eq!(JOINS.load(Ordering::SeqCst), 3);
        coalescer.run(1, || async { 2 }).await;
        assert_eq!(
            JOINS.load(Ordering::SeqCst),
            3,
            "a later call starts afresh"
        );
    }

    #[tokio::test]
    async fn later_calls_compute_afresh() {
        let coalescer = Coalescer::<u8, u32>::new();
        assert_eq!(coalescer.run(1, || async { 1 }).await, 1);
        assert_eq!(coalescer.run(1, || async { 2 }).await, 2);
    }

    #[tokio::test]
    async fn a_follower_giving_up_does_not_start_a_second_computation() {
        let coalescer = Arc::new(Coalescer::<u8, u32>::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let slow = |runs: Arc<AtomicUsize>| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            7
        };
        let leader = tokio::spawn({
            let (coalescer, runs) = (coalescer.clone(), runs.clone());
            async move { coalescer.run(1, || slow(runs)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let impatient = coalescer.run(1, || slow(runs.clone()));
        assert!(
            tokio::time::timeout(Duration::from_millis(10), impatient)
                .await
                .is_err()
        );
        assert_eq!(coalescer.in_flight(), 1, "the leader's entry must survive");
        assert_eq!(coalescer.run(1, || slow(runs.clone())).await, 7);
        assert_eq!(leader.await.unwrap(), 7);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(coalescer.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_caller_leaves_no_entry() {
        let coalescer = Coalescer::<u8, u32>::new();
        let slow = coalescer.run(1, std::future::pending);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), slow)
                .await
                .is_err()
        );
        assert_eq!(coalescer.in_flight(), 0);
    }
}
