//! `sceau enroll request|respond`: the member's side of enrollment; the
//! verifier's side is `sceau-recover enroll challenge|verify`.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use sceau::cli::EnrollStep;
use sceau_format::enrollment;
use sceau_format::storage_key::StorageKey;
use sceau_tpm::CredentialFor;
use zeroize::Zeroizing;

use super::{open_tpm_for_tool, own_member};

pub fn run(step: &EnrollStep) -> anyhow::Result<()> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    match step {
        EnrollStep::Request(options) => {
            let mut tpm = open_tpm_for_tool(options)?;
            let member = own_member(&tpm)?;
            let key_id = tpm.srk().key_id();
            let ek = tpm.endorsement_key()?;
            let ek_key = StorageKey::from_tpm2b_public(&ek.public)
                .context("the EK is not an ECC P-256 decryption key")?;
            let text =
                enrollment::request_file(&member, &key_id, &ek_key, ek.certificate.as_deref());
            print!("{text}");
        }
        EnrollStep::Respond { tpm, challenge } => {
            let mut tpm = open_tpm_for_tool(tpm)?;
            let member = own_member(&tpm)?;
            let blobs = enrollment::parse_challenge(&read(challenge)?, &member)?;
            let ek = tpm.endorsement_key()?;
            let mut answer = Zeroizing::new(Vec::with_capacity(enrollment::ANSWER_LEN));
            for (name, key, blob) in [
                ("SRK", CredentialFor::Srk, &blobs.srk),
                ("signing key", CredentialFor::SigningKey, &blobs.signing),
            ] {
                let credential = tpm
                    .activate_credential(key, &ek, &blob.duplicate, &blob.in_sym_seed)
                    .with_context(|| {
                        format!("TPM2_ActivateCredential refused the challenge for the {name}")
                    })?;
                answer.extend_from_slice(&credential);
            }
            print!("{}", enrollment::response_file(&answer));
        }
    }
    Ok(())
}
