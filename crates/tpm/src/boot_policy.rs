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
//!
//! A policy signed with a revocation serial runs TPM2_PolicySecret on that
//! serial's NV index between PolicyPCR and PolicyAuthorize (one command
//! more per Decrypt; `crate::revocation`). At start each serial's index is
//! read, and defined if it is missing; a revoked serial's policies are
//! skipped with a warning. A serial revoked while sceau serves shows as a
//! PolicyAuthorize refusal, after which the serials are read again.
//!
//! During a rotation of the policy key, `--former-policy-key` keys are
//! loaded beside the current one: objects sealed to a former key's
//! authPolicy open through the policies that key signed, while new objects
//! are sealed to the current key only. Each policy belongs to the key its
//! fingerprint names (systemd's files, which may carry none, to the current
//! key).
//!
//! A policy that cannot match in this boot (a PCR it covers was never
//! extended: a policy staged for a boot state still to come) is skipped with
//! a warning that names it, and sceau serves with the others.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::handles::{AuthHandle, KeyHandle, NvIndexHandle, ObjectHandle, SessionHandle};
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
use super::revocation;
use super::session::start_salted_policy;
use sceau_format::key_id::hex;
use sceau_format::pcr_policy::{
    PcrSelection, PcrValues, SignedPolicy, policy_pcr_digest, unextended,
};
use sceau_format::policy_key::{PolicyKey, approved_hash, ecdsa_from_der};
use sceau_format::revocation::{Serial, SerialState};

/// What `serve --policy-key`, `--former-policy-key` and `--policy` gave:
/// the keys, and each signed policy with the file it came from (for the
/// lines that name it).
#[derive(Debug, Clone)]
pub struct BootPolicyConfig {
    /// The key new objects are sealed to.
    pub key: PolicyKey,
    /// Keys being rotated out: objects sealed to them still open.
    pub former_keys: Vec<PolicyKey>,
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
        "{file}: signed by another key than --policy-key and every --former-policy-key (its key \
         fingerprint is {fingerprint})"
    )]
    OtherKey { file: String, fingerprint: String },
    #[error("{file}: the signature does not verify with its policy key (checked by the TPM)")]
    BadSignature { file: String },
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
    /// The standing revocation index it runs PolicySecret on.
    serial: Option<(Serial, NvIndexHandle)>,
    /// Its serial was revoked while sceau served: never chosen again.
    revoked: bool,
}

/// One policy key and the policies it signed.
struct KeyPolicies {
    key_name: Name,
    authorized_policy: [u8; 32],
    policies: Vec<VerifiedPolicy>,
    /// The policy whose PCRs match them as last read; `None` while none
    /// does.
    current: Option<usize>,
}

/// The policies of one TPM connection, and the one that matches the PCRs.
pub struct BootPolicies {
    /// The current key first, then the former ones.
    keys: Vec<KeyPolicies>,
    /// Every PCR some policy covers: what a re-evaluation reads.
    all_pcrs: PcrSelection,
    /// Whether the PCRs were evaluated once: a mismatch is logged when it
    /// begins, not at every probe while it lasts.
    evaluated: bool,
    session: Option<PolicySession>,
}

impl BootPolicies {
    /// Checks every policy in the TPM and picks the one the PCRs match.
    /// Refuses a policy of another key or a bad signature; skips, with a
    /// warning, a policy over a PCR never extended in this boot and one
    /// whose serial is revoked. A mismatch is not refused (Encrypt still
    /// works, and a newly signed policy fixes it), only logged.
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
        let keys: Vec<&PolicyKey> = std::iter::once(&config.key)
            .chain(&config.former_keys)
            .collect();
        let mut by_key: Vec<Vec<(String, SignedPolicy)>> = vec![Vec::new(); keys.len()];
        for (file, policy) in &config.policies {
            // systemd's files may name no key: they are the current key's.
            let owner = keys
                .iter()
                .position(|key| policy.names_key(key))
                .ok_or_else(|| BootPolicyError::OtherKey {
                    file: file.clone(),
                    fingerprint: policy.key_fingerprint.map(|f| hex(&f)).unwrap_or_default(),
                })?;
            let unextended_pcr = policy
                .pcrs
                .indices()
                .find_map(|i| values.get(i).and_then(unextended).map(|state| (i, state)));
            if let Some((index, state)) = unextended_pcr {
                log::warn!(
                    "boot policy: skipping {file}: PCR {index} reads all {state} in this boot \
                     (nothing extended it), so the policy cannot match now, and a policy over \
                     it would bind to nothing; it is used once a boot extends that PCR"
                );
                continue;
            }
            by_key[owner].push((file.clone(), policy.clone()));
        }
        let mut loaded_keys = Vec::with_capacity(keys.len());
        for (key, policies) in keys.into_iter().zip(by_key) {
            let (key_name, verified) = verify_with(ctx, key, &policies)?;
            loaded_keys.push(KeyPolicies {
                key_name,
                authorized_policy: key.authorized_policy(),
                policies: standing_only(ctx, verified)?,
                current: None,
            });
        }
        let mut loaded = Self {
            keys: loaded_keys,
            all_pcrs,
            evaluated: false,
            session: None,
        };
        loaded.choose(&values, observer);
        Ok(loaded)
    }

    /// The current policy key's Name, as the TPM computed it.
    pub fn key_name(&self) -> &[u8] {
        self.keys[0].key_name.value()
    }

    /// The former policy keys' Names, as the TPM computed them.
    pub fn former_key_names(&self) -> impl Iterator<Item = &[u8]> {
        self.keys[1..].iter().map(|k| k.key_name.value())
    }

    /// The authPolicy of every object sealed while this key is configured.
    pub fn authorized_policy(&self) -> &[u8; 32] {
        &self.keys[0].authorized_policy
    }

    /// Whether an object with this authPolicy opens here: it is sealed to
    /// the current or a former policy key.
    pub fn opens(&self, auth_policy: &[u8; 32]) -> bool {
        self.keys
            .iter()
            .any(|k| &k.authorized_policy == auth_policy)
    }

    /// Whether some policy of the current key matched the PCRs when last
    /// read.
    pub fn matched(&self) -> bool {
        self.keys[0].current.is_some()
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

    /// Reads every standing serial's index again, and drops the policies of
    /// a serial revoked since: after PolicyAuthorize refused a session.
    fn refresh_serials(&mut self, ctx: &mut Context, observer: &Observer) -> Result<(), TpmError> {
        for verified in self.keys.iter_mut().flat_map(|k| k.policies.iter_mut()) {
            let Some((serial, index)) = verified.serial else {
                continue;
            };
            if verified.revoked {
                continue;
            }
            let state = observer.timed(TpmCommand::NvReadPublic, || {
                revocation::refresh(ctx, serial, index)
            })?;
            if state != SerialState::Standing {
                verified.revoked = true;
                log::warn!(
                    "boot policy: {} is revoked (serial {serial}, revoked while sceau served); \
                     it opens nothing from now on",
                    verified.file
                );
            }
        }
        Ok(())
    }

    fn choose(&mut self, values: &PcrValues, observer: &Observer) {
        let before = self.keys[0].current;
        for key in &mut self.keys {
            key.current = key.policies.iter().position(|v| {
                !v.revoked
                    && policy_pcr_digest(v.policy.pcrs, values)
                        .is_ok_and(|digest| Some(digest) == v.pcr_digest())
            });
        }
        let current = self.keys[0].current;
        let changed = !self.evaluated || before != current;
        self.evaluated = true;
        observer.boot_policy(current.is_some());
        match current {
            Some(i) if changed => log::info!(
                "boot policy: the PCRs match {} (PCRs {})",
                self.keys[0].policies[i].file,
                self.keys[0].policies[i].policy.pcrs
            ),
            None if changed => log::warn!(
                "boot policy: no signed policy matches the PCRs; DEKs sealed to the policy key \
                 do not open until one does (docs/boot-binding.md): {}",
                describe_differences(values, &self.keys[0].policies)
            ),
            _ => {}
        }
    }

    /// Satisfies the authPolicy `auth_policy` (the current or a former
    /// key's) in the policy session: PolicyPCR, PolicySecret for a
    /// revocable policy, then PolicyAuthorize with the matching policy's
    /// ticket. Returns the session for Unseal. A session left
    /// half-satisfied by a failure is flushed.
    pub fn authorize(
        &mut self,
        ctx: &mut Context,
        salt_key: KeyHandle,
        observer: &Observer,
        auth_policy: &[u8; 32],
    ) -> Result<AuthSession, TpmError> {
        let Some(key) = self
            .keys
            .iter()
            .position(|k| &k.authorized_policy == auth_policy)
        else {
            return Err(TpmError::refused(
                "the envelope is sealed to a boot policy key this sceau was not given \
                 (--policy-key, --former-policy-key)"
                    .into(),
                Fault::EnvelopeRejected,
            ));
        };
        let mut reread = false;
        loop {
            let Some(index) = self.keys[key].current else {
                if !reread {
                    reread = true;
                    self.reevaluate(ctx, observer)?;
                    if self.keys[key].current.is_some() {
                        continue;
                    }
                }
                return Err(TpmError::refused(
                    "boot policy: no signed policy matches the PCRs".into(),
                    Fault::PolicyMismatch,
                ));
            };
            let session = self.session(ctx, salt_key, observer)?;
            match self.run_policy(ctx, session, key, index, observer) {
                Ok(()) => return Ok(session.into()),
                Err(error) => {
                    self.discard_session(ctx);
                    // TPM_RC_VALUE on PolicyAuthorize: the session's digest
                    // is not the approved policy, so the PCRs moved or the
                    // policy's serial was revoked.
                    if !reread && error.operation == "PolicyAuthorize" {
                        reread = true;
                        self.refresh_serials(ctx, observer)?;
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
        key: usize,
        index: usize,
        observer: &Observer,
    ) -> Result<(), TpmError> {
        let key = &self.keys[key];
        let verified = &key.policies[index];
        let selection = pcrs::sha256_selection(verified.policy.pcrs)?;
        observer
            .timed(TpmCommand::PolicyPcr, || {
                ctx.execute_without_session(|c| c.policy_pcr(session, Digest::default(), selection))
            })
            .map_err(|e| TpmError::new("PolicyPCR", e))?;
        if let Some((_, nv_index)) = verified.serial {
            // The index's empty authValue in a password session: what the
            // policy commits to is the index's Name, not a secret.
            observer
                .timed(TpmCommand::PolicySecret, || {
                    ctx.execute_with_session(Some(AuthSession::Password), |c| {
                        c.policy_secret(
                            session,
                            AuthHandle::from(nv_index),
                            Nonce::default(),
                            Digest::default(),
                            Nonce::default(),
                            None,
                        )
                    })
                })
                .map_err(|e| TpmError::new("PolicySecret", e))?;
        }
        let approved = Digest::try_from(verified.policy.policy.to_vec())
            .map_err(|e| TpmError::new("approved policy", e))?;
        let ticket = VerifiedTicket::try_from(verified.ticket)
            .map_err(|e| TpmError::new("policy ticket", e))?;
        observer
            .timed(TpmCommand::PolicyAuthorize, || {
                ctx.execute_without_session(|c| {
                    c.policy_authorize(session, approved, Nonce::default(), &key.key_name, ticket)
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

impl VerifiedPolicy {
    /// The PolicyPCR digest the policy was signed over: `pol` itself, or,
    /// for a revocable policy, the digest before PolicySecret (from the
    /// values it carries, which the parser checked give `pol`).
    fn pcr_digest(&self) -> Option<[u8; 32]> {
        match (&self.policy.serial, &self.policy.values) {
            (None, _) => Some(self.policy.policy),
            (Some(_), Some(values)) => policy_pcr_digest(self.policy.pcrs, values).ok(),
            (Some(_), None) => None,
        }
    }
}

/// LoadExternal of `key`, every policy's signature checked with it, its
/// Name as the TPM computes it (checked against ours), and the key flushed.
fn verify_with(
    ctx: &mut Context,
    key: &PolicyKey,
    policies: &[(String, SignedPolicy)],
) -> Result<(Name, Vec<VerifiedPolicy>), BootPolicyError> {
    let public = Public::unmarshall(&key.tpmt_public())
        .map_err(|e| TpmError::new("policy key public area", e))?;
    let handle = ctx
        .execute_without_session(|c| c.load_external_public(public, Hierarchy::Owner))
        .map_err(|e| TpmError::new("LoadExternal (policy key)", e))?;
    let verified = verify_all(ctx, handle, key, policies);
    let key_name = ctx.tr_get_name(ObjectHandle::from(handle));
    if let Err(e) = ctx.flush_context(ObjectHandle::from(handle)) {
        log::warn!("FlushContext of the policy key failed: {e}");
    }
    let key_name = key_name.map_err(|e| TpmError::new("TR_GetName (policy key)", e))?;
    let ours = key.name();
    if key_name.value() != ours {
        return Err(BootPolicyError::NameMismatch {
            tpm: hex(key_name.value()),
            ours: hex(&ours),
        });
    }
    Ok((key_name, verified?))
}

/// The verified policies whose serial stands (its index defined now if it
/// was missing); a revoked serial's, or one whose handle holds another
/// index, are skipped with a warning.
fn standing_only(
    ctx: &mut Context,
    verified: Vec<VerifiedPolicy>,
) -> Result<Vec<VerifiedPolicy>, TpmError> {
    let mut kept = Vec::with_capacity(verified.len());
    for mut policy in verified {
        let Some(serial) = policy.policy.serial else {
            kept.push(policy);
            continue;
        };
        match revocation::standing(ctx, serial)? {
            Ok(index) => {
                policy.serial = Some((serial, index));
                kept.push(policy);
            }
            Err(SerialState::Revoked) => log::warn!(
                "boot policy: skipping {}: its serial {serial} is revoked in this TPM",
                policy.file
            ),
            Err(_) => log::warn!(
                "boot policy: skipping {}: NV index 0x{:08x} is not sceau's index for serial \
                 {serial} (other attributes or size), so the policy can never open",
                policy.file,
                serial.index_handle()
            ),
        }
    }
    Ok(kept)
}

/// LoadExternal'ed `handle` (of `key`) checks every policy's signature:
/// VerifySignature over aHash, whose ticket PolicyAuthorize takes.
fn verify_all(
    ctx: &mut Context,
    handle: KeyHandle,
    key: &PolicyKey,
    policies: &[(String, SignedPolicy)],
) -> Result<Vec<VerifiedPolicy>, BootPolicyError> {
    let mut verified = Vec::with_capacity(policies.len());
    for (file, policy) in policies {
        let bad = || BootPolicyError::BadSignature { file: file.clone() };
        let signature = tss_signature(key, &policy.signature).ok_or_else(bad)?;
        let digest = Digest::try_from(approved_hash(&policy.policy).to_vec())
            .map_err(|e| TpmError::new("policy digest", e))?;
        let ticket = ctx
            .execute_without_session(|c| c.verify_signature(handle, digest, signature))
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
            serial: None,
            revoked: false,
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
        .filter(|v| !v.revoked)
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
