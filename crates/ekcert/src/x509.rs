//! EK certificates and the manufacturer CAs they chain to.
//!
//! A chain is built from the EK certificate up through the configured
//! intermediates (never trusted by themselves) to one of the configured
//! roots. Every certificate on the path must be within its validity period,
//! carry only critical extensions this module understands, and every issuer
//! must be a CA allowed to sign certificates; every signature must verify
//! (RSA PKCS #1 v1.5 or ECDSA, SHA-256 or stronger: SHA-1 is refused).
//!
//! EK certificates carry a critical subjectAltName whose directoryName holds
//! the TPM's manufacturer, model and firmware version (TCG EK Credential
//! Profile §3.2.9); that extension is understood here, and its three values
//! become selectors once the chain is verified.

use std::time::{Duration, SystemTime};

use der::asn1::ObjectIdentifier;
use der::{Decode as _, Encode as _};
use x509_cert::Certificate;
use x509_cert::crl::CertificateList;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, KeyUsages, SubjectAltName,
};
use x509_cert::name::Name;

use crate::keys::{Hash, Key};

const MAX_CHAIN_DEPTH: usize = 6;
const MAX_BUNDLE_CERTIFICATES: usize = 1000;

const OID_BASIC_CONSTRAINTS: &str = "2.5.29.19";
const OID_KEY_USAGE: &str = "2.5.29.15";
const OID_SUBJECT_ALT_NAME: &str = "2.5.29.17";
const OID_EXTENDED_KEY_USAGE: &str = "2.5.29.37";
const OID_CERTIFICATE_POLICIES: &str = "2.5.29.32";
const OID_SUBJECT_DIRECTORY_ATTRIBUTES: &str = "2.5.29.9";
/// tcg-kp-EKCertificate and anyExtendedKeyUsage.
const OID_EK_CERTIFICATE_USAGE: &str = "2.23.133.8.1";
const OID_ANY_EXTENDED_KEY_USAGE: &str = "2.5.29.37.0";
const OID_TPM_MANUFACTURER: &str = "2.23.133.2.1";
const OID_TPM_MODEL: &str = "2.23.133.2.2";
const OID_TPM_VERSION: &str = "2.23.133.2.3";
const OID_COMMON_NAME: &str = "2.5.4.3";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    #[error("the EK certificate is not a DER X.509 certificate")]
    Malformed,
    #[error("the EK certificate does not chain to a configured manufacturer root ({0})")]
    Untrusted(String),
    #[error("{0} is outside its validity period")]
    Expired(String),
    #[error("{subject} has an unsupported critical extension {oid}")]
    CriticalExtension { subject: String, oid: String },
    #[error("{0} is not a CA that may sign certificates")]
    NotCa(String),
    #[error("the EK certificate's extended key usage does not allow an EK certificate")]
    Usage,
    #[error("{0}")]
    Bundle(String),
    #[error("{subject} is revoked: its serial number is in the CRL of {issuer}")]
    Revoked { subject: String, issuer: String },
    #[error(
        "the CRL of {0} is past its nextUpdate: fetch a fresh one from the manufacturer, since \
         a stale list cannot say what was revoked since"
    )]
    StaleCrl(String),
}

/// One parsed certificate with the bytes its signature covers.
#[derive(Debug, Clone)]
pub struct Parsed {
    der: Vec<u8>,
    cert: Certificate,
    tbs: Vec<u8>,
    key: Option<Key>,
}

impl Parsed {
    pub fn from_der(der: &[u8]) -> Result<Self, CertificateError> {
        let cert = Certificate::from_der(der).map_err(|_| CertificateError::Malformed)?;
        let tbs = tbs_bytes(der).ok_or(CertificateError::Malformed)?.to_vec();
        let key = Key::from_spki(&cert.tbs_certificate.subject_public_key_info).ok();
        Ok(Self {
            der: der.to_vec(),
            cert,
            tbs,
            key,
        })
    }

    /// The certificate as it was given.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The certified key; `None` if its algorithm is not one sceau knows.
    pub fn key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    fn subject(&self) -> &Name {
        &self.cert.tbs_certificate.subject
    }

    fn issuer(&self) -> &Name {
        &self.cert.tbs_certificate.issuer
    }

    /// A short name for messages: the subject's CN, else its DN.
    pub fn label(&self) -> String {
        cap_field(&common_name(self.subject()).unwrap_or_else(|| self.subject().to_string()))
    }

    /// The issuer's CN, else its DN, for messages.
    pub fn issuer_label(&self) -> String {
        cap_field(&common_name(self.issuer()).unwrap_or_else(|| self.issuer().to_string()))
    }

    /// The issuer's CN, for the `issuer:cn:` selector.
    pub fn issuer_common_name(&self) -> Option<String> {
        common_name(self.issuer())
    }

    fn is_signed_by(&self, issuer: &Parsed) -> bool {
        if !same_name(self.issuer(), issuer.subject()) {
            return false;
        }
        let Some(key) = issuer.key() else {
            return false;
        };
        let Some(hash) = signature_hash(&self.cert.signature_algorithm.oid) else {
            return false;
        };
        let Some(signature) = self.cert.signature.as_bytes() else {
            return false;
        };
        key.verify_x509(hash, &self.tbs, signature).is_ok()
    }

    fn check_validity(&self, now: SystemTime) -> Result<(), CertificateError> {
        let validity = &self.cert.tbs_certificate.validity;
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        if now < validity.not_before.to_unix_duration()
            || now > validity.not_after.to_unix_duration()
        {
            return Err(CertificateError::Expired(self.label()));
        }
        Ok(())
    }

    fn extensions(&self) -> impl Iterator<Item = &x509_cert::ext::Extension> {
        self.cert.tbs_certificate.extensions.iter().flatten()
    }

    fn extension(&self, oid: &str) -> Option<&[u8]> {
        self.extensions()
            .find(|e| e.extn_id.to_string() == oid)
            .map(|e| e.extn_value.as_bytes())
    }

    fn check_critical_extensions(&self) -> Result<(), CertificateError> {
        const UNDERSTOOD: [&str; 6] = [
            OID_BASIC_CONSTRAINTS,
            OID_KEY_USAGE,
            OID_SUBJECT_ALT_NAME,
            OID_EXTENDED_KEY_USAGE,
            OID_CERTIFICATE_POLICIES,
            OID_SUBJECT_DIRECTORY_ATTRIBUTES,
        ];
        for extension in self.extensions().filter(|e| e.critical) {
            let oid = extension.extn_id.to_string();
            if !UNDERSTOOD.contains(&oid.as_str()) {
                return Err(CertificateError::CriticalExtension {
                    subject: self.label(),
                    oid,
                });
            }
        }
        Ok(())
    }

    /// An issuer must say it is a CA, and if it limits its key's usage, the
    /// usage must include signing certificates.
    fn check_ca(&self, below: usize) -> Result<(), CertificateError> {
        let not_ca = || CertificateError::NotCa(self.label());
        let constraints = self
            .extension(OID_BASIC_CONSTRAINTS)
            .and_then(|v| BasicConstraints::from_der(v).ok())
            .ok_or_else(not_ca)?;
        if !constraints.ca {
            return Err(not_ca());
        }
        if let Some(limit) = constraints.path_len_constraint
            && below > usize::from(limit)
        {
            return Err(not_ca());
        }
        if let Some(usage) = self.extension(OID_KEY_USAGE) {
            let usage = KeyUsage::from_der(usage).map_err(|_| not_ca())?;
            if !usage.0.contains(KeyUsages::KeyCertSign) {
                return Err(not_ca());
            }
        }
        Ok(())
    }

    fn check_ek_usage(&self) -> Result<(), CertificateError> {
        let Some(value) = self.extension(OID_EXTENDED_KEY_USAGE) else {
            return Ok(());
        };
        let usage = ExtendedKeyUsage::from_der(value).map_err(|_| CertificateError::Usage)?;
        let allowed = [OID_EK_CERTIFICATE_USAGE, OID_ANY_EXTENDED_KEY_USAGE];
        if usage
            .0
            .iter()
            .any(|oid| allowed.contains(&oid.to_string().as_str()))
        {
            Ok(())
        } else {
            Err(CertificateError::Usage)
        }
    }

    /// Manufacturer, model and version from the subjectAltName's
    /// directoryName (TCG EK Credential Profile).
    pub fn tpm_identity(&self) -> TpmIdentity {
        let mut identity = TpmIdentity::default();
        let Some(value) = self.extension(OID_SUBJECT_ALT_NAME) else {
            return identity;
        };
        let Ok(names) = SubjectAltName::from_der(value) else {
            return identity;
        };
        for name in &names.0 {
            let GeneralName::DirectoryName(name) = name else {
                continue;
            };
            for attribute in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
                let Some(text) = string_value(&attribute.value) else {
                    continue;
                };
                match attribute.oid.to_string().as_str() {
                    OID_TPM_MANUFACTURER => identity.manufacturer = Some(text),
                    OID_TPM_MODEL => identity.model = Some(text),
                    OID_TPM_VERSION => identity.version = Some(text),
                    _ => {}
                }
            }
        }
        identity
    }
}

/// What an EK certificate says of its TPM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TpmIdentity {
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub version: Option<String>,
}

/// Why a CRL is refused: x509-cert reads version 2 alone, which RFC 5280
/// asks of every CRL (its cRLNumber extension needs it); a version 1 list
/// is said to be one rather than called malformed.
const NOT_A_CRL: &str = "is not an X.509 version 2 CRL (RFC 5280 CRLs carry a cRLNumber, \
     so are version 2; `openssl ca -gencrl` makes one with a crl_extensions section)";

/// A certificate revocation list, with the bytes its signature covers.
#[derive(Debug, Clone)]
pub struct Crl {
    list: CertificateList,
    tbs: Vec<u8>,
}

impl Crl {
    pub fn from_der(der: &[u8]) -> Result<Self, CertificateError> {
        let malformed = || CertificateError::Bundle(NOT_A_CRL.into());
        let list = CertificateList::from_der(der).map_err(|_| malformed())?;
        let tbs = tbs_bytes(der).ok_or_else(malformed)?.to_vec();
        Ok(Self { list, tbs })
    }

    /// The CRLs of a PEM file (`X509 CRL` blocks, as `openssl ca -gencrl`
    /// writes them) or of one DER CRL.
    pub fn from_file_bytes(bytes: &[u8], what: &str) -> Result<Vec<Self>, CertificateError> {
        if bytes.first() == Some(&0x30) {
            return Ok(vec![Self::from_der(bytes).map_err(|_| {
                CertificateError::Bundle(format!("{what}: {NOT_A_CRL}"))
            })?]);
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| CertificateError::Bundle(format!("{what}: neither PEM nor DER")))?;
        let blocks = pem_blocks(text, "X509 CRL", what)?;
        if blocks.is_empty() {
            return Err(CertificateError::Bundle(format!(
                "{what}: no X509 CRL block"
            )));
        }
        blocks
            .into_iter()
            .map(|(der, line)| {
                Self::from_der(&der).map_err(|_| {
                    CertificateError::Bundle(format!(
                        "{what}: the CRL ending on line {line} {NOT_A_CRL}"
                    ))
                })
            })
            .collect()
    }

    fn issuer(&self) -> &Name {
        &self.list.tbs_cert_list.issuer
    }

    fn is_signed_by(&self, issuer: &Parsed) -> bool {
        if !same_name(self.issuer(), issuer.subject()) {
            return false;
        }
        let (Some(key), Some(hash), Some(signature)) = (
            issuer.key(),
            signature_hash(&self.list.signature_algorithm.oid),
            self.list.signature.as_bytes(),
        ) else {
            return false;
        };
        key.verify_x509(hash, &self.tbs, signature).is_ok()
    }

    fn lists(&self, certificate: &Parsed) -> bool {
        let serial = certificate.cert.tbs_certificate.serial_number.as_bytes();
        self.list
            .tbs_cert_list
            .revoked_certificates
            .iter()
            .flatten()
            .any(|revoked| revoked.serial_number.as_bytes() == serial)
    }

    fn is_stale(&self, now: SystemTime) -> bool {
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        self.list
            .tbs_cert_list
            .next_update
            .is_some_and(|next| now > next.to_unix_duration())
    }
}

/// The manufacturer roots, the intermediates a verifier may use, and the
/// CRLs it applies.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    roots: Vec<Parsed>,
    intermediates: Vec<Parsed>,
    crls: Vec<Crl>,
}

impl TrustStore {
    /// From PEM bundles (`CERTIFICATE` blocks; anything else is refused).
    pub fn from_pem(roots: &str, intermediates: &str) -> Result<Self, CertificateError> {
        let roots = parse_bundle(roots, "roots")?;
        if roots.is_empty() {
            return Err(CertificateError::Bundle(
                "the roots file holds no certificate".into(),
            ));
        }
        Ok(Self {
            roots,
            intermediates: parse_bundle(intermediates, "intermediates")?,
            crls: Vec::new(),
        })
    }

    /// Adds CRLs, each of which must be signed by a root or intermediate
    /// of this store: a list nobody here issued is refused rather than
    /// ignored, since ignoring it would ignore the revocations it was
    /// meant to carry.
    pub fn with_crls(mut self, crls: Vec<Crl>) -> Result<Self, CertificateError> {
        for crl in &crls {
            let issued = self
                .roots
                .iter()
                .chain(&self.intermediates)
                .any(|ca| crl.is_signed_by(ca));
            if !issued {
                return Err(CertificateError::Bundle(format!(
                    "a CRL of {} is signed by no configured root or intermediate",
                    cap_field(
                        &common_name(crl.issuer()).unwrap_or_else(|| crl.issuer().to_string())
                    )
                )));
            }
        }
        self.crls.extend(crls);
        Ok(self)
    }

    pub fn crl_count(&self) -> usize {
        self.crls.len()
    }

    /// Refuses `certificate` if a CRL its issuer signed lists it, or if
    /// that issuer's CRL is stale. An issuer with no CRL here is not
    /// checked: CRLs are offline files, given for the CAs that publish them.
    fn check_revocation(
        &self,
        certificate: &Parsed,
        issuer: &Parsed,
        now: SystemTime,
    ) -> Result<(), CertificateError> {
        for crl in self.crls.iter().filter(|crl| crl.is_signed_by(issuer)) {
            if crl.is_stale(now) {
                return Err(CertificateError::StaleCrl(issuer.label()));
            }
            if crl.lists(certificate) {
                return Err(CertificateError::Revoked {
                    subject: certificate.label(),
                    issuer: issuer.label(),
                });
            }
        }
        Ok(())
    }

    /// From certificates already parsed (each file a PEM bundle or one DER
    /// certificate, [`certificates_in`]).
    pub fn new(roots: Vec<Parsed>, intermediates: Vec<Parsed>) -> Result<Self, CertificateError> {
        if roots.is_empty() {
            return Err(CertificateError::Bundle("no root certificate given".into()));
        }
        for certificate in roots.iter().chain(&intermediates) {
            if certificate.key().is_none() {
                return Err(CertificateError::Bundle(format!(
                    "{} has a key type sceau cannot verify with (RSA ≥ 2048, P-256, P-384)",
                    certificate.label()
                )));
            }
        }
        Ok(Self {
            roots,
            intermediates,
            crls: Vec::new(),
        })
    }

    pub fn root_count(&self) -> usize {
        self.roots.len()
    }

    /// Verifies `leaf` up to a root; returns the path's length on success.
    pub fn verify(&self, leaf: &Parsed, now: SystemTime) -> Result<usize, CertificateError> {
        leaf.check_validity(now)?;
        leaf.check_critical_extensions()?;
        leaf.check_ek_usage()?;
        let mut current = leaf;
        for depth in 0..MAX_CHAIN_DEPTH {
            if let Some(root) = self.roots.iter().find(|root| current.is_signed_by(root)) {
                self.check_revocation(current, root, now)?;
                root.check_validity(now)?;
                root.check_critical_extensions()?;
                root.check_ca(depth)?;
                return Ok(depth + 1);
            }
            let Some(next) = self
                .intermediates
                .iter()
                .find(|candidate| current.is_signed_by(candidate))
            else {
                return Err(CertificateError::Untrusted(format!(
                    "no configured root or intermediate issued {} (issuer {})",
                    current.label(),
                    current.issuer_label()
                )));
            };
            self.check_revocation(current, next, now)?;
            next.check_validity(now)?;
            next.check_critical_extensions()?;
            next.check_ca(depth)?;
            current = next;
        }
        Err(CertificateError::Untrusted(format!(
            "the chain is longer than {MAX_CHAIN_DEPTH}"
        )))
    }
}

fn parse_bundle(text: &str, what: &str) -> Result<Vec<Parsed>, CertificateError> {
    let blocks = pem_blocks(text, "CERTIFICATE", what)?;
    if blocks.len() > MAX_BUNDLE_CERTIFICATES {
        return Err(CertificateError::Bundle(format!(
            "{what}: more than {MAX_BUNDLE_CERTIFICATES} certificates"
        )));
    }
    let mut out = Vec::with_capacity(blocks.len());
    for (der, line) in blocks {
        let parsed = Parsed::from_der(&der).map_err(|_| {
            CertificateError::Bundle(format!(
                "{what}: the certificate ending on line {line} is not an X.509 certificate"
            ))
        })?;
        if parsed.key().is_none() {
            return Err(CertificateError::Bundle(format!(
                "{what}: {} has a key type sceau cannot verify with (RSA ≥ 2048, P-256, P-384)",
                parsed.label()
            )));
        }
        out.push(parsed);
    }
    Ok(out)
}

/// The certificates of one file: a PEM bundle, or one DER certificate (as
/// manufacturers publish their CAs, `.cer` or `.crt`).
pub fn certificates_in(bytes: &[u8], what: &str) -> Result<Vec<Parsed>, CertificateError> {
    if bytes.first() == Some(&0x30) {
        return Parsed::from_der(bytes)
            .map(|parsed| vec![parsed])
            .map_err(|_| CertificateError::Bundle(format!("{what}: not a DER X.509 certificate")));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| CertificateError::Bundle(format!("{what}: neither PEM nor DER")))?;
    parse_bundle(text, what)
}

/// The DER of every `label` block of a PEM text, with the line each ends
/// on; any other block is refused, so that a key or a request put in the
/// wrong file is said, not skipped.
fn pem_blocks(
    text: &str,
    label: &str,
    what: &str,
) -> Result<Vec<(Vec<u8>, usize)>, CertificateError> {
    use base64::Engine as _;
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        match &mut body {
            None if line == begin => body = Some(String::new()),
            None if line.starts_with("-----BEGIN") => {
                return Err(CertificateError::Bundle(format!(
                    "{what}: line {}: only {label} blocks are accepted",
                    number + 1
                )));
            }
            None => {}
            Some(b64) if line == end => {
                let der = base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .map_err(|_| {
                        CertificateError::Bundle(format!(
                            "{what}: the block ending on line {} is not valid base64",
                            number + 1
                        ))
                    })?;
                out.push((der, number + 1));
                if out.len() > MAX_BUNDLE_CERTIFICATES {
                    return Err(CertificateError::Bundle(format!(
                        "{what}: more than {MAX_BUNDLE_CERTIFICATES} blocks"
                    )));
                }
                body = None;
            }
            Some(b64) => b64.push_str(line),
        }
    }
    if body.is_some() {
        return Err(CertificateError::Bundle(format!(
            "{what}: a {label} block has no END line"
        )));
    }
    Ok(out)
}

/// The raw TBSCertificate: the first element of the outer SEQUENCE, as
/// signed (re-encoding a parsed certificate could differ from it).
fn tbs_bytes(der: &[u8]) -> Option<&[u8]> {
    let (_, outer) = header(der)?;
    let (len, _) = header(outer)?;
    outer.get(..len)
}

/// Parses a DER SEQUENCE header; returns (whole element length, contents).
fn header(bytes: &[u8]) -> Option<(usize, &[u8])> {
    if *bytes.first()? != 0x30 {
        return None;
    }
    let first = usize::from(*bytes.get(1)?);
    let (len, start) = if first < 0x80 {
        (first, 2)
    } else {
        let count = first & 0x7f;
        if count == 0 || count > 3 {
            return None;
        }
        let mut len = 0usize;
        for byte in bytes.get(2..2 + count)? {
            len = (len << 8) | usize::from(*byte);
        }
        (len, 2 + count)
    };
    let contents = bytes.get(start..start + len)?;
    Some((start + len, contents))
}

fn signature_hash(oid: &ObjectIdentifier) -> Option<Hash> {
    match oid.to_string().as_str() {
        "1.2.840.113549.1.1.11" | "1.2.840.10045.4.3.2" => Some(Hash::Sha256),
        "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => Some(Hash::Sha384),
        "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => Some(Hash::Sha512),
        _ => None,
    }
}

fn same_name(a: &Name, b: &Name) -> bool {
    match (a.to_der(), b.to_der()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn common_name(name: &Name) -> Option<String> {
    name.0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|attribute| attribute.oid.to_string() == OID_COMMON_NAME)
        .and_then(|attribute| string_value(&attribute.value))
}

/// A directory string's text (UTF8String, PrintableString, IA5String),
/// limited to printable characters so that it can be a selector value.
fn string_value(value: &der::Any) -> Option<String> {
    use der::{Tag, Tagged as _};
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {}
        _ => return None,
    }
    let text = std::str::from_utf8(value.value()).ok()?;
    let clean: String = text.chars().filter(|c| !c.is_control()).take(128).collect();
    (!clean.is_empty()).then_some(clean)
}

/// Most bytes of a certificate's text a message carries: a certificate is
/// input, and must not grow a log line without bound.
const MAX_FIELD_BYTES: usize = 256;

fn cap_field(text: &str) -> String {
    sceau_format::text::cap(text, MAX_FIELD_BYTES)
}
