//! `sceau-recover recovery-keygen`: makes the offline recovery key pair.

use anyhow::bail;
use sceau_format::key_id::hex;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_recover::cli::RecoveryKeygenOptions;

use super::write_new;

/// Writes the two halves of a new recovery key; never overwrites a file, and
/// never leaves one half without the other: an identity whose public file
/// was not written would be a private key nobody knows to keep.
pub fn run(options: &RecoveryKeygenOptions) -> anyhow::Result<()> {
    if options.identity == options.public {
        bail!("--identity and --public name the same file; give two different paths");
    }
    // Checked before anything is written; O_EXCL below still settles a race.
    for path in [&options.identity, &options.public] {
        if path.symlink_metadata().is_ok() {
            bail!(
                "{} already exists; recovery-keygen never overwrites a key: move it away or choose another path",
                path.display()
            );
        }
    }
    let identity = RecoveryIdentity::generate();
    write_new(
        &options.identity,
        0o600,
        identity.identity_file().as_bytes(),
    )?;
    if let Err(error) = write_new(&options.public, 0o644, identity.public_file().as_bytes()) {
        // The identity was created by this run (O_EXCL), so it is ours to
        // remove; a failure to do so is reported with the first error.
        return Err(match std::fs::remove_file(&options.identity) {
            Ok(()) => error.context(format!(
                "no key written ({} removed again)",
                options.identity.display()
            )),
            Err(removal) => error.context(format!(
                "{} was written but could not be removed ({removal}): delete it by hand",
                options.identity.display()
            )),
        });
    }
    eprintln!(
        "recovery key {} written: identity {} (keep offline), public {}",
        hex(identity.public().name()),
        options.identity.display(),
        options.public.display()
    );
    Ok(())
}
