//! sceau's metrics: a fixed registry of atomic counters, gauges and
//! histograms, rendered in the Prometheus text exposition format 0.0.4 and
//! served (opt-in) on a second socket that systemd passes
//! (`server::metrics`).
//!
//! Every label value is one of a fixed, small set chosen by sceau (a method
//! it implements, a gRPC code, a TPM command it issues) or a value sceau
//! computed itself (its version, its key_id). No label carries text a client
//! sent: a request's uid or key_id would let any caller grow the registry
//! without bound and write into the scrape (docs/metrics.md). The registry
//! therefore never allocates a series after start, and recording a value is
//! a few relaxed atomic additions, cheap enough to do whether or not a
//! metrics socket was passed.
#![forbid(unsafe_code)]

pub mod call;
mod render;

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use crate::events::{self, Event, Kind};
use sceau_tpm::TpmObserver;
use sceau_tpm::identity::TpmIdentity;

pub use render::{CONTENT_TYPE, render};

/// The process's registry. Everything sceau records goes here; a scrape
/// renders it.
pub static METRICS: Registry = Registry::new();

/// The KMS methods, as the `method` label spells them. `Other` is any path
/// the service does not implement (answered UNIMPLEMENTED): the path itself
/// is client text and never becomes a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Encrypt,
    Decrypt,
    Status,
    Other,
}

impl Method {
    const ALL: [Method; 4] = [
        Method::Encrypt,
        Method::Decrypt,
        Method::Status,
        Method::Other,
    ];

    /// The method a gRPC request path names.
    pub fn from_path(path: &str) -> Self {
        match path {
            "/v2.KeyManagementService/Encrypt" => Method::Encrypt,
            "/v2.KeyManagementService/Decrypt" => Method::Decrypt,
            "/v2.KeyManagementService/Status" => Method::Status,
            _ => Method::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::Encrypt => "Encrypt",
            Method::Decrypt => "Decrypt",
            Method::Status => "Status",
            Method::Other => "other",
        }
    }
}

/// gRPC status codes by number, as grpc-go (and go-grpc-prometheus's
/// `grpc_code` label) spells them.
pub const GRPC_CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// The code number for `Unknown`, used for anything out of range.
const UNKNOWN_CODE: usize = 2;

pub use sceau_format::members::Refusal;
pub use sceau_tpm::TpmCommand;

/// Upper bounds of the latency buckets, in seconds, as rendered in `le`.
/// From half a millisecond (swtpm, a fast firmware TPM) to 60 s, the longest
/// `--request-deadline`; a discrete TPM's Create lands around 10-250 ms.
pub const BUCKETS: [(&str, Duration); 16] = [
    ("0.0005", Duration::from_micros(500)),
    ("0.001", Duration::from_millis(1)),
    ("0.0025", Duration::from_micros(2500)),
    ("0.005", Duration::from_millis(5)),
    ("0.01", Duration::from_millis(10)),
    ("0.025", Duration::from_millis(25)),
    ("0.05", Duration::from_millis(50)),
    ("0.1", Duration::from_millis(100)),
    ("0.25", Duration::from_millis(250)),
    ("0.5", Duration::from_millis(500)),
    ("1", Duration::from_secs(1)),
    ("2.5", Duration::from_millis(2500)),
    ("5", Duration::from_secs(5)),
    ("10", Duration::from_secs(10)),
    ("30", Duration::from_secs(30)),
    ("60", Duration::from_secs(60)),
];

/// A latency histogram with the fixed [`BUCKETS`]. Each slot counts the
/// observations that fell in it alone (the last one: above every bound);
/// rendering accumulates them, so the buckets and the count always agree.
#[derive(Debug)]
pub struct Histogram {
    slots: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub const fn new() -> Self {
        Self {
            slots: [const { AtomicU64::new(0) }; BUCKETS.len() + 1],
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let slot = BUCKETS
            .iter()
            .position(|(_, bound)| elapsed <= *bound)
            .unwrap_or(BUCKETS.len());
        self.slots[slot].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The cumulative bucket counts (the last is `+Inf`, the total count)
    /// and the sum of the observations.
    fn snapshot(&self) -> ([u64; BUCKETS.len() + 1], Duration) {
        let mut cumulative = [0; BUCKETS.len() + 1];
        let mut total = 0;
        for (slot, out) in self.slots.iter().zip(cumulative.iter_mut()) {
            total += slot.load(Ordering::Relaxed);
            *out = total;
        }
        let sum = Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed));
        (cumulative, sum)
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything sceau counts. Fixed arrays indexed by the enums above: no
/// series is ever created at run time.
#[derive(Debug)]
pub struct Registry {
    calls: [[AtomicU64; GRPC_CODES.len()]; Method::ALL.len()],
    call_durations: [Histogram; Method::ALL.len()],
    tpm_commands: [Histogram; TpmCommand::ALL.len()],
    /// Jobs waiting in the TPM thread's queue.
    tpm_queue_depth: AtomicI64,
    tpm_retries: AtomicU64,
    tpm_reopens: AtomicU64,
    tpm_deadline_misses: AtomicU64,
    decrypt_coalesced: AtomicU64,
    /// Cluster envelopes refused before any TPM work, by class word.
    envelopes_refused: [AtomicU64; Refusal::CLASSES.len()],
    tpm_healthy: AtomicBool,
    /// Boot-state binding: 0 without `--policy-key`, 1 while a signed policy
    /// matches the PCRs, 2 while none does.
    boot_policy: AtomicU8,
    key_id: RwLock<String>,
    /// The KEK generation served, when it was made (or first served), in
    /// seconds since the epoch, and how many generations besides the SRK
    /// the TPM holds; `kek_generation_made` 0 until serving.
    kek_generation: AtomicU64,
    kek_generation_made: AtomicU64,
    kek_open_generations: AtomicU64,
    /// The TPM's manufacturer, vendor string and firmware version, read
    /// once at start (`sceau_tpm::identity`).
    tpm_identity: RwLock<Option<TpmIdentity>>,
    /// The CVEs of the vendor advisories the TPM falls under.
    tpm_advisories: RwLock<Vec<String>>,
}

impl Registry {
    pub const fn new() -> Self {
        Self {
            calls: [const { [const { AtomicU64::new(0) }; GRPC_CODES.len()] }; Method::ALL.len()],
            call_durations: [const { Histogram::new() }; Method::ALL.len()],
            tpm_commands: [const { Histogram::new() }; TpmCommand::ALL.len()],
            tpm_queue_depth: AtomicI64::new(0),
            tpm_retries: AtomicU64::new(0),
            tpm_reopens: AtomicU64::new(0),
            tpm_deadline_misses: AtomicU64::new(0),
            decrypt_coalesced: AtomicU64::new(0),
            envelopes_refused: [const { AtomicU64::new(0) }; Refusal::CLASSES.len()],
            // sceau serves only once the TPM has answered at start-up.
            tpm_healthy: AtomicBool::new(true),
            boot_policy: AtomicU8::new(0),
            key_id: RwLock::new(String::new()),
            kek_generation: AtomicU64::new(0),
            kek_generation_made: AtomicU64::new(0),
            kek_open_generations: AtomicU64::new(0),
            tpm_identity: RwLock::new(None),
            tpm_advisories: RwLock::new(Vec::new()),
        }
    }

    /// A completed call: its method, its gRPC code (by number) and how long
    /// it took.
    pub fn call(&self, method: Method, code: i32, elapsed: Duration) {
        let code = usize::try_from(code)
            .ok()
            .filter(|c| *c < GRPC_CODES.len())
            .unwrap_or(UNKNOWN_CODE);
        self.calls[method as usize][code].fetch_add(1, Ordering::Relaxed);
        self.call_durations[method as usize].observe(elapsed);
    }

    pub fn tpm_command(&self, command: TpmCommand, elapsed: Duration) {
        self.tpm_commands[command as usize].observe(elapsed);
    }

    pub fn tpm_job_queued(&self) {
        self.tpm_queue_depth.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tpm_job_dequeued(&self) {
        self.tpm_queue_depth.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn tpm_retry(&self) {
        self.tpm_retries.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tpm_reopen(&self) {
        self.tpm_reopens.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tpm_deadline_miss(&self) {
        self.tpm_deadline_misses.fetch_add(1, Ordering::Relaxed);
    }

    pub fn decrypt_coalesced(&self) {
        self.decrypt_coalesced.fetch_add(1, Ordering::Relaxed);
    }

    pub fn envelope_refused(&self, refusal: &Refusal) {
        self.envelopes_refused[refusal.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Returns whether this changes what was known: unknown or matched to
    /// not matched, or the reverse.
    pub fn set_boot_policy_matched(&self, matched: bool) -> bool {
        let value = if matched { 1 } else { 2 };
        self.boot_policy.swap(value, Ordering::Relaxed) != value
    }

    /// Returns whether the verdict changed.
    pub fn set_tpm_healthy(&self, healthy: bool) -> bool {
        self.tpm_healthy.swap(healthy, Ordering::Relaxed) != healthy
    }

    /// The key_id sceau serves under; set once, when it starts serving.
    /// The key_id Status reports; a reload replaces it.
    pub fn set_key_id(&self, key_id: &str) {
        *self.key_id.write().unwrap_or_else(|e| e.into_inner()) = key_id.to_string();
    }

    /// Who made the TPM and which firmware it runs, for `sceau_tpm_info`.
    pub fn set_tpm_identity(&self, identity: TpmIdentity) {
        *self.tpm_identity.write().unwrap_or_else(|e| e.into_inner()) = Some(identity);
    }

    /// The advisories the TPM falls under, for `sceau_tpm_advisory`.
    pub fn set_tpm_advisories(&self, cves: Vec<String>) {
        *self
            .tpm_advisories
            .write()
            .unwrap_or_else(|e| e.into_inner()) = cves;
    }

    pub fn tpm_advisories(&self) -> Vec<String> {
        self.tpm_advisories
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn tpm_identity(&self) -> Option<TpmIdentity> {
        self.tpm_identity
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The KEK generation served and when it was made (seconds since the
    /// epoch), and the generations the TPM holds besides the SRK.
    pub fn set_kek(&self, generation: u32, made: u64, open: usize) {
        self.kek_generation
            .store(u64::from(generation), Ordering::Relaxed);
        self.kek_generation_made.store(made, Ordering::Relaxed);
        self.set_open_generations(open);
    }

    pub fn set_open_generations(&self, open: usize) {
        self.kek_open_generations
            .store(u64::try_from(open).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl Registry {
    /// The key_id Status reports, empty before serving.
    pub(crate) fn key_id(&self) -> String {
        self.key_id
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The current generation, its age in seconds at `now`, and the open
    /// generations; `None` before serving.
    pub(crate) fn kek(&self, now: u64) -> Option<(u64, u64, u64)> {
        let made = self.kek_generation_made.load(Ordering::Relaxed);
        (made != 0).then(|| {
            (
                self.kek_generation.load(Ordering::Relaxed),
                now.saturating_sub(made),
                self.kek_open_generations.load(Ordering::Relaxed),
            )
        })
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

/// The TPM layer's observer in the daemon: its events go to [`METRICS`],
/// and each job's TPM time to the call's record for its log line.
pub struct TpmMetrics;

impl TpmObserver for TpmMetrics {
    fn command(&self, command: TpmCommand, took: Duration) {
        METRICS.tpm_command(command, took);
    }

    /// Each change of the verdict is a lifecycle event.
    fn health(&self, healthy: bool) {
        if METRICS.set_tpm_healthy(healthy) {
            events::emit(match healthy {
                true => Event::new(Kind::TpmHealthy, "the TPM answers again"),
                false => Event::new(
                    Kind::TpmUnhealthy,
                    "the TPM stopped answering: Status reports unhealthy until it answers",
                ),
            });
        }
    }

    /// A boot that no signed policy matches is a lifecycle event, once per
    /// change.
    fn boot_policy(&self, matched: bool) {
        if METRICS.set_boot_policy_matched(matched) && !matched {
            events::emit(Event::new(
                Kind::PolicyMismatch,
                "no signed boot policy matches this boot: bound DEKs do not open",
            ));
        }
    }

    fn queued(&self) {
        METRICS.tpm_job_queued();
    }

    fn dequeued(&self) {
        METRICS.tpm_job_dequeued();
    }

    fn retry(&self) {
        METRICS.tpm_retry();
    }

    fn reopen(&self) {
        METRICS.tpm_reopen();
    }

    fn deadline_missed(&self) {
        METRICS.tpm_deadline_miss();
    }

    fn answered(&self, tpm_time: Duration) {
        call::add_tpm_time(tpm_time);
    }
}
