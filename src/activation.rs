//! Socket activation: taking over the listening sockets systemd passes.
//!
//! With activation, systemd owns the socket file: it exists before sceau
//! starts, connections wait in its backlog until sceau accepts, and sceau
//! never creates, replaces or unlinks it.
//!
//! Two names are known: `kms`, the KMS v2 endpoint (a unix stream socket),
//! and `metrics` (optional, `systemd/sceau-metrics.socket`), where
//! `server::metrics` answers HTTP/1.1 scrapes (unix or TCP stream sockets,
//! as many as the unit lists, e.g. both loopback addresses).
//!
//! Only what the KMS needs can stop sceau: no `kms` fd, two of them, or a
//! `kms` fd that is not a listening unix socket. Anything wrong with the
//! optional sockets (a `metrics` fd that cannot be served, an fd with an
//! unknown name) is logged and that fd closed, and the KMS serves anyway:
//! observability must never cost availability (a restart loop under
//! `Restart=always` would leave the apiserver unable to read a Secret).
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;

use sceau_sys as sys;

/// The `FileDescriptorName=` of sceau's socket unit.
pub const FD_NAME: &str = "kms";
/// The `FileDescriptorName=` of the optional metrics socket unit.
pub const METRICS_FD_NAME: &str = "metrics";
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
    #[error("systemd passed more than one socket named {0:?}")]
    Duplicate(&'static str),
    #[error("the passed fd {fd} is not a listening unix stream socket ({reason})")]
    NotAUnixListener { fd: RawFd, reason: &'static str },
    #[error("the passed metrics fd {fd} is not a listening unix or TCP stream socket ({reason})")]
    NotAMetricsListener { fd: RawFd, reason: &'static str },
    #[error("inspecting the passed fd {fd}: {source}")]
    Inspect { fd: RawFd, source: std::io::Error },
}

/// Where metrics are served: a loopback TCP port or a unix socket path,
/// whichever `sceau-metrics.socket` listens on.
#[derive(Debug)]
pub enum MetricsListener {
    Tcp(std::net::TcpListener),
    Unix(UnixListener),
}

/// The sockets sceau serves: those systemd passed, or the KMS socket sceau
/// bound itself (then without metrics).
#[derive(Debug)]
pub struct Listeners {
    pub kms: UnixListener,
    /// Every usable `metrics` fd; empty when none was passed or none could
    /// be served.
    pub metrics: Vec<MetricsListener>,
}

/// The passed `kms` listener and every usable `metrics` one; `None` when
/// sceau was not socket-activated. `passed` comes from
/// [`sys::take_passed_fds`]. A `metrics` fd that cannot be served, and an
/// fd with another name, is logged and closed.
pub fn select_listeners(
    passed: Vec<(OwnedFd, String)>,
) -> Result<Option<Listeners>, ActivationError> {
    if passed.is_empty() {
        return Ok(None);
    }
    let names: Vec<(RawFd, String)> = passed
        .iter()
        .map(|(fd, name)| (fd.as_raw_fd(), name.clone()))
        .collect();
    let chosen = choose_fds(&names)?;
    let mut kms = None;
    let mut metrics = Vec::new();
    for (fd, name) in passed {
        let raw = fd.as_raw_fd();
        if raw == chosen.kms {
            kms = Some(into_listener(fd, raw)?);
        } else if chosen.metrics.contains(&raw) {
            match into_metrics_listener(fd, raw) {
                Ok(listener) => metrics.push(listener),
                Err(e) => log::warn!("{e}: closed it; the KMS serves without it"),
            }
        } else {
            log::warn!(
                "systemd passed a socket named {:?} (fd {raw}); sceau serves only \
                 FileDescriptorName=kms and FileDescriptorName=metrics: closed it",
                sceau_format::text::printable(&name)
            );
        }
    }
    Ok(Some(Listeners {
        kms: kms.expect("the chosen fd is among the passed ones"),
        metrics,
    }))
}

/// The fds chosen by name; any other fd is closed.
#[derive(Debug, PartialEq, Eq)]
struct Chosen {
    kms: RawFd,
    metrics: Vec<RawFd>,
}

/// The fd named `kms` (or the only fd, when the unit names none) and every
/// one named `metrics`.
fn choose_fds(passed: &[(RawFd, String)]) -> Result<Chosen, ActivationError> {
    if let [(fd, name)] = passed
        && name == UNNAMED
    {
        return Ok(Chosen {
            kms: *fd,
            metrics: Vec::new(),
        });
    }
    if passed.iter().all(|(_, name)| name == UNNAMED) {
        return Err(ActivationError::AmbiguousUnnamed(passed.len()));
    }
    let named = |wanted: &'static str| -> Vec<RawFd> {
        passed
            .iter()
            .filter(|(_, name)| name == wanted)
            .map(|(fd, _)| *fd)
            .collect()
    };
    let kms = match named(FD_NAME)[..] {
        [kms] => kms,
        [] => {
            return Err(ActivationError::NoKmsSocket(
                passed.iter().map(|(_, name)| name.clone()).collect(),
            ));
        }
        _ => return Err(ActivationError::Duplicate(FD_NAME)),
    };
    Ok(Chosen {
        kms,
        metrics: named(METRICS_FD_NAME),
    })
}

fn into_listener(fd: OwnedFd, raw: RawFd) -> Result<UnixListener, ActivationError> {
    let not = |reason| ActivationError::NotAUnixListener { fd: raw, reason };
    match listening_stream_domain(&fd, raw)? {
        Ok(libc::AF_UNIX) => {}
        Ok(_) => return Err(not("not AF_UNIX")),
        Err(reason) => return Err(not(reason)),
    }
    let listener = UnixListener::from(fd);
    // systemd's NonBlocking=yes does this too; tokio requires it.
    listener
        .set_nonblocking(true)
        .map_err(|source| ActivationError::Inspect { fd: raw, source })?;
    Ok(listener)
}

fn into_metrics_listener(fd: OwnedFd, raw: RawFd) -> Result<MetricsListener, ActivationError> {
    let not = |reason| ActivationError::NotAMetricsListener { fd: raw, reason };
    let nonblocking = |result: std::io::Result<()>| {
        result.map_err(|source| ActivationError::Inspect { fd: raw, source })
    };
    match listening_stream_domain(&fd, raw)? {
        Ok(libc::AF_UNIX) => {
            let listener = UnixListener::from(fd);
            nonblocking(listener.set_nonblocking(true))?;
            Ok(MetricsListener::Unix(listener))
        }
        Ok(libc::AF_INET | libc::AF_INET6) => {
            let listener = std::net::TcpListener::from(fd);
            nonblocking(listener.set_nonblocking(true))?;
            Ok(MetricsListener::Tcp(listener))
        }
        Ok(_) => Err(not("neither AF_UNIX nor AF_INET/AF_INET6")),
        Err(reason) => Err(not(reason)),
    }
}

/// The socket's domain if it is a listening stream socket, else why not.
fn listening_stream_domain(
    fd: &OwnedFd,
    raw: RawFd,
) -> Result<Result<libc::c_int, &'static str>, ActivationError> {
    let inspect = |option| {
        sys::socket_option(fd.as_fd(), option)
            .map_err(|source| ActivationError::Inspect { fd: raw, source })
    };
    if inspect(libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Ok(Err("not SOCK_STREAM"));
    }
    if inspect(libc::SO_ACCEPTCONN)? == 0 {
        return Ok(Err("not listening"));
    }
    inspect(libc::SO_DOMAIN).map(Ok)
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

    fn kms_only(fd: RawFd) -> Chosen {
        Chosen {
            kms: fd,
            metrics: Vec::new(),
        }
    }

    #[test]
    fn picks_the_kms_fd_or_a_single_unnamed_one() {
        assert_eq!(choose_fds(&named(&["kms"])).unwrap(), kms_only(3));
        assert_eq!(choose_fds(&named(&["unknown"])).unwrap(), kms_only(3));
    }

    #[test]
    fn picks_every_metrics_fd_beside_a_kms_one() {
        assert_eq!(
            choose_fds(&named(&["metrics", "kms"])).unwrap(),
            Chosen {
                kms: 4,
                metrics: vec![3]
            }
        );
        assert!(matches!(
            choose_fds(&named(&["metrics"])),
            Err(ActivationError::NoKmsSocket(_))
        ));
        // Two metrics sockets (a drop-in that adds [::1]:9847 without
        // clearing ListenStream=) are both served, never a reason to stop.
        assert_eq!(
            choose_fds(&named(&["kms", "metrics", "metrics"])).unwrap(),
            Chosen {
                kms: 3,
                metrics: vec![4, 5]
            }
        );
    }

    #[test]
    fn only_the_kms_fd_can_stop_sceau() {
        assert!(matches!(
            choose_fds(&named(&["unknown", "unknown"])),
            Err(ActivationError::AmbiguousUnnamed(2))
        ));
        assert!(matches!(
            choose_fds(&named(&["sceau.socket"])),
            Err(ActivationError::NoKmsSocket(_))
        ));
        assert!(matches!(
            choose_fds(&named(&["kms", "kms"])),
            Err(ActivationError::Duplicate("kms"))
        ));
        // A misspelt metrics socket, or an unnamed fd beside kms, is not
        // chosen (select_listeners logs and closes it); the KMS serves.
        assert_eq!(choose_fds(&named(&["kms", "metric"])).unwrap(), kms_only(3));
        assert_eq!(
            choose_fds(&named(&["unknown", "kms"])).unwrap(),
            kms_only(4)
        );
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
        // A TCP listener is fine for metrics, never for the KMS endpoint.
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp_fd = OwnedFd::from(tcp.try_clone().unwrap());
        assert!(matches!(
            into_listener(tcp_fd, 3),
            Err(ActivationError::NotAUnixListener {
                reason: "not AF_UNIX",
                ..
            })
        ));
        assert!(matches!(
            into_metrics_listener(OwnedFd::from(tcp), 3),
            Ok(MetricsListener::Tcp(_))
        ));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(matches!(
            into_metrics_listener(OwnedFd::from(udp), 3),
            Err(ActivationError::NotAMetricsListener {
                reason: "not SOCK_STREAM",
                ..
            })
        ));
    }
}
