//! A stand-in for systemd's notification socket: collects what sceau sends
//! with sd_notify (READY=1, STATUS=…, WATCHDOG=1, STOPPING=1, …).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct NotifyReceiver {
    socket: UnixDatagram,
    path: PathBuf,
    /// Every message so far, with when it arrived.
    pub received: Vec<(Instant, String)>,
}

impl NotifyReceiver {
    pub fn bind(path: &Path) -> NotifyReceiver {
        let socket = UnixDatagram::bind(path).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        NotifyReceiver {
            socket,
            path: path.to_path_buf(),
            received: Vec::new(),
        }
    }

    /// Bound to the abstract name `name` (NOTIFY_SOCKET=@name, which systemd
    /// may use); `path()` is then `@name`, ready for NOTIFY_SOCKET.
    pub fn bind_abstract(name: &str) -> NotifyReceiver {
        use std::os::linux::net::SocketAddrExt;
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
        let socket = UnixDatagram::bind_addr(&address).expect("bind the abstract notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        NotifyReceiver {
            socket,
            path: PathBuf::from(format!("@{name}")),
            received: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Collects messages until one contains `needle` (returns true) or
    /// `timeout` passes (returns false).
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.receive_one().is_some_and(|m| m.contains(needle)) {
                return true;
            }
        }
        false
    }

    /// Collects whatever arrives during `period`.
    pub fn collect_for(&mut self, period: Duration) {
        let deadline = Instant::now() + period;
        while Instant::now() < deadline {
            self.receive_one();
        }
    }

    /// Messages containing `needle` that arrived after `since`.
    pub fn count_since(&self, needle: &str, since: Instant) -> usize {
        self.received
            .iter()
            .filter(|(at, m)| *at >= since && m.contains(needle))
            .count()
    }

    pub fn all_text(&self) -> String {
        self.received
            .iter()
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn receive_one(&mut self) -> Option<String> {
        let mut buffer = [0u8; 4096];
        let n = self.socket.recv(&mut buffer).ok()?;
        let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
        self.received.push((Instant::now(), message.clone()));
        Some(message)
    }
}
