//! One open TPM: the ESAPI context, the SRK and the salted session, and the
//! command sequences sceau runs on them. Only the worker thread holds this.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::constants::{CapabilityType, StartupType};
use tss_esapi::handles::{ObjectHandle, SessionHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{
    CapabilityData, MaxBuffer, Private, Public, SensitiveData, SymmetricDefinitionObject,
};

use super::fault::TpmError;
use super::sealed::{ImportableObject, LoadableObject, blobs_from_created, sealed_template};
use super::session::{ParameterEncryption, start_salted};
use super::srk::{Srk, SrkError};
use super::tcti::Tcti;
use crate::hooks::{self, Protection};
use crate::metrics::{TpmCommand, time_tpm_command as timed};
use crate::secret::Dek;
use sceau_format::sealed::SealedBlobs;

/// Everything needed to (re)open the TPM.
#[derive(Debug, Clone)]
pub struct TpmConfig {
    pub tcti: Tcti,
    /// A persistent handle holding the same key as the SRK template.
    pub srk_handle: Option<u32>,
    pub parameter_encryption: ParameterEncryption,
}

/// TPM_HT_TRANSIENT and TPM_HT_LOADED_SESSION: the first handle of each.
const FIRST_TRANSIENT_HANDLE: u32 = 0x8000_0000;
const FIRST_LOADED_SESSION_HANDLE: u32 = 0x0200_0000;
/// Bytes of zeros the scrub command carries: its command (header, TPM2B size,
/// data) covers the buffer offsets where Unseal's largest answer (header,
/// parameter size, TPM2B size, 128-byte DEK) lay.
const SCRUB_LEN: usize = 160;
/// More than any TPM holds at once (the PC Client minimum is 3).
const MAX_HANDLES: u32 = 64;

pub struct Tpm {
    ctx: Context,
    srk: Srk,
    session: Option<AuthSession>,
    parameter_encryption: ParameterEncryption,
}

impl Tpm {
    /// Opens the TCTI, clears what a crashed predecessor left loaded,
    /// recreates the SRK and starts the salted session, so that the first
    /// request pays for none of it (and OpenSSL is initialised before the
    /// sandbox closes the filesystem).
    pub fn open(config: &TpmConfig) -> Result<Self, SrkError> {
        let mut ctx =
            Context::new(config.tcti.name_conf()).map_err(|e| TpmError::new("Initialize", e))?;
        ensure_started(&mut ctx)?;
        flush_leftovers(&mut ctx)?;
        let srk = Srk::recreate(&mut ctx, config.srk_handle)?;
        let mut tpm = Self {
            ctx,
            srk,
            session: None,
            parameter_encryption: config.parameter_encryption,
        };
        tpm.dek_session()?;
        Ok(tpm)
    }

    pub fn srk(&self) -> &Srk {
        &self.srk
    }

    /// The context and SRK for one-off commands outside the request path
    /// (`sceau enroll respond`); the serving daemon never calls this.
    pub fn context_and_srk(&mut self) -> (&mut Context, &Srk) {
        (&mut self.ctx, &self.srk)
    }

    /// TPM2_Create of a sealed-data object holding `dek`, under the SRK.
    pub fn seal(&mut self, dek: &Dek) -> Result<SealedBlobs, TpmError> {
        let template = sealed_template().map_err(|e| TpmError::new("sealed template", e))?;
        let data = SensitiveData::try_from(dek.expose().to_vec())
            .map_err(|e| TpmError::new("sealed data", e))?;
        let session = self.dek_session()?;
        let parent = self.srk.handle;
        let created = timed(TpmCommand::Create, || {
            self.ctx.execute_with_session(Some(session), |c| {
                c.create(parent, template, None, Some(data), None, None)
            })
        })
        .map_err(|e| TpmError::new("Create", e))?;
        let blobs = blobs_from_created(created.out_public.clone(), &created.out_private)
            .map_err(|e| TpmError::new("marshal sealed object", e))?;
        if hooks::enabled(Protection::TssInputScrub) {
            self.load_and_flush(created.out_private, created.out_public)?;
        }
        Ok(blobs)
    }

    /// Loads the new object once and flushes it. This proves the envelope
    /// opens before it is handed out, and it overwrites tpm2-tss's stored
    /// copy of Create's input (kept in the context, in the clear, for a
    /// possible resubmission) with Load's, which holds no secret.
    fn load_and_flush(&mut self, private: Private, public: Public) -> Result<(), TpmError> {
        let parent = self.srk.handle;
        let loaded = timed(TpmCommand::Load, || {
            self.ctx
                .execute_with_session(Some(AuthSession::Password), |c| {
                    c.load(parent, private, public)
                })
        })
        .map_err(|e| TpmError::new("Load of the new object", e))?;
        timed(TpmCommand::FlushContext, || {
            self.ctx.flush_context(loaded.into())
        })
        .map_err(|e| TpmError::new("FlushContext", e))
    }

    /// Load, Unseal and FlushContext. The loaded object is flushed on every
    /// path, because a TPM without a resource manager holds only three.
    pub fn unseal(&mut self, object: &LoadableObject) -> Result<Dek, TpmError> {
        let parent = self.srk.handle;
        let loaded = timed(TpmCommand::Load, || {
            self.ctx
                .execute_with_session(Some(AuthSession::Password), |c| {
                    c.load(parent, object.private.clone(), object.public.clone())
                })
        })
        .map_err(TpmError::loading_client_blob)?;
        let unsealed = self.unseal_loaded(loaded.into());
        if let Err(e) = timed(TpmCommand::FlushContext, || {
            self.ctx.flush_context(loaded.into())
        }) {
            log::warn!("FlushContext of a loaded sealed object failed: {e}");
        }
        if hooks::enabled(Protection::TssBufferScrub) {
            self.scrub_tss_buffer();
        }
        unsealed
    }

    /// TPM2_Import of a cluster envelope's entry under the SRK, then Load,
    /// Unseal and FlushContext as for a local object. Import's inputs are
    /// encrypted to the SRK and its output under it, so no session is needed
    /// to keep the DEK off the bus; Unseal still runs in the salted session.
    pub fn unseal_imported(&mut self, object: &ImportableObject) -> Result<Dek, TpmError> {
        let parent = self.srk.handle;
        let private = timed(TpmCommand::Import, || {
            self.ctx
                .execute_with_session(Some(AuthSession::Password), |c| {
                    c.import(
                        parent.into(),
                        None,
                        object.public.clone(),
                        object.duplicate.clone(),
                        object.in_sym_seed.clone(),
                        SymmetricDefinitionObject::Null,
                    )
                })
        })
        .map_err(|e| TpmError::on_client_blob("Import", e))?;
        self.unseal(&LoadableObject {
            public: object.public.clone(),
            private,
        })
    }

    /// tpm2-tss decrypts Unseal's response in place, in the one command
    /// buffer it keeps for the context's whole life; FlushContext's short
    /// exchange overwrites only its first 14 bytes, leaving the DEK behind.
    /// A TPM2_Hash of zeros rewrites the buffer well past the largest DEK.
    fn scrub_tss_buffer(&mut self) {
        let zeros = MaxBuffer::try_from(vec![0u8; SCRUB_LEN]).expect("within MaxBuffer's limit");
        let scrubbed = timed(TpmCommand::Hash, || {
            self.ctx.execute_without_session(|c| {
                c.hash(zeros, HashingAlgorithm::Sha256, Hierarchy::Null)
            })
        });
        if let Err(e) = scrubbed {
            log::warn!("scrubbing the TSS command buffer failed: {e}");
        }
    }

    fn unseal_loaded(&mut self, loaded: ObjectHandle) -> Result<Dek, TpmError> {
        let session = self.dek_session()?;
        let data = timed(TpmCommand::Unseal, || {
            self.ctx
                .execute_with_session(Some(session), |c| c.unseal(loaded))
        })
        .map_err(|e| TpmError::new("Unseal", e))?;
        Ok(Dek::copy_from(data.value()))
    }

    /// A cheap liveness check: ReadPublic of the SRK.
    pub fn probe(&mut self) -> Result<(), TpmError> {
        let srk = self.srk.handle;
        timed(TpmCommand::ReadPublic, || {
            self.ctx.execute_without_session(|c| c.read_public(srk))
        })
        .map(|_| ())
        .map_err(|e| TpmError::new("ReadPublic", e))
    }

    /// Forgets the salted session after an error; the next DEK starts a new one.
    pub fn discard_session(&mut self) {
        if let Some(session) = self.session.take() {
            let handle = ObjectHandle::from(SessionHandle::from(session));
            if let Err(e) = self.ctx.flush_context(handle) {
                log::debug!("flushing the discarded session failed: {e}");
            }
        }
    }

    fn dek_session(&mut self) -> Result<AuthSession, TpmError> {
        match (self.parameter_encryption, self.session) {
            #[cfg(feature = "insecure-test-hooks")]
            (ParameterEncryption::Off, _) => Ok(AuthSession::Password),
            (ParameterEncryption::SaltedSession, Some(session)) => Ok(session),
            (ParameterEncryption::SaltedSession, None) => {
                let session = timed(TpmCommand::StartAuthSession, || {
                    start_salted(&mut self.ctx, self.srk.handle)
                })?;
                self.session = Some(session);
                Ok(session)
            }
        }
    }
}

/// A TPM that was reset without Startup answers TPM_RC_INITIALIZE to
/// everything. The kernel and swtpm's `startup-clear` normally send it.
fn ensure_started(ctx: &mut Context) -> Result<(), TpmError> {
    let probe = ctx.execute_without_session(|c| {
        c.get_capability(CapabilityType::Handles, FIRST_TRANSIENT_HANDLE, 1)
    });
    let not_started = matches!(
        probe
            .as_ref()
            .map_err(|e| TpmError::new("GetCapability", *e).response_code()),
        Err(Some(0x100))
    );
    if not_started {
        log::info!("TPM was not started; sending Startup(CLEAR)");
        ctx.execute_without_session(|c| c.startup(StartupType::Clear))
            .map_err(|e| TpmError::new("Startup", e))?;
    }
    Ok(())
}

/// Without a resource manager, objects and sessions a killed sceau left
/// loaded stay in the TPM's few slots until flushed (three of each on common
/// TPMs). Under /dev/tpmrm0 the lists are always empty: the kernel gives each
/// file descriptor its own view. On a TPM without a resource manager sceau
/// assumes it is the only user.
fn flush_leftovers(ctx: &mut Context) -> Result<(), TpmError> {
    for (first, kind) in [
        (FIRST_TRANSIENT_HANDLE, "transient object"),
        (FIRST_LOADED_SESSION_HANDLE, "loaded session"),
    ] {
        for handle in list_handles(ctx, first)? {
            let object = ctx
                .execute_without_session(|c| c.tr_from_tpm_public(handle))
                .map_err(|e| TpmError::new("TR_FromTPMPublic", e))?;
            ctx.flush_context(object)
                .map_err(|e| TpmError::new("FlushContext", e))?;
            log::warn!(
                "flushed a {kind} ({:#010x}) left by an earlier process",
                u32::from(handle)
            );
        }
    }
    Ok(())
}

/// The handles of one type (the top byte of `first`) the TPM reports.
fn list_handles(ctx: &mut Context, first: u32) -> Result<Vec<TpmHandle>, TpmError> {
    let (data, _) = ctx
        .execute_without_session(|c| c.get_capability(CapabilityType::Handles, first, MAX_HANDLES))
        .map_err(|e| TpmError::new("GetCapability", e))?;
    let CapabilityData::Handles(handles) = data else {
        return Ok(Vec::new());
    };
    Ok(handles
        .iter()
        .copied()
        .filter(|h| u32::from(*h) >> 24 == first >> 24)
        .collect())
}
