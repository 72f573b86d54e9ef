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

/// One key set's fingerprint and the shares given of it, with their files.
type KeySetGroup<'a> = ([u8; 32], Vec<&'a (PathBuf, Share)>);

/// Decrypts and checks every share; one refusal line per bad file. The
/// shares must also be of one key set and distinct.
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
    // Shares of several key sets: each group is listed, none is blamed.
    // Which set is genuine is not for the first file to decide: a share
    // forged for one custodian (with the real recovery key as C_0 and
    // other commitments of the forger's choosing) verifies alone. The
    // ceremony record's key set fingerprint, which `share verify` prints
    // for each genuine share, decides.
    let mut sets: Vec<KeySetGroup> = Vec::new();
    for entry in &shares {
        let key_set = entry.1.key_set();
        match sets.iter_mut().find(|(set, _)| *set == key_set) {
            Some((_, members)) => members.push(entry),
            None => sets.push((key_set, vec![entry])),
        }
    }
    if sets.len() > 1 {
        for (key_set, members) in &sets {
            let share = &members[0].1;
            let files: Vec<String> = members
                .iter()
                .map(|(f, _)| f.display().to_string())
                .collect();
            eprintln!(
                "sceau-recover: key set {} (recovery key {}, any {} of {}): {}",
                hex(key_set),
                hex(share.recovery_key().name()),
                share.threshold(),
                share.custodians(),
                files.join(", ")
            );
        }
        anyhow::bail!(
            "the shares are of {} different key sets (listed above): keep only those of the key set in the ceremony record, which `share verify` prints; nothing was opened",
            sets.len()
        );
    }
    for (n, (file, share)) in shares.iter().enumerate() {
        if let Some((earlier, _)) = shares[..n]
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
    // The one figure to compare with the ceremony record: a share that
    // verifies alone but was forged shows another key set.
    println!("key set {}", hex(&shares[0].key_set()));
    Ok(())
}
