//! `sceau-recover enrollment-keygen`: makes the enrollment key pair whose
//! endorsement `sceau serve --enrollment-key` requires of every member file.

use sceau_format::endorsement::EnrollmentIdentity;
use sceau_format::key_id::hex;
use sceau_recover::cli::EnrollmentKeygenOptions;

use super::write_key_pair;

pub fn run(options: &EnrollmentKeygenOptions) -> anyhow::Result<()> {
    let identity = EnrollmentIdentity::generate();
    write_key_pair(
        ["--enrollment-identity", "--enrollment-public"],
        (&options.identity, identity.identity_file().as_bytes()),
        (&options.public, identity.public().public_file().as_bytes()),
    )?;
    eprintln!(
        "enrollment key {} written: identity {} (keep on the verifier's offline machine), public {} (for every node's `sceau serve --enrollment-key`)",
        hex(identity.public().name()),
        options.identity.display(),
        options.public.display()
    );
    Ok(())
}
