//! Socket activation: taking over the listening socket systemd passes.
//!
//! With activation, systemd owns the socket file: it exists before sceau
//! starts, connections wait in its backlog until sceau accepts, and sceau
//! never creates, replaces or unlinks it.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;

use crate::sys;

/// The `FileDescriptorName=` of sceau's socket unit.
pub const FD_NAME: &str = "kms";
/// The name systemd gives an fd when the socket unit sets none.
const UNNAMED: &str = "unknown";

#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error(
        "systemd passed {0} sockets without names; name the kms one with FileDescriptorName=kms"
    )]
    AmbiguousUnnamed(usize),
    #[error("systemd passed sockets named {0:?}, none named \"kms\"")]
    NoKmsSocket(Vec<String>),
    #[error("the passed fd {fd} is not a listening unix stream socket ({reason})")]
    NotAUnixListener { fd: RawFd, reason: &'static str },
    #[error("inspecting the passed fd {fd}: {source}")]
    Inspect { fd: RawFd, source: std::io::Error },
}

/// The passed `kms` listener, or `None` when sceau was not socket-activated.
/// `passed` comes from [`sys::take_passed_fds`]; fds other than the chosen
/// one are closed, since sceau serves one socket.
pub fn select_listener(
    passed: Vec<(OwnedFd, String)>,
) -> Result<Option<UnixListener>, ActivationError> {
    if passed.is_empty() {
        return Ok(None);
    }
    let names: Vec<(RawFd, String)> = passed
        .iter()
        .map(|(fd, name)| (fd.as_raw_fd(), name.clone()))
        .collect();
    let chosen = choose_fd(&names)?;
    let kms = passed
        .into_iter()
        .map(|(fd, _)| fd)
        .find(|fd| fd.as_raw_fd() == chosen)
        .expect("the chosen fd is among the passed ones");
    into_listener(kms, chosen).map(Some)
}

/// The fd named `kms`, or the only fd when the unit names none.
fn choose_fd(passed: &[(RawFd, String)]) -> Result<RawFd, ActivationError> {
    if let Some((fd, _)) = passed.iter().find(|(_, name)| name == FD_NAME) {
        return Ok(*fd);
    }
    match passed {
        [(fd, name)] if name == UNNAMED => Ok(*fd),
        _ if passed.iter().all(|(_, name)| name == UNNAMED) => {
            Err(ActivationError::AmbiguousUnnamed(passed.len()))
        }
        _ => Err(ActivationError::NoKmsSocket(
            passed.iter().map(|(_, name)| name.clone()).collect(),
        )),
    }
}

fn into_listener(fd: OwnedFd, raw: RawFd) -> Result<UnixListener, ActivationError> {
    let inspect = |option| {
        sys::socket_option(fd.as_fd(), option)
            .map_err(|source| ActivationError::Inspect { fd: raw, source })
    };
    let not = |reason| ActivationError::NotAUnixListener { fd: raw, reason };
    if inspect(libc::SO_DOMAIN)? != libc::AF_UNIX {
        return Err(not("not AF_UNIX"));
    }
    if inspect(libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err(not("not SOCK_STREAM"));
    }
    if inspect(libc::SO_ACCEPTCONN)? == 0 {
        return Err(not("not listening"));
    }
    let listener = UnixListener::from(fd);
    // systemd's NonBlocking=yes does this too; tokio requires it.
    listener
        .set_nonblocking(true)
        .map_err(|source| ActivationError::Inspect { fd: raw, source })?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Vec<(RawFd, String)> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (3 + i as RawFd, n.to_string()))
            .collect()
    }

    #[test]
    fn picks_the_kms_fd_or_a_single_unnamed_one() {
        assert_eq!(choose_fd(&named(&["kms"])).unwrap(), 3);
        assert_eq!(choose_fd(&named(&["metrics", "kms"])).unwrap(), 4);
        assert_eq!(choose_fd(&named(&["unknown"])).unwrap(), 3);
    }

    #[test]
    fn refuses_ambiguous_or_foreign_fds() {
        assert!(matches!(
            choose_fd(&named(&["unknown", "unknown"])),
            Err(ActivationError::AmbiguousUnnamed(2))
        ));
        assert!(matches!(
            choose_fd(&named(&["sceau.socket"])),
            Err(ActivationError::NoKmsSocket(_))
        ));
    }

    #[test]
    fn refuses_a_socket_that_is_not_a_unix_stream_listener() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = OwnedFd::from(a);
        assert!(matches!(
            into_listener(fd, 3),
            Err(ActivationError::NotAUnixListener {
                reason: "not listening",
                ..
            })
        ));
        let datagram = std::os::unix::net::UnixDatagram::unbound().unwrap();
        assert!(matches!(
            into_listener(OwnedFd::from(datagram), 3),
            Err(ActivationError::NotAUnixListener {
                reason: "not SOCK_STREAM",
                ..
            })
        ));
    }
}
