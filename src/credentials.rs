//! The systemd credentials sceau reads: `tpm-owner-auth`, the owner
//! hierarchy's authorization value, from `$CREDENTIALS_DIRECTORY` (which
//! `LoadCredentialEncrypted=` or `LoadCredential=` fill). Never from the
//! command line or an environment variable's value: both are readable by
//! every process of the same user in /proc, and land in shell histories
//! and unit listings.
//!
//! The file is held to what systemd makes: a regular file, not a symbolic
//! link, readable by its owner alone (0400), owned by this process's user
//! or root. Anything else is refused before the TPM is opened.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::cluster::trusted_files::effective_uid;
use sceau_format::owner_auth::{self, MAX_OWNER_AUTH_LEN, OwnerAuthError};
use sceau_tpm::owner::OwnerAuth;
use zeroize::Zeroizing;

/// The credential's name, as a unit's `LoadCredentialEncrypted=` gives it.
pub const OWNER_AUTH: &str = "tpm-owner-auth";

/// More than the longest value in any form (`hex:`, 128 digits, newline):
/// a larger file is refused without being read to its end.
const MAX_FILE_LEN: usize = 4 + 2 * MAX_OWNER_AUTH_LEN + 1;

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "the credential {OWNER_AUTH} ({path}) is a symbolic link: sceau reads only the file \
         systemd's LoadCredentialEncrypted= writes"
    )]
    Link { path: PathBuf },
    #[error("the credential {OWNER_AUTH} ({path}) is not a regular file")]
    NotAFile { path: PathBuf },
    #[error(
        "the credential {OWNER_AUTH} ({path}) has mode {mode:04o}: it must be readable by its \
         owner alone (systemd makes credentials 0400)"
    )]
    Readable { path: PathBuf, mode: u32 },
    #[error(
        "the credential {OWNER_AUTH} ({path}) belongs to uid {owner}: it must belong to this \
         process's user ({uid}) or root"
    )]
    Owner { path: PathBuf, owner: u32, uid: u32 },
    #[error("the credential {OWNER_AUTH} ({path}) {reason}")]
    Value {
        path: PathBuf,
        reason: OwnerAuthError,
    },
    #[error("reading the credential {OWNER_AUTH} ({path}): {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The owner authorization, if the unit passed the credential; `None`
/// when there is no credentials directory or no such credential in it.
pub fn owner_auth() -> Result<Option<OwnerAuth>, CredentialError> {
    let Some(directory) = std::env::var_os("CREDENTIALS_DIRECTORY") else {
        return Ok(None);
    };
    owner_auth_in(Path::new(&directory))
}

/// [`owner_auth`] from `directory`.
pub fn owner_auth_in(directory: &Path) -> Result<Option<OwnerAuth>, CredentialError> {
    let path = directory.join(OWNER_AUTH);
    let io = |source| CredentialError::Io {
        path: path.clone(),
        source,
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(CredentialError::Link { path });
        }
        Err(e) => return Err(io(e)),
    };
    let metadata = file.metadata().map_err(io)?;
    if !metadata.file_type().is_file() {
        return Err(CredentialError::NotAFile { path });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(CredentialError::Readable { path, mode });
    }
    let uid = effective_uid();
    if metadata.uid() != 0 && Some(metadata.uid()) != uid {
        return Err(CredentialError::Owner {
            path,
            owner: metadata.uid(),
            uid: uid.unwrap_or(0),
        });
    }
    let bytes = read_bounded(file).map_err(io)?;
    owner_auth::parse(&bytes)
        .map(|value| Some(OwnerAuth::new(value)))
        .map_err(|reason| CredentialError::Value { path, reason })
}

/// The file's bytes, into memory that is wiped when dropped, reserved
/// once so that no copy is left behind by a reallocation; a file longer
/// than any value gives one byte too many, which `parse` refuses.
fn read_bounded(file: File) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_FILE_LEN + 1));
    file.take(MAX_FILE_LEN as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn directory(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sceau-credentials-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, bytes: &[u8], mode: u32) {
        let path = dir.join(OWNER_AUTH);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn no_credential_is_no_owner_authorization() {
        let dir = directory("none");
        assert!(owner_auth_in(&dir).unwrap().is_none());
    }

    #[test]
    fn a_credential_as_systemd_writes_it_is_read() {
        let dir = directory("good");
        write(&dir, b"hex:0102\n", 0o400);
        let auth = owner_auth_in(&dir).unwrap().expect("a value");
        assert_eq!(format!("{auth:?}"), "OwnerAuth(2 bytes)");
    }

    /// Each refusal names the credential and says what is wrong; the
    /// value itself never appears in it.
    #[test]
    fn unsafe_or_malformed_credentials_are_refused_without_their_value() {
        let cases: &[(&[u8], u32, &str)] = &[
            (b"", 0o400, "is empty"),
            (&[b'x'; 200], 0o400, "at most 64"),
            (b"hex:xyz-secret", 0o400, "hex digits"),
            (b"group-secret", 0o440, "mode 0440"),
            (b"other-secret", 0o404, "mode 0404"),
        ];
        for (bytes, mode, expected) in cases {
            let dir = directory("bad");
            write(&dir, bytes, *mode);
            let error = owner_auth_in(&dir).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(error.contains(OWNER_AUTH), "{error}");
            assert!(!error.contains("secret"), "{error}");
        }
        let dir = directory("link");
        write(&dir, b"target", 0o400);
        std::fs::rename(dir.join(OWNER_AUTH), dir.join("target")).unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join(OWNER_AUTH)).unwrap();
        let error = owner_auth_in(&dir).unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
        let dir = directory("dir");
        std::fs::create_dir(dir.join(OWNER_AUTH)).unwrap();
        let error = owner_auth_in(&dir).unwrap_err().to_string();
        assert!(error.contains("not a regular file"), "{error}");
    }
}
