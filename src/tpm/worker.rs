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
//! The worker reports to `metrics`: the queue depth, retries, reopens and
//! deadline misses, and, to each call's record, the time the TPM thread
//! spent on its job (`metrics::call::add_tpm_time`). Each TPM command's own
//! time is recorded where it is sent (`device`).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::device::{Tpm, TpmConfig};
use super::fault::{Fault, Recovery, TpmError};
use super::health::HealthRecord;
use super::sealed::{ImportableObject, LoadableObject};
use super::srk::KeyId;
use crate::metrics::{self, METRICS};
use crate::secret::Dek;
use sceau_format::sealed::SealedBlobs;

/// The apiserver's default KMS call timeout is 3 s; answering within 2.5 s
/// leaves it room to receive the answer.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(2500);
/// Requests waiting for the TPM. An apiserver cold start sends about one
/// Decrypt per stored seed; more than this many waiting means the TPM cannot
/// serve them within their deadlines anyway.
pub const QUEUE_DEPTH: usize = 64;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(10);

enum Request {
    Seal(Dek),
    Unseal(LoadableObject),
    UnsealImported(ImportableObject),
    Probe,
}

enum Outcome {
    Sealed(SealedBlobs),
    Unsealed(Dek),
    Alive,
}

struct Job {
    request: Request,
    deadline: Instant,
    reply: oneshot::Sender<Answer>,
}

/// A job's result and how long the TPM thread worked on it.
struct Answer {
    result: Result<Outcome, Fault>,
    tpm_time: Duration,
}

impl Answer {
    fn without_work(fault: Fault) -> Self {
        Self {
            result: Err(fault),
            tpm_time: Duration::ZERO,
        }
    }
}

/// The async side of the worker: cheap to clone, one per caller.
#[derive(Clone)]
pub struct TpmWorker {
    jobs: mpsc::Sender<Job>,
    key_id: KeyId,
    deadline: Duration,
    health: Arc<HealthRecord>,
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
        let health = Arc::new(HealthRecord::default());
        let srk_name = tpm.srk().name.value().to_vec();
        let key_id = tpm.srk().key_id();
        let thread = Worker {
            tpm: Some(tpm),
            config,
            srk_name,
            queue,
            health: health.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("sceau-tpm".into())
            .spawn(move || thread.run(death_notice))?;
        let worker = TpmWorker {
            jobs,
            key_id,
            deadline,
            health,
        };
        Ok((worker, WorkerDeath(death), handle))
    }

    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    pub async fn seal(&self, dek: Dek) -> Result<SealedBlobs, Fault> {
        match self.submit(Request::Seal(dek)).await? {
            Outcome::Sealed(blobs) => Ok(blobs),
            _ => unreachable!("a Seal job answers Sealed"),
        }
    }

    pub async fn unseal(&self, object: LoadableObject) -> Result<Dek, Fault> {
        match self.submit(Request::Unseal(object)).await? {
            Outcome::Unsealed(dek) => Ok(dek),
            _ => unreachable!("an Unseal job answers Unsealed"),
        }
    }

    pub async fn unseal_imported(&self, object: ImportableObject) -> Result<Dek, Fault> {
        match self.submit(Request::UnsealImported(object)).await? {
            Outcome::Unsealed(dek) => Ok(dek),
            _ => unreachable!("an UnsealImported job answers Unsealed"),
        }
    }

    /// The TPM's health, from the last answer if it is recent, else from a
    /// probe shared by every concurrent caller.
    pub async fn health(&self) -> Result<(), Fault> {
        if let Some(verdict) = self.health.fresh() {
            return verdict;
        }
        let _probe = self.health.probing.lock().await;
        if let Some(verdict) = self.health.fresh() {
            return verdict;
        }
        let verdict = self.submit(Request::Probe).await.map(|_| ());
        self.health.record(verdict);
        verdict
    }

    async fn submit(&self, request: Request) -> Result<Outcome, Fault> {
        let deadline = Instant::now() + self.deadline;
        let tokio_deadline = tokio::time::Instant::from_std(deadline);
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request,
            deadline,
            reply,
        };
        // Counted before it is sent, so that the worker's decrement never
        // comes first; taken back unless the job entered the queue (also
        // when this call is dropped while it waits for room).
        let counted = QueueCount::counted();
        match tokio::time::timeout_at(tokio_deadline, self.jobs.send(job)).await {
            Err(_) => {
                METRICS.tpm_deadline_miss();
                return Err(Fault::Busy);
            }
            Ok(Err(_)) => return Err(Fault::Unreachable),
            Ok(Ok(())) => counted.handed_to_the_worker(),
        }
        match tokio::time::timeout_at(tokio_deadline, answer).await {
            Err(_) => {
                METRICS.tpm_deadline_miss();
                Err(Fault::Timeout)
            }
            Ok(Err(_)) => Err(Fault::Unreachable),
            Ok(Ok(answer)) => {
                metrics::call::add_tpm_time(answer.tpm_time);
                answer.result
            }
        }
    }
}

/// One job counted in `sceau_tpm_queue_depth` on its way into the queue:
/// uncounted on drop, unless the worker took over the count.
struct QueueCount {
    in_queue: bool,
}

impl QueueCount {
    fn counted() -> Self {
        METRICS.tpm_job_queued();
        Self { in_queue: false }
    }

    /// The job is in the queue; the worker uncounts it when it takes it.
    fn handed_to_the_worker(mut self) {
        self.in_queue = true;
    }
}

impl Drop for QueueCount {
    fn drop(&mut self) {
        if !self.in_queue {
            METRICS.tpm_job_dequeued();
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
    queue: mpsc::Receiver<Job>,
    health: Arc<HealthRecord>,
}

impl Worker {
    fn run(mut self, death_notice: oneshot::Sender<()>) {
        while let Some(job) = self.queue.blocking_recv() {
            METRICS.tpm_job_dequeued();
            self.serve(job);
            // tss-esapi moves TPM2B structures holding the DEK (Create's
            // input, Unseal's output) through stack frames nothing wipes.
            crate::secret::scrub_stack();
            if self.tpm.is_none() {
                break;
            }
        }
        self.queue.close();
        while let Ok(job) = self.queue.try_recv() {
            METRICS.tpm_job_dequeued();
            let _ = job.reply.send(Answer::without_work(Fault::Unreachable));
        }
        if self.tpm.is_none() {
            METRICS.set_tpm_healthy(false);
            log::error!("the TPM is unreachable and could not be reopened; stopping");
            let _ = death_notice.send(());
        }
    }

    fn serve(&mut self, job: Job) {
        if job.reply.is_closed() || Instant::now() >= job.deadline {
            log::debug!("skipping a job whose caller gave up or whose deadline passed");
            return;
        }
        let started = Instant::now();
        let result = self.execute(&job.request, job.deadline);
        let tpm_time = started.elapsed();
        self.health
            .record(result.as_ref().map(|_| ()).map_err(|f| *f));
        // A caller that gave up drops the answer here, DEK included.
        let _ = job.reply.send(Answer { result, tpm_time });
    }

    fn execute(&mut self, request: &Request, deadline: Instant) -> Result<Outcome, Fault> {
        let mut retry_delay = FIRST_RETRY_DELAY;
        let mut reopened = false;
        let mut new_session = false;
        loop {
            let tpm = self.tpm.as_mut().ok_or(Fault::Unreachable)?;
            let error = match run_once(tpm, request) {
                Ok(outcome) => return Ok(outcome),
                Err(error) => error,
            };
            match error.recovery() {
                Recovery::RetryLater if Instant::now() + retry_delay < deadline => {
                    log::debug!("{error}; retrying in {retry_delay:?}");
                    METRICS.tpm_retry();
                    std::thread::sleep(retry_delay);
                    retry_delay *= 2;
                }
                Recovery::RetryLater => {
                    log::warn!("{error}; no time left to retry");
                    METRICS.tpm_deadline_miss();
                    return Err(Fault::Busy);
                }
                Recovery::NewSession if !new_session => {
                    log::warn!("{error}; starting a new salted session");
                    METRICS.tpm_retry();
                    tpm.discard_session();
                    new_session = true;
                }
                Recovery::Reconnect if !reopened => {
                    log::warn!("{error}; reopening the TPM");
                    METRICS.tpm_reopen();
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

fn run_once(tpm: &mut Tpm, request: &Request) -> Result<Outcome, TpmError> {
    match request {
        Request::Seal(dek) => tpm.seal(dek).map(Outcome::Sealed),
        Request::Unseal(object) => tpm.unseal(object).map(Outcome::Unsealed),
        Request::UnsealImported(object) => tpm.unseal_imported(object).map(Outcome::Unsealed),
        Request::Probe => tpm.probe().map(|()| Outcome::Alive),
    }
}

fn log_reported(error: &TpmError, fault: Fault) {
    match fault {
        Fault::EnvelopeRejected => log::info!("{error}; reported as {fault}"),
        _ => log::warn!("{error}; reported as {fault}"),
    }
}
