//! A TCP proxy between sceau and swtpm that keeps every byte in both
//! directions: what an interposer on the TPM bus would see.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

pub struct RecordingProxy {
    port: u16,
    recorded: Arc<Mutex<Vec<u8>>>,
}

impl RecordingProxy {
    /// Listens on a fresh pair Q, Q+1 and forwards to `tpm_port`, `tpm_port`+1
    /// (the swtpm TCTI's command and control channels).
    pub fn start(tpm_port: u16) -> RecordingProxy {
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let (command, control) = listener_pair();
        let port = command.local_addr().unwrap().port();
        for (listener, target) in [(command, tpm_port), (control, tpm_port + 1)] {
            let recorded = recorded.clone();
            std::thread::spawn(move || forward_all(listener, target, recorded));
        }
        RecordingProxy { port, recorded }
    }

    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    pub fn recorded(&self) -> Vec<u8> {
        self.recorded.lock().unwrap().clone()
    }

    /// Panics unless the proxy carried real traffic (over 1000 bytes) and
    /// no 8-byte window of `secret` (a DEK split across reads included).
    pub fn assert_never_carried(&self, secret: &[u8]) {
        let capture = self.recorded();
        assert!(
            capture.len() > 1000,
            "the proxy saw only {} bytes",
            capture.len()
        );
        for window in secret.windows(8) {
            assert_eq!(
                occurrences(&capture, window),
                0,
                "DEK bytes crossed the bus"
            );
        }
    }
}

/// Two listeners on consecutive loopback ports (the TPM proxy's too).
pub(crate) fn listener_pair() -> (TcpListener, TcpListener) {
    for _ in 0..50 {
        let first = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = first.local_addr().unwrap().port();
        if port == u16::MAX {
            continue;
        }
        if let Ok(second) = TcpListener::bind((Ipv4Addr::LOCALHOST, port + 1)) {
            return (first, second);
        }
    }
    panic!("no free consecutive port pair for the recording proxy");
}

/// Accepts until the test process ends; each connection gets two pumps.
fn forward_all(listener: TcpListener, target: u16, recorded: Arc<Mutex<Vec<u8>>>) {
    for client in listener.incoming().flatten() {
        let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
            continue;
        };
        let (client_read, server_read) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let (up, down) = (recorded.clone(), recorded.clone());
        std::thread::spawn(move || pump(client_read, server, up));
        std::thread::spawn(move || pump(server_read, client, down));
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, recorded: Arc<Mutex<Vec<u8>>>) {
    let mut buffer = [0u8; 4096];
    while let Ok(n) = from.read(&mut buffer) {
        if n == 0 {
            break;
        }
        recorded.lock().unwrap().extend_from_slice(&buffer[..n]);
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// How often `needle` occurs in `haystack`.
pub fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}
