//! `sceau-recover recovery-keygen`: makes the offline recovery key pair, and
//! writes its private half encrypted (an age file) or split among
//! custodians, never whole.

use anyhow::Context as _;
use sceau_format::key_id::hex;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::recovery_share;
use sceau_recover::cli::{RecoveryKeygenOptions, RecoveryPrivate};
use sceau_recover::custody::{Custodian, Passphrases, Protection, Sealer};

use super::{write_key_pair, write_new};

pub fn run(options: &RecoveryKeygenOptions) -> anyhow::Result<()> {
    let mut passphrases = Passphrases::new(options.passphrase_fd);
    match &options.private {
        RecoveryPrivate::Identity { path, protection } => {
            let what = "the recovery identity";
            let sealer = Sealer::prepare(protection, &mut passphrases, what)?;
            let identity = RecoveryIdentity::generate();
            let file = sealer.seal(identity.identity_file().as_bytes(), what)?;
            let public = identity.public_file();
            let name = hex(identity.public().name());
            // Gone before anything is written or printed: a memory scan
            // while the output blocks finds none of it.
            drop(identity);
            super::scrub_stack();
            write_key_pair(
                ["--identity", "--public"],
                (path, &file),
                (&options.public, public.as_bytes()),
            )?;
            eprintln!(
                "recovery key {name} written: identity {} ({}; keep it offline), public {}",
                path.display(),
                match protection {
                    Protection::Unencrypted => "UNENCRYPTED",
                    _ => "an age file",
                },
                options.public.display()
            );
        }
        RecoveryPrivate::Shares {
            threshold,
            dir,
            custodians,
        } => split(options, *threshold, dir, custodians, &mut passphrases)?,
    }
    Ok(())
}

/// Every check and every passphrase comes before the key exists; the key
/// exists only in this function's memory, and the share files are written
/// before the public file, which is what `sceau serve` will wrap for.
fn split(
    options: &RecoveryKeygenOptions,
    threshold: usize,
    dir: &std::path::Path,
    custodians: &[Custodian],
    passphrases: &mut Passphrases,
) -> anyhow::Result<()> {
    let share_path = |custodian: &Custodian| dir.join(format!("{}.share.age", custodian.name));
    for path in custodians
        .iter()
        .map(share_path)
        .chain([options.public.clone()])
    {
        if path.symlink_metadata().is_ok() {
            anyhow::bail!(
                "{} already exists; a key or share is never overwritten: move it away or choose another path",
                path.display()
            );
        }
    }
    // An existing directory must be a real one that only its owner can
    // write: anyone else could replace a share before it is handed over.
    match dir.symlink_metadata() {
        Ok(meta) => {
            use std::os::unix::fs::PermissionsExt as _;
            if !meta.is_dir() {
                anyhow::bail!(
                    "--shares-out {} is not a directory (a symlink is not followed: give the real path)",
                    dir.display()
                );
            }
            if meta.permissions().mode() & 0o022 != 0 {
                anyhow::bail!(
                    "--shares-out {} is writable by group or others, who could swap a share: use a directory only you can write (chmod 700)",
                    dir.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("--shares-out {}", dir.display())),
    }
    let names: Vec<String> = custodians.iter().map(|c| c.name.clone()).collect();
    let sealers = custodians
        .iter()
        .map(|c| Sealer::prepare(&c.protection, passphrases, &format!("{}'s share", c.name)))
        .collect::<Result<Vec<_>, _>>()?;
    let identity = RecoveryIdentity::generate();
    let shares = recovery_share::split(&identity, threshold, &names)?;
    let mut files = Vec::new();
    for ((custodian, share), sealer) in custodians.iter().zip(&shares).zip(&sealers) {
        files.push(sealer.seal(
            share.file().as_bytes(),
            &format!("{}'s share", custodian.name),
        )?);
    }
    let public = identity.public_file();
    let name = hex(identity.public().name());
    let key_set = hex(&shares[0].key_set());
    drop(shares);
    drop(identity);
    // Created only now that nothing can fail before the writes, and removed
    // again with the shares if a write fails.
    let created_dir = !dir.exists();
    if created_dir {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut written = Vec::new();
    let mut write_all = || -> anyhow::Result<()> {
        for (custodian, file) in custodians.iter().zip(&files) {
            let path = share_path(custodian);
            write_new(&path, 0o600, file)?;
            written.push(path);
        }
        write_new(&options.public, 0o644, public.as_bytes())
    };
    if let Err(error) = write_all() {
        // Shares without their public file are a key nobody wraps for; the
        // files were created by this run (O_EXCL), so they are removed.
        let mut left = Vec::new();
        for path in &written {
            if let Err(e) = std::fs::remove_file(path) {
                left.push(format!("{} ({e})", path.display()));
            }
        }
        if created_dir && left.is_empty() {
            let _ = std::fs::remove_dir(dir);
        }
        return Err(if left.is_empty() {
            error.context("no share kept")
        } else {
            error.context(format!(
                "these shares could not be removed: delete them by hand: {}",
                left.join(", ")
            ))
        });
    }
    eprintln!(
        "recovery key {name} split: any {threshold} of {} shares open it; the key itself was written nowhere",
        custodians.len()
    );
    eprintln!(
        "key set {key_set}: write it in the ceremony record; `sceau-recover share verify` prints it for every genuine share"
    );
    if threshold == 1 {
        eprintln!(
            "sceau-recover: warning: a threshold of 1 lets each custodian open every Secret alone: that is custody by copies, not dual control"
        );
    }
    for (custodian, share) in custodians.iter().zip(1..) {
        eprintln!(
            "  share {share}: {} for {} ({})",
            share_path(custodian).display(),
            custodian.name,
            match &custodian.protection {
                Protection::Recipient(r) => format!("age recipient {r}"),
                Protection::Ssh(file) => format!("SSH key {}", file.display()),
                Protection::Passphrase => "passphrase".into(),
                Protection::Unencrypted => "UNENCRYPTED".into(),
            }
        );
    }
    eprintln!(
        "public half: {} (for `sceau serve --recovery-key`); check each share with `sceau-recover share verify`",
        options.public.display()
    );
    Ok(())
}
