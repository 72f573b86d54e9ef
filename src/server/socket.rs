//! The listening unix socket, when sceau binds it itself.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use sceau_sys::{UmaskGuard, group_id};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptions {
    pub path: PathBuf,
    /// Permission bits of the socket file; 0600 unless the operator widens it.
    pub mode: u32,
    /// A group that may connect (with a mode such as 0660), by name or number.
    pub group: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("another process is serving on {0}")]
    InUse(PathBuf),
    #[error("{0} was replaced while sceau was binding it; check who else can write its directory")]
    Replaced(PathBuf),
    #[error("unknown group {0:?}")]
    UnknownGroup(String),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// The file of a socket sceau created, remembered by inode so that sceau
/// only ever removes its own file.
pub struct SocketFile {
    path: PathBuf,
    inode: (u64, u64),
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file, if it is still the one sceau created.
    pub fn remove(&self) {
        let ours = fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.inode);
        if ours && let Err(e) = fs::remove_file(&self.path) {
            log::warn!("could not remove {}: {e}", self.path.display());
        }
    }
}

/// Checks, before a possibly slow TPM start, that `bind` can succeed: the
/// group exists and the path is free or holds a stale socket.
pub fn preflight(options: &SocketOptions) -> Result<(), SocketError> {
    options.group.as_deref().map(resolve_group).transpose()?;
    path_state(&options.path).map(drop)
}

/// Binds `options.path`, replacing a stale socket but never another kind of
/// file or a socket someone is still serving on. The listener goes to the
/// server, which closes it when it stops accepting; the file is removed later.
pub fn bind(options: &SocketOptions) -> Result<(UnixListener, SocketFile), SocketError> {
    bind_with(options, |_| {})
}

/// [`bind`], with `before_ownership` run between creating the socket file
/// and setting its group: tests use it to swap the path for a symlink.
fn bind_with(
    options: &SocketOptions,
    before_ownership: impl FnOnce(&Path),
) -> Result<(UnixListener, SocketFile), SocketError> {
    let path = options.path.clone();
    let io_error = |action, source| SocketError::Io {
        action,
        path: path.clone(),
        source,
    };
    if path_state(&path)? == PathState::StaleSocket {
        log::info!("removing stale socket {}", path.display());
        fs::remove_file(&path).map_err(|e| io_error("removing stale socket", e))?;
    }
    let gid = options.group.as_deref().map(resolve_group).transpose()?;
    let listener = {
        // Created with its final mode, so that nothing has to chmod the path
        // afterwards: chmod by path follows a symlink that someone able to
        // write the directory swaps in for the socket.
        let _umask = UmaskGuard::set(!options.mode & 0o777);
        UnixListener::bind(&path).map_err(|e| io_error("binding", e))?
    };
    before_ownership(&path);
    if let Some(gid) = gid {
        // lchown changes a symlink itself, never its target. Until it runs,
        // the socket's group is sceau's own; the uid check at accept is what
        // keeps callers out either way.
        std::os::unix::fs::lchown(&path, None, Some(gid)).map_err(|e| io_error("chgrp", e))?;
    }
    let metadata = fs::symlink_metadata(&path).map_err(|e| io_error("inspecting", e))?;
    let intact = metadata.file_type().is_socket()
        && metadata.mode() & 0o777 == options.mode & 0o777
        && gid.is_none_or(|gid| metadata.gid() == gid);
    if !intact {
        return Err(SocketError::Replaced(path));
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| io_error("configuring", e))?;
    let file = SocketFile {
        path,
        inode: (metadata.dev(), metadata.ino()),
    };
    Ok((listener, file))
}

#[derive(Debug, PartialEq, Eq)]
enum PathState {
    Free,
    StaleSocket,
}

/// A path sceau may bind: nothing there, or a socket no one serves on.
fn path_state(path: &Path) -> Result<PathState, SocketError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(PathState::Free),
        Err(source) => {
            return Err(SocketError::Io {
                action: "inspecting",
                path: path.into(),
                source,
            });
        }
    };
    if !metadata.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.into()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(SocketError::InUse(path.into()));
    }
    Ok(PathState::StaleSocket)
}

fn resolve_group(group: &str) -> Result<u32, SocketError> {
    group
        .parse::<u32>()
        .ok()
        .or_else(|| group_id(group))
        .ok_or_else(|| SocketError::UnknownGroup(group.into()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sceau-socket-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn options(path: PathBuf) -> SocketOptions {
        SocketOptions {
            path,
            mode: 0o600,
            group: None,
        }
    }

    #[test]
    fn creates_0600_and_replaces_only_stale_sockets() {
        let dir = scratch("stale");
        let path = dir.join("kms.sock");
        drop(UnixListener::bind(&path).unwrap()); // a stale socket file
        let (_listener, file) = bind(&options(path.clone())).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(matches!(
            bind(&options(path.clone())),
            Err(SocketError::InUse(_))
        ));
        file.remove();
        assert!(!path.exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_a_regular_file() {
        let dir = scratch("file");
        let path = dir.join("kms.sock");
        fs::write(&path, b"keep me").unwrap();
        assert!(matches!(
            bind(&options(path.clone())),
            Err(SocketError::NotASocket(_))
        ));
        assert_eq!(fs::read(&path).unwrap(), b"keep me");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn applies_mode_and_group() {
        let dir = scratch("mode");
        let path = dir.join("kms.sock");
        // A group this process may always chgrp to: its own.
        let own_gid = fs::metadata(&dir).unwrap().gid();
        let (_listener, file) = bind(&SocketOptions {
            path: path.clone(),
            mode: 0o660,
            group: Some(own_gid.to_string()),
        })
        .unwrap();
        let metadata = fs::metadata(&path).unwrap();
        assert_eq!(
            (metadata.permissions().mode() & 0o777, metadata.gid()),
            (0o660, own_gid)
        );
        file.remove();
        fs::remove_dir_all(dir).unwrap();
    }

    /// Someone who can write the socket's directory swaps the new socket for
    /// a symlink before its group and mode are set: the symlink's target
    /// keeps its mode and group, and bind fails.
    /// Without no-follow calls, this fails with the target's mode changed
    /// from 0644 to 0660 (chmod followed the symlink).
    #[test]
    fn never_follows_a_symlink_swapped_in_for_the_socket() {
        let dir = scratch("symlink");
        let path = dir.join("kms.sock");
        let target = dir.join("precious");
        fs::write(&target, b"keep me").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        let own_gid = fs::metadata(&dir).unwrap().gid();
        let before = fs::metadata(&target).unwrap();
        let result = bind_with(
            &SocketOptions {
                path: path.clone(),
                mode: 0o660,
                group: Some(own_gid.to_string()),
            },
            |path| {
                fs::remove_file(path).unwrap();
                std::os::unix::fs::symlink(&target, path).unwrap();
            },
        );
        let after = fs::metadata(&target).unwrap();
        assert_eq!(
            after.permissions().mode() & 0o7777,
            0o644,
            "the symlink's target was chmodded"
        );
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
        assert!(
            matches!(result, Err(SocketError::Replaced(_))),
            "bind must notice the swap: {:?}",
            result.err()
        );
        fs::remove_dir_all(dir).unwrap();
    }
}
