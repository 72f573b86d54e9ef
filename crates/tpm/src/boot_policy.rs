//! Boot-state binding in the TPM: DEK seeds sealed to a policy key open only
//! through a signed PCR policy that matches the PCRs now.
//!
//! Objects are sealed with authPolicy = PolicyAuthorize(policy key) and
//! userWithAuth clear, so no password or HMAC session can unseal them. At
//! start, each signed policy's signature is checked by the TPM itself
//! (LoadExternal of the policy key in the owner hierarchy, then
//! VerifySignature), which returns the ticket PolicyAuthorize needs; the
//! tickets are kept for the life of the TPM connection. A Decrypt then costs
//! two commands more than without a policy: PolicyPCR and PolicyAuthorize in
//! a salted policy session that Unseal consumes (the TPM resets a policy
//! session after it authorizes a command, so the session itself is reused).
//!
//! Which policy to use is decided from the PCRs (read at start, and again
//! when PolicyAuthorize says the session's digest is not the policy's: the
//! PCRs changed), not tried one by one, so a mismatch costs one PCR_Read.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::handles::{KeyHandle, ObjectHandle, SessionHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Digest, EccParameter, EccSignature, Name, Nonce, Public, PublicKeyRsa, RsaSignature, Signature,
    VerifiedTicket,
};
use tss_esapi::traits::UnMarshall as _;
use tss_esapi::tss2_esys::TPMT_TK_VERIFIED;

use super::fault::{Fault, TpmError};
use super::observe::{Observer, TpmCommand};
use super::pcrs::{self, PcrReadError};
use super::session::start_salted_policy;
use sceau_format::key_id::hex;
use sceau_format::pcr_policy::{
    PcrSelection, PcrValues, SignedPolicy, policy_pcr_digest, unextended,
};
use sceau_format::policy_key::{PolicyKey, approved_hash, ecdsa_from_der};

/// What `serve --policy-key` and `--policy` gave: the key, and each signed
/// policy with the file it came from (for the lines that name it).
#[derive(Debug, Clone)]
pub struct BootPolicyConfig {
    pub key: PolicyKey,
    pub policies: Vec<(String, SignedPolicy)>,
}

/// Why the signed policies cannot be used; `serve` refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum BootPolicyError {
    #[error(transparent)]
    Tpm(#[from] TpmError),
    #[error(transparent)]
    Pcrs(#[from] PcrReadError),
    #[error(
        "{file}: signed by another key than --policy-key (its key fingerprint is {fingerprint})"
    )]
    OtherKey { file: String, fingerprint: String },
    #[error("{file}: the signature does not verify with --policy-key (checked by the TPM)")]
    BadSignature { file: String },
    #[error(
        "{file}: PCR {index} reads all {state} on this TPM: nothing extended it, so any OS \
         booted on this machine can give it the value the policy expects; bind to PCRs the \
         firmware or the boot loader measures (docs/boot-binding.md)"
    )]
    Unextended {
        file: String,
        index: u8,
        state: &'static str,
    },
    #[error(
        "the TPM names the policy key {tpm}, not {ours}: sceau would seal to a policy no \
         session can satisfy"
    )]
    NameMismatch { tpm: String, ours: String },
}

/// A signed policy the TPM has verified, with its ticket.
struct VerifiedPolicy {
    file: String,
    policy: SignedPolicy,
    ticket: TPMT_TK_VERIFIED,
}

/// The policies of one TPM connection, and the one that matches the PCRs.
pub struct BootPolicies {
    key_name: Name,
    authorized_policy: [u8; 32],
    policies: Vec<VerifiedPolicy>,
    /// Every PCR some policy covers: what a re-evaluation reads.
    all_pcrs: PcrSelection,
    /// The policy whose digest is the PolicyPCR digest of the PCRs as last
    /// read; `None` while none matches.
    current: Option<usize>,
    /// Whether the PCRs were evaluated once: a mismatch is logged when it
    /// begins, not at every probe while it lasts.
    evaluated: bool,
    session: Option<PolicySession>,
}

impl BootPolicies {
    /// Checks every policy in the TPM and picks the one the PCRs match.
    /// Refuses a policy of another key, a bad signature, or a PCR that was
    /// never extended; a mismatch is not refused (Encrypt still works, and
    /// a newly signed policy fixes it), only logged.
    pub fn load(
        ctx: &mut Context,
        config: &BootPolicyConfig,
        observer: &Observer,
    ) -> Result<Self, BootPolicyError> {
        let all_pcrs = PcrSelection::from_indices(
            config
                .policies
                .iter()
                .flat_map(|(_, p)| p.pcrs.indices())
                .map(u64::from)
                .collect::<std::collections::BTreeSet<_>>(),
        )
        .expect("every policy names at least one PCR");
        let values = pcrs::read(ctx, all_pcrs)?;
        for (file, policy) in &config.policies {
            if !policy.names_key(&config.key) {
                return Err(BootPolicyError::OtherKey {
                    file: file.clone(),
                    fingerprint: policy.key_fingerprint.map(|f| hex(&f)).unwrap_or_default(),
                });
            }
            for index in policy.pcrs.indices() {
                let value = values.get(index).expect("read above");
                if let Some(state) = unextended(value) {
                    return Err(BootPolicyError::Unextended {
                        file: file.clone(),
                        index,
                        state,
                    });
                }
            }
        }
        let public = Public::unmarshall(&config.key.tpmt_public())
            .map_err(|e| TpmError::new("policy key public area", e))?;
        let key = ctx
            .execute_without_session(|c| c.load_external_public(public, Hierarchy::Owner))
            .map_err(|e| TpmError::new("LoadExternal (policy key)", e))?;
        let verified = verify_all(ctx, key, config);
        let key_name = ctx.tr_get_name(ObjectHandle::from(key));
        if let Err(e) = ctx.flush_context(ObjectHandle::from(key)) {
            log::warn!("FlushContext of the policy key failed: {e}");
        }
        let key_name = key_name.map_err(|e| TpmError::new("TR_GetName (policy key)", e))?;
        let ours = config.key.name();
        if key_name.value() != ours {
            return Err(BootPolicyError::NameMismatch {
                tpm: hex(key_name.value()),
                ours: hex(&ours),
            });
        }
        let mut loaded = Self {
            key_name,
            authorized_policy: config.key.authorized_policy(),
            policies: verified?,
            all_pcrs,
            current: None,
            evaluated: false,
            session: None,
        };
        loaded.choose(&values, observer);
        Ok(loaded)
    }

    /// The policy key's Name, as the TPM computed it.
    pub fn key_name(&self) -> &[u8] {
        self.key_name.value()
    }

    /// The authPolicy of every object sealed while this key is configured.
    pub fn authorized_policy(&self) -> &[u8; 32] {
        &self.authorized_policy
    }

    /// Whether some loaded policy matched the PCRs when last read.
    pub fn matched(&self) -> bool {
        self.current.is_some()
    }

    /// Reads the PCRs again and picks the matching policy: for a probe, and
    /// after PolicyAuthorize found the PCRs changed.
    pub fn reevaluate(&mut self, ctx: &mut Context, observer: &Observer) -> Result<bool, TpmError> {
        let values = observer
            .timed(TpmCommand::PcrRead, || pcrs::read(ctx, self.all_pcrs))
            .map_err(|e| match e {
                PcrReadError::Tpm(e) => e,
                other => TpmError::refused(other.to_string(), Fault::Failure),
            })?;
        self.choose(&values, observer);
        Ok(self.matched())
    }

    fn choose(&mut self, values: &PcrValues, observer: &Observer) {
        let before = self.current;
        self.current = self.policies.iter().position(|v| {
            policy_pcr_digest(v.policy.pcrs, values).is_ok_and(|digest| digest == v.policy.policy)
        });
        let changed = !self.evaluated || before != self.current;
        self.evaluated = true;
        observer.boot_policy(self.current.is_some());
        match self.current {
            Some(i) if changed => log::info!(
                "boot policy: the PCRs match {} (PCRs {})",
                self.policies[i].file,
                self.policies[i].policy.pcrs
            ),
            None if changed => log::warn!(
                "boot policy: no signed policy matches the PCRs; DEKs sealed to the policy key \
                 do not open until one does (docs/boot-binding.md): {}",
                describe_differences(values, &self.policies)
            ),
            _ => {}
        }
    }

    /// Satisfies the authPolicy in the policy session: PolicyPCR, then
    /// PolicyAuthorize with the current policy's ticket. Returns the session
    /// for Unseal. A session left half-satisfied by a failure is flushed.
    pub fn authorize(
        &mut self,
        ctx: &mut Context,
        salt_key: KeyHandle,
        observer: &Observer,
    ) -> Result<AuthSession, TpmError> {
        let mut reread = false;
        loop {
            let Some(index) = self.current else {
                if !reread && self.reevaluate(ctx, observer)? {
                    reread = true;
                    continue;
                }
                return Err(TpmError::refused(
                    "boot policy: no signed policy matches the PCRs".into(),
                    Fault::PolicyMismatch,
                ));
            };
            let session = self.session(ctx, salt_key, observer)?;
            match self.run_policy(ctx, session, index, observer) {
                Ok(()) => return Ok(session.into()),
                Err(error) => {
                    self.discard_session(ctx);
                    // TPM_RC_VALUE on PolicyAuthorize: the session's digest
                    // is not the approved policy, so the PCRs moved.
                    if !reread && error.operation == "PolicyAuthorize" {
                        reread = true;
                        self.reevaluate(ctx, observer)?;
                        continue;
                    }
                    return Err(error);
                }
            }
        }
    }

    fn run_policy(
        &self,
        ctx: &mut Context,
        session: PolicySession,
        index: usize,
        observer: &Observer,
    ) -> Result<(), TpmError> {
        let verified = &self.policies[index];
        let selection = pcrs::sha256_selection(verified.policy.pcrs)?;
        observer
            .timed(TpmCommand::PolicyPcr, || {
                ctx.execute_without_session(|c| c.policy_pcr(session, Digest::default(), selection))
            })
            .map_err(|e| TpmError::new("PolicyPCR", e))?;
        let approved = Digest::try_from(verified.policy.policy.to_vec())
            .map_err(|e| TpmError::new("approved policy", e))?;
        let ticket = VerifiedTicket::try_from(verified.ticket)
            .map_err(|e| TpmError::new("policy ticket", e))?;
        observer
            .timed(TpmCommand::PolicyAuthorize, || {
                ctx.execute_without_session(|c| {
                    c.policy_authorize(session, approved, Nonce::default(), &self.key_name, ticket)
                })
            })
            .map_err(|e| TpmError::new("PolicyAuthorize", e))
    }

    /// The policy session, salted with the SRK and with response encryption
    /// on, so that Unseal's answer crosses the bus encrypted; started at open
    /// (so that no Decrypt pays for it), and again after a failure.
    pub fn session(
        &mut self,
        ctx: &mut Context,
        salt_key: KeyHandle,
        observer: &Observer,
    ) -> Result<PolicySession, TpmError> {
        if let Some(session) = self.session {
            return Ok(session);
        }
        let session = observer.timed(TpmCommand::StartAuthSession, || {
            start_salted_policy(ctx, salt_key)
        })?;
        self.session = Some(session);
        Ok(session)
    }

    /// Flushes the policy session; the next Decrypt starts a new one.
    pub fn discard_session(&mut self, ctx: &mut Context) {
        if let Some(session) = self.session.take() {
            let handle = ObjectHandle::from(SessionHandle::from(session));
            if let Err(e) = ctx.flush_context(handle) {
                log::debug!("flushing the policy session failed: {e}");
            }
        }
    }
}

/// LoadExternal'ed `key` checks every policy's signature: VerifySignature
/// over aHash, whose ticket PolicyAuthorize takes.
fn verify_all(
    ctx: &mut Context,
    key: KeyHandle,
    config: &BootPolicyConfig,
) -> Result<Vec<VerifiedPolicy>, BootPolicyError> {
    let mut verified = Vec::with_capacity(config.policies.len());
    for (file, policy) in &config.policies {
        let bad = || BootPolicyError::BadSignature { file: file.clone() };
        let signature = tss_signature(&config.key, &policy.signature).ok_or_else(bad)?;
        let digest = Digest::try_from(approved_hash(&policy.policy).to_vec())
            .map_err(|e| TpmError::new("policy digest", e))?;
        let ticket = ctx
            .execute_without_session(|c| c.verify_signature(key, digest, signature))
            .map_err(|e| match TpmError::new("VerifySignature", e) {
                // The TPM's answer to a signature that does not verify; a
                // busy or lost TPM is reported as what it is.
                e if e.is_parameter_error() => bad(),
                e => e.into(),
            })?;
        let ticket = TPMT_TK_VERIFIED::try_from(ticket)
            .map_err(|e| TpmError::new("VerifySignature ticket", e))?;
        verified.push(VerifiedPolicy {
            file: file.clone(),
            policy: policy.clone(),
            ticket,
        });
    }
    Ok(verified)
}

/// The signature as the TPM takes it: RSASSA with SHA-256 for an RSA key,
/// ECDSA with SHA-256 (r and s from the DER) for a P-256 key.
fn tss_signature(key: &PolicyKey, signature: &[u8]) -> Option<Signature> {
    match key {
        PolicyKey::Rsa { .. } => {
            let sig = PublicKeyRsa::try_from(signature.to_vec()).ok()?;
            RsaSignature::create(HashingAlgorithm::Sha256, sig)
                .ok()
                .map(Signature::RsaSsa)
        }
        PolicyKey::P256(_) => {
            let (r, s) = ecdsa_from_der(signature).ok()?;
            EccSignature::create(
                HashingAlgorithm::Sha256,
                EccParameter::try_from(r.to_vec()).ok()?,
                EccParameter::try_from(s.to_vec()).ok()?,
            )
            .ok()
            .map(Signature::EcDsa)
        }
    }
}

/// For each policy, what differs: PCR by PCR (expected, actual) when the
/// file carries the values it was signed at (sceau's files do, checked to
/// give the signed digest), else which PCRs it covers and what they read
/// now (systemd's files hold only the digest): what an operator signs anew.
fn describe_differences(values: &PcrValues, policies: &[VerifiedPolicy]) -> String {
    let files: Vec<String> = policies
        .iter()
        .map(|v| match &v.policy.values {
            Some(signed) => {
                let differing: Vec<String> = signed
                    .iter()
                    .filter(|(index, expected)| values.get(*index) != Some(*expected))
                    .map(|(index, expected)| {
                        format!(
                            "PCR {index} expected {} actual {}",
                            hex(expected),
                            values
                                .get(index)
                                .map_or_else(|| "unread".to_string(), |v| hex(v))
                        )
                    })
                    .collect();
                format!("{}: {}", v.file, differing.join(", "))
            }
            None => {
                let now: Vec<String> = v
                    .policy
                    .pcrs
                    .indices()
                    .map(|index| {
                        format!(
                            "{index}={}",
                            values
                                .get(index)
                                .map_or_else(|| "unread".to_string(), |v| hex(v))
                        )
                    })
                    .collect();
                format!(
                    "{}: PCRs {} (only its digest is known), now {}",
                    v.file,
                    v.policy.pcrs,
                    now.join(" ")
                )
            }
        })
        .collect();
    files.join("; ")
}
