//! `sceau-recover share verify`, and the reading of share files that
//! `recover` shares: each file decrypted, parsed and checked against its
//! key set's commitments on its own, and named in every refusal.

use std::path::PathBuf;

use anyhow::Context as _;
use sceau_format::key_id::hex;
use sceau_format::recovery_share::Share;
use sceau_recover::cli::ShareVerifyOptions;
use sceau_recover::custody::{self, AgeIdentities, Passphrases};

use super::{age_identities, read_private};

/// Decrypts and checks every share; one refusal line per bad file. The
/// shares must also be of one key set (the first file's) and distinct.
pub(crate) fn read_shares(
    files: &[PathBuf],
    identities: &AgeIdentities,
    passphrases: &mut Passphrases,
) -> anyhow::Result<Vec<Share>> {
    let mut shares: Vec<(PathBuf, Share)> = Vec::new();
    let mut refused = 0;
    for file in files {
        match read_share(file, identities, passphrases) {
            Ok(share) => shares.push((file.clone(), share)),
            Err(error) => {
                refused += 1;
                eprintln!("sceau-recover: share refused: {error:#}");
            }
        }
    }
    for (n, (file, share)) in shares.iter().enumerate() {
        let (first_file, first) = &shares[0];
        if !share.same_key_set(first) {
            refused += 1;
            eprintln!(
                "sceau-recover: share refused: {}: a share of another key set (recovery key {}, {} of {} to open) than {} (recovery key {}, {} of {})",
                file.display(),
                hex(share.recovery_key().name()),
                share.threshold(),
                share.custodians(),
                first_file.display(),
                hex(first.recovery_key().name()),
                first.threshold(),
                first.custodians()
            );
        } else if let Some((earlier, _)) = shares[..n]
            .iter()
            .find(|(_, earlier)| earlier.index() == share.index())
        {
            refused += 1;
            eprintln!(
                "sceau-recover: share refused: {}: the same share ({}) as {}",
                file.display(),
                share.index(),
                earlier.display()
            );
        }
    }
    if refused > 0 {
        anyhow::bail!(
            "{refused} of {} share files refused (named above); nothing was opened: leave them out or replace them",
            files.len()
        );
    }
    Ok(shares.into_iter().map(|(_, share)| share).collect())
}

fn read_share(
    file: &std::path::Path,
    identities: &AgeIdentities,
    passphrases: &mut Passphrases,
) -> anyhow::Result<Share> {
    let bytes = read_private(file, "recovery share")?;
    let name = file.display().to_string();
    let plaintext = if custody::is_age(bytes.as_bytes()) {
        custody::open(bytes.as_bytes(), &name, identities, passphrases)?
    } else {
        anyhow::bail!("{name}: not an age file (share files are what recovery-keygen wrote)");
    };
    let text = std::str::from_utf8(&plaintext).with_context(|| format!("{name}: not a share"))?;
    Share::parse(text).with_context(|| name.clone())
}

pub fn verify(options: &ShareVerifyOptions) -> anyhow::Result<()> {
    let mut passphrases = Passphrases::new(options.unlock.passphrase_fd);
    let identities = age_identities(&options.unlock, &mut passphrases)?;
    let shares = read_shares(&options.shares, &identities, &mut passphrases)?;
    let recovery_key = shares[0].recovery_key();
    if let Some(public) = &options.public {
        let text = std::fs::read_to_string(public)
            .with_context(|| format!("reading {}", public.display()))?;
        let expected = sceau_format::members::parse_pinned(
            &text,
            sceau_format::members::RECOVERY_PUBLIC_LABEL,
        )
        .with_context(|| public.display().to_string())?;
        if expected != recovery_key {
            anyhow::bail!(
                "the shares belong to recovery key {}, but {} is recovery key {}",
                hex(recovery_key.name()),
                public.display(),
                hex(expected.name())
            );
        }
    }
    for (file, share) in options.shares.iter().zip(&shares) {
        println!(
            "{}: share {} of {} (custodian {}), verified against the commitments of recovery key {}",
            file.display(),
            share.index(),
            share.custodians(),
            share.custodian(),
            hex(recovery_key.name())
        );
    }
    let need = usize::from(shares[0].threshold());
    println!(
        "{} of the {need} shares needed to open recovery key {}{}",
        shares.len(),
        hex(recovery_key.name()),
        if options.public.is_some() {
            ", which is the key of the public file"
        } else {
            ""
        }
    );
    Ok(())
}
