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
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, KeyUsages, SubjectAltName,
};
use x509_cert::name::Name;

use super::keys::{Hash, Key};
use crate::plugin::log::cap_field;

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
}

/// One parsed certificate with the bytes its signature covers.
#[derive(Debug, Clone)]
pub struct Parsed {
    cert: Certificate,
    tbs: Vec<u8>,
    key: Option<Key>,
}

impl Parsed {
    pub fn from_der(der: &[u8]) -> Result<Self, CertificateError> {
        let cert = Certificate::from_der(der).map_err(|_| CertificateError::Malformed)?;
        let tbs = tbs_bytes(der).ok_or(CertificateError::Malformed)?.to_vec();
        let key = Key::from_spki(&cert.tbs_certificate.subject_public_key_info).ok();
        Ok(Self { cert, tbs, key })
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

/// The manufacturer roots and the intermediates the server may use.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    roots: Vec<Parsed>,
    intermediates: Vec<Parsed>,
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
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        match (&mut body, line) {
            (None, "-----BEGIN CERTIFICATE-----") => body = Some(String::new()),
            (None, l) if l.starts_with("-----BEGIN") => {
                return Err(CertificateError::Bundle(format!(
                    "{what}: line {}: only CERTIFICATE blocks are accepted",
                    number + 1
                )));
            }
            (None, _) => {}
            (Some(b64), "-----END CERTIFICATE-----") => {
                let der = base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .map_err(|_| {
                        CertificateError::Bundle(format!(
                            "{what}: the certificate ending on line {} is not valid base64",
                            number + 1
                        ))
                    })?;
                let parsed = Parsed::from_der(&der).map_err(|_| {
                    CertificateError::Bundle(format!(
                        "{what}: the certificate ending on line {} is not an X.509 certificate",
                        number + 1
                    ))
                })?;
                if parsed.key().is_none() {
                    return Err(CertificateError::Bundle(format!(
                        "{what}: {} has a key type sceau cannot verify with (RSA ≥ 2048, P-256, P-384)",
                        parsed.label()
                    )));
                }
                out.push(parsed);
                if out.len() > MAX_BUNDLE_CERTIFICATES {
                    return Err(CertificateError::Bundle(format!(
                        "{what}: more than {MAX_BUNDLE_CERTIFICATES} certificates"
                    )));
                }
                body = None;
            }
            (Some(b64), l) => b64.push_str(l),
        }
    }
    if body.is_some() {
        return Err(CertificateError::Bundle(format!(
            "{what}: a CERTIFICATE block has no END line"
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
