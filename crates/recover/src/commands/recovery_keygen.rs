//! `sceau-recover recovery-keygen`: makes the offline recovery key pair.

use sceau_format::key_id::hex;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_recover::cli::RecoveryKeygenOptions;

use super::write_key_pair;

pub fn run(options: &RecoveryKeygenOptions) -> anyhow::Result<()> {
    let identity = RecoveryIdentity::generate();
    write_key_pair(
        ["--identity", "--public"],
        (&options.identity, identity.identity_file().as_bytes()),
        (&options.public, identity.public_file().as_bytes()),
    )?;
    eprintln!(
        "recovery key {} written: identity {} (keep offline), public {}",
        hex(identity.public().name()),
        options.identity.display(),
        options.public.display()
    );
    Ok(())
}
