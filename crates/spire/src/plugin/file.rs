//! Files a plugin reads from paths its configuration names: the server's
//! allow list and PEM bundles, the agent's event log. Each is opened without
//! blocking (O_NONBLOCK; std adds O_CLOEXEC), its type checked on the open
//! descriptor (a FIFO, a directory, a device or a socket is refused with its
//! type named), then read through that same descriptor, at most the caller's
//! bound whatever its size said (securityfs files, such as the event log,
//! report a size of 0).

use std::path::Path;

/// O_NONBLOCK, so that opening a FIFO (or a device that blocks in open)
/// returns at once and is refused by type below. The value of Linux's
/// generic ABI (asm-generic/fcntl.h), which the architectures sceau builds
/// for use; the spire crate does not link libc for one constant.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "s390x",
        target_arch = "powerpc64",
    )
))]
const O_NONBLOCK: i32 = 0o4000;

/// Why a file was not read. Display is one line naming the path.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is {kind}, not a regular file")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path} is larger than {max} bytes")]
    TooLarge { path: String, max: u64 },
}

impl FileError {
    /// The file (or a directory on its path) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Reads the regular file at `path`, at most `max` bytes of it.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let shown = || path.display().to_string();
    let unreadable = |source: std::io::Error| FileError::Io {
        path: shown(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let metadata = file.metadata().map_err(unreadable)?;
    if !metadata.is_file() {
        return Err(FileError::NotRegular {
            path: shown(),
            kind: file_type(&metadata.file_type()),
        });
    }
    let too_large = || FileError::TooLarge { path: shown(), max };
    if metadata.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    // The file may have grown since its size was read, or its size said 0.
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// What a file that is not a regular file is, for the refusal.
fn file_type(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}
