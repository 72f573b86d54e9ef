//! What another local user can do to the metrics endpoint, and what a
//! mistake in the metrics sockets does to the KMS: neither blinds the
//! scrapes, slows the KMS, or stops it.
//!
//! sceau gets its sockets here from the test kit's launcher
//! (`sceau_testkit::launch`), which passes them as systemd does. That a
//! scrape flood cannot slow the KMS is checked in `isolation` (the endpoint's
//! own idle thread) and measured by benches/scrape_flood.rs.
//!
//! Shown to fail without the protections, with the endpoint as it was
//! (4 connections, accept-time refusal past them, 5 s to send a request, on
//! the KMS's own event loop, and any metrics socket problem fatal):
//! `idle_connections_cannot_blind_the_scrapes` got empty answers once the
//! holder had its connections open; `problems_with_the_metrics_sockets_never_stop_the_kms`
//! saw sceau exit with "more than one socket named metrics".

use std::io::Read;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sceau::server::metrics::MAX_CONNECTIONS;

use super::{free_port, scrape_tcp, scrape_unix};
use crate::harness::launch::Launched;
use crate::harness::process::poll_until;
use crate::harness::rpc;

/// Threads that keep `count` connections to the endpoint open and idle,
/// opening a new one whenever sceau closes one, until dropped. `connect`
/// opens one connection.
struct IdleHolder {
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl IdleHolder {
    fn start<S: Read + Send + 'static>(
        count: usize,
        connect: impl Fn() -> std::io::Result<S> + Send + Sync + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicUsize::new(0));
        let connect = Arc::new(connect);
        let threads = (0..count)
            .map(|_| {
                let (stop, opened, connect) = (stop.clone(), opened.clone(), connect.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut held) = connect() else {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        };
                        opened.fetch_add(1, Ordering::Relaxed);
                        // Waits, sending nothing, until sceau closes it.
                        let _ = held.read(&mut [0u8; 64]);
                    }
                })
            })
            .collect();
        Self {
            stop,
            opened,
            threads,
        }
    }
}

impl Drop for IdleHolder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// How many scrapes each test makes while the holder is at work.
const SCRAPES: usize = 30;

/// Twice as many idle connections as the endpoint has slots, re-opened as
/// they are closed: every scrape still gets the metrics.
#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_cannot_blind_the_scrapes() {
    let port = free_port();
    let launched = Launched::start("metrics-blind", &[format!("metrics=tcp:{port}")], &[]).await;
    let holder = IdleHolder::start(2 * MAX_CONNECTIONS, move || {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(stream)
    });
    assert!(
        poll_until(Duration::from_secs(10), || holder
            .opened
            .load(Ordering::Relaxed)
            >= 2 * MAX_CONNECTIONS),
        "the holder could not open its connections"
    );
    for _ in 0..SCRAPES {
        assert!(scrape_tcp(port).contains("sceau_calls_total"));
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(holder);
    drop(launched);
}

/// On a unix socket with `--metrics-allow-uid`, another user's
/// connections are closed at accept: they take no slot, however many, and
/// that user gets no answer; root's scrapes all succeed.
#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_unix_socket_closes_other_users_at_accept() {
    let tmp_path = std::env::temp_dir().join(format!("sceau-metrics-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&tmp_path);
    let spec = format!("metrics=unix:{}", tmp_path.display());
    let launched = Launched::start("metrics-uid", &[spec], &["--metrics-allow-uid", "4242"]).await;
    // Another user (nobody), as the peer uid the kernel reports.
    let other = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
        ])
        .arg(
            "import socket,sys\n\
             s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(5)\n\
             try:\n\
             \x20   s.sendall(b'GET /metrics HTTP/1.1\\r\\n\\r\\n'); print(len(s.recv(4096)))\n\
             except (BrokenPipeError, ConnectionResetError): print(0)",
        )
        .arg(&tmp_path)
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(
        String::from_utf8_lossy(&other.stdout).trim(),
        "0",
        "uid 65534 got an answer: {}",
        String::from_utf8_lossy(&other.stderr)
    );
    assert!(
        launched
            .log_text()
            .contains("closed a connection from uid 65534")
    );
    let path = tmp_path.clone();
    let holder = IdleHolder::start(MAX_CONNECTIONS + 4, move || {
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"])
            .arg("import socket,sys\ns=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.recv(1)")
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()?;
        let out = child.stdout.take().unwrap();
        // The child's stdout ends when its connection is closed.
        std::thread::spawn(move || child.wait());
        Ok(out)
    });
    for _ in 0..SCRAPES / 3 {
        assert!(scrape_unix(&tmp_path).contains("sceau_calls_total"));
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(holder);
    let _ = std::fs::remove_file(&tmp_path);
}

/// Two metrics sockets (a drop-in that adds one without clearing the
/// first), a `metrics` fd that is not a listening socket, and an fd with an
/// unknown name: the KMS serves, each usable metrics socket answers, and
/// each problem is one WARN line.
#[tokio::test(flavor = "multi_thread")]
async fn problems_with_the_metrics_sockets_never_stop_the_kms() {
    let (first, second, foreign) = (free_port(), free_port(), free_port());
    let sockets = [
        format!("metrics=tcp:{first}"),
        format!("metrics=tcp:{second}"),
        "metrics=pair".to_string(),
        format!("metric=tcp:{foreign}"),
    ];
    let launched = Launched::start("metrics-sockets", &sockets, &[]).await;
    assert!(scrape_tcp(first).contains("sceau_calls_total"));
    assert!(scrape_tcp(second).contains("sceau_calls_total"));
    let log = launched.log_text();
    assert!(
        log.contains("is not a listening unix or TCP stream socket (not listening): closed it"),
        "{log}"
    );
    assert!(log.contains("a socket named \"metric\""), "{log}");
    assert!(log.contains("serving metrics on the 2 socket(s)"), "{log}");
    let mut client = rpc::connect(&launched.kms).await;
    let key_id = rpc::status(&mut client).await.key_id;
    rpc::round_trip(&mut client, &key_id, b"still serving").await;
}
