//! `sceau-recover enrollment-keygen`: makes the enrollment key pair whose
//! endorsement `sceau serve --enrollment-key` requires of every member file,
//! and writes its private half encrypted (an age file), as
//! `recovery-keygen --identity` does.

use sceau_format::endorsement::EnrollmentIdentity;
use sceau_format::key_id::hex;
use sceau_recover::cli::EnrollmentKeygenOptions;
use sceau_recover::custody::{Passphrases, Protection, Sealer};

use super::write_key_pair;

pub fn run(options: &EnrollmentKeygenOptions) -> anyhow::Result<()> {
    let what = "the enrollment identity";
    // The passphrase is asked before the key exists, so that no key waits
    // in memory while someone types.
    let mut passphrases = Passphrases::new(options.passphrase_fd);
    let sealer = Sealer::prepare(&options.protection, &mut passphrases, what)?;
    let identity = EnrollmentIdentity::generate();
    let file = sealer.seal(identity.identity_file().as_bytes(), what)?;
    let public = identity.public().public_file();
    let name = hex(identity.public().name());
    // Gone before anything is written or printed: a memory scan while the
    // output blocks finds none of it.
    drop(identity);
    super::scrub_stack();
    write_key_pair(
        ["--enrollment-identity", "--enrollment-public"],
        (&options.identity, &file),
        (&options.public, public.as_bytes()),
    )?;
    eprintln!(
        "enrollment key {name} written: identity {} ({}; keep it on the verifier's offline machine), public {} (for every node's `sceau serve --enrollment-key`)",
        options.identity.display(),
        match options.protection {
            Protection::Unencrypted => "UNENCRYPTED",
            _ => "an age file",
        },
        options.public.display()
    );
    Ok(())
}
