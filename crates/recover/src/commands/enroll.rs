//! `sceau-recover enroll challenge|verify`: the verifier's side of
//! enrollment; the member's side is `sceau enroll request|respond`.

use anyhow::Context as _;
use sceau_format::endorsement::EnrollmentIdentity;
use sceau_format::key_id::{KeyId, hex};
use sceau_format::members::member_file;
use sceau_recover::cli::EnrollStep;

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
        } => {
            let request = Request::parse(&read(request)?)?;
            match request.check_certificate()? {
                Some(fingerprint) => eprintln!(
                    "EK certificate names the EK; SHA-256 {fingerprint}: check its issuer chain against the TPM manufacturer's CA (docs/ha.md)"
                ),
                None => eprintln!(
                    "no EK certificate: the answer proves the SRK and EK share a TPM, not that the TPM is genuine"
                ),
            }
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
            let parsed = Request::parse(&read(request)?)?;
            enrollment::verify(&parsed, &read(expected)?, &read(response)?)?;
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
