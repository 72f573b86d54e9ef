//! The server's checks, in the order an attestation meets them:
//!
//! 1. [`check_payload`]: the EK is a TPM endorsement key of a supported
//!    kind; it is trusted (allow list, certificate chain, or both); **the
//!    certificate's key is the EK the credential will be made for**; the AK
//!    is a restricted signing key the TPM created (its creation certified
//!    by itself with TPM_GENERATED, the creation data hash and Name
//!    matching, the signature verifying); whether its creation data names
//!    the EK as its parent is kept for `server::resets`.
//! 2. [`issue_challenge`]: a credential for the EK bound to the AK's Name,
//!    with a fresh secret, and a fresh nonce for the quote.
//! 3. [`check_response`]: the secret, compared in constant time, and the
//!    quote over the nonce and the asked PCRs, signed by the AK; with
//!    `measured_boot` on, the event log: parsed within bounds, every bank
//!    it declares (and every bank the configuration requires) quoted, the
//!    quoted boot PCRs of each not unextended, every quoted PCR of each
//!    equal to the log's replay in that bank, then what the banks agree the
//!    log says as selectors ([`measured_boot_selectors`]).
//!
//! Each refusal is a [`Refusal`] whose text is one line for the log and the
//! gRPC status; none carries TPM return codes.

use sceau_format::advisories::{self, Advisory, Version};
use sceau_format::roca::has_roca_fingerprint;
use std::time::SystemTime;

use sceau_format::wire::{ALG_AES, ALG_CFB, ALG_SHA256, NAME_LEN, sha256_name};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::config::{EkTrust, MeasuredBoot, ServerConfig};
use super::credential::{self, Credential};
use super::event_log::{self, Bank, EventLog, Facts, PcrCheckError};
use super::keys::{Key, TpmSignatureCheck as _};
use super::structures::selection_bitmap;
use super::structures::{
    Attestation, Attested, ClockInfo, PublicArea, PublicKey, ST_ATTEST_CREATION, ST_ATTEST_QUOTE,
    Signature, TPM_GENERATED, attributes as attr, creation_outside_info, creation_parent_name,
};
use super::x509::Parsed;
use crate::payload::{
    Challenge, ChallengeResponse, PLACE_PROOF_LEN, Payload, SECRET_LEN, place_proof,
};

/// Why an attestation was refused. Display is the one line logged and sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed {0}")]
    Malformed(String),
    #[error("the EK is not an endorsement key sceau accepts: {0}")]
    EkKind(&'static str),
    #[error("the EK {0} is not on the allow list")]
    NotAllowed(String),
    #[error("the EK certificate is not trusted: {0}")]
    Certificate(String),
    #[error(
        "the EK certificate certifies another key than the EK the agent presented (a genuine certificate with a foreign key)"
    )]
    CertificateKeyMismatch,
    #[error("the EK has no certificate, and the configuration requires one")]
    NoCertificate,
    #[error("the AK is not acceptable: {0}")]
    Ak(&'static str),
    #[error(
        "the {0} is an RSA key with the ROCA fingerprint (CVE-2017-15361, Infineon RSALib): its \
         private key can be computed from its public one; update the TPM's firmware, clear the \
         TPM and use its new keys, or use its ECC EK"
    )]
    Roca(&'static str),
    #[error(
        "the TPM ({manufacturer} firmware {firmware}) is under {cve} ({summary}): update its firmware from the vendor, or set tpm_advisories = \"warn\" to attest it anyway"
    )]
    Advisory {
        manufacturer: String,
        firmware: String,
        cve: String,
        summary: String,
    },
    #[error("tpm_advisories = \"refuse\" cannot clear this TPM: {0}")]
    AdvisoryUnknown(&'static str),
    #[error("the AK's creation attestation is not acceptable: {0}")]
    Creation(&'static str),
    #[error("the credential was not activated: the answer does not match")]
    Credential,
    #[error("the quote is not acceptable: {0}")]
    Quote(&'static str),
    #[error("measured boot is required and the agent sent no event log")]
    NoEventLog,
    #[error(
        "PCR {pcr} ({bank}) is all zeros or all ones: the firmware never extended it, so the bank says nothing about the boot"
    )]
    Unextended { pcr: u8, bank: Bank },
    #[error("the event log does not match the quote: {0}")]
    EventLog(PcrCheckError),
    #[error(
        "the quote does not cover the {0} bank, which the event log declares or the configuration requires (agents before this check quote SHA-256 alone: upgrade the agent)"
    )]
    BankNotQuoted(Bank),
    #[error(
        "the TPM's reset and restart counts or clock went back since its last attestation here (resetCount {reset_before} to {reset_now}, restartCount {restart_before} to {restart_now}): it was cleared, or its state restored from a copy, so its PCRs may replay an earlier boot; if it was cleared on purpose, restart spire-server"
    )]
    RolledBack {
        reset_before: u32,
        reset_now: u32,
        restart_before: u32,
        restart_now: u32,
    },
    #[error(
        "the TPM was reset (resetCount {reset_before} to {reset_now}) while the agent that attested before kept running: a TPM reset under a running OS, after which software can extend the boot PCRs along a log of its choosing"
    )]
    ResetWithoutReboot { reset_before: u32, reset_now: u32 },
    #[error(
        "the TPM was restarted or resumed (restartCount {restart_before} to {restart_now}) since this EK's last attestation here: a quote cannot tell a resume from suspend, which keeps the PCRs, from a TPM Restart, which resets them for software to extend; with measured boot required, reboot the node"
    )]
    RestartSinceAttestation {
        restart_before: u32,
        restart_now: u32,
    },
    #[error(
        "the AK was not created under the EK, so the TPM obfuscates the reset count of its quotes, and measured boot is required; upgrade the agent"
    )]
    AkNotUnderEk,
}

/// What a payload that passed every check established.
#[derive(Debug, Clone)]
pub struct VerifiedPayload {
    pub ek: Key,
    pub pub_hash: String,
    pub ak: Key,
    pub ak_name: [u8; NAME_LEN],
    /// Selectors known before the challenge (EK hash, certificate facts).
    pub selectors: Vec<String>,
    /// The place proof the AK's creation data carries (its outsideInfo,
    /// when that is a proof's length), unverified: `server::limits`
    /// compares it with the one it expects for the EK.
    pub place_proof: Option<[u8; PLACE_PROOF_LEN]>,
    /// The AK's creation data names the EK as its parent: the AK is in the
    /// endorsement hierarchy, so the TPM does not obfuscate the clockInfo
    /// counts of what it signs (`server::resets`).
    pub ak_under_ek: bool,
    /// TPM_PT_MANUFACTURER's text from a verified EK certificate
    /// (`id:49465800` is `IFX`), for the advisories.
    pub manufacturer: Option<String>,
}

/// What the server remembers between its challenge and the answer.
pub struct Pending {
    pub verified: VerifiedPayload,
    credential: Credential,
    nonce: [u8; SECRET_LEN],
    quote_pcrs: Vec<u8>,
    measured_boot: MeasuredBoot,
    /// The banks the log must declare; the first is the selectors' bank.
    measured_boot_banks: Vec<Bank>,
    advisories: Vec<Advisory>,
    refuse_advised_tpms: bool,
}

/// The TCG default EK policy, PolicySecret(TPM_RH_ENDORSEMENT) (EK
/// Credential Profile, templates L-1 and L-2).
const EK_POLICY: [u8; 32] = [
    0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xb3, 0xf8, 0x1a, 0x90, 0xcc, 0x8d, 0x46, 0xa5, 0xd7, 0x24,
    0xfd, 0x52, 0xd7, 0x6e, 0x06, 0x52, 0x0b, 0x64, 0xf2, 0xa1, 0xda, 0x1b, 0x33, 0x14, 0x69, 0xaa,
];

/// A payload's refusal with the EK it names, for the log line: the hash is
/// known as soon as the EK's public area gives a key, before any check of
/// its kind, certificate or trust; `None` when it gives none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedRefusal {
    pub ek: Option<String>,
    pub refusal: Refusal,
}

/// The payload checks ([`check_payload_naming_ek`] without the EK hash).
pub fn check_payload(
    config: &ServerConfig,
    payload: &Payload,
    now: SystemTime,
) -> Result<VerifiedPayload, Refusal> {
    check_payload_naming_ek(config, payload, now).map_err(|named| named.refusal)
}

/// The payload checks; a refusal carries the EK hash when the payload
/// names a key.
pub fn check_payload_naming_ek(
    config: &ServerConfig,
    payload: &Payload,
    now: SystemTime,
) -> Result<VerifiedPayload, NamedRefusal> {
    let (ek_hash, ek) = check_ek_public(&payload.ek_public);
    let named = |refusal: Refusal| NamedRefusal {
        ek: ek_hash.clone(),
        refusal,
    };
    let ek = ek.map_err(named)?;
    check_trusted_payload(config, payload, ek, now).map_err(named)
}

fn check_trusted_payload(
    config: &ServerConfig,
    payload: &Payload,
    ek: Key,
    now: SystemTime,
) -> Result<VerifiedPayload, Refusal> {
    let pub_hash = ek.pub_hash();
    let mut selectors = vec![
        format!("pub_hash:{pub_hash}"),
        format!("ek:{}", ek.algorithm()),
    ];

    let mut manufacturer = None;
    let on_list = config
        .ek_hashes
        .as_ref()
        .is_some_and(|list| list.contains(&pub_hash));
    let certified = config.trust_store.as_ref().map(|store| {
        if payload.ek_certificate.is_empty() {
            Err(Refusal::NoCertificate)
        } else {
            check_certificate(store, &payload.ek_certificate, &ek, now)
        }
    });
    match (config.ek_trust, certified) {
        // A certificate for another key is a lie, whatever else holds.
        (_, Some(Err(Refusal::CertificateKeyMismatch))) => {
            return Err(Refusal::CertificateKeyMismatch);
        }
        (EkTrust::Both, _) if config.ek_hashes.is_some() && !on_list => {
            return Err(Refusal::NotAllowed(pub_hash));
        }
        (_, Some(Ok((facts, maker)))) => {
            selectors.extend(facts);
            manufacturer = maker;
        }
        (EkTrust::Both, Some(Err(refusal))) => return Err(refusal),
        (EkTrust::Either, Some(Err(refusal))) if !on_list => return Err(refusal),
        (_, None) if !on_list => return Err(Refusal::NotAllowed(pub_hash)),
        // On the allow list; a certificate that does not verify adds no
        // selectors but does not undo the list.
        _ => {}
    }

    let (ak, ak_name) = check_ak(payload)?;
    // Creation data that is not a TPMS_CREATION_DATA carries no proof; it
    // is not refused for that, as it was not before proofs.
    let place_proof = creation_outside_info(&payload.creation_data)
        .ok()
        .and_then(|info| info.try_into().ok());
    // The creation data is the TPM's (its hash is in the certified
    // creation attestation), so its parentName is the Name of the key the
    // AK was created under. A key with the EK's Name that can be a parent
    // is the EK itself: a public-only copy (TPM2_LoadExternal) cannot be
    // one, and no other seed derives the same public key.
    let ak_under_ek = creation_parent_name(&payload.creation_data)
        .is_ok_and(|parent| parent == sha256_name(&payload.ek_public).as_slice());
    Ok(VerifiedPayload {
        ek,
        pub_hash,
        ak,
        ak_name,
        selectors,
        place_proof,
        ak_under_ek,
        manufacturer,
    })
}

/// The EK's public area: a restricted decryption key bound to its TPM with
/// the TCG default template's parameters, which the credential depends on
/// (SHA-256 nameAlg, AES-128-CFB). Returns the hash of the key the area
/// holds, if it holds one, whatever the verdict.
fn check_ek_public(tpmt_public: &[u8]) -> (Option<String>, Result<Key, Refusal>) {
    let area = match PublicArea::parse(tpmt_public) {
        Ok(area) => area,
        Err(e) => {
            return (
                None,
                Err(Refusal::Malformed(format!("EK public area: {e}"))),
            );
        }
    };
    let key = Key::from_tpm(&area.key);
    let hash = key.as_ref().ok().map(Key::pub_hash);
    let verdict = check_ek_kind(&area)
        .and_then(|()| key.map_err(|e| Refusal::Malformed(format!("EK key: {e}"))));
    (hash, verdict)
}

fn check_ek_kind(area: &PublicArea) -> Result<(), Refusal> {
    if area.name_alg != ALG_SHA256 {
        return Err(Refusal::EkKind("its name algorithm is not SHA-256"));
    }
    let required = attr::FIXED_TPM
        | attr::FIXED_PARENT
        | attr::SENSITIVE_DATA_ORIGIN
        | attr::RESTRICTED
        | attr::DECRYPT;
    if !area.has(required) || area.has(attr::SIGN) {
        return Err(Refusal::EkKind(
            "it is not a restricted decryption key fixed to its TPM",
        ));
    }
    if area.auth_policy != EK_POLICY {
        return Err(Refusal::EkKind(
            "its policy is not the TCG endorsement policy",
        ));
    }
    if area.symmetric != Some((ALG_AES, 128, ALG_CFB)) {
        return Err(Refusal::EkKind(
            "its symmetric algorithm is not AES-128-CFB",
        ));
    }
    match &area.key {
        PublicKey::Rsa { modulus, .. } if has_roca_fingerprint(modulus) => {
            return Err(Refusal::Roca("EK"));
        }
        PublicKey::Rsa { bits: 2048, .. } | PublicKey::Ecc { .. } => {}
        PublicKey::Rsa { .. } => return Err(Refusal::EkKind("an RSA EK must have 2048 bits")),
        PublicKey::KeyedHash { .. } => return Err(Refusal::EkKind("it is not an RSA or ECC key")),
    }
    Ok(())
}

/// The certificate chains to a root, and certifies exactly `ek`. Returns
/// the selectors the certificate vouches for, and the TPM's manufacturer
/// ID as TPM_PT_MANUFACTURER spells it when the certificate gives one in
/// the TCG's `id:` form.
fn check_certificate(
    store: &super::x509::TrustStore,
    der: &[u8],
    ek: &Key,
    now: SystemTime,
) -> Result<(Vec<String>, Option<String>), Refusal> {
    let certificate = Parsed::from_der(der).map_err(|e| Refusal::Certificate(e.to_string()))?;
    store
        .verify(&certificate, now)
        .map_err(|e| Refusal::Certificate(e.to_string()))?;
    // The check spire-tpm-plugin lacks: without it, any genuine EK
    // certificate (they are public) vouches for whatever key the agent
    // sends, and a machine without a TPM passes.
    if certificate.key() != Some(ek) {
        return Err(Refusal::CertificateKeyMismatch);
    }
    let identity = certificate.tpm_identity();
    let manufacturer = identity
        .manufacturer
        .as_deref()
        .and_then(|id| id.strip_prefix("id:"))
        .filter(|hex| hex.len() == 8)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .map(sceau_format::tpm_info::manufacturer)
        .filter(|id| !id.is_empty());
    let mut selectors = Vec::new();
    for (name, value) in [
        ("manufacturer", identity.manufacturer),
        ("model", identity.model),
        ("version", identity.version),
    ] {
        if let Some(value) = value {
            selectors.push(format!("{name}:{value}"));
        }
    }
    if let Some(issuer) = certificate.issuer_common_name() {
        selectors.push(format!("issuer:cn:{issuer}"));
    }
    Ok((selectors, manufacturer))
}

/// The AK: a restricted signing key created in a TPM, which certified its
/// own creation.
fn check_ak(payload: &Payload) -> Result<(Key, [u8; NAME_LEN]), Refusal> {
    let area = PublicArea::parse(&payload.ak_public)
        .map_err(|e| Refusal::Malformed(format!("AK public area: {e}")))?;
    if area.name_alg != ALG_SHA256 {
        return Err(Refusal::Ak("its name algorithm is not SHA-256"));
    }
    if !area.has(attr::FIXED_TPM) {
        return Err(Refusal::Ak("it is not fixedTPM"));
    }
    if !area.has(attr::FIXED_PARENT) {
        return Err(Refusal::Ak("it is not fixedParent"));
    }
    if !area.has(attr::SENSITIVE_DATA_ORIGIN) {
        return Err(Refusal::Ak(
            "it was not generated by the TPM (sensitiveDataOrigin)",
        ));
    }
    if !area.has(attr::RESTRICTED) {
        return Err(Refusal::Ak(
            "it is not restricted, so it could sign data the TPM did not produce",
        ));
    }
    if !area.has(attr::SIGN) || area.has(attr::DECRYPT) {
        return Err(Refusal::Ak("it is not a signing-only key"));
    }
    if let PublicKey::Rsa { modulus, .. } = &area.key
        && has_roca_fingerprint(modulus)
    {
        return Err(Refusal::Roca("AK"));
    }
    // TPM2_LoadExternal takes a public area alone, with any attributes,
    // and gives it the Name a real AK would have. What stops a key made in
    // software is that the TPM will not authorize its use in
    // ActivateCredential. An AK needs no policy, and a policy for its ADMIN
    // role would leave that to how a TPM treats public-only objects (swtpm
    // refuses; crates/spire/tests/integration/attest.rs), so such an AK is refused here.
    if area.has(attr::ADMIN_WITH_POLICY) || !area.auth_policy.is_empty() {
        return Err(Refusal::Ak(
            "it has an authorization policy (an AK needs none, and a policy could let a key that is not in the TPM answer)",
        ));
    }
    let ak =
        Key::from_tpm(&area.key).map_err(|_| Refusal::Ak("its key is not RSA ≥ 2048 or P-256"))?;
    let ak_name = sha256_name(&payload.ak_public);

    let attestation = Attestation::parse(&payload.creation_attestation)
        .map_err(|e| Refusal::Malformed(format!("AK creation attestation: {e}")))?;
    if attestation.magic != TPM_GENERATED {
        return Err(Refusal::Creation("it was not generated by a TPM"));
    }
    let Attested::Creation {
        object_name,
        creation_hash,
    } = &attestation.attested
    else {
        return Err(Refusal::Creation("it is not a creation attestation"));
    };
    debug_assert_eq!(attestation.kind, ST_ATTEST_CREATION);
    if object_name.as_slice() != ak_name.as_slice() {
        return Err(Refusal::Creation("it certifies another object than the AK"));
    }
    if creation_hash.as_slice() != Sha256::digest(&payload.creation_data).as_slice() {
        return Err(Refusal::Creation(
            "its creation hash does not match the creation data",
        ));
    }
    let signature = Signature::parse(&payload.creation_signature)
        .map_err(|e| Refusal::Malformed(format!("AK creation signature: {e}")))?;
    ak.verify_tpm(&payload.creation_attestation, &signature)
        .map_err(|_| Refusal::Creation("its signature does not verify with the AK"))?;
    Ok((ak, ak_name))
}

impl Pending {
    /// The place proof the EK's next payload must carry, should this
    /// attestation pass: derived from this credential's secret.
    pub fn next_place_proof(&self) -> zeroize::Zeroizing<[u8; PLACE_PROOF_LEN]> {
        place_proof(self.credential.expected.as_slice())
    }
}

/// A fresh credential and nonce for a verified payload.
pub fn issue_challenge(
    config: &ServerConfig,
    verified: VerifiedPayload,
) -> Result<(Pending, Challenge), Refusal> {
    let credential = credential::make(&verified.ek, &verified.ak_name)
        .map_err(|_| Refusal::EkKind("no credential can be made for its key type"))?;
    let mut nonce = [0u8; SECRET_LEN];
    sceau_format::random::fill(&mut nonce);
    let challenge = Challenge {
        credential_blob: credential.blob.clone(),
        encrypted_secret: credential.secret.clone(),
        nonce,
        quote_pcrs: config.quote_pcrs.clone(),
    };
    Ok((
        Pending {
            verified,
            credential,
            nonce,
            quote_pcrs: config.quote_pcrs.clone(),
            measured_boot: config.measured_boot,
            measured_boot_banks: config.measured_boot_banks.clone(),
            advisories: config.advisories.clone(),
            refuse_advised_tpms: config.refuse_advised_tpms,
        },
        challenge,
    ))
}

/// Checks the answer; returns every selector of the attested node.
pub fn check_response(
    pending: Pending,
    response: &ChallengeResponse,
) -> Result<Vec<String>, Refusal> {
    check_response_clocked(pending, response).map(|(selectors, _)| selectors)
}

/// [`check_response`], and the TPM's clockInfo from the quote it verified:
/// `None` when no quote was asked, so that counts an agent sent unasked,
/// in a quote nothing verified, are never read.
pub fn check_response_clocked(
    mut pending: Pending,
    response: &ChallengeResponse,
) -> Result<(Vec<String>, Option<ClockInfo>), Refusal> {
    let matches: bool = response
        .credential
        .as_slice()
        .ct_eq(pending.credential.expected.as_slice())
        .into();
    if !matches {
        return Err(Refusal::Credential);
    }
    let mut selectors = std::mem::take(&mut pending.verified.selectors);
    if pending.quote_pcrs.is_empty() {
        return Ok((selectors, None));
    }
    let attestation =
        Attestation::parse(&response.quote).map_err(|_| Refusal::Quote("it is malformed"))?;
    if attestation.magic != TPM_GENERATED || attestation.kind != ST_ATTEST_QUOTE {
        return Err(Refusal::Quote("it is not a TPM-generated quote"));
    }
    if attestation.extra_data != pending.nonce {
        return Err(Refusal::Quote("it is not over this challenge's nonce"));
    }
    let Attested::Quote {
        selections,
        pcr_digest,
    } = &attestation.attested
    else {
        return Err(Refusal::Quote("it is not a quote"));
    };
    let banks = quoted_banks(selections, &pending.quote_pcrs)?;
    let per_bank = pending.quote_pcrs.len();
    if response.pcr_values.len() != per_bank * banks.len() {
        return Err(Refusal::Quote(
            "it does not carry one value per asked PCR in each bank",
        ));
    }
    let mut quoted: Vec<QuotedBank<'_>> = Vec::with_capacity(banks.len());
    for (bank, values) in banks.iter().zip(response.pcr_values.chunks(per_bank)) {
        if values.iter().any(|v| v.len() != bank.digest_len()) {
            return Err(Refusal::Quote(
                "a PCR value is not of its bank's digest length",
            ));
        }
        let pairs = pending
            .quote_pcrs
            .iter()
            .copied()
            .zip(values.iter().map(Vec::as_slice))
            .collect();
        quoted.push((*bank, pairs));
    }
    let mut hash = Sha256::new();
    for value in &response.pcr_values {
        hash.update(value);
    }
    if hash.finalize().as_slice() != pcr_digest.as_slice() {
        return Err(Refusal::Quote("the PCR values do not match its digest"));
    }
    let signature = Signature::parse(&response.quote_signature)
        .map_err(|_| Refusal::Quote("its signature is malformed"))?;
    pending
        .verified
        .ak
        .verify_tpm(&response.quote, &signature)
        .map_err(|_| Refusal::Quote("its signature does not verify with the AK"))?;
    let sha256 = quoted
        .iter()
        .find(|(bank, _)| *bank == Bank::Sha256)
        .map(|(_, values)| values.as_slice())
        .unwrap_or_default();
    for (index, value) in sha256 {
        selectors.push(format!(
            "pcr:sha256:{index}:{}",
            sceau_format::key_id::hex(value)
        ));
    }
    // The TPM obfuscates firmwareVersion in a quote by a key outside the
    // endorsement and platform hierarchies; under the EK it is the TPM's.
    if pending.verified.ak_under_ek {
        selectors.push(format!(
            "firmware:{}",
            sceau_format::tpm_info::firmware_version_of(attestation.firmware_version)
        ));
    }
    selectors.extend(check_advisories(&pending, attestation.firmware_version)?);
    if pending.measured_boot != MeasuredBoot::Off {
        selectors.extend(check_event_log(
            pending.measured_boot,
            &pending.measured_boot_banks,
            &quoted,
            &response.event_log,
        )?);
    }
    Ok((selectors, Some(attestation.clock)))
}

/// The vendor advisories the node's TPM falls under, as `advisory:CVE-…`
/// selectors; with `tpm_advisories = "refuse"`, a refusal for the first,
/// or for a TPM whose manufacturer or firmware is not known from the TPM
/// itself (a certificate, a quote under the EK).
fn check_advisories(pending: &Pending, quoted_firmware: u64) -> Result<Vec<String>, Refusal> {
    let refuse = pending.refuse_advised_tpms;
    let Some(manufacturer) = &pending.verified.manufacturer else {
        return match refuse {
            true => Err(Refusal::AdvisoryUnknown(
                "no verified EK certificate names its manufacturer",
            )),
            false => Ok(Vec::new()),
        };
    };
    if !pending.verified.ak_under_ek {
        return match refuse {
            true => Err(Refusal::AdvisoryUnknown(
                "its AK is not under its EK, so the quote's firmware version is obfuscated",
            )),
            false => Ok(Vec::new()),
        };
    }
    let firmware = Version::from_first_word((quoted_firmware >> 32) as u32);
    let matched = advisories::matching(&pending.advisories, manufacturer, firmware);
    if let (true, Some(first)) = (refuse, matched.first()) {
        return Err(Refusal::Advisory {
            manufacturer: manufacturer.clone(),
            firmware: firmware.to_string(),
            cve: first.cve.clone(),
            summary: first.summary.clone(),
        });
    }
    Ok(matched
        .iter()
        .map(|advisory| {
            log::warn!(
                "EK {}: the TPM ({manufacturer} firmware {firmware}) is under {} ({}); attested \
                 with the selector advisory:{}, as tpm_advisories = \"warn\" asks",
                pending.verified.pub_hash,
                advisory.cve,
                advisory.summary,
                advisory.cve
            );
            format!("advisory:{}", advisory.cve)
        })
        .collect())
}

/// The banks a quote covers, in its selection's order: each of SHA-1,
/// SHA-256, SHA-384 and SHA-512 at most once, SHA-256 among them, each of
/// exactly the asked PCRs. The agent quotes SHA-256, and with an event log
/// every other bank the log declares; in the order its TPM lists them.
fn quoted_banks(selections: &[(u16, Vec<u8>)], asked: &[u8]) -> Result<Vec<Bank>, Refusal> {
    let bitmap = selection_bitmap(asked);
    let mut banks = Vec::with_capacity(selections.len());
    for (alg, select) in selections {
        if *select != bitmap {
            return Err(Refusal::Quote("it covers other PCRs than the ones asked"));
        }
        match Bank::from_alg_id(*alg) {
            Some(bank) if !banks.contains(&bank) => banks.push(bank),
            _ => {
                return Err(Refusal::Quote(
                    "it covers a bank twice, or one that is not SHA-1, SHA-256, SHA-384 or SHA-512",
                ));
            }
        }
    }
    if !banks.contains(&Bank::Sha256) {
        return Err(Refusal::Quote("it does not cover the SHA-256 bank"));
    }
    Ok(banks)
}

/// One bank of a verified quote: its (PCR, value) pairs.
pub type QuotedBank<'a> = (Bank, Vec<(u8, &'a [u8])>);

/// The measured-boot check of a verified quote: `quoted` are its (PCR,
/// value) pairs per bank, which include PCRs 0–7 (the configuration adds
/// them). Every bank the log declares that can be hashed here, and every
/// one of `required` (the first is the selectors' bank), must be quoted,
/// not unextended, and equal to the log's replay: so a bank software
/// extended along a log of its choosing must agree with every bank the
/// firmware extended, and the data of separators, actions and variables
/// must hash to its digests in each (`event_log::check_labelled`). Returns
/// the log's selectors, from the facts every bank agrees on; none when
/// the log is optional and absent.
pub fn check_event_log(
    mode: MeasuredBoot,
    required: &[Bank],
    quoted: &[QuotedBank<'_>],
    log: &[u8],
) -> Result<Vec<String>, Refusal> {
    if log.is_empty() {
        return match mode {
            MeasuredBoot::Required => Err(Refusal::NoEventLog),
            MeasuredBoot::Optional | MeasuredBoot::Off => Ok(Vec::new()),
        };
    }
    // The payload codec bounds the log's size to MAX_EVENT_LOG_LEN; the
    // parser bounds its events, each event's size, and the size again.
    let limits = event_log::Limits {
        max_log_bytes: crate::payload::MAX_EVENT_LOG_LEN,
        ..event_log::Limits::default()
    };
    let parsed =
        EventLog::parse(log, limits).map_err(|e| Refusal::Malformed(format!("event log: {e}")))?;
    if let Some(bank) = required.iter().find(|b| !parsed.has_bank(**b)) {
        return Err(Refusal::EventLog(PcrCheckError::BankNotInLog(*bank)));
    }
    let mut banks = required.to_vec();
    for bank in parsed.hashed_banks() {
        if !banks.contains(&bank) {
            banks.push(bank);
        }
    }
    let mut checked = Vec::with_capacity(banks.len());
    for bank in banks {
        let values = quoted
            .iter()
            .find(|(b, _)| *b == bank)
            .map(|(_, values)| values.as_slice())
            .ok_or(Refusal::BankNotQuoted(bank))?;
        // Before the replay: a bank the firmware never touched matches any
        // log software extends into it, so its agreement proves nothing.
        if let Some(pcr) = event_log::unextended(values) {
            return Err(Refusal::Unextended { pcr, bank });
        }
        checked.push((bank, values));
    }
    let mut facts = Vec::with_capacity(checked.len());
    for (bank, values) in checked {
        let verified = parsed.matches(bank, values).map_err(Refusal::EventLog)?;
        facts.push(verified.facts());
    }
    if facts.is_empty() {
        return Err(Refusal::EventLog(PcrCheckError::NothingQuoted));
    }
    let first = facts.remove(0);
    let selectors_bank = required.first().copied().unwrap_or(Bank::Sha256);
    Ok(measured_boot_selectors(
        selectors_bank,
        &Facts::agreed(first, &facts),
    ))
}

/// The selectors a verified log gives: `secureboot:enabled|disabled|unknown`,
/// `boot_app:<bank>:<hex>` per boot application (in boot order, repeats
/// kept once), `eventlog:complete|incomplete`.
pub fn measured_boot_selectors(bank: Bank, facts: &Facts) -> Vec<String> {
    let mut selectors = vec![
        match facts.secure_boot {
            Some(true) => "secureboot:enabled",
            Some(false) => "secureboot:disabled",
            None => "secureboot:unknown",
        }
        .to_string(),
    ];
    for digest in facts.boot_applications.iter().flatten() {
        let selector = format!("boot_app:{bank}:{}", sceau_format::key_id::hex(digest));
        if !selectors.contains(&selector) {
            selectors.push(selector);
        }
    }
    selectors.push(
        if facts.complete {
            "eventlog:complete"
        } else {
            "eventlog:incomplete"
        }
        .to_string(),
    );
    selectors
}

/// Payloads a software "TPM" makes, for the tests of this crate and of
/// its integration tests (feature `test-support`): right in every field the
/// server can check before the challenge, which is the point.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support {
    use super::*;
    use crate::server::structures::{ALG_ECDSA, ECC_NIST_P256};
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::hazmat::PrehashSigner as _;
    use p256::elliptic_curve::sec1::ToEncodedPoint as _;
    use sceau_format::wire::{ALG_ECC, ALG_NULL, Writer};

    pub const AK_ATTRIBUTES: u32 = attr::FIXED_TPM
        | attr::FIXED_PARENT
        | attr::SENSITIVE_DATA_ORIGIN
        | 0x40 // userWithAuth
        | 0x400 // noDA
        | attr::RESTRICTED
        | attr::SIGN;
    pub const EK_ATTRIBUTES: u32 = 0x0003_00b2;

    /// An ECC P-256 TPMT_PUBLIC for `key`.
    pub fn ecc_public(key: &p256::PublicKey, attributes: u32, policy: &[u8], ek: bool) -> Vec<u8> {
        let point = key.to_encoded_point(false);
        let mut w = Writer::default();
        w.u16(ALG_ECC).u16(ALG_SHA256).u32(attributes).tpm2b(policy);
        if ek {
            w.u16(ALG_AES).u16(128).u16(ALG_CFB).u16(ALG_NULL);
        } else {
            w.u16(ALG_NULL).u16(ALG_ECDSA).u16(ALG_SHA256);
        }
        w.u16(ECC_NIST_P256).u16(ALG_NULL);
        w.tpm2b(point.x().unwrap()).tpm2b(point.y().unwrap());
        w.finish()
    }

    pub fn attest(magic: u32, kind: u16, extra: &[u8], body: &[u8]) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(magic).u16(kind).tpm2b(&[0; 34]).tpm2b(extra);
        w.raw(&[0; 17]).raw(&[0; 8]).raw(body);
        w.finish()
    }

    pub fn sign(key: &SigningKey, message: &[u8]) -> Vec<u8> {
        let (signature, _) = key
            .sign_prehash(&Sha256::digest(message))
            .map(|s: p256::ecdsa::Signature| (s, ()))
            .unwrap();
        let (r, s) = signature.split_bytes();
        let mut w = Writer::default();
        w.u16(ALG_ECDSA).u16(ALG_SHA256).tpm2b(&r).tpm2b(&s);
        w.finish()
    }

    /// A payload a software "TPM" makes: right in every field.
    pub struct Forgery {
        pub payload: Payload,
        pub ak: SigningKey,
        pub ek_hash: String,
    }

    pub fn forgery(ak_attributes: u32, ak_policy: &[u8]) -> Forgery {
        let ek = p256::SecretKey::from_slice(&[3; 32]).unwrap();
        let ek_public = ecc_public(&ek.public_key(), EK_ATTRIBUTES, &EK_POLICY, true);
        let ak = SigningKey::from_slice(&[5; 32]).unwrap();
        let ak_public = ecc_public(
            &p256::PublicKey::from(ak.verifying_key()),
            ak_attributes,
            ak_policy,
            false,
        );
        let creation_data = b"creation data".to_vec();
        let mut body = Writer::default();
        body.tpm2b(&sha256_name(&ak_public))
            .tpm2b(&Sha256::digest(&creation_data));
        let creation_attestation = attest(TPM_GENERATED, ST_ATTEST_CREATION, &[], &body.finish());
        let creation_signature = sign(&ak, &creation_attestation);
        let ek_hash = Key::P256(ek.public_key()).pub_hash();
        Forgery {
            payload: Payload {
                ek_public,
                ek_certificate: Vec::new(),
                ak_public,
                creation_data,
                creation_attestation,
                creation_signature,
            },
            ak,
            ek_hash,
        }
    }

    /// A forged payload whose EK is the software key `[ek_secret; 32]`.
    pub fn forgery_with_ek(ek_secret: u8) -> (Payload, Key) {
        let mut f = forgery(AK_ATTRIBUTES, &[]);
        let ek = p256::SecretKey::from_slice(&[ek_secret; 32]).unwrap();
        f.payload.ek_public = ecc_public(&ek.public_key(), EK_ATTRIBUTES, &EK_POLICY, true);
        (f.payload, Key::P256(ek.public_key()))
    }
}

#[cfg(test)]
pub(crate) mod tests;
