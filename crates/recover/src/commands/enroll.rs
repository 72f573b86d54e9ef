//! `sceau-recover enroll challenge|verify`: the verifier's side of
//! enrollment; the member's side is `sceau enroll request|respond`.

use anyhow::Context as _;
use sceau_format::endorsement::EnrollmentIdentity;
use sceau_format::key_id::{KeyId, hex};
use sceau_format::members::member_file;
use sceau_recover::cli::{EkTrust, EnrollStep};

use sceau_recover::custody::Passphrases;

use super::{age_identities, read_protected, write_new};

pub fn run(step: &EnrollStep) -> anyhow::Result<()> {
    use sceau_format::enrollment::{self, Request};
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    match step {
        EnrollStep::Challenge {
            request,
            challenge_out,
            expected_out,
            ek_trust,
        } => {
            let mut request = Request::parse(&read(request)?)?;
            attach_certificate(&mut request, ek_trust)?;
            check_ek(&request, ek_trust)?;
            let (challenge, expected) = enrollment::challenge_files(&request);
            write_new(challenge_out, 0o644, challenge.as_bytes())?;
            write_new(expected_out, 0o600, expected.as_bytes())?;
        }
        EnrollStep::Verify {
            request,
            expected,
            response,
            member_out,
            enrollment_identity,
            unlock,
            ek_trust,
        } => {
            // Read before any check, so that a wrong path or passphrase
            // fails first; opened as the recovery identity is (an age file,
            // or plaintext with a warning).
            let identity = enrollment_identity
                .as_deref()
                .map(|path| -> anyhow::Result<_> {
                    let mut passphrases = Passphrases::new(unlock.passphrase_fd);
                    let identities = age_identities(unlock, &mut passphrases)?;
                    let text = read_protected(path, "enrollment", &identities, &mut passphrases)?;
                    EnrollmentIdentity::parse(&text)
                        .with_context(|| format!("reading {}", path.display()))
                })
                .transpose()?;
            let mut parsed = Request::parse(&read(request)?)?;
            attach_certificate(&mut parsed, ek_trust)?;
            enrollment::verify(&parsed, &read(expected)?, &read(response)?)?;
            check_ek(&parsed, ek_trust)?;
            let node_key_id = KeyId::from_srk_name(parsed.member.srk.name());
            let mut text = member_file(&parsed.member, &node_key_id);
            match &identity {
                Some(identity) => {
                    text.push_str(&identity.endorse(&parsed.member, parsed.ek.name()))
                }
                None => eprintln!(
                    "warning: the member file is not endorsed (no --enrollment-identity): a node \
                     started with `sceau serve --enrollment-key` refuses it"
                ),
            }
            write_new(member_out, 0o644, text.as_bytes())?;
            eprintln!(
                "enrolled: SRK {} and signing key {} share a TPM with EK {}{}",
                hex(parsed.member.srk.name()),
                hex(parsed.member.signing.name()),
                hex(parsed.ek.name()),
                match &identity {
                    Some(identity) => format!(
                        "; endorsed by enrollment key {}",
                        hex(identity.public().name())
                    ),
                    None => String::new(),
                }
            );
        }
    }
    Ok(())
}

/// The most bytes read from one certificate, CRL or CA file.
const MAX_TRUST_FILE_LEN: u64 = 4 * 1024 * 1024;

/// Puts `--ek-certificate` in the request, where a TPM that keeps its
/// certificate outside NV has none: the expected answer pins the
/// certificate's SHA-256, so challenge and verify must be given the same
/// file.
fn attach_certificate(
    request: &mut sceau_format::enrollment::Request,
    trust: &EkTrust,
) -> anyhow::Result<()> {
    if let Some(file) = &trust.certificate {
        let what = file.display().to_string();
        let mut given = sceau_ekcert::x509::certificates_in(&read_bounded(file)?, &what)?;
        if given.len() != 1 {
            anyhow::bail!(
                "{what}: holds {} certificates; give the EK certificate alone",
                given.len()
            );
        }
        let der = given.remove(0).der().to_vec();
        match &request.certificate {
            Some(carried) if *carried != der => anyhow::bail!(
                "the request carries an EK certificate from the TPM's NV, and --ek-certificate \
                 gives another: leave out --ek-certificate, or find out why they differ"
            ),
            _ => request.certificate = Some(der),
        }
    }
    Ok(())
}

/// Checks the request's EK against what the operator trusts. With
/// `--ek-roots`, the certificate must chain to one of them, past the CRLs,
/// and certify this EK; with `--accept-any-ek`, what is given up is said.
fn check_ek(request: &sceau_format::enrollment::Request, trust: &EkTrust) -> anyhow::Result<()> {
    use sceau_ekcert::keys::Key;
    use sceau_ekcert::x509::{Crl, Parsed, TrustStore};
    let Some(roots) = &trust.roots else {
        match request.check_certificate()? {
            Some(fingerprint) => eprintln!(
                "warning: --accept-any-ek: the EK certificate (SHA-256 {fingerprint}) names the \
                 EK, but its chain is not checked: the TPM may be an emulation"
            ),
            None => eprintln!(
                "warning: --accept-any-ek: no EK certificate; the answer proves the SRK and EK \
                 share a TPM, not that the TPM is genuine"
            ),
        }
        return Ok(());
    };
    let fingerprint = request.check_certificate()?.ok_or_else(|| {
        anyhow::anyhow!(
            "the request has no EK certificate (the TPM keeps none at the TCG NV index): give \
             the one its vendor publishes with --ek-certificate FILE, or enroll with \
             --accept-any-ek, which gives up the proof that the TPM is genuine"
        )
    })?;
    let certificates = |path: &std::path::Path| -> anyhow::Result<Vec<Parsed>> {
        let mut out = Vec::new();
        for file in files_of(path)? {
            let what = file.display().to_string();
            out.extend(sceau_ekcert::x509::certificates_in(
                &read_bounded(&file)?,
                &what,
            )?);
        }
        Ok(out)
    };
    let intermediates = match &trust.intermediates {
        Some(path) => certificates(path).with_context(|| {
            format!(
                "--ek-intermediates {}: give the manufacturer's intermediate certificates, a PEM \
                 file or a directory of them",
                path.display()
            )
        })?,
        None => Vec::new(),
    };
    let mut crls = Vec::new();
    for file in &trust.crls {
        let bytes = read_bounded(file).with_context(|| {
            format!(
                "--crl {}: give a CRL the manufacturer publishes (PEM or DER)",
                file.display()
            )
        })?;
        crls.extend(Crl::from_file_bytes(&bytes, &file.display().to_string())?);
    }
    let root_certificates = certificates(roots).with_context(|| {
        format!(
            "--ek-roots {}: give the manufacturer's root certificates, a PEM file or a directory \
             of them",
            roots.display()
        )
    })?;
    let store = TrustStore::new(root_certificates, intermediates)
        .and_then(|store| store.with_crls(crls))
        .with_context(|| format!("reading --ek-roots {}", roots.display()))?;
    let der = request.certificate.as_deref().expect("checked above");
    let certificate = Parsed::from_der(der)?;
    store
        .verify(&certificate, std::time::SystemTime::now())
        .context("the EK certificate is refused")?;
    let (x, y) = sceau_format::storage_key::coordinates(request.ek.point());
    let ek = Key::from_tpm(&sceau_format::public::PublicKey::Ecc {
        curve: sceau_format::wire::ECC_NIST_P256,
        kdf: None,
        x: x.to_vec(),
        y: y.to_vec(),
    })?;
    if certificate.key() != Some(&ek) {
        anyhow::bail!("the EK certificate certifies another key than this request's EK");
    }
    eprintln!(
        "EK certificate (SHA-256 {fingerprint}) chains to a configured root through {}",
        certificate.issuer_label()
    );
    Ok(())
}

/// A file, or a directory's regular files in name order (a CA store as
/// keylime and distributions keep them: one certificate per file).
fn files_of(path: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))? {
        let entry = entry.with_context(|| format!("reading {}", path.display()))?;
        if entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    if files.is_empty() {
        anyhow::bail!("{} holds no file", path.display());
    }
    Ok(files)
}

fn read_bounded(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_TRUST_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > MAX_TRUST_FILE_LEN {
        anyhow::bail!(
            "{} is larger than {MAX_TRUST_FILE_LEN} bytes",
            path.display()
        );
    }
    Ok(bytes)
}
