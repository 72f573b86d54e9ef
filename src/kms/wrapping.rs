//! Cluster mode's Encrypt: the DEK wrapped in software for every recipient,
//! on a thread of its own whose stack is scrubbed after every envelope.
//!
//! Wrapping derives, per recipient, an ECDH seed and two keys (KDFa
//! "STORAGE" and "INTEGRITY") that each open the DEK. Those buffers are
//! wiped, and so is the AES state, but the SHA-256 and HMAC states that
//! compute them cannot be wiped through `sha2`'s API and stay in stack
//! frames. On a gRPC worker thread nothing ever overwrites those frames (an
//! outside review found the keys of the last envelopes in `sceau-grpc`
//! stacks and recovered the DEK from them); here the frames are zeroed as
//! soon as the envelope is made.
#![forbid(unsafe_code)]

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use sceau_format::members::Membership;
use sceau_format::wrapped::{ClusterEnvelopeError, ToSign};
use sceau_tpm::secret::Dek;

/// Encrypts waiting to be wrapped. One envelope takes about a millisecond,
/// so a full queue drains well within any request deadline.
const QUEUE_DEPTH: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    #[error("busy: {QUEUE_DEPTH} Encrypts are already waiting to be wrapped")]
    Busy,
    #[error("the wrapping thread has stopped")]
    Stopped,
    #[error(transparent)]
    Envelope(#[from] ClusterEnvelopeError),
}

struct Job {
    dek: Dek,
    reply: oneshot::Sender<Result<ToSign, ClusterEnvelopeError>>,
}

/// The async side: hands DEKs to the wrapping thread. The thread ends when
/// this is dropped.
pub struct WrappingThread {
    jobs: mpsc::Sender<Job>,
}

impl WrappingThread {
    /// Starts the thread. In the daemon it starts inside the sandbox, so it
    /// inherits Landlock and seccomp like every other thread.
    pub fn spawn(membership: Arc<Membership>) -> std::io::Result<Self> {
        let (jobs, mut queue) = mpsc::channel::<Job>(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name("sceau-wrap".into())
            .spawn(move || {
                while let Some(job) = queue.blocking_recv() {
                    wrap(&membership, job);
                    sceau_tpm::secret::scrub_stack();
                }
            })?;
        Ok(Self { jobs })
    }

    /// The envelope of `dek` for every member and the recovery key, up to
    /// the signature this node's TPM adds.
    pub async fn seal(&self, dek: Dek) -> Result<ToSign, WrapError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .try_send(Job { dek, reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => WrapError::Busy,
                mpsc::error::TrySendError::Closed(_) => WrapError::Stopped,
            })?;
        Ok(answer.await.map_err(|_| WrapError::Stopped)??)
    }
}

/// One job, in a frame of its own below the loop, so that the scrub after it
/// covers everything it left; the DEK's page is wiped when `job` drops here.
#[inline(never)]
fn wrap(membership: &Membership, job: Job) {
    let Job { dek, reply } = job;
    let result = membership.seal(dek.expose());
    drop(dek);
    let _ = reply.send(result);
}
