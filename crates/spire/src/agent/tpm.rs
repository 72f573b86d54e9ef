//! The agent's TPM work for one attestation, blocking (run it in
//! `spawn_blocking`), through the daemon's TPM layer: the same TCTI parsing,
//! SRK template and salted sessions as `sceau serve`, and the EK and
//! credential activation of `sceau enroll` (sceau_tpm::enroll).
//!
//! [`Attestation::begin`] makes the payload: the EK (RSA-2048 or ECC P-256,
//! TCG default template) with its certificate, and an ECC P-256
//! attestation key (AK) created under the EK, as keylime's agent does, and
//! certified by itself with TPM2_CertifyCreation. Under the EK the AK is in
//! the endorsement hierarchy, so the TPM does not obfuscate the reset and
//! restart counts in what it signs, and the server can track resets
//! (`server::resets`); the EK's policy, PolicySecret(TPM_RH_ENDORSEMENT),
//! authorizes the Create and the Load under it. [`Attestation::answer`] opens the
//! server's credential with TPM2_ActivateCredential and quotes the PCRs it
//! asks for: in the SHA-256 bank, and, when it sends the event log, in
//! every other bank the log declares (the server replays each). Dropping the [`Attestation`] flushes every object and session
//! it loaded, whichever way the attestation ended.

use sceau_tpm::device::OpenFailure;
use sceau_tpm::enroll::{self, EndorsementKey};
use sceau_tpm::fault::{Fault, Recovery, TpmError};
use sceau_tpm::session::start_salted;
use sceau_tpm::srk::SrkError;
use sceau_tpm::{Tcti, Tpm, TpmConfig};
use sha2::{Digest as _, Sha256};
use tss_esapi::Context;
use tss_esapi::abstraction::AsymmetricAlgorithmSelection;
use tss_esapi::handles::{KeyHandle, ObjectHandle, SessionHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::key_bits::RsaKeyBits;
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{
    AttestInfo, CreationData, Data, EccPoint, HashScheme, PcrSelectionListBuilder, PcrSlot, Public,
    SignatureScheme,
};
use tss_esapi::traits::Marshall as _;
use tss_esapi::tss2_esys::{TPMS_CREATION_DATA, TPMT_TK_CREATION};

use std::path::{Path, PathBuf};

use super::raw::{RawChannel, RawError};
use crate::payload::{Challenge, ChallengeResponse, MAX_EVENT_LOG_LEN, PLACE_PROOF_LEN, Payload};
use crate::plugin::file::read_bounded;
use crate::server::event_log::{self, Bank};

/// TPM2_PCR_Read returns at most eight digests per call (TPML_DIGEST).
const PCRS_PER_READ: usize = 8;

/// Which TCG default EK template the agent uses (`ek_algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EkAlgorithm {
    /// RSA-2048, template L-1, certificate at NV 0x01C00002.
    #[default]
    Rsa2048,
    /// ECC NIST P-256, template L-2, certificate at NV 0x01C0000A.
    EccP256,
}

impl std::fmt::Display for EkAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Rsa2048 => "RSA-2048",
            Self::EccP256 => "ECC P-256",
        })
    }
}

impl EkAlgorithm {
    fn selection(self) -> AsymmetricAlgorithmSelection {
        match self {
            Self::Rsa2048 => AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa2048),
            Self::EccP256 => AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256),
        }
    }
}

/// What the agent's TPM work needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmSettings {
    pub tcti: Tcti,
    pub ek_algorithm: EkAlgorithm,
    /// The firmware event log sent with a quote of PCRs 0–7 (`None`: never
    /// sent).
    pub event_log_path: Option<PathBuf>,
}

/// The PCRs the firmware measures the boot into; a challenge whose quote
/// covers them all is one a measured-boot server sent, and gets the log.
const BOOT_PCRS: std::ops::RangeInclusive<u8> = 0..=7;

/// A failed attestation step, as one line for SPIRE's log. The TPM's own
/// return code and the TSS's text are not in it: only the step and the
/// daemon's fault class (the detail goes to the debug log).
#[derive(Debug, thiserror::Error)]
pub enum AgentTpmError {
    #[error(
        "cannot use the TPM at {tcti} ({fault}); check the plugin's `tcti` setting and the agent's access to it"
    )]
    Open { tcti: String, fault: Fault },
    #[error("TPM {step} failed ({fault})")]
    Step { step: &'static str, fault: Fault },
    #[error(
        "the server's credential does not open on this TPM (another EK or AK); attestation must start again"
    )]
    CredentialRejected,
    #[error("{0}")]
    SecondConnection(String),
    #[error("the TPM returned a malformed {0}")]
    Malformed(&'static str),
    #[error("the PCRs changed while they were being quoted, twice; try again")]
    PcrsChanging,
    #[error("the attestation was already used for a challenge")]
    AlreadyAnswered,
}

impl AgentTpmError {
    fn step(step: &'static str, error: TpmError) -> Self {
        log::debug!("TPM {step}: {error}");
        Self::Step {
            step,
            fault: fault_of(&error),
        }
    }
}

impl From<RawError> for AgentTpmError {
    fn from(error: RawError) -> Self {
        match error {
            RawError::Tpm(e) => Self::step(e.operation, e),
            RawError::Malformed(what) => Self::Malformed(what),
            other => Self::SecondConnection(other.to_string()),
        }
    }
}

/// The daemon's classification, reduced to the word a log reader acts on.
fn fault_of(error: &TpmError) -> Fault {
    match error.recovery() {
        Recovery::Report(fault) => fault,
        Recovery::RetryLater => Fault::Busy,
        Recovery::Reconnect => Fault::Unreachable,
        Recovery::NewSession => Fault::Failure,
    }
}

/// One attestation's TPM state: the open TPM (context, SRK), the loaded AK
/// and EK. Dropping it flushes them; the SRK and any session left are
/// flushed when the context closes.
pub struct Attestation {
    tpm: Tpm,
    ak: Option<KeyHandle>,
    ek: Option<EndorsementKey>,
    answered: bool,
    event_log_path: Option<PathBuf>,
}

impl std::fmt::Debug for Attestation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attestation")
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl Attestation {
    /// Opens the TPM, makes and certifies a fresh AK, reads the EK and its
    /// certificate, and returns the payload for the server.
    pub fn begin(settings: &TpmSettings) -> Result<(Self, Payload), AgentTpmError> {
        Self::begin_with_place_proof(settings, None)
    }

    /// As [`Attestation::begin`], with the place proof of this EK's last
    /// attestation ([`crate::payload::place_proof`] of the credential it
    /// activated) in the AK's creation data, where TPM2_Create records it
    /// as outsideInfo: the server gives a payload that carries the proof
    /// it expects a place kept for nodes that attested before.
    pub fn begin_with_place_proof(
        settings: &TpmSettings,
        proof: Option<&[u8; PLACE_PROOF_LEN]>,
    ) -> Result<(Self, Payload), AgentTpmError> {
        let template = ak_template().map_err(|e| AgentTpmError::step("AK template", e))?;
        Self::begin_with(settings, template, proof)
    }

    /// As [`Attestation::begin`], with another AK template. Only the test
    /// agent (`examples/rogue_agent.rs`) uses it, to prove that the server
    /// refuses AKs that are not restricted signing keys.
    pub fn begin_with_ak_template(
        settings: &TpmSettings,
        ak_template: Public,
    ) -> Result<(Self, Payload), AgentTpmError> {
        Self::begin_with(settings, ak_template, None)
    }

    fn begin_with(
        settings: &TpmSettings,
        ak_template: Public,
        proof: Option<&[u8; PLACE_PROOF_LEN]>,
    ) -> Result<(Self, Payload), AgentTpmError> {
        // Refuse a TCTI that cannot carry CertifyCreation before any TPM work.
        let raw = RawChannel::for_tcti(&settings.tcti)?;
        let config = TpmConfig::plain(settings.tcti.clone());
        let mut tpm = Tpm::open(&config).map_err(|e| open_error(&settings.tcti, e))?;
        // Tpm::open starts the daemon's long-lived DEK session; the agent
        // starts its own for the one command that needs it, and keeps a
        // session slot free for the EK's policy session.
        tpm.discard_session();
        let mut attestation = Self {
            tpm,
            ak: None,
            ek: None,
            answered: false,
            event_log_path: settings.event_log_path.clone(),
        };
        let payload = attestation.make_payload(&raw, settings.ek_algorithm, ak_template, proof)?;
        Ok((attestation, payload))
    }

    fn make_payload(
        &mut self,
        raw: &RawChannel,
        ek_algorithm: EkAlgorithm,
        template: Public,
        proof: Option<&[u8; PLACE_PROOF_LEN]>,
    ) -> Result<Payload, AgentTpmError> {
        let outside_info = proof
            .map(|proof| Data::try_from(proof.to_vec()))
            .transpose()
            .map_err(|e| AgentTpmError::step("outsideInfo", TpmError::new("Data", e)))?;
        let (ctx, _) = self.tpm.context_and_srk();
        let ek = enroll::endorsement_key_for(ctx, ek_algorithm.selection())
            .map_err(|e| AgentTpmError::step("CreatePrimary (EK)", e))?;
        let ek_handle = ek.handle();
        self.ek = Some(ek);
        let created = with_ek_policy(ctx, "Create (AK)", |c, policy| {
            c.execute_with_session(Some(policy), |c| {
                c.create(ek_handle, template, None, None, outside_info, None)
            })
        })?;
        let ak_public = created
            .out_public
            .marshall()
            .map_err(|e| AgentTpmError::step("marshal AK", TpmError::new("marshal", e)))?;
        let creation_data = marshal_creation_data(created.creation_data)?;
        let ticket = TPMT_TK_CREATION::try_from(created.creation_ticket)
            .map_err(|e| AgentTpmError::step("creation ticket", TpmError::new("ticket", e)))?;
        let ak = with_ek_policy(ctx, "Load (AK)", |c, policy| {
            c.execute_with_session(Some(policy), |c| {
                c.load(ek_handle, created.out_private, created.out_public)
            })
        })?;
        let saved = ctx.context_save(ak.into()).map_err(|e| {
            AgentTpmError::step("ContextSave (AK)", TpmError::new("ContextSave", e))
        })?;
        // A TPM without a resource manager holds three objects (SRK, EK,
        // AK here), and CertifyCreation's second copy of the AK needs one:
        // the AK is flushed while the copy is certified, then loaded again
        // from its saved context.
        flush(ctx, ak.into(), "AK");
        let (creation_attestation, creation_signature) =
            raw.certify_creation(&saved, created.creation_hash.value(), &ticket)?;
        let ak = ctx.context_load(saved).map_err(|e| {
            AgentTpmError::step("ContextLoad (AK)", TpmError::new("ContextLoad", e))
        })?;
        self.ak = Some(KeyHandle::from(ak));
        let ek = self.ek.as_ref().expect("made above");
        let ek_public = tpmt_from_tpm2b(&ek.public)?;
        let ek_certificate = ek.certificate.clone().unwrap_or_default();
        Ok(Payload {
            ek_public,
            ek_certificate,
            ak_public,
            creation_data,
            creation_attestation,
            creation_signature,
        })
    }

    /// Answers the server's challenge: ActivateCredential (AK as the
    /// credential's object, EK as its key), then a quote of the PCRs it
    /// names with its nonce. An attestation answers once.
    pub fn answer(&mut self, challenge: &Challenge) -> Result<ChallengeResponse, AgentTpmError> {
        if std::mem::replace(&mut self.answered, true) {
            return Err(AgentTpmError::AlreadyAnswered);
        }
        let (Some(ak), Some(ek)) = (self.ak, self.ek.as_ref()) else {
            return Err(AgentTpmError::AlreadyAnswered);
        };
        let (ctx, srk) = self.tpm.context_and_srk();
        let srk = srk.handle;
        // The credential is a secret: the AK's authorization runs in a
        // session salted to the SRK with response encryption.
        let session = start_salted(ctx, srk).map_err(|e| AgentTpmError::step("session", e))?;
        let credential = enroll::activate_credential_for(
            ctx,
            ak,
            session,
            ek,
            &challenge.credential_blob,
            &challenge.encrypted_secret,
        );
        flush(ctx, SessionHandle::from(session).into(), "salted session");
        let credential = credential.map_err(|e| match fault_of(&e) {
            Fault::EnvelopeRejected => {
                log::debug!("ActivateCredential: {e}");
                AgentTpmError::CredentialRejected
            }
            _ => AgentTpmError::step("ActivateCredential", e),
        })?;
        let mut response = ChallengeResponse {
            credential,
            quote: Vec::new(),
            quote_signature: Vec::new(),
            pcr_values: Vec::new(),
            event_log: Vec::new(),
        };
        if !challenge.quote_pcrs.is_empty() {
            // The log is read before the quote, to quote every bank it
            // declares; a firmware log does not change once the OS runs,
            // so it describes the boot the quote does.
            let boot_quoted = BOOT_PCRS.clone().all(|p| challenge.quote_pcrs.contains(&p));
            if let (true, Some(path)) = (boot_quoted, &self.event_log_path) {
                response.event_log = read_event_log(path);
            }
            let banks = banks_to_quote(&response.event_log);
            let mut quoted = quote(ctx, ak, &challenge.nonce, &challenge.quote_pcrs, &banks)?;
            if !quoted.consistent {
                log::info!("the PCRs changed between TPM2_Quote and TPM2_PCR_Read; quoting again");
                quoted = quote(ctx, ak, &challenge.nonce, &challenge.quote_pcrs, &banks)?;
                if !quoted.consistent {
                    return Err(AgentTpmError::PcrsChanging);
                }
            }
            response.quote = quoted.attest;
            response.quote_signature = quoted.signature;
            response.pcr_values = quoted.values;
        }
        Ok(response)
    }
}

/// The event log at `path`, read when the challenge asks for it, right
/// before the quote, so that both describe the same boot; empty (and one log line) when there is none to send. A
/// missing log is not an error here: the server decides whether it needs
/// one (`measured_boot = "required"` refuses, `"optional"` attests without
/// its selectors), and its refusal names the absence.
pub fn read_event_log(path: &Path) -> Vec<u8> {
    match read_bounded(path, MAX_EVENT_LOG_LEN as u64) {
        Ok(bytes) if bytes.is_empty() => {
            log::warn!("the event log {} is empty; none sent", path.display());
            Vec::new()
        }
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => {
            log::info!(
                "no event log at {} (no TPM firmware log, or securityfs not mounted); none sent",
                path.display()
            );
            Vec::new()
        }
        Err(e) => {
            log::warn!("event log not sent: {e}");
            Vec::new()
        }
    }
}

/// `command` in the EK's policy session (PolicySecret(TPM_RH_ENDORSEMENT)),
/// which is flushed after it whatever the outcome.
fn with_ek_policy<T>(
    ctx: &mut Context,
    step: &'static str,
    command: impl FnOnce(&mut Context, AuthSession) -> Result<T, tss_esapi::Error>,
) -> Result<T, AgentTpmError> {
    let policy = enroll::endorsement_policy_session(ctx)
        .map_err(|e| AgentTpmError::step("PolicySecret (endorsement)", e))?;
    let result = command(ctx, policy);
    // Already gone if the TPM ended it with the command (continueSession
    // clear); the flush then fails, which is not worth a warning.
    if let Err(e) = ctx.flush_context(SessionHandle::from(policy).into()) {
        log::debug!("FlushContext of the EK policy session: {e}");
    }
    result.map_err(|e| AgentTpmError::step(step, TpmError::new(step, e)))
}

impl Drop for Attestation {
    fn drop(&mut self) {
        let (ctx, _) = self.tpm.context_and_srk();
        if let Some(ak) = self.ak.take() {
            flush(ctx, ak.into(), "AK");
        }
        if let Some(ek) = self.ek.take() {
            flush(ctx, ek.handle().into(), "EK");
        }
        // The SRK is flushed when the context inside `tpm` closes.
    }
}

fn flush(ctx: &mut Context, handle: ObjectHandle, what: &str) {
    if let Err(e) = ctx.flush_context(handle) {
        log::warn!("FlushContext of the {what} failed; the TPM drops it at its next reset ({e})");
    }
}

fn open_error(tcti: &Tcti, error: OpenFailure) -> AgentTpmError {
    let fault = match &error {
        OpenFailure::Srk(SrkError::Tpm(e)) => fault_of(e),
        _ => Fault::Failure,
    };
    log::debug!("opening the TPM at {tcti}: {error}");
    AgentTpmError::Open {
        tcti: tcti.to_string(),
        fault,
    }
}

/// The AK: ECC P-256, nameAlg SHA-256, a restricted ECDSA-SHA256 signing key
/// that never leaves this TPM (fixedTPM, fixedParent, sensitiveDataOrigin),
/// used with an empty authValue (userWithAuth) and exempt from the
/// dictionary-attack counter (noDA).
pub fn ak_template() -> Result<Public, TpmError> {
    ak_template_with(true)
}

/// The AK template with `restricted` as given: `false` makes a general
/// signing key, which the server must refuse (for the tests and the rogue
/// test agent; the plugin always uses [`ak_template`]). The template is the
/// TPM layer's, shared with the envelope signing key, with an empty
/// `unique`.
pub fn ak_template_with(restricted: bool) -> Result<Public, TpmError> {
    sceau_tpm::signing::ecdsa_p256_template(restricted, EccPoint::default())
        .map_err(|e| TpmError::new("AK template", e))
}

/// TPMS_CREATION_DATA as the TPM marshals it: the bytes whose SHA-256 is
/// the creationHash. tss-esapi 7.7 keeps the fields private and has no
/// marshaller for it, so they are read from the tpm2-tss structure.
fn marshal_creation_data(data: CreationData) -> Result<Vec<u8>, AgentTpmError> {
    let raw = TPMS_CREATION_DATA::from(data);
    let bad = || AgentTpmError::Malformed("creation data");
    let sized = |bytes: &[u8], size: u16| bytes.get(..usize::from(size)).map(<[u8]>::to_vec);
    let mut out = sceau_format::wire::Writer::default();
    out.u32(raw.pcrSelect.count);
    let count = usize::try_from(raw.pcrSelect.count).map_err(|_| bad())?;
    for selection in raw.pcrSelect.pcrSelections.get(..count).ok_or_else(bad)? {
        let select = selection
            .pcrSelect
            .get(..usize::from(selection.sizeofSelect))
            .ok_or_else(bad)?;
        out.u16(selection.hash)
            .u8(selection.sizeofSelect)
            .raw(select);
    }
    out.tpm2b(&sized(&raw.pcrDigest.buffer, raw.pcrDigest.size).ok_or_else(bad)?)
        .u8(raw.locality)
        .u16(raw.parentNameAlg)
        .tpm2b(&sized(&raw.parentName.name, raw.parentName.size).ok_or_else(bad)?)
        .tpm2b(&sized(&raw.parentQualifiedName.name, raw.parentQualifiedName.size).ok_or_else(bad)?)
        .tpm2b(&sized(&raw.outsideInfo.buffer, raw.outsideInfo.size).ok_or_else(bad)?);
    Ok(out.finish())
}

/// The TPMT_PUBLIC inside a marshalled TPM2B_PUBLIC.
fn tpmt_from_tpm2b(tpm2b: &[u8]) -> Result<Vec<u8>, AgentTpmError> {
    let mut r = sceau_format::wire::Reader::new(tpm2b);
    let inner = r
        .tpm2b("TPM2B_PUBLIC")
        .map_err(|_| AgentTpmError::Malformed("EK public area"))?;
    r.finish("TPM2B_PUBLIC")
        .map_err(|_| AgentTpmError::Malformed("EK public area"))?;
    Ok(inner.to_vec())
}

/// SHA-256, then every other bank `event_log` declares (none when it is
/// empty; SHA-256 alone, and one log line, when its header does not parse:
/// the server names what is wrong with it).
fn banks_to_quote(event_log: &[u8]) -> Vec<Bank> {
    let mut banks = vec![Bank::Sha256];
    if event_log.is_empty() {
        return banks;
    }
    match event_log::declared_banks(event_log) {
        Ok(declared) => banks.extend(declared.into_iter().filter(|b| *b != Bank::Sha256)),
        Err(e) => log::warn!("the event log's header does not parse ({e}); quoting SHA-256 alone"),
    }
    banks
}

fn hashing_algorithm(bank: Bank) -> HashingAlgorithm {
    match bank {
        Bank::Sha1 => HashingAlgorithm::Sha1,
        Bank::Sha256 => HashingAlgorithm::Sha256,
        Bank::Sha384 => HashingAlgorithm::Sha384,
        Bank::Sha512 => HashingAlgorithm::Sha512,
    }
}

struct Quoted {
    attest: Vec<u8>,
    signature: Vec<u8>,
    /// In the quote's selection order: bank after bank, PCRs increasing.
    values: Vec<Vec<u8>>,
    /// The values read hash to the digest the quote signed.
    consistent: bool,
}

/// TPM2_Quote of `pcrs` in `banks` with `nonce`, then TPM2_PCR_Read of
/// what the quote selected, in its selection's order (the TPM's, which
/// the server reads from the signed quote). Whether a PCR was extended in
/// between is decided by hashing the values read and comparing with the
/// quote's pcrDigest, which is stricter than comparing update counters.
fn quote(
    ctx: &mut Context,
    ak: KeyHandle,
    nonce: &[u8],
    pcrs: &[u8],
    banks: &[Bank],
) -> Result<Quoted, AgentTpmError> {
    let algorithms: Vec<HashingAlgorithm> = banks.iter().map(|b| hashing_algorithm(*b)).collect();
    let selection = pcr_selection(pcrs, &algorithms)?;
    let qualifying = Data::try_from(nonce.to_vec())
        .map_err(|e| AgentTpmError::step("Quote", TpmError::new("nonce", e)))?;
    let scheme = SignatureScheme::EcDsa {
        hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
    };
    let (attest, signature) = ctx
        .execute_with_session(Some(AuthSession::Password), |c| {
            c.quote(ak, qualifying, scheme, selection)
        })
        .map_err(|e| AgentTpmError::step("Quote", TpmError::new("Quote", e)))?;
    let AttestInfo::Quote { info } = attest.attested() else {
        return Err(AgentTpmError::Malformed("quote"));
    };
    let quoted_digest = info.pcr_digest().value().to_vec();
    let selected: Vec<(HashingAlgorithm, Vec<u8>)> = info
        .pcr_selection()
        .get_selections()
        .iter()
        .map(|s| {
            let mut indices: Vec<u8> = s
                .selected()
                .into_iter()
                .map(|slot| u32::from(slot).trailing_zeros() as u8)
                .collect();
            indices.sort_unstable();
            (s.hashing_algorithm(), indices)
        })
        .collect();
    let marshal = |e| AgentTpmError::step("marshal quote", TpmError::new("marshal", e));
    let attest = attest.marshall().map_err(marshal)?;
    let signature = signature.marshall().map_err(marshal)?;
    let mut values = Vec::with_capacity(pcrs.len() * banks.len());
    for (algorithm, indices) in &selected {
        for chunk in indices.chunks(PCRS_PER_READ) {
            let (_, _, digests) = ctx
                .execute_without_session(|c| c.pcr_read(pcr_selection(chunk, &[*algorithm])?))
                .map_err(|e| AgentTpmError::step("PCR_Read", TpmError::new("PCR_Read", e)))?;
            if digests.len() != chunk.len() {
                return Err(AgentTpmError::Malformed("PCR_Read answer"));
            }
            values.extend(digests.value().iter().map(|d| d.value().to_vec()));
        }
    }
    let mut hash = Sha256::new();
    for value in &values {
        hash.update(value);
    }
    let consistent = hash.finalize().as_slice() == quoted_digest.as_slice();
    Ok(Quoted {
        attest,
        signature,
        values,
        consistent,
    })
}

/// A selection of `pcrs` in each of `banks`.
fn pcr_selection(
    pcrs: &[u8],
    banks: &[HashingAlgorithm],
) -> Result<tss_esapi::structures::PcrSelectionList, tss_esapi::Error> {
    let slots = pcrs
        .iter()
        .map(|index| PcrSlot::try_from(1u32 << index))
        .collect::<Result<Vec<_>, _>>()?;
    banks
        .iter()
        .fold(PcrSelectionListBuilder::new(), |builder, bank| {
            builder.with_selection(*bank, &slots)
        })
        .build()
}

impl From<tss_esapi::Error> for AgentTpmError {
    fn from(error: tss_esapi::Error) -> Self {
        Self::step("PCR selection", TpmError::new("PCR selection", error))
    }
}

#[cfg(test)]
mod event_log_tests {
    use super::*;
    use sceau_testkit::TempDir;
    use std::time::{Duration, Instant};

    /// `read_event_log` in a thread, so that a blocking open fails the test
    /// (after 5 s) instead of hanging it.
    fn read_bounded_in_time(path: &Path) -> Vec<u8> {
        let (sender, receiver) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        let started = Instant::now();
        std::thread::spawn(move || {
            let _ = sender.send(read_event_log(&path));
        });
        let bytes = receiver
            .recv_timeout(Duration::from_secs(5))
            .expect("reading the event log hung");
        assert!(started.elapsed() < Duration::from_secs(2));
        bytes
    }

    #[test]
    fn a_log_is_read_and_anything_else_sends_none() {
        let dir = TempDir::new("sceau-spire-agent-log");
        let log = dir.join("binary_bios_measurements");
        std::fs::write(&log, b"a log").unwrap();
        assert_eq!(read_bounded_in_time(&log), b"a log");
        assert!(read_bounded_in_time(&dir.join("missing")).is_empty());
        assert!(read_bounded_in_time(dir.path()).is_empty());
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        assert!(read_bounded_in_time(&fifo).is_empty());
        let large = dir.join("large");
        let file = std::fs::File::create(&large).unwrap();
        file.set_len(MAX_EVENT_LOG_LEN as u64 + 1).unwrap();
        assert!(read_bounded_in_time(&large).is_empty());
        file.set_len(MAX_EVENT_LOG_LEN as u64).unwrap();
        assert_eq!(read_bounded_in_time(&large).len(), MAX_EVENT_LOG_LEN);
    }
}
