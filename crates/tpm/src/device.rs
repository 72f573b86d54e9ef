//! One open TPM: the ESAPI context, the SRK and the salted session, and the
//! command sequences sceau runs on them. Only the worker thread holds this.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::constants::SessionType;
use tss_esapi::constants::response_code::Tss2ResponseCode;
use tss_esapi::handles::{KeyHandle, ObjectHandle, SessionHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{SensitiveData, SymmetricDefinitionObject};

use std::collections::BTreeMap;

use super::boot_policy::{BootPolicies, BootPolicyConfig, BootPolicyError};
use super::enroll::EndorsementKey;
use super::fault::{ConnectFailure, Fault, INITIALIZE, TpmError};
use super::kek::{self, KekError, OpenGeneration};
use super::observe::{Observer, TpmCommand};
use super::owner::{self, OwnerAuth};
use super::sealed::{ImportableObject, LoadableObject, blobs_from_created, sealed_template};
use super::session::{ParameterEncryption, start_salted};
use super::signing::EnvelopeSigningKey;
use super::srk::{KeyId, Srk, SrkError};
use super::start::{FIRST_LOADED_SESSION_HANDLE, list_handles, started_and_transients};
use super::tcti::{Tcti, Transport};
use crate::secret::Dek;
use sceau_format::members::Member;
use sceau_format::sealed::SealedBlobs;
use sceau_format::signing_key::{SIGNATURE_LEN, SigningKey, SigningKeyError};
use sceau_format::storage_key::{StorageKey, StorageKeyError};
use sceau_format::wire::NAME_LEN;
use sceau_sys::hooks::{self, Protection};

/// Everything needed to (re)open the TPM.
#[derive(Debug, Clone)]
pub struct TpmConfig {
    pub tcti: Tcti,
    /// A persistent handle holding the same key as the SRK template.
    pub srk_handle: Option<u32>,
    pub parameter_encryption: ParameterEncryption,
    /// Told each command's time; [`Observer::none`] outside the daemon.
    pub observer: Observer,
    /// Recreate the envelope signing key at open (cluster mode, and the
    /// commands that print a member file).
    pub envelope_signing_key: bool,
    /// Seal to this boot policy key, and open through these signed policies.
    pub boot_policy: Option<BootPolicyConfig>,
    /// The owner hierarchy's authorization value (the credential
    /// `tpm-owner-auth`), for a TPM whose owner set one.
    pub owner_auth: Option<OwnerAuth>,
    /// The SRK Name `--expect-srk-name` pins: another SRK is refused at
    /// start and at every reopen after a reset.
    pub pinned_srk_name: Option<[u8; NAME_LEN]>,
}

impl TpmConfig {
    /// A TPM at `tcti` with nothing added: the salted session, CreatePrimary
    /// of the SRK, no observer, no signing key, no boot policy, no owner
    /// authorization, no pin. What a tool or a benchmark opens.
    pub fn plain(tcti: Tcti) -> TpmConfig {
        TpmConfig {
            tcti,
            srk_handle: None,
            parameter_encryption: ParameterEncryption::SaltedSession,
            observer: Observer::none(),
            envelope_signing_key: false,
            boot_policy: None,
            owner_auth: None,
            pinned_srk_name: None,
        }
    }
}

/// Which of this TPM's keys an enrollment credential was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialFor {
    Srk,
    SigningKey,
}

/// The generations a TPM holds, by number and Name (0: the SRK), and its
/// epoch counter, as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generations {
    pub open: BTreeMap<u32, Vec<u8>>,
    pub counter: u64,
}

impl Generations {
    /// The generation Encrypt seals under: the highest one held.
    pub fn current(&self) -> (u32, &[u8]) {
        let (n, name) = self
            .open
            .iter()
            .next_back()
            .expect("generation 0 is always held");
        (*n, name)
    }
}

/// Why this TPM's keys do not make a cluster member.
#[derive(Debug, thiserror::Error)]
pub enum MemberKeysError {
    #[error(transparent)]
    Tpm(#[from] TpmError),
    #[error("cluster mode needs an ECC P-256 SRK, and this TPM gave another: {0}")]
    Srk(#[from] StorageKeyError),
    #[error("this TPM's envelope signing key is not what its template asks for: {0}")]
    SigningKey(#[from] SigningKeyError),
    #[error("the TPM was opened without its envelope signing key")]
    NoSigningKey,
}

/// The start-up check's canary: as long as the longest DEK seed sceau
/// seals, and searched for by halves.
const SCRUB_CANARY_LEN: usize = 32;

/// The start-up check of the unsent scrub failed; `serve` refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ScrubCheckError {
    #[error(
        "tpm2-tss refused the unsent Create that plants the check's canary; sceau cannot scrub \
         this tpm2-tss's buffers"
    )]
    CanaryNotPlanted,
    #[error("tpm2-tss refused the unsent scrub Create; sceau cannot scrub its buffers")]
    ScrubRefused,
    #[error(
        "the scrub left the check's canary in tpm2-tss's memory: on this tpm2-tss every DEK \
         would stay in its buffers after each call"
    )]
    CanarySurvived,
    #[error("reading this process's memory to check the scrub: {0}")]
    Unreadable(std::io::Error),
}

/// Bytes of zeros the unsent scrub Create carries as its data: marshalled at
/// buffer offset 20, they cover where Unseal's largest answer (header,
/// parameter size, TPM2B size, a DEK of at most 128 bytes) lay, 16..144.
const SCRUB_LEN: usize = 160;
/// TSS2_ESYS_RC_LAYER | TSS2_BASE_RC_BAD_TR: ESAPI's "not a handle it
/// knows as that kind of resource".
const ESYS_RC_BAD_TR: u32 = (7 << 16) | tss_esapi::tss2_esys::TSS2_BASE_RC_BAD_TR;

pub struct Tpm {
    ctx: Context,
    srk: Srk,
    /// The KEK generations 1 and up the TPM holds (generation 0 is `srk`).
    generations: BTreeMap<u32, OpenGeneration>,
    signing_key: Option<EnvelopeSigningKey>,
    boot: Option<BootPolicies>,
    session: Option<AuthSession>,
    parameter_encryption: ParameterEncryption,
    observer: Observer,
}

impl Tpm {
    /// Opens the TCTI, clears what a crashed predecessor left loaded,
    /// recreates the SRK and starts the salted session, so that the first
    /// request pays for none of it (and OpenSSL is initialised before the
    /// sandbox closes the filesystem).
    pub fn open(config: &TpmConfig) -> Result<Self, OpenFailure> {
        Self::open_with(config, Leftovers::Flush)
    }

    /// [`Tpm::open_explained`] for a command that runs beside a serving
    /// sceau (`sceau kek`): on a TPM without a resource manager, whatever
    /// another process loaded is refused rather than flushed, since it is
    /// most likely that sceau's SRK and session.
    pub fn open_beside_others(config: &TpmConfig) -> Result<Self, OpenError> {
        Self::open_with(config, Leftovers::Refuse)
            .map_err(|error| OpenError::explain(config, error))
    }

    fn open_with(config: &TpmConfig, leftovers: Leftovers) -> Result<Self, OpenFailure> {
        if !sceau_sys::openssl_without_legacy_name_tables() {
            log::debug!("OpenSSL refused OPENSSL_INIT_NO_ADD_ALL_*; its start-up is just slower");
        }
        let mut ctx =
            Context::new(config.tcti.name_conf()).map_err(|e| TpmError::new(INITIALIZE, e))?;
        if let Some(auth) = &config.owner_auth {
            auth.apply(&mut ctx)?;
        }
        let transients = started_and_transients(&mut ctx)?;
        match leftovers {
            Leftovers::Flush => flush_leftovers(&mut ctx, transients)?,
            Leftovers::Refuse => refuse_leftovers(&mut ctx, &config.tcti, transients)?,
        }
        let pinned = config.pinned_srk_name.as_ref().map(|name| name.as_slice());
        let srk = Srk::recreate(&mut ctx, config.srk_handle, pinned)?;
        let signing_key = config
            .envelope_signing_key
            .then(|| EnvelopeSigningKey::recreate(&mut ctx))
            .transpose()?;
        let boot = config
            .boot_policy
            .as_ref()
            .map(|c| BootPolicies::load(&mut ctx, c, &config.observer))
            .transpose()?;
        let generations = kek::read_open(&mut ctx, srk.algorithm).map_err(OpenFailure::Kek)?;
        let mut tpm = Self {
            ctx,
            srk,
            generations,
            signing_key,
            boot,
            session: None,
            parameter_encryption: config.parameter_encryption,
            observer: config.observer.clone(),
        };
        tpm.dek_session()?;
        if let Some(boot) = tpm.boot.as_mut() {
            boot.session(&mut tpm.ctx, tpm.srk.handle, &tpm.observer)?;
        }
        Ok(tpm)
    }

    /// [`Tpm::open`] for a command an operator started: a failure says
    /// what is wrong in words, with the TSS detail kept apart
    /// ([`OpenError::detail`]) for a DEBUG line.
    pub fn open_explained(config: &TpmConfig) -> Result<Self, OpenError> {
        Self::open(config).map_err(|error| OpenError::explain(config, error))
    }

    /// The key_id this TPM serves: the SRK's, or with a boot policy key,
    /// one over both (`KeyId::bound_to_policy`).
    pub fn key_id(&self) -> KeyId {
        match &self.boot {
            Some(boot) => KeyId::bound_to_policy(self.srk.name.value(), boot.key_name()),
            None => self.srk.key_id(),
        }
    }

    /// The boot policy key's Name, if new objects are sealed to one: part of
    /// what a key_id names (`sceau_format::kek::single_node_config`).
    pub fn policy_key_name(&self) -> Option<&[u8]> {
        self.boot.as_ref().map(BootPolicies::key_name)
    }

    /// With a boot policy key, the SRK's own key_id: the envelopes written
    /// before the key was configured name it, and still open.
    pub fn unbound_key_id(&self) -> Option<KeyId> {
        self.boot.as_ref().map(|_| self.srk.key_id())
    }

    /// The key_ids of the SRK bound to each former policy key: envelopes
    /// written before the key was rotated name them, and still open.
    pub fn former_key_ids(&self) -> Vec<KeyId> {
        self.boot.as_ref().map_or_else(Vec::new, |boot| {
            boot.former_key_names()
                .map(|name| KeyId::bound_to_policy(self.srk.name.value(), name))
                .collect()
        })
    }

    pub fn srk(&self) -> &Srk {
        &self.srk
    }

    /// The TPM's manufacturer, vendor string and firmware version.
    pub fn identity(&mut self) -> Result<super::identity::TpmIdentity, TpmError> {
        super::identity::read(&mut self.ctx)
    }

    /// The storage key of KEK `generation`: the SRK for 0.
    /// The parent for work under `generation`. A generation's persistent key
    /// takes an object slot while in use, and the envelope signing key gives
    /// its slot back first (`EnvelopeSigningKey::set_aside`): without a
    /// resource manager the slots are sceau's to share, and Linux's
    /// /dev/tpmrm0 loads every object a process holds before each of its
    /// commands, so the SRK, the signing key, the parent and the object
    /// being loaded are four where a TPM may hold three (seen in the VM).
    fn generation_key(&mut self, generation: u32) -> Result<KeyHandle, TpmError> {
        if generation > 0
            && let Some(key) = self.signing_key.as_mut()
        {
            key.set_aside(&mut self.ctx)?;
        }
        match generation {
            0 => Ok(self.srk.handle),
            n => self
                .generations
                .get(&n)
                .map(|g| g.handle)
                .ok_or_else(|| kek::not_held(n)),
        }
    }

    /// Every generation the TPM holds by Name (0, the SRK, included), read
    /// from the TPM again, and the epoch counter: what the daemon serves
    /// from at start and at each reload.
    pub fn read_generations(&mut self) -> Result<Generations, KekError> {
        for old in std::mem::take(&mut self.generations).into_values() {
            let mut object = ObjectHandle::from(old.handle);
            if let Err(e) = self.ctx.tr_close(&mut object) {
                log::debug!("closing a generation's ESAPI handle failed: {e}");
            }
        }
        self.generations = kek::read_open(&mut self.ctx, self.srk.algorithm)?;
        let counter = kek::read_epoch(&mut self.ctx)?;
        Ok(self.generations_now(counter))
    }

    fn generations_now(&self, counter: u64) -> Generations {
        let mut open: BTreeMap<u32, Vec<u8>> = self
            .generations
            .iter()
            .map(|(n, g)| (*n, g.name.clone()))
            .collect();
        open.insert(0, self.srk.name.value().to_vec());
        Generations { open, counter }
    }

    /// Takes a new epoch from the TPM's counter.
    pub fn next_epoch(&mut self) -> Result<u64, KekError> {
        kek::next_epoch(&mut self.ctx)
    }

    /// The highest cluster membership epoch this node served, and its
    /// membership's digest.
    pub fn membership_mark(&mut self) -> Result<Option<(u64, [u8; 32])>, KekError> {
        kek::membership_mark(&mut self.ctx)
    }

    pub fn set_membership_mark(&mut self, epoch: u64, digest: &[u8; 32]) -> Result<(), KekError> {
        kek::set_membership_mark(&mut self.ctx, epoch, digest)
    }

    /// `sceau kek rotate`: makes generation `number` and returns its Name.
    pub fn create_generation(&mut self, number: u32) -> Result<Vec<u8>, KekError> {
        let generation = kek::create(&mut self.ctx, &self.srk, number, &self.generations)?;
        let name = generation.name.clone();
        self.generations.insert(number, generation);
        Ok(name)
    }

    /// `sceau kek retire`: destroys generation `number`, which must be open.
    pub fn destroy_generation(&mut self, number: u32) -> Result<(), KekError> {
        let generation = self
            .generations
            .remove(&number)
            .ok_or_else(|| KekError::Tpm(kek::not_held(number)))?;
        kek::destroy(&mut self.ctx, number, generation)
    }

    /// The envelope signing key's TPM2B_PUBLIC, if the TPM was opened with
    /// one.
    pub fn signing_key_public(&self) -> Option<Result<Vec<u8>, TpmError>> {
        self.signing_key
            .as_ref()
            .map(EnvelopeSigningKey::tpm2b_public)
    }

    /// This TPM as a cluster member: its SRK and envelope signing key, read
    /// back through the member file's own parsers. Enrollment proves this
    /// one, generation 0's, against the EK.
    pub fn member(&self) -> Result<Member, MemberKeysError> {
        self.member_with(&self.srk.tpm2b_public()?)
    }

    /// This TPM as a member under each KEK generation it holds, the current
    /// (highest) first: the storage key members wrap DEKs for is the
    /// generation's, the signing key is the same for all. `srk-public`
    /// prints the first; `serve` takes the first one the member files list.
    pub fn members_by_generation(&self) -> Result<Vec<(u32, Member)>, MemberKeysError> {
        let mut members = Vec::with_capacity(self.generations.len() + 1);
        for (n, generation) in self.generations.iter().rev() {
            members.push((*n, self.member_with(&generation.public)?));
        }
        members.push((0, self.member()?));
        Ok(members)
    }

    fn member_with(&self, storage_key: &[u8]) -> Result<Member, MemberKeysError> {
        let srk = StorageKey::from_tpm2b_public(storage_key)?;
        let signing = self
            .signing_key_public()
            .ok_or(MemberKeysError::NoSigningKey)??;
        let signing = SigningKey::from_tpm2b_public(&signing)?;
        Ok(Member { srk, signing })
    }

    /// TPM2_Sign of a cluster envelope's digest with the envelope signing
    /// key. A TPM opened without one answers as if the key were not loaded.
    pub fn sign_envelope(&mut self, digest: &[u8; 32]) -> Result<[u8; SIGNATURE_LEN], TpmError> {
        let key = self.signing_key.as_mut().ok_or_else(|| {
            TpmError::new(
                "Sign",
                tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::WrongParamSize),
            )
        })?;
        key.sign(&mut self.ctx, &self.observer, digest)
    }

    /// The envelope signing key's handle, if the TPM was opened with one:
    /// for `sceau enroll respond`, which activates a credential bound to
    /// its Name.
    pub fn signing_key_handle(&self) -> Option<KeyHandle> {
        self.signing_key.as_ref().map(EnvelopeSigningKey::handle)
    }

    /// The context and SRK for the SPIRE agent's attestation, which runs
    /// its own TPM work on the TPM this layer opened; the daemon never
    /// calls this (its enrollment uses the two methods below).
    pub fn context_and_srk(&mut self) -> (&mut Context, &Srk) {
        (&mut self.ctx, &self.srk)
    }

    /// Enrollment: the TCG default ECC P-256 EK and its certificate, if the
    /// TPM keeps one. The EK stays loaded until this TPM is dropped.
    pub fn endorsement_key(&mut self) -> Result<EndorsementKey, TpmError> {
        super::enroll::endorsement_key(&mut self.ctx)
    }

    /// Enrollment's answer: TPM2_ActivateCredential of a credential made for
    /// `key` (the SRK, or the envelope signing key, which the TPM must have
    /// been opened with), its seed decrypted by `ek`.
    pub fn activate_credential(
        &mut self,
        key: CredentialFor,
        ek: &EndorsementKey,
        credential_blob: &[u8],
        secret: &[u8],
    ) -> Result<zeroize::Zeroizing<Vec<u8>>, TpmError> {
        let object = match key {
            CredentialFor::Srk => self.srk.handle,
            CredentialFor::SigningKey => self.signing_key_handle().ok_or_else(|| {
                TpmError::refused(
                    "the TPM was opened without its envelope signing key".into(),
                    Fault::Failure,
                )
            })?,
        };
        super::enroll::activate_credential(&mut self.ctx, object, ek, credential_blob, secret)
    }

    /// TPM2_Create of a sealed-data object holding `dek`, under KEK
    /// `generation` (0: the SRK), bound to the boot policy key when there
    /// is one.
    pub fn seal(&mut self, dek: &Dek, generation: u32) -> Result<SealedBlobs, TpmError> {
        let parent = self.generation_key(generation)?;
        let policy = self.boot.as_ref().map(BootPolicies::authorized_policy);
        let template = sealed_template(policy).map_err(|e| TpmError::new("sealed template", e))?;
        let data = SensitiveData::try_from(dek.expose().to_vec())
            .map_err(|e| TpmError::new("sealed data", e))?;
        let session = self.dek_session()?;
        let created = self
            .observer
            .timed(TpmCommand::Create, || {
                self.ctx.execute_with_session(Some(session), |c| {
                    c.create(parent, template, None, Some(data), None, None)
                })
            })
            .map_err(|e| TpmError::new("Create", e))?;
        let blobs = blobs_from_created(created.out_public, &created.out_private)
            .map_err(|e| TpmError::new("marshal sealed object", e))?;
        if hooks::enabled(Protection::TssInputScrub) {
            self.scrub_tss_without_sending()?;
        }
        Ok(blobs)
    }

    /// Load, Unseal and FlushContext. The loaded object is flushed on every
    /// path, because a TPM without a resource manager holds only three. An
    /// object bound to the boot policy key is unsealed in the policy
    /// session, which PolicyPCR and PolicyAuthorize satisfy first.
    pub fn unseal(&mut self, object: &LoadableObject, generation: u32) -> Result<Dek, TpmError> {
        let parent = self.generation_key(generation)?;
        let policy_bound = match (&object.auth_policy, &self.boot) {
            (None, _) => None,
            (Some(policy), Some(boot)) if boot.opens(policy) => Some(*policy),
            // Checked before Load, so that the TPM does no work for it.
            (Some(_), _) => {
                return Err(TpmError::refused(
                    "the envelope is sealed to a boot policy key this sceau was not given \
                     (--policy-key, --former-policy-key)"
                        .into(),
                    Fault::EnvelopeRejected,
                ));
            }
        };
        let loaded = self
            .observer
            .timed(TpmCommand::Load, || {
                self.ctx
                    .execute_with_session(Some(AuthSession::Password), |c| {
                        c.load(parent, object.private.clone(), object.public.clone())
                    })
            })
            .map_err(TpmError::loading_client_blob)?;
        let unsealed = match policy_bound {
            Some(auth_policy) => self.unseal_under_policy(loaded.into(), &auth_policy),
            None => self.unseal_loaded(loaded.into()),
        };
        if let Err(e) = self.observer.timed(TpmCommand::FlushContext, || {
            self.ctx.flush_context(loaded.into())
        }) {
            log::warn!("FlushContext of a loaded sealed object failed: {e}");
        }
        if hooks::enabled(Protection::TssBufferScrub) {
            self.scrub_tss_without_sending()?;
        }
        unsealed
    }

    /// TPM2_Import of a cluster envelope's entry under KEK `generation` (the
    /// storage key the entry was wrapped for), then Load,
    /// Unseal and FlushContext as for a local object. Import's inputs are
    /// encrypted to the SRK and its output under it, so no session is needed
    /// to keep the DEK off the bus; Unseal still runs in the salted session.
    pub fn unseal_imported(
        &mut self,
        object: &ImportableObject,
        generation: u32,
    ) -> Result<Dek, TpmError> {
        let parent = self.generation_key(generation)?;
        let private = self
            .observer
            .timed(TpmCommand::Import, || {
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
        self.unseal(
            &LoadableObject {
                public: object.public.clone(),
                private,
                auth_policy: object.auth_policy,
            },
            generation,
        )
    }

    /// Rewrites what tpm2-tss 3.2 keeps in the clear between commands,
    /// without sending anything to the TPM:
    ///
    /// - Create's input, DEK included, which ESAPI copies into the context
    ///   for a possible resubmission (`in.Create.inSensitiveData`);
    /// - the last response, which ESAPI decrypts in place in the one command
    ///   buffer the context keeps for its whole life: after Unseal, the DEK
    ///   at offsets 16..16+len (FlushContext's short exchange rewrites only
    ///   the first 14 bytes).
    ///
    /// Esys_Create with [`SCRUB_LEN`] zeros as its data does both: it copies
    /// its input over the stored one, and its Prepare step marshals the
    /// zeros over the buffer (the data starts at offset 20). The session
    /// handle it is given is the SRK's, which is not a session, so ESAPI
    /// stops at its session check, after Prepare and before sending
    /// (`init_session_tab`: TSS2_ESYS_RC_BAD_TR): no TPM round trip. Until
    /// tpm2-tss 3.2.1 this took a Load and a FlushContext after each Create,
    /// and a TPM2_Hash after each Unseal: three of the six commands of an
    /// Encrypt and a Decrypt, each tens of milliseconds on a discrete TPM.
    ///
    /// Shown by `memory_scan::controls` (the DEK is found without it) and
    /// `fault_matrix::commands_per_encrypt_and_decrypt` (no command reaches
    /// the TPM). Whether it works on the tpm2-tss this process runs is proved
    /// once at start, by its effect ([`Tpm::verify_buffer_scrub`]); a call
    /// whose scrub then ends any other way fails, rather than return with
    /// its DEK possibly left in the buffers.
    fn scrub_tss_without_sending(&mut self) -> Result<(), TpmError> {
        match scrub_by_unsent_create(&mut self.ctx, self.srk.handle, &[0; SCRUB_LEN]) {
            ScrubOutcome::StoppedBeforeSending | ScrubOutcome::Sent => Ok(()),
            ScrubOutcome::RefusedOtherwise(e) => Err(TpmError::new("scrub of tpm2-tss buffers", e)),
        }
    }

    /// Proves that the unsent scrub rewrites what this tpm2-tss keeps, by
    /// its effect rather than by the error code it ends with (the same
    /// code can come from an earlier step, before anything is rewritten):
    /// an unsent Create first puts a random canary where a DEK would lie,
    /// in the command buffer and the stored input; the scrub runs; then
    /// every readable anonymous mapping of this process but the stack
    /// (where tpm2-tss keeps both) is searched for either half of the
    /// canary, through `memory` ([`sceau_sys::OwnMemory`], opened while
    /// the process was still dumpable). No command reaches the TPM.
    ///
    /// `serve` calls it once, before it serves, and refuses to start if it
    /// fails: a tpm2-tss on which the scrub does not work (another version
    /// that orders its steps differently) would leave every DEK in its
    /// buffers.
    pub fn verify_buffer_scrub(
        &mut self,
        memory: &sceau_sys::OwnMemory,
    ) -> Result<(), ScrubCheckError> {
        let mut canary = zeroize::Zeroizing::new([0u8; SCRUB_CANARY_LEN]);
        sceau_format::random::fill(canary.as_mut_slice());
        let planted = scrub_by_unsent_create(&mut self.ctx, self.srk.handle, canary.as_slice());
        if let ScrubOutcome::RefusedOtherwise(_) = planted {
            return Err(ScrubCheckError::CanaryNotPlanted);
        }
        if hooks::enabled(Protection::TssBufferScrub) && hooks::enabled(Protection::TssInputScrub) {
            self.scrub_tss_without_sending()
                .map_err(|_| ScrubCheckError::ScrubRefused)?;
        }
        let (first, second) = canary.split_at(SCRUB_CANARY_LEN / 2);
        match memory.holds(&[first, second]) {
            Ok(false) => Ok(()),
            Ok(true) => Err(ScrubCheckError::CanarySurvived),
            Err(e) => Err(ScrubCheckError::Unreadable(e)),
        }
    }

    fn unseal_loaded(&mut self, loaded: ObjectHandle) -> Result<Dek, TpmError> {
        let session = self.dek_session()?;
        let data = self
            .observer
            .timed(TpmCommand::Unseal, || {
                self.ctx
                    .execute_with_session(Some(session), |c| c.unseal(loaded))
            })
            .map_err(|e| TpmError::new("Unseal", e))?;
        Ok(Dek::copy_from(data.value()))
    }

    /// Unseal in the policy session, once PolicyPCR (PolicySecret) and
    /// PolicyAuthorize have satisfied `auth_policy`. Any failure leaves the
    /// session flushed.
    fn unseal_under_policy(
        &mut self,
        loaded: ObjectHandle,
        auth_policy: &[u8; 32],
    ) -> Result<Dek, TpmError> {
        let boot = self.boot.as_mut().expect("checked by the caller");
        let session =
            boot.authorize(&mut self.ctx, self.srk.handle, &self.observer, auth_policy)?;
        let data = self
            .observer
            .timed(TpmCommand::Unseal, || {
                self.ctx
                    .execute_with_session(Some(session), |c| c.unseal(loaded))
            })
            .map_err(|e| TpmError::new("Unseal", e));
        if data.is_err() {
            boot.discard_session(&mut self.ctx);
        }
        Ok(Dek::copy_from(data?.value()))
    }

    /// A cheap liveness check: ReadPublic of the SRK. With boot policies, a
    /// PCR_Read instead, which also picks the policy the PCRs match now:
    /// Status reports `policy-mismatch` while none does.
    pub fn probe(&mut self) -> Result<(), TpmError> {
        if let Some(boot) = self.boot.as_mut() {
            return match boot.reevaluate(&mut self.ctx, &self.observer)? {
                true => Ok(()),
                false => Err(TpmError::refused(
                    "boot policy: no signed policy matches the PCRs".into(),
                    Fault::PolicyMismatch,
                )),
            };
        }
        let srk = self.srk.handle;
        self.observer
            .timed(TpmCommand::ReadPublic, || {
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
                let session = self.observer.timed(TpmCommand::StartAuthSession, || {
                    start_salted(&mut self.ctx, self.srk.handle)
                })?;
                self.session = Some(session);
                Ok(session)
            }
        }
    }
}

/// How the unsent scrub Create ended.
#[derive(Debug, PartialEq, Eq)]
enum ScrubOutcome {
    /// ESAPI refused the session after Prepare: the buffers are rewritten and
    /// nothing went to the TPM (tpm2-tss 3.2).
    StoppedBeforeSending,
    /// Any other refusal: the buffers may not have been rewritten.
    RefusedOtherwise(tss_esapi::Error),
    /// The TPM ran it (a tpm2-tss that checks sessions differently): the
    /// buffers are rewritten, at the cost of a round trip and an object.
    Sent,
}

/// Esys_Create of `data` (the scrub's [`SCRUB_LEN`] zeros, or the start-up
/// check's canary) under the SRK with the SRK's handle as the "session",
/// which ESAPI refuses once it has marshalled the command.
fn scrub_by_unsent_create(ctx: &mut Context, srk: KeyHandle, data: &[u8]) -> ScrubOutcome {
    let (Ok(template), Ok(sensitive)) = (
        sealed_template(None),
        SensitiveData::try_from(data.to_vec()),
    ) else {
        return ScrubOutcome::RefusedOtherwise(tss_esapi::Error::WrapperError(
            tss_esapi::WrapperErrorKind::InvalidParam,
        ));
    };
    let not_a_session = AuthSession::create(
        SessionType::Hmac,
        SessionHandle::from(ObjectHandle::from(srk)),
        HashingAlgorithm::Sha256,
    );
    // tss-esapi logs each failed call at error level; this failure is the
    // plan, so it stays out of the log even at debug.
    let result = super::tss_log::without_tss_log(|| {
        ctx.execute_with_session(not_a_session, |c| {
            c.create(srk, template, None, Some(sensitive), None, None)
        })
    });
    match result {
        Err(tss_esapi::Error::Tss2Error(rc)) if rc == Tss2ResponseCode::from(ESYS_RC_BAD_TR) => {
            ScrubOutcome::StoppedBeforeSending
        }
        Err(other) => ScrubOutcome::RefusedOtherwise(other),
        Ok(_) => ScrubOutcome::Sent,
    }
}

/// Without a resource manager, objects and sessions a killed sceau left
/// loaded stay in the TPM's few slots until flushed (three of each on common
/// TPMs). Under /dev/tpmrm0 the lists are always empty: the kernel gives each
/// file descriptor its own view. On a TPM without a resource manager sceau
/// assumes it is the only user.
fn flush_leftovers(ctx: &mut Context, transients: Vec<TpmHandle>) -> Result<(), TpmError> {
    let sessions = list_handles(ctx, FIRST_LOADED_SESSION_HANDLE)?;
    let leftovers = transients
        .into_iter()
        .map(|h| (h, "transient object"))
        .chain(sessions.into_iter().map(|h| (h, "loaded session")));
    for (handle, kind) in leftovers {
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
    Ok(())
}

/// What [`Tpm::open`] does with objects and sessions another process left
/// loaded, which only a TPM without a resource manager shows.
#[derive(Clone, Copy)]
enum Leftovers {
    /// The daemon's start: a crashed predecessor's, flushed.
    Flush,
    /// A command beside the daemon: a live process's, refused.
    Refuse,
}

fn refuse_leftovers(
    ctx: &mut Context,
    tcti: &Tcti,
    transients: Vec<TpmHandle>,
) -> Result<(), OpenFailure> {
    let sessions = list_handles(ctx, FIRST_LOADED_SESSION_HANDLE)?;
    match transients.len() + sessions.len() {
        0 => Ok(()),
        loaded => Err(OpenFailure::InUse {
            tcti: tcti.to_string(),
            loaded,
        }),
    }
}

/// Why opening a TPM failed, before [`OpenError`] explains it: the SRK, or
/// what opening does besides (the boot policies, the KEK generations, a
/// TPM another process holds). The one error type of opening.
#[derive(Debug, thiserror::Error)]
pub enum OpenFailure {
    #[error(transparent)]
    Srk(#[from] SrkError),
    /// Opening also loads the signed boot policies, and refuses bad ones.
    #[error(transparent)]
    BootPolicy(#[from] BootPolicyError),
    #[error(
        "the TPM at {tcti} has no resource manager and holds {loaded} objects or sessions \
         another process loaded (a serving sceau?): stop sceau first (systemctl stop sceau), \
         or use device:/dev/tpmrm0, where both run at once"
    )]
    InUse { tcti: String, loaded: usize },
    /// Opening also finds the KEK generations the TPM holds.
    #[error(transparent)]
    Kek(KekError),
}

impl From<TpmError> for OpenFailure {
    fn from(error: TpmError) -> Self {
        OpenFailure::Srk(SrkError::Tpm(error))
    }
}

/// Why [`Tpm::open_explained`] failed, in one line an operator can act on.
/// The TSS error stays inside, out of `Display` and out of the error chain
/// (not a `source`), so that it cannot reach that line by accident.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// tpm2-tss could not reach the TPM; what the machine shows about why.
    #[error("{cause}")]
    Unreachable {
        cause: ConnectFailure,
        detail: Box<OpenFailure>,
    },
    /// The TPM answered, but refused a command of the start-up sequence.
    #[error(
        "the TPM at {tcti} refused {operation} ({fault}): see {fault} in \
         docs/troubleshooting.md; SCEAU_LOG=debug shows the TPM's own code"
    )]
    Refused {
        tcti: String,
        operation: &'static str,
        fault: Fault,
        detail: Box<OpenFailure>,
    },
    /// The owner hierarchy has an authorization value that sceau was not
    /// given, or was given wrong.
    #[error(
        "the TPM at {tcti} refused the owner authorization ({}): {}",
        if *given { "the one in the credential tpm-owner-auth is not the TPM's" }
        else { "it has one, and no credential tpm-owner-auth was given" },
        owner::HOW_TO_PROVIDE
    )]
    OwnerAuth {
        tcti: String,
        given: bool,
        detail: Box<OpenFailure>,
    },
    /// Not a TPM error: a persistent SRK handle that is not the SRK, or the
    /// like; these messages are sceau's own.
    #[error("{0}")]
    Srk(OpenFailure),
}

impl OpenError {
    fn explain(config: &TpmConfig, error: OpenFailure) -> Self {
        let tcti = &config.tcti;
        let OpenFailure::Srk(SrkError::Tpm(tpm_error)) = &error else {
            return Self::Srk(error);
        };
        if owner::refused(tpm_error) {
            return Self::OwnerAuth {
                tcti: tcti.to_string(),
                given: config.owner_auth.is_some(),
                detail: Box::new(error),
            };
        }
        if tpm_error.is_connection_failure() {
            return Self::Unreachable {
                cause: diagnose(tcti),
                detail: Box::new(error),
            };
        }
        Self::Refused {
            tcti: tcti.to_string(),
            operation: tpm_error.operation,
            fault: tpm_error.fault(),
            detail: Box::new(error),
        }
    }

    /// The TSS's account (return code and text), for a DEBUG line only.
    pub fn detail(&self) -> Option<String> {
        match self {
            Self::Unreachable { detail, .. }
            | Self::Refused { detail, .. }
            | Self::OwnerAuth { detail, .. } => {
                // tss-esapi's Display leaves the code to its error's source.
                Some(match detail.as_ref() {
                    OpenFailure::Srk(SrkError::Tpm(e)) => match e.response_code() {
                        Some(rc) => format!("{e} (TSS2_RC {rc:#x})"),
                        None => e.to_string(),
                    },
                    other => other.to_string(),
                })
            }
            Self::Srk(_) => None,
        }
    }
}

/// How long the diagnosis waits for a software TPM's port to answer.
const DIAGNOSIS_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Looks at the machine to say why tpm2-tss could not reach the TPM: the
/// TCTI library first (tpm2-tss fails the same way without it), then the
/// device, the software TPM's port, or the broker.
pub fn diagnose(tcti: &Tcti) -> ConnectFailure {
    // Loading the library also keeps it loaded; `serve` does that anyway.
    if sceau_sys::pin_tcti_library(tcti.kind()).is_err() {
        return ConnectFailure::LibraryMissing {
            library: tcti.library(),
            package: tcti.debian_package(),
        };
    }
    let unexplained = |what| ConnectFailure::Unexplained {
        tcti: tcti.to_string(),
        what,
    };
    match tcti.transport() {
        Transport::Device { path } => {
            diagnose_device(path).unwrap_or_else(|| unexplained("device"))
        }
        Transport::Swtpm { host, port } | Transport::Mssim { host, port } => {
            diagnose_network(host, *port).unwrap_or_else(|| unexplained("port"))
        }
        Transport::Tabrmd { .. } => ConnectFailure::BrokerUnreachable,
    }
}

/// Why `path` cannot serve as the TPM device, if it cannot: opened as
/// tpm2-tss opens it, for reading and writing.
pub fn diagnose_device(path: &std::path::Path) -> Option<ConnectFailure> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path);
    let error = opened.err()?;
    let path = path.to_path_buf();
    // EPERM (not EACCES) is the device cgroup's answer, systemd's
    // DeviceAllow=; both are PermissionDenied to std.
    Some(match error.kind() {
        _ if error.raw_os_error() == Some(libc::EPERM) => ConnectFailure::DeviceNotAllowed { path },
        std::io::ErrorKind::NotFound => ConnectFailure::DeviceMissing { path },
        std::io::ErrorKind::PermissionDenied => ConnectFailure::PermissionDenied { path },
        _ if error.raw_os_error() == Some(libc::EBUSY) => ConnectFailure::DeviceBusy { path },
        _ => ConnectFailure::DeviceUnusable {
            path,
            reason: error.to_string(),
        },
    })
}

fn diagnose_network(host: &str, port: u16) -> Option<ConnectFailure> {
    use std::net::ToSocketAddrs as _;
    let Ok(addresses) = (host, port).to_socket_addrs() else {
        return Some(ConnectFailure::UnknownHost { host: host.into() });
    };
    let addresses: Vec<_> = addresses.collect();
    let reachable = addresses.iter().any(|address| {
        std::net::TcpStream::connect_timeout(address, DIAGNOSIS_CONNECT_TIMEOUT).is_ok()
    });
    match (reachable, addresses.is_empty()) {
        (true, _) => None,
        (false, true) => Some(ConnectFailure::UnknownHost { host: host.into() }),
        (false, false) => Some(ConnectFailure::NothingListening {
            host: host.into(),
            port,
            control: u32::from(port) + 1,
        }),
    }
}
