//! Scrapes and KMS calls run apart: the endpoint answers on a thread of its
//! own, at the `SCHED_IDLE` policy, with its own event loop
//! (`server::metrics`), so a flood of scrapes takes only CPU time the KMS's
//! threads leave idle and never queues behind or ahead of a KMS call.
//!
//! This checks that mechanism in the running process, through /proc, rather
//! than timing Encrypts under a flood: on a shared 2-core machine the
//! flooders' own pull on the CPU moved such a ratio between 1.06 and 1.34
//! for the same build, so a timed test failed on load it could not control.
//! The latency itself is measured by `benches/scrape_flood.rs`, with its
//! figures in docs/performance.md.
//!
//! Shown to fail: with `run_this_thread_when_idle` not called in
//! `server::metrics::start`, the policy check failed ("the metrics thread
//! runs under policy 0"). The endpoint as it was before it had a thread
//! (on the KMS's own event loop) fails the first check: no thread is named
//! `sceau-metrics`.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{SCRAPE, exchange, free_port};
use crate::harness::footprint::{Thread, threads_of};
use crate::harness::launch::Launched;

/// The scheduling policy `sched_setscheduler(2)` calls `SCHED_IDLE`.
const SCHED_IDLE: u32 = 5;
/// The name `server::metrics::start` gives its thread.
const METRICS_THREAD: &str = "sceau-metrics";
/// Clients scraping at once.
const SCRAPERS: usize = 3;
/// The flood lasts at least this long and until [`MIN_SCRAPES`] answers,
/// bounded by [`FLOOD_LIMIT`] (a `SCHED_IDLE` thread is slow to answer on
/// a machine whose cores other tests keep busy, which is its purpose).
const FLOOD_TIME: Duration = Duration::from_secs(2);
const MIN_SCRAPES: usize = 300;
const FLOOD_LIMIT: Duration = Duration::from_secs(60);

/// Scrapes `port` from [`SCRAPERS`] threads until the flood has lasted
/// [`FLOOD_TIME`] and made [`MIN_SCRAPES`] answers (or [`FLOOD_LIMIT`]);
/// returns how many answers had the metrics.
fn flood(port: u16) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|_| {
            let (stop, answered) = (stop.clone(), answered.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
                        continue;
                    };
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let answer = exchange(stream, SCRAPE);
                    if String::from_utf8_lossy(&answer).contains("sceau_calls_total") {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < FLOOD_LIMIT
        && (started.elapsed() < FLOOD_TIME || answered.load(Ordering::Relaxed) < MIN_SCRAPES)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for scraper in scrapers {
        scraper.join().unwrap();
    }
    answered.load(Ordering::Relaxed)
}

/// Scrapes are answered by one thread of their own, at `SCHED_IDLE`, and
/// the CPU time a flood of them costs falls on that thread: at most a tenth
/// of it on all the KMS's threads together (start-up is over, no KMS call
/// is made, so they have nothing else to do).
#[tokio::test(flavor = "multi_thread")]
async fn scrapes_run_only_on_an_idle_thread_of_their_own() {
    let port = free_port();
    let launched = Launched::start("metrics-idle", &[format!("metrics=tcp:{port}")], &[]).await;
    let before = threads_of(launched.pid()).unwrap();
    let metrics: Vec<&Thread> = before.iter().filter(|t| t.name == METRICS_THREAD).collect();
    assert_eq!(
        metrics.len(),
        1,
        "one {METRICS_THREAD} thread expected: {before:?}"
    );
    let metrics_id = metrics[0].id;
    assert_eq!(
        metrics[0].policy, SCHED_IDLE,
        "the metrics thread runs under policy {}",
        metrics[0].policy
    );

    let scrapes = flood(port);
    let after = threads_of(launched.pid()).unwrap();
    let spent = |id: u32| {
        let at_start = before
            .iter()
            .find(|t| t.id == id)
            .map_or(Duration::ZERO, |t| t.cpu);
        let at_end = after
            .iter()
            .find(|t| t.id == id)
            .map_or(at_start, |t| t.cpu);
        at_end.saturating_sub(at_start)
    };
    let on_metrics = spent(metrics_id);
    let elsewhere: Duration = after
        .iter()
        .filter(|t| t.id != metrics_id)
        .map(|t| spent(t.id))
        .sum();
    eprintln!(
        "{scrapes} scrapes: {on_metrics:?} on {METRICS_THREAD}, {elsewhere:?} on the other threads"
    );
    assert!(scrapes >= MIN_SCRAPES, "only {scrapes} scrapes answered");
    assert!(
        !on_metrics.is_zero() && elsewhere * 10 <= on_metrics,
        "the scrapes cost {on_metrics:?} on {METRICS_THREAD} and {elsewhere:?} on the KMS's threads: {after:?}"
    );
}
