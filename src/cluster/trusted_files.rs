//! Reading the files that decide who receives every DEK: the member SRK
//! publics of `--members` and the recovery public of `--recovery-key`.
//!
//! Nothing inside such a file can prove it belongs there: a software key
//! can carry the TCG SRK's attribute bits, and its `name:` line is the
//! writer's own. So what protects membership is who can write the files,
//! and sceau checks it before it trusts them:
//!
//! - the file is opened with `O_NOFOLLOW` (a symbolic link is refused) and
//!   checked with `fstat` on the open file, so the checked file is the one
//!   read: a regular file, owned by root or by sceau's own user, writable by
//!   neither group nor others;
//! - its directory passes the same owner and mode checks;
//! - every directory above it is owned by root or sceau's user and is not
//!   writable by group or others, unless it has the sticky bit (like `/tmp`:
//!   others can then add entries but not replace ours);
//! - no component of the path is a symbolic link: a link is checked as
//!   itself, never followed, so that the directories checked are the ones
//!   the file is read through (a link's target directory could belong to
//!   anyone, and the link itself be replaced between check and open).
#![forbid(unsafe_code)]

use std::fs::Metadata;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Member and recovery files are a few hundred bytes; this bounds a read.
const MAX_FILE_LEN: u64 = 64 * 1024;
const GROUP_OR_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    // The cause is the source, printed after the message.
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is a symbolic link: copy the file itself there (member and recovery files are never followed)"
    )]
    Symlink { path: PathBuf },
    #[error(
        "{path} is a symbolic link in the path of a file that decides who can open every Secret: \
         give the real path (sceau follows no link there)"
    )]
    SymlinkInPath { path: PathBuf },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("{path} is larger than {MAX_FILE_LEN} bytes: not a sceau key file")]
    TooLarge { path: PathBuf },
    #[error(
        "{path} is owned by uid {owner}: it decides who can open every Secret, so only root (or sceau's own user, uid {own}) may own it; run `chown root: {path}`"
    )]
    Owner { path: PathBuf, owner: u32, own: u32 },
    #[error(
        "{path} has mode {mode:04o}, writable by group or others: it decides who can open every Secret; run `chmod go-w {path}`"
    )]
    Writable { path: PathBuf, mode: u32 },
}

/// Reads a member or recovery file after the checks in the module doc.
pub fn read_trusted(path: &Path) -> Result<String, TrustError> {
    read_trusted_also_owned_by(path, None)
}

/// [`read_trusted`], also trusting files and directories owned by `also`:
/// the service's user, whose state directory root reads (`sceau kek`).
pub fn read_trusted_also_owned_by(path: &Path, also: Option<u32>) -> Result<String, TrustError> {
    let io = |source| TrustError::Io {
        path: path.to_path_buf(),
        source,
    };
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    check_directory_also_owned_by(parent, also)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => TrustError::Symlink {
                path: path.to_path_buf(),
            },
            _ => io(e),
        })?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(TrustError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    check_owner_and_mode(path, &metadata, false, also)?;
    if metadata.len() > MAX_FILE_LEN {
        return Err(TrustError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let mut text = String::new();
    file.take(MAX_FILE_LEN)
        .read_to_string(&mut text)
        .map_err(io)?;
    Ok(text)
}

/// The owner and mode checks for a directory sceau lists or reads from,
/// and for every directory above it, walked from `/` down without following
/// a symbolic link.
pub fn check_directory(dir: &Path) -> Result<(), TrustError> {
    check_directory_also_owned_by(dir, None)
}

/// [`check_directory`], also trusting directories owned by `also`.
pub fn check_directory_also_owned_by(dir: &Path, also: Option<u32>) -> Result<(), TrustError> {
    let io = |path: &Path, source| TrustError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Lexically absolute: `canonicalize` would resolve the links this
    // refuses.
    let absolute = std::path::absolute(dir).map_err(|e| io(dir, e))?;
    let components: Vec<_> = absolute.components().collect();
    let mut prefix = PathBuf::new();
    for (i, component) in components.iter().enumerate() {
        prefix.push(component);
        let metadata = std::fs::symlink_metadata(&prefix).map_err(|e| io(&prefix, e))?;
        if metadata.file_type().is_symlink() {
            return Err(TrustError::SymlinkInPath { path: prefix });
        }
        let last = i + 1 == components.len();
        if last && !metadata.is_dir() {
            return Err(io(
                &prefix,
                std::io::Error::from(std::io::ErrorKind::NotADirectory),
            ));
        }
        check_owner_and_mode(&prefix, &metadata, !last, also)?;
    }
    Ok(())
}

fn check_owner_and_mode(
    path: &Path,
    metadata: &Metadata,
    sticky_allowed: bool,
    also: Option<u32>,
) -> Result<(), TrustError> {
    let own = effective_uid();
    if metadata.uid() != 0 && Some(metadata.uid()) != own && Some(metadata.uid()) != also {
        return Err(TrustError::Owner {
            path: path.to_path_buf(),
            owner: metadata.uid(),
            own: own.unwrap_or(0),
        });
    }
    let mode = metadata.permissions().mode() & 0o7777;
    let sticky = sticky_allowed && mode & STICKY != 0;
    if mode & GROUP_OR_OTHER_WRITE != 0 && !sticky {
        return Err(TrustError::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// sceau's effective uid, from `/proc/self/status` (std has no geteuid, and
/// this keeps the module free of `unsafe`). `None` if unreadable: then only
/// root-owned files are trusted.
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_uid() {
        let euid = effective_uid().expect("/proc/self/status");
        let created = std::env::temp_dir().join(format!("sceau-euid-{}", std::process::id()));
        std::fs::write(&created, "x").unwrap();
        let owner = std::fs::metadata(&created).unwrap().uid();
        std::fs::remove_file(&created).unwrap();
        assert_eq!(euid, owner, "a new file belongs to the effective uid");
    }

    // Shown failing: with the path canonicalised (as before), the file was
    // read through the link.
    #[test]
    fn a_symbolic_link_anywhere_in_the_path_is_refused() {
        let top = std::env::temp_dir().join(format!("sceau-link-{}", std::process::id()));
        let real = top.join("real");
        std::fs::create_dir_all(real.join("inner")).unwrap();
        for dir in [&top, &real, &real.join("inner")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(real.join("inner/member.pub"), "x").unwrap();
        std::os::unix::fs::symlink(&real, top.join("link")).unwrap();

        assert_eq!(read_trusted(&real.join("inner/member.pub")).unwrap(), "x");
        let error = read_trusted(&top.join("link/inner/member.pub")).unwrap_err();
        assert!(
            matches!(&error, TrustError::SymlinkInPath { path } if path.ends_with("link")),
            "{error}"
        );
        let error = check_directory(&top.join("link")).unwrap_err();
        assert!(matches!(error, TrustError::SymlinkInPath { .. }), "{error}");
        std::fs::remove_dir_all(&top).unwrap();
    }
}
