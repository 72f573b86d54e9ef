//! What the TPM layer reports about its own work, to whoever watches it.
//!
//! The daemon hands in an [`Observer`] that feeds its metrics registry and
//! each call's log record; the SPIRE agent and one-shot commands hand in
//! [`Observer::none`]. The layer never imports a registry: what it reports is
//! this trait, and what is done with it is the caller's business.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TPM command sceau sends on the request path, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpmCommand {
    Create,
    Load,
    Unseal,
    Import,
    FlushContext,
    ReadPublic,
    StartAuthSession,
    Sign,
    PcrRead,
    PolicyPcr,
    PolicySecret,
    PolicyAuthorize,
    NvReadPublic,
}

impl TpmCommand {
    pub const ALL: [TpmCommand; 13] = [
        TpmCommand::Create,
        TpmCommand::Load,
        TpmCommand::Unseal,
        TpmCommand::Import,
        TpmCommand::FlushContext,
        TpmCommand::ReadPublic,
        TpmCommand::StartAuthSession,
        TpmCommand::Sign,
        TpmCommand::PcrRead,
        TpmCommand::PolicyPcr,
        TpmCommand::PolicySecret,
        TpmCommand::PolicyAuthorize,
        TpmCommand::NvReadPublic,
    ];

    /// The command's name in the TPM 2.0 specification, without `TPM2_`.
    pub fn name(self) -> &'static str {
        match self {
            TpmCommand::Create => "Create",
            TpmCommand::Load => "Load",
            TpmCommand::Unseal => "Unseal",
            TpmCommand::Import => "Import",
            TpmCommand::FlushContext => "FlushContext",
            TpmCommand::ReadPublic => "ReadPublic",
            TpmCommand::StartAuthSession => "StartAuthSession",
            TpmCommand::Sign => "Sign",
            TpmCommand::PcrRead => "PCR_Read",
            TpmCommand::PolicyPcr => "PolicyPCR",
            TpmCommand::PolicySecret => "PolicySecret",
            TpmCommand::PolicyAuthorize => "PolicyAuthorize",
            TpmCommand::NvReadPublic => "NV_ReadPublic",
        }
    }
}

/// The events of the TPM layer. Every method has an empty default, so an
/// observer names only what it records. The TPM thread calls the command,
/// health, retry and reopen events; the async side of the worker calls the
/// queue, deadline and answer events on the caller's task.
pub trait TpmObserver: Send + Sync + 'static {
    /// One TPM command took `took`, answered or not.
    fn command(&self, _command: TpmCommand, _took: Duration) {}
    /// The TPM's health as last seen (any answer, or a probe).
    fn health(&self, _healthy: bool) {}
    /// Whether a signed boot policy matched the PCRs when last read.
    fn boot_policy(&self, _matched: bool) {}
    /// A job entered the TPM thread's queue, or is about to.
    fn queued(&self) {}
    /// A job left the queue (taken, or never entered).
    fn dequeued(&self) {}
    /// A retryable answer was retried, or a new session started.
    fn retry(&self) {}
    /// A dead connection was reopened.
    fn reopen(&self) {}
    /// A job missed its deadline, waiting for room or for its answer.
    fn deadline_missed(&self) {}
    /// A job's answer came back to its caller, with the time the TPM thread
    /// spent on it (called on the caller's task).
    fn answered(&self, _tpm_time: Duration) {}
}

/// A shared observer; cloning it shares the same one.
#[derive(Clone)]
pub struct Observer(Arc<dyn TpmObserver>);

impl Observer {
    pub fn new(observer: impl TpmObserver) -> Self {
        Self(Arc::new(observer))
    }

    /// An observer that records nothing.
    pub fn none() -> Self {
        struct Unobserved;
        impl TpmObserver for Unobserved {}
        Self::new(Unobserved)
    }

    /// Runs one TPM command and reports its time.
    pub fn timed<T>(&self, command: TpmCommand, run: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = run();
        self.0.command(command, started.elapsed());
        result
    }
}

impl std::ops::Deref for Observer {
    type Target = dyn TpmObserver;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl Default for Observer {
    fn default() -> Self {
        Self::none()
    }
}
