//! `sceau-recover policy keygen|sign|show`: the offline side of boot-state
//! binding. The signing key stays on the operator's machine; what reaches a
//! node is its public half (`sceau serve --policy-key`) and the signed
//! policies (`sceau serve --policy`), in the files systemd uses for the same
//! purpose.

use anyhow::Context as _;
use sceau_format::key_id::hex;
use sceau_format::pcr_policy::{
    MAX_POLICY_FILE_LEN, PcrSelection, PcrValues, SignedPolicy, parse_signed_policies, unextended,
    write_signed_policies,
};
use sceau_format::policy_key::{PolicyKey, PolicySignatureError, PolicySigner};
use sceau_recover::cli::PolicyStep;

use sceau_recover::custody::{Passphrases, Protection, Sealer};

use super::{age_identities, read_protected, write_key_pair, write_new};

pub fn run(step: &PolicyStep) -> anyhow::Result<()> {
    match step {
        PolicyStep::Keygen {
            private,
            public,
            protection,
            passphrase_fd,
        } => {
            let what = "the policy signing key";
            let sealer = Sealer::prepare(protection, &mut Passphrases::new(*passphrase_fd), what)?;
            let signer = PolicySigner::generate();
            let file = sealer.seal(signer.to_pem().as_bytes(), what)?;
            write_key_pair(
                ["--policy-private", "--policy-key"],
                (private, &file),
                (public, signer.public().to_pem().as_bytes()),
            )?;
            eprintln!(
                "policy signing key {} written: private {} ({}; keep it offline), public {} (for every node's `sceau serve --policy-key`)",
                hex(&signer.public().fingerprint()),
                private.display(),
                match protection {
                    Protection::Unencrypted => "UNENCRYPTED",
                    _ => "an age file",
                },
                public.display()
            );
        }
        PolicyStep::Sign {
            private,
            pcrs,
            values,
            serial,
            accept_policies_another_os_can_meet,
            out,
            unlock,
        } => {
            let pcrs = PcrSelection::parse(pcrs).context("--pcrs")?;
            pcrs.check_bindable().context("--pcrs")?;
            if !accept_policies_another_os_can_meet && !pcrs.covers_firmware() {
                anyhow::bail!(
                    "--pcrs {pcrs}: no PCR the firmware extends (0-7), so any OS booted on the \
                     machine without systemd-stub can extend these from userspace to the signed \
                     values; add PCR 7 (--pcrs 7,{pcrs}), or pass \
                     --accept-policies-another-os-can-meet (docs/boot-binding.md)"
                );
            }
            let values_file = values;
            let text = read_small(values_file, "PCR values")?;
            let values = PcrValues::parse(&text).with_context(|| {
                format!("{} (not what `sceau pcrs` prints)", values_file.display())
            })?;
            // A policy over a PCR at its reset value binds to nothing: any
            // OS booted on the machine can extend it to that value.
            if let Some((index, state)) = pcrs
                .indices()
                .find_map(|i| values.get(i).and_then(unextended).map(|state| (i, state)))
            {
                anyhow::bail!(
                    "{}: PCR {index} reads all {state}: nothing extended it, so any OS booted on the \
                     machine can give it this value; sign PCRs the firmware or the boot loader \
                     measured (docs/boot-binding.md)",
                    values_file.display()
                );
            }
            let mut passphrases = Passphrases::new(unlock.passphrase_fd);
            let identities = age_identities(unlock, &mut passphrases)?;
            let pem = read_protected(private, "policy signing", &identities, &mut passphrases)?;
            let signer =
                PolicySigner::from_pem(&pem).with_context(|| private.display().to_string())?;
            let signed =
                SignedPolicy::sign(&signer, pcrs, &values, *serial).with_context(|| {
                    format!(
                        "{}: --pcrs names a PCR the file has no value for",
                        values_file.display()
                    )
                })?;
            let policy = signed.policy;
            write_new(out, 0o644, write_signed_policies(&[signed]).as_bytes())?;
            eprintln!(
                "signed policy {} over PCRs {pcrs} (sha256), revocation serial {serial}, written to {}",
                hex(&policy),
                out.display()
            );
        }
        PolicyStep::Show { policy, key } => {
            let text = read_small(policy, "signed policy")?;
            let policies =
                parse_signed_policies(&text).with_context(|| policy.display().to_string())?;
            let key = key
                .as_ref()
                .map(|path| {
                    PolicyKey::from_pem(&read_small(path, "policy key")?)
                        .with_context(|| path.display().to_string())
                })
                .transpose()?;
            let mut refused = 0;
            for (i, signed) in policies.iter().enumerate() {
                let verdict = match &key {
                    None => "not checked (give --policy-key)".to_string(),
                    Some(key) if !signed.names_key(key) => {
                        refused += 1;
                        "REFUSED: signed by another key (its fingerprint is not this key's)".into()
                    }
                    Some(key) => match key.verify(&signed.policy, &signed.signature) {
                        Ok(()) => "valid".into(),
                        Err(PolicySignatureError::Rsa) => {
                            "fingerprint matches; an RSA signature is checked by the node's TPM"
                                .into()
                        }
                        Err(error) => {
                            refused += 1;
                            format!("REFUSED: {error}")
                        }
                    },
                };
                println!("policy {}: sha256 PCRs {}", i + 1, signed.pcrs);
                match signed.serial {
                    Some(serial) => {
                        println!(
                            "  digest (PolicyPCR, PolicySecret): {}",
                            hex(&signed.policy)
                        );
                        println!(
                            "  revocation serial:  {serial} (NV index 0x{:08x}; `sceau revoke-policy --serial {serial}`)",
                            serial.index_handle()
                        );
                    }
                    None => {
                        println!("  digest (PolicyPCR): {}", hex(&signed.policy));
                        println!(
                            "  revocation serial:  none (only a policy key rotation withdraws it)"
                        );
                    }
                }
                println!(
                    "  key fingerprint:    {}",
                    signed.key_fingerprint.map_or("(none)".into(), |f| hex(&f))
                );
                println!("  signature:          {verdict}");
                match &signed.values {
                    Some(values) => {
                        for (index, value) in values.iter() {
                            println!("  PCR {index:<2} signed at:    {}", hex(value));
                        }
                    }
                    None => println!("  values:             not in the file (only the digest)"),
                }
            }
            if refused > 0 {
                anyhow::bail!(
                    "{refused} of {} policies in {} would be refused with this key",
                    policies.len(),
                    policy.display()
                );
            }
        }
    }
    Ok(())
}

/// A small text file: at most [`MAX_POLICY_FILE_LEN`] bytes are read.
fn read_small(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)
        .with_context(|| format!("reading the {what} file {}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_POLICY_FILE_LEN as u64 + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the {what} file {}", path.display()))?;
    if text.len() > MAX_POLICY_FILE_LEN {
        anyhow::bail!(
            "{} is larger than {MAX_POLICY_FILE_LEN} bytes: not a {what} file",
            path.display()
        );
    }
    Ok(text)
}
