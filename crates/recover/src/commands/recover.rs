//! `sceau-recover recover`: opens envelopes and etcd contents with the
//! recovery identity or the custodians' shares, without any TPM.

use anyhow::bail;
use sceau_format::key_id::hex;
use sceau_format::members::KnownMembers;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_recover::cli::{RecoverInput, RecoverOptions, RecoveryKey};
use sceau_recover::custody::Passphrases;
use sceau_recover::verify::{Checked, check, read_members};

use super::{age_identities, read_protected};

/// The recovery key, from its identity file or from the custodians' shares.
/// Shares are all checked before anything else is read; the key is combined
/// only after the input was (main.rs locked the memory against swap).
enum Key {
    Identity(RecoveryIdentity),
    Shares(Vec<sceau_format::recovery_share::Share>),
}

impl Key {
    fn read(options: &RecoverOptions) -> anyhow::Result<Self> {
        let mut passphrases = Passphrases::new(options.unlock.passphrase_fd);
        let identities = age_identities(&options.unlock, &mut passphrases)?;
        Ok(match &options.key {
            RecoveryKey::Identity(path) => Self::Identity(RecoveryIdentity::parse(
                &read_protected(path, "recovery", &identities, &mut passphrases)?,
            )?),
            RecoveryKey::Shares(files) => {
                let shares = super::share::read_shares(files, &identities, &mut passphrases)?;
                let need = usize::from(shares[0].threshold());
                if shares.len() < need {
                    bail!(
                        "shares given: {} of the {need} that open recovery key {}; nothing was opened",
                        shares.len(),
                        hex(shares[0].recovery_key().name())
                    );
                }
                Self::Shares(shares)
            }
        })
    }

    fn identity(self) -> anyhow::Result<RecoveryIdentity> {
        match self {
            Self::Identity(identity) => Ok(identity),
            Self::Shares(shares) => Ok(sceau_format::recovery_share::combine(&shares)?),
        }
    }
}

/// No TPM, no sandbox; an offline operator tool.
pub fn run(options: &RecoverOptions) -> anyhow::Result<()> {
    use std::io::{IsTerminal as _, Write as _};
    if std::io::stdout().is_terminal() && !options.force {
        bail!("refusing to write plaintext to a terminal; redirect the output or pass --force");
    }
    let key = Key::read(options)?;
    let known = read_members(&options.members)?;
    if known.is_none() {
        eprintln!(
            "no --members: envelopes are opened without checking their signatures, and each \
             is named UNVERIFIED"
        );
    }
    match &options.input {
        RecoverInput::Envelope(path) => {
            let input = super::read_input(path)?;
            let identity = key.identity()?;
            let opened = open_envelope_input(&identity, known.as_ref(), &input);
            // The key is wiped before anything is written: a memory scan
            // while the output blocks finds none of it.
            drop(identity);
            super::scrub_stack();
            sceau_sys::unlock_all_memory();
            let (dek, checked) = opened?;
            std::io::stdout().write_all(&dek)?;
            if checked == Checked::Unverified {
                eprintln!("UNVERIFIED envelope: opened without checking its signature");
            }
        }
        RecoverInput::EtcdSnapshot(_) | RecoverInput::EtcdJson(_) => {
            let values = super::etcd_values(&options.input)?;
            print_secrets(key, known.as_ref(), &values)?;
        }
    }
    Ok(())
}

/// A raw ciphertext, or a whole stored etcd value (`k8s:enc:kms:v2:…`), which
/// also carries the annotations that envelopes of five or more recipients
/// need and the key_id the apiserver stored; checked against the members
/// first when they were given.
fn open_envelope_input(
    identity: &RecoveryIdentity,
    known: Option<&KnownMembers>,
    input: &[u8],
) -> anyhow::Result<(zeroize::Zeroizing<Vec<u8>>, Checked)> {
    use sceau_recover::kubernetes::parse_stored_value;
    match parse_stored_value(input)? {
        Some(object) => {
            let annotations = object.annotations.into_iter().collect();
            let ciphertext = &object.encrypted_dek_source;
            let checked = check(known, ciphertext, &annotations, Some(&object.key_id))?;
            Ok((identity.open(ciphertext, &annotations)?, checked))
        }
        None => {
            let annotations = Default::default();
            let checked = check(known, input, &annotations, None)?;
            Ok((identity.open(input, &annotations)?, checked))
        }
    }
}

/// Opens every DEK seed, wipes the key, then decrypts and prints: the key
/// lives only until the last seed is opened, not until the last Secret is
/// written (a memory scan while the output blocks finds none of it). The
/// seeds and the Secrets stay in locked memory until everything is printed.
fn print_secrets(
    key: Key,
    known: Option<&KnownMembers>,
    values: &[sceau_recover::etcd::StoredValue],
) -> anyhow::Result<()> {
    let identity = key.identity()?;
    let seeds = sceau_recover::report::open_seeds(&identity, known, values);
    drop(identity);
    super::scrub_stack();
    let summary = sceau_recover::report::recover_secrets(
        &seeds,
        values,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    drop(seeds);
    super::scrub_stack();
    sceau_sys::unlock_all_memory();
    let summary = summary?;
    eprintln!(
        "{} Secrets recovered ({} of them unverified), {} values skipped, {} failed",
        summary.printed, summary.unverified, summary.skipped, summary.failed
    );
    if summary.failed > 0 {
        bail!("{} encrypted values could not be recovered", summary.failed);
    }
    Ok(())
}
