//! The one thread that talks to the TPM.
//!
//! A TPM runs one command at a time and an ESAPI context is not reentrant,
//! so a single thread owns the [`Tpm`] and takes jobs from a bounded queue.
//! Every job carries a deadline: a caller never waits past it, and the worker
//! skips jobs whose caller has already given up. Retryable TPM answers are
//! retried with a bounded backoff; a dead connection is reopened once, and if
//! that fails the worker stops and reports its death so the process can exit
//! and let its supervisor restart it.
//!
//! The worker reports to the [`Observer`] in its [`TpmConfig`]: the queue
//! depth, retries, reopens and deadline misses, and the time the TPM thread
//! spent on each job (on the caller's task, so that the daemon can add it to
//! the call's log line). Each TPM command's own time is reported where it is
//! sent (`device`).
//!
//! Each request is a type of its own ([`Request`]) with its own reply type,
//! so a caller gets back exactly what it asked for. [`SealingTpm`] is what
//! the daemon's modes need from a TPM; the worker implements it directly, and
//! a fake stands behind it in unit tests.
#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::device::{Generations, Tpm, TpmConfig};
use super::fault::{Fault, Recovery, TpmError};
use super::health::HealthRecord;
use super::kek::KekError;
use super::observe::Observer;
use super::sealed::{ImportableObject, LoadableObject};
use crate::secret::Dek;
use sceau_format::sealed::SealedBlobs;
use sceau_format::signing_key::SIGNATURE_LEN;

/// The apiserver's default KMS call timeout is 3 s; answering within 2.5 s
/// leaves it room to receive the answer.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(2500);
/// Requests waiting for the TPM. An apiserver cold start sends about one
/// Decrypt per stored seed; more than this many waiting means the TPM cannot
/// serve them within their deadlines anyway.
pub const QUEUE_DEPTH: usize = 64;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(10);

/// One kind of job for the TPM thread and the reply it gives.
///
/// `run` may be called more than once for one job (after a retryable answer,
/// a new session or a reopened TPM), so it borrows the request.
trait Request: Send + 'static {
    type Reply: Send + 'static;
    fn run(&self, tpm: &mut Tpm) -> Result<Self::Reply, TpmError>;
}

/// TPM2_Create of a sealed-data object holding the DEK, under a KEK
/// generation.
struct Seal(Dek, u32);

impl Request for Seal {
    type Reply = SealedBlobs;
    fn run(&self, tpm: &mut Tpm) -> Result<SealedBlobs, TpmError> {
        tpm.seal(&self.0, self.1)
    }
}

/// Load, Unseal and Flush of a version 1 envelope's object, under a KEK
/// generation.
struct Unseal(LoadableObject, u32);

impl Request for Unseal {
    type Reply = Dek;
    fn run(&self, tpm: &mut Tpm) -> Result<Dek, TpmError> {
        tpm.unseal(&self.0, self.1)
    }
}

/// The generations the TPM holds and its epoch counter, read again: a
/// reload's TPM part.
struct ReadGenerations;

impl Request for ReadGenerations {
    type Reply = Generations;
    fn run(&self, tpm: &mut Tpm) -> Result<Generations, TpmError> {
        tpm.read_generations().map_err(kek_fault)
    }
}

/// A new epoch from the TPM's counter, for a key_id a reload allocates.
struct NextEpoch;

impl Request for NextEpoch {
    type Reply = u64;
    fn run(&self, tpm: &mut Tpm) -> Result<u64, TpmError> {
        tpm.next_epoch().map_err(kek_fault)
    }
}

/// A generation error on the TPM thread: its TPM error as it is, any other
/// as a failure said in its own words.
fn kek_fault(error: KekError) -> TpmError {
    match error {
        KekError::Tpm(error) => error,
        other => TpmError::refused(other.to_string(), Fault::Failure),
    }
}

/// Import, Load, Unseal and Flush of a cluster envelope's entry, under
/// the KEK generation it was wrapped for.
struct UnsealImported(ImportableObject, u32);

impl Request for UnsealImported {
    type Reply = Dek;
    fn run(&self, tpm: &mut Tpm) -> Result<Dek, TpmError> {
        tpm.unseal_imported(&self.0, self.1)
    }
}

/// TPM2_Sign of a cluster envelope's digest.
struct SignEnvelope([u8; 32]);

impl Request for SignEnvelope {
    type Reply = [u8; SIGNATURE_LEN];
    fn run(&self, tpm: &mut Tpm) -> Result<[u8; SIGNATURE_LEN], TpmError> {
        tpm.sign_envelope(&self.0)
    }
}

/// A command that proves the TPM answers (ReadPublic of the SRK).
struct Probe;

impl Request for Probe {
    type Reply = ();
    fn run(&self, tpm: &mut Tpm) -> Result<(), TpmError> {
        tpm.probe()
    }
}

/// A request on its way through the queue, with its deadline and where its
/// reply goes.
struct Job<R: Request> {
    request: R,
    deadline: Instant,
    reply: oneshot::Sender<Answer<R::Reply>>,
}

/// A job's result and how long the TPM thread worked on it.
struct Answer<T> {
    result: Result<T, Fault>,
    tpm_time: Duration,
}

/// What the queue holds: any [`Job`], served or abandoned by the thread.
trait Queued: Send {
    /// Runs the job on the TPM thread and sends its answer.
    fn serve(self: Box<Self>, worker: &mut Worker);
    /// Answers the job with `fault` without running it.
    fn abandon(self: Box<Self>, fault: Fault);
}

impl<R: Request> Queued for Job<R> {
    fn serve(self: Box<Self>, worker: &mut Worker) {
        if self.reply.is_closed() || Instant::now() >= self.deadline {
            log::debug!("skipping a job whose caller gave up or whose deadline passed");
            return;
        }
        let started = Instant::now();
        let result = worker.execute(&self.request, self.deadline);
        let tpm_time = started.elapsed();
        worker
            .health
            .record(result.as_ref().map(|_| ()).map_err(|f| *f));
        // A caller that gave up drops the answer here, DEK included.
        let _ = self.reply.send(Answer { result, tpm_time });
    }

    fn abandon(self: Box<Self>, fault: Fault) {
        let _ = self.reply.send(Answer {
            result: Err(fault),
            tpm_time: Duration::ZERO,
        });
    }
}

/// The TPM calls the daemon's modes make, each answered by the TPM thread:
/// [`TpmWorker`] in the daemon, a fake in unit tests, fuzz targets and the
/// bench, so that the modes' own checks run against a fake too.
pub trait SealingTpm: Send + Sync + 'static {
    /// Create of a sealed-data object under KEK `generation` (0: the SRK).
    fn seal(
        &self,
        dek: Dek,
        generation: u32,
    ) -> impl Future<Output = Result<SealedBlobs, Fault>> + Send;
    /// Load and Unseal of a version 1 envelope's object under KEK
    /// `generation`.
    fn unseal(
        &self,
        object: LoadableObject,
        generation: u32,
    ) -> impl Future<Output = Result<Dek, Fault>> + Send;
    /// The generations the TPM holds and its epoch counter, read again.
    fn read_generations(&self) -> impl Future<Output = Result<Generations, Fault>> + Send;
    /// A new epoch from the TPM's counter.
    fn next_epoch(&self) -> impl Future<Output = Result<u64, Fault>> + Send;
    /// Import, Load and Unseal of a cluster envelope's entry under KEK
    /// `generation`.
    fn unseal_imported(
        &self,
        object: ImportableObject,
        generation: u32,
    ) -> impl Future<Output = Result<Dek, Fault>> + Send;
    /// Sign of a cluster envelope's digest with the envelope signing key:
    /// `r ‖ s`, low s.
    fn sign_envelope(
        &self,
        digest: [u8; 32],
    ) -> impl Future<Output = Result<[u8; SIGNATURE_LEN], Fault>> + Send;
    /// The TPM's health, from the last answer if it is recent, else from a
    /// probe shared by every concurrent caller.
    fn health(&self) -> impl Future<Output = Result<(), Fault>> + Send;
}

/// The async side of the worker: cheap to clone, one per caller.
#[derive(Clone)]
pub struct TpmWorker {
    jobs: mpsc::Sender<Box<dyn Queued>>,
    deadline: Duration,
    health: Arc<HealthRecord>,
    observer: Observer,
}

/// Resolves when the worker has stopped because the TPM is gone for good, or
/// because its thread panicked (which drops the notice unsent). A normal stop
/// happens only after the server is gone, when no one waits on this any more.
pub struct WorkerDeath(oneshot::Receiver<()>);

impl WorkerDeath {
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

impl TpmWorker {
    /// Moves an open TPM onto its own thread. Call this after the sandbox is
    /// in place, so that the thread inherits it.
    pub fn spawn(
        tpm: Tpm,
        config: TpmConfig,
        deadline: Duration,
    ) -> std::io::Result<(TpmWorker, WorkerDeath, JoinHandle<()>)> {
        let (jobs, queue) = mpsc::channel(QUEUE_DEPTH);
        let (death_notice, death) = oneshot::channel();
        let observer = config.observer.clone();
        let health = Arc::new(HealthRecord::new(observer.clone()));
        let srk_name = tpm.srk().name.value().to_vec();
        let thread = Worker {
            tpm: Some(tpm),
            config,
            srk_name,
            queue,
            health: health.clone(),
            observer: observer.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("sceau-tpm".into())
            .spawn(move || thread.run(death_notice))?;
        let worker = TpmWorker {
            jobs,
            deadline,
            health,
            observer,
        };
        Ok((worker, WorkerDeath(death), handle))
    }

    async fn submit<R: Request>(&self, request: R) -> Result<R::Reply, Fault> {
        let deadline = Instant::now() + self.deadline;
        let tokio_deadline = tokio::time::Instant::from_std(deadline);
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Queued> = Box::new(Job {
            request,
            deadline,
            reply,
        });
        // Counted before it is sent, so that the worker's decrement never
        // comes first; taken back unless the job entered the queue (also
        // when this call is dropped while it waits for room).
        let counted = QueueCount::counted(&self.observer);
        match tokio::time::timeout_at(tokio_deadline, self.jobs.send(job)).await {
            Err(_) => {
                self.observer.deadline_missed();
                return Err(Fault::Busy);
            }
            Ok(Err(_)) => return Err(Fault::Unreachable),
            Ok(Ok(())) => counted.handed_to_the_worker(),
        }
        match tokio::time::timeout_at(tokio_deadline, answer).await {
            Err(_) => {
                self.observer.deadline_missed();
                Err(Fault::Timeout)
            }
            Ok(Err(_)) => Err(Fault::Unreachable),
            Ok(Ok(answer)) => {
                self.observer.answered(answer.tpm_time);
                answer.result
            }
        }
    }
}

impl SealingTpm for TpmWorker {
    async fn seal(&self, dek: Dek, generation: u32) -> Result<SealedBlobs, Fault> {
        self.submit(Seal(dek, generation)).await
    }

    async fn unseal(&self, object: LoadableObject, generation: u32) -> Result<Dek, Fault> {
        self.submit(Unseal(object, generation)).await
    }

    async fn read_generations(&self) -> Result<Generations, Fault> {
        self.submit(ReadGenerations).await
    }

    async fn next_epoch(&self) -> Result<u64, Fault> {
        self.submit(NextEpoch).await
    }

    async fn unseal_imported(
        &self,
        object: ImportableObject,
        generation: u32,
    ) -> Result<Dek, Fault> {
        self.submit(UnsealImported(object, generation)).await
    }

    async fn sign_envelope(&self, digest: [u8; 32]) -> Result<[u8; SIGNATURE_LEN], Fault> {
        self.submit(SignEnvelope(digest)).await
    }

    async fn health(&self) -> Result<(), Fault> {
        if let Some(verdict) = self.health.fresh() {
            return verdict;
        }
        let _probe = self.health.probing.lock().await;
        if let Some(verdict) = self.health.fresh() {
            return verdict;
        }
        let verdict = self.submit(Probe).await;
        self.health.record(verdict);
        verdict
    }
}

/// One job counted in the queue depth on its way into the queue:
/// uncounted on drop, unless the worker took over the count.
struct QueueCount<'a> {
    observer: &'a Observer,
    in_queue: bool,
}

impl<'a> QueueCount<'a> {
    fn counted(observer: &'a Observer) -> Self {
        observer.queued();
        Self {
            observer,
            in_queue: false,
        }
    }

    /// The job is in the queue; the worker uncounts it when it takes it.
    fn handed_to_the_worker(mut self) {
        self.in_queue = true;
    }
}

impl Drop for QueueCount<'_> {
    fn drop(&mut self) {
        if !self.in_queue {
            self.observer.dequeued();
        }
    }
}

/// The thread side: owns the TPM while it is usable.
struct Worker {
    /// `None` once the TPM is gone for good.
    tpm: Option<Tpm>,
    config: TpmConfig,
    /// The SRK Name at start: a reopened TPM must give the same key.
    srk_name: Vec<u8>,
    queue: mpsc::Receiver<Box<dyn Queued>>,
    health: Arc<HealthRecord>,
    observer: Observer,
}

impl Worker {
    fn run(mut self, death_notice: oneshot::Sender<()>) {
        while let Some(job) = self.queue.blocking_recv() {
            self.observer.dequeued();
            job.serve(&mut self);
            // tss-esapi moves TPM2B structures holding the DEK (Create's
            // input, Unseal's output) through stack frames nothing wipes.
            crate::secret::scrub_stack();
            if self.tpm.is_none() {
                break;
            }
        }
        self.queue.close();
        while let Ok(job) = self.queue.try_recv() {
            self.observer.dequeued();
            job.abandon(Fault::Unreachable);
        }
        if self.tpm.is_none() {
            self.observer.health(false);
            log::error!("the TPM is unreachable and could not be reopened; stopping");
            let _ = death_notice.send(());
        }
    }

    fn execute<R: Request>(&mut self, request: &R, deadline: Instant) -> Result<R::Reply, Fault> {
        let mut retry_delay = FIRST_RETRY_DELAY;
        let mut reopened = false;
        let mut new_session = false;
        loop {
            let tpm = self.tpm.as_mut().ok_or(Fault::Unreachable)?;
            let error = match request.run(tpm) {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            match error.recovery() {
                Recovery::RetryLater if Instant::now() + retry_delay < deadline => {
                    log::debug!("{error}; retrying in {retry_delay:?}");
                    self.observer.retry();
                    std::thread::sleep(retry_delay);
                    retry_delay *= 2;
                }
                Recovery::RetryLater => {
                    log::warn!("{error}; no time left to retry");
                    self.observer.deadline_missed();
                    return Err(Fault::Busy);
                }
                Recovery::NewSession if !new_session => {
                    log::warn!("{error}; starting a new salted session");
                    self.observer.retry();
                    tpm.discard_session();
                    new_session = true;
                }
                Recovery::Reconnect if !reopened => {
                    log::warn!("{error}; reopening the TPM");
                    self.observer.reopen();
                    reopened = true;
                    self.reopen()?;
                }
                Recovery::NewSession | Recovery::Reconnect => {
                    log::error!("{error}; the TPM failed again after recovery");
                    return Err(Fault::Failure);
                }
                Recovery::Report(fault) => {
                    log_reported(&error, fault);
                    return Err(fault);
                }
            }
        }
    }

    /// Replaces a dead context. On failure the worker has no TPM left.
    fn reopen(&mut self) -> Result<(), Fault> {
        drop(self.tpm.take());
        let tpm = Tpm::open(&self.config).map_err(|e| {
            log::error!("reopening the TPM failed: {e}");
            Fault::Unreachable
        })?;
        if tpm.srk().name.value() != self.srk_name {
            log::error!(
                "the reopened TPM has a different SRK (key_id {}): it was cleared or replaced",
                tpm.srk().key_id()
            );
            return Err(Fault::Unreachable);
        }
        log::info!("TPM reopened; SRK unchanged");
        self.tpm = Some(tpm);
        Ok(())
    }
}

fn log_reported(error: &TpmError, fault: Fault) {
    match fault {
        // The client's envelope, or the boot state (whose change is logged
        // once, as a warning, when it happens): not the TPM's health.
        Fault::EnvelopeRejected | Fault::PolicyMismatch => {
            log::info!("{error}; reported as {fault}")
        }
        _ => log::warn!("{error}; reported as {fault}"),
    }
}
