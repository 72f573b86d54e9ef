//! One module per command of `sceau-recover`; `main.rs` parses and
//! dispatches here. `anyhow` is used from here up only.

pub mod enroll;
pub mod enrollment_keygen;
pub mod inventory;
pub mod policy;
pub mod recover;
pub mod recovery_keygen;
pub mod share;

use anyhow::Context as _;

/// Overwrites the stack below the caller's frame, where generating a key,
/// combining the shares and opening envelopes left copies of the scalar (p256's `Scalar`
/// and `SecretKey` are `Copy`-like values that every call and move copies;
/// their own wipe covers only the last copy). 128 KiB is several times the
/// deepest call of `combine` and `open` (the memory scan test fails with
/// the scalar on the stack without this).
#[inline(never)]
pub(crate) fn scrub_stack() {
    let mut stack = [0u8; 128 * 1024];
    zeroize::Zeroize::zeroize(&mut stack[..]);
    std::hint::black_box(&stack);
}

/// A file's bytes, or standard input's for `-`.
pub(crate) fn read_input(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    if path == std::path::Path::new("-") {
        std::io::stdin().read_to_end(&mut bytes)?;
    } else {
        bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(bytes)
}

/// The live values of an etcd input (a snapshot, or `etcdctl -w json`
/// output); an envelope input has none.
pub(crate) fn etcd_values(
    input: &sceau_recover::cli::RecoverInput,
) -> anyhow::Result<Vec<sceau_recover::etcd::StoredValue>> {
    use sceau_recover::cli::RecoverInput;
    Ok(match input {
        RecoverInput::EtcdSnapshot(path) => {
            sceau_recover::etcd::values_from_snapshot(&read_input(path)?)?
        }
        RecoverInput::EtcdJson(path) => {
            let text = String::from_utf8(read_input(path)?).context("etcdctl JSON is not UTF-8")?;
            sceau_recover::etcd::values_from_etcdctl_json(&text)?
        }
        RecoverInput::Envelope(_) => Vec::new(),
    })
}

/// Creates a file that must not exist yet, with `mode`.
pub(crate) fn write_new(path: &std::path::Path, mode: u32, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .with_context(|| format!("creating {}", path.display()))
}

/// Writes a new key pair: `identity` (mode 0600), then `public`. Never
/// overwrites a file, and never leaves one half without the other: an
/// identity whose public file was not written would be a private key nobody
/// knows to keep. `flags` name the two paths in errors.
pub(crate) fn write_key_pair(
    flags: [&str; 2],
    identity: (&std::path::Path, &[u8]),
    public: (&std::path::Path, &[u8]),
) -> anyhow::Result<()> {
    if identity.0 == public.0 {
        anyhow::bail!(
            "{} and {} name the same file; give two different paths",
            flags[0],
            flags[1]
        );
    }
    // Checked before anything is written; O_EXCL below still settles a race.
    for path in [identity.0, public.0] {
        if path.symlink_metadata().is_ok() {
            anyhow::bail!(
                "{} already exists; a key is never overwritten: move it away or choose another path",
                path.display()
            );
        }
    }
    write_new(identity.0, 0o600, identity.1)?;
    if let Err(error) = write_new(public.0, 0o644, public.1) {
        // The identity was created by this run (O_EXCL), so it is ours to
        // remove; a failure to do so is reported with the first error.
        return Err(match std::fs::remove_file(identity.0) {
            Ok(()) => error.context(format!(
                "no key written ({} removed again)",
                identity.0.display()
            )),
            Err(removal) => error.context(format!(
                "{} was written but could not be removed ({removal}): delete it by hand",
                identity.0.display()
            )),
        });
    }
    Ok(())
}

/// Reads a private key file (`what`: "recovery", "enrollment"), refusing
/// one that group or others can access: a loose mode is how a copy of it
/// leaks. The mode is taken from the opened file, not the path, so it is the
/// mode of the bytes read.
pub(crate) fn read_private(
    path: &std::path::Path,
    what: &str,
) -> anyhow::Result<zeroize::Zeroizing<String>> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{path} holds the {what} private key but has mode {mode:04o} (group or others have access): run `chmod 600 {path}` and check who may have copied it",
            path = path.display(),
            mode = mode & 0o7777,
        );
    }
    // Key files are a few KiB; a larger one is not what was meant, and
    // would be held (locked) in memory whole.
    const MAX_PRIVATE_FILE: u64 = 1024 * 1024;
    // Sized from the file, so that reading never grows (and copies) it.
    let size =
        usize::try_from(file.metadata().map_or(0, |m| m.len()).min(MAX_PRIVATE_FILE)).unwrap_or(0);
    let mut text = zeroize::Zeroizing::new(String::with_capacity(size + 1));
    file.take(MAX_PRIVATE_FILE + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    if text.len() as u64 > MAX_PRIVATE_FILE {
        anyhow::bail!(
            "{} is over {MAX_PRIVATE_FILE} bytes: not a {what} key file",
            path.display()
        );
    }
    Ok(text)
}

/// Reads a private key file that `sceau-recover` wrote as an age file
/// (opened with `unlock` or a passphrase), or in plaintext, as earlier
/// versions did and `--unencrypted-private-key` still does: that one still
/// opens, with a warning naming how to encrypt it.
pub(crate) fn read_protected(
    path: &std::path::Path,
    what: &str,
    identities: &sceau_recover::custody::AgeIdentities,
    passphrases: &mut sceau_recover::custody::Passphrases,
) -> anyhow::Result<zeroize::Zeroizing<String>> {
    use sceau_recover::custody;
    let text = read_private(path, what)?;
    if !custody::is_age(text.as_bytes()) {
        eprintln!(
            "sceau-recover: warning: {path} holds the {what} private key unencrypted: encrypt it \
             (`(umask 077; age -p -a -o {path}.age {path})`, then shred {path}) or keep it where \
             only its holder can reach it",
            path = path.display()
        );
        return Ok(text);
    }
    let plaintext = custody::open(
        text.as_bytes(),
        &path.display().to_string(),
        identities,
        passphrases,
    )?;
    let text = std::str::from_utf8(&plaintext)
        .with_context(|| format!("{}: the decrypted file is not text", path.display()))?;
    Ok(zeroize::Zeroizing::new(text.to_string()))
}

/// The `--age-identity` files of `unlock`, read as private files (an SSH
/// key's passphrase, if any, is asked of `passphrases` before the files').
pub(crate) fn age_identities(
    unlock: &sceau_recover::cli::Unlock,
    passphrases: &mut sceau_recover::custody::Passphrases,
) -> anyhow::Result<sceau_recover::custody::AgeIdentities> {
    Ok(sceau_recover::custody::AgeIdentities::read(
        &unlock.age_identities,
        |file| read_private(file, "age").map_err(|e| format!("{e:#}")),
        passphrases,
    )?)
}
