//! The metrics endpoint: `GET /metrics` over HTTP/1.1 on the sockets systemd
//! passes as `metrics` (docs/metrics.md), answered with the registry in the
//! Prometheus text format.
//!
//! It shares nothing with the KMS server: its own thread, with its own event
//! loop, at the `SCHED_IDLE` policy, so that scrapes run only on CPU time
//! the KMS leaves idle and a flood of them cannot delay a KMS call
//! (docs/performance.md, "Scrapes and KMS latency"); its own listeners,
//! accept loops and connection slots. It never reaches the KMS service, so
//! no request on it can cause a TPM command, and the KMS socket speaks
//! HTTP/2 only, so it never answers a scrape
//! (`metrics::the_sockets_serve_only_their_own_protocol` in
//! tests/integration).
//!
//! No local user can blind it by holding connections: a connection must
//! send its whole request head within [`REQUEST_HEAD_TIME`], and at the cap
//! of [`MAX_CONNECTIONS`] the oldest connection still sending its request
//! is closed to make room for the new one. On a unix socket with
//! `--metrics-allow-uid`, other users' connections are closed at accept and
//! never take a slot. The rendered answer is cached for [`RENDER_CACHE_TIME`],
//! so a flood of scrapes renders once a second.
//!
//! The responder is written by hand rather than with hyper's HTTP/1 server:
//! it needs one request line and one answer, then closes, and everything it
//! holds is bounded here: [`MAX_REQUEST_HEAD`] bytes read,
//! [`CONNECTION_TIME`] per connection, [`MAX_CONNECTIONS`] at once.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::AbortHandle;

use super::log_budget::LogBudget;
use crate::activation::MetricsListener;
use crate::metrics;

/// The most a client may send before its request head ends (`\r\n\r\n`).
/// Prometheus sends about 300 bytes, curl about 100.
pub const MAX_REQUEST_HEAD: usize = 4096;
/// How long a client may take to send its whole request head, from accept.
/// A scraper sends it at once; a connection that idles is dropped.
pub const REQUEST_HEAD_TIME: Duration = Duration::from_secs(1);
/// How long one connection may take, from accept to close; a client that
/// reads too slowly is dropped.
pub const CONNECTION_TIME: Duration = Duration::from_secs(5);
/// Connections answered at once. Past it, the oldest connection that has
/// not sent its whole request is closed for the new one; only when every
/// one has (each is then being answered from the cache) is the new one
/// closed. A connection that has sent its request holds its slot only while
/// its answer (about 15 KB) goes into the socket's buffer, which takes it
/// whole whether or not the client reads, so that case lasts microseconds.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a rendered answer is reused: scrapes within it see the same
/// numbers, and a flood of scrapes costs one rendering a second.
pub const RENDER_CACHE_TIME: Duration = Duration::from_secs(1);
/// The pause after a failed accept (EMFILE and the like), so that a pending
/// connection cannot make the loop spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);
/// The metrics thread's stack: an event loop and a few small buffers.
const THREAD_STACK: usize = 256 * 1024;
/// How long start-up waits for the metrics thread to report.
const THREAD_START_WAIT: Duration = Duration::from_secs(2);

static OVER_CAP_LOG: LogBudget = LogBudget::new();
static EVICTED_LOG: LogBudget = LogBudget::new();
static REFUSED_UID_LOG: LogBudget = LogBudget::new();
static ACCEPT_ERROR_LOG: LogBudget = LogBudget::new();

/// Who may scrape a unix metrics socket besides root: `None` lets every
/// peer the socket file admits.
#[derive(Debug, Clone, Default)]
pub struct AllowedScrapers(Option<Vec<u32>>);

impl AllowedScrapers {
    /// Root and `uids`; an empty list leaves the check to the file's mode.
    pub fn root_and(uids: &[u32]) -> Self {
        Self((!uids.is_empty()).then(|| uids.to_vec()))
    }

    fn admits(&self, uid: u32) -> bool {
        match &self.0 {
            None => true,
            Some(uids) => uid == 0 || uids.contains(&uid),
        }
    }

    fn is_restricted(&self) -> bool {
        self.0.is_some()
    }
}

/// Starts the metrics thread serving `listeners`. Call it before seccomp
/// is installed (the thread and its event loop are made here) and after the
/// rest of the sandbox (the thread inherits it). Returns once the thread
/// runs; an error means there are no metrics, never that the KMS stops.
pub fn start(listeners: Vec<MetricsListener>, allowed: AllowedScrapers) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listeners = {
        let _context = runtime.enter();
        listeners
            .into_iter()
            .map(Listener::from_std)
            .collect::<std::io::Result<Vec<_>>>()?
    };
    if allowed.is_restricted() && listeners.iter().any(|l| matches!(l, Listener::Tcp(_))) {
        log::warn!(
            "--metrics-allow-uid applies to unix metrics sockets only: any local user can \
             scrape the TCP one (docs/metrics.md)"
        );
    }
    let (started, report) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("sceau-metrics".into())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let _ = started.send(sceau_sys::run_this_thread_when_idle());
            let shared = Arc::new(Shared::new(allowed));
            runtime.block_on(async move {
                for listener in listeners {
                    tokio::spawn(serve(listener, shared.clone()));
                }
                std::future::pending::<()>().await
            });
        })?;
    match report.recv_timeout(THREAD_START_WAIT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            log::warn!("metrics thread: SCHED_IDLE refused ({e}); it runs at normal priority");
            Ok(())
        }
        Err(_) => Err(std::io::Error::other("the metrics thread did not start")),
    }
}

/// What the accept loops and connections of the metrics thread share.
struct Shared {
    slots: Mutex<Slots>,
    cache: Mutex<Option<(Instant, Arc<[u8]>)>>,
    allowed: AllowedScrapers,
}

impl Shared {
    fn new(allowed: AllowedScrapers) -> Self {
        Self {
            slots: Mutex::new(Slots::default()),
            cache: Mutex::new(None),
            allowed,
        }
    }

    /// The whole `200 OK` answer, rendered at most once per
    /// [`RENDER_CACHE_TIME`].
    fn metrics_answer(&self) -> Arc<[u8]> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, answer)) = cache.as_ref()
            && at.elapsed() < RENDER_CACHE_TIME
        {
            return answer.clone();
        }
        let answer: Arc<[u8]> =
            Response::new(200, "OK", metrics::CONTENT_TYPE, &metrics::render()).into_bytes();
        *cache = Some((Instant::now(), answer.clone()));
        answer
    }
}

/// The connections being answered, oldest first.
#[derive(Default)]
struct Slots {
    open: Vec<Slot>,
    next_id: u64,
}

struct Slot {
    id: u64,
    /// Set once the connection has sent its whole request head.
    request_read: Arc<AtomicBool>,
    task: Option<AbortHandle>,
}

/// Whether a new connection may have a slot.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    Free,
    /// The oldest connection still sending its request was closed for it.
    Evicted,
    /// Every slot holds a connection being answered.
    Full,
}

impl Slots {
    /// Makes room for one more connection if it can.
    fn admit(&mut self) -> Admission {
        self.open
            .retain(|slot| slot.task.as_ref().is_none_or(|t| !t.is_finished()));
        if self.open.len() < MAX_CONNECTIONS {
            return Admission::Free;
        }
        let Some(oldest) = self
            .open
            .iter()
            .position(|slot| !slot.request_read.load(Ordering::Relaxed))
        else {
            return Admission::Full;
        };
        if let Some(task) = self.open.remove(oldest).task {
            task.abort();
        }
        Admission::Evicted
    }

    /// Takes a slot; the connection marks `request_read` itself.
    fn take(&mut self) -> (u64, Arc<AtomicBool>) {
        let id = self.next_id;
        self.next_id += 1;
        let request_read = Arc::new(AtomicBool::new(false));
        self.open.push(Slot {
            id,
            request_read: request_read.clone(),
            task: None,
        });
        (id, request_read)
    }

    fn set_task(&mut self, id: u64, task: AbortHandle) {
        if let Some(slot) = self.open.iter_mut().find(|slot| slot.id == id) {
            slot.task = Some(task);
        }
    }

    fn release(&mut self, id: u64) {
        self.open.retain(|slot| slot.id != id);
    }
}

/// Frees a connection's slot when its task ends, aborted or not.
struct SlotGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut slots = self.shared.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.release(self.id);
    }
}

async fn serve(listener: Listener, shared: Arc<Shared>) {
    loop {
        let connection = match listener.accept().await {
            Ok(connection) => connection,
            Err(e) => {
                if let Some(suppressed) = ACCEPT_ERROR_LOG.allow() {
                    log::warn!(
                        "metrics: accept failed ({e}); retrying in {ACCEPT_BACKOFF:?}{suppressed}"
                    );
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if let Connection::Unix(stream) = &connection {
            let uid = stream.peer_cred().map(|c| c.uid());
            if !uid.as_ref().is_ok_and(|uid| shared.allowed.admits(*uid)) {
                if let Some(suppressed) = REFUSED_UID_LOG.allow() {
                    log::warn!(
                        "metrics: closed a connection from uid {} (not root, not \
                         --metrics-allow-uid){suppressed}",
                        uid.map_or_else(|e| format!("unknown: {e}"), |u| u.to_string())
                    );
                }
                continue;
            }
        }
        let (id, request_read) = {
            let mut slots = shared.slots.lock().unwrap_or_else(|p| p.into_inner());
            match slots.admit() {
                Admission::Free => {}
                Admission::Evicted => {
                    if let Some(suppressed) = EVICTED_LOG.allow() {
                        log::warn!(
                            "metrics: all {MAX_CONNECTIONS} connections busy; closed the oldest \
                             one still sending its request{suppressed}"
                        );
                    }
                }
                Admission::Full => {
                    if let Some(suppressed) = OVER_CAP_LOG.allow() {
                        log::warn!(
                            "metrics: closed a connection past the cap of \
                             {MAX_CONNECTIONS}{suppressed}"
                        );
                    }
                    continue;
                }
            }
            slots.take()
        };
        let guard = SlotGuard {
            shared: shared.clone(),
            id,
        };
        let task = tokio::spawn(async move {
            let answered = match connection {
                Connection::Tcp(stream) => {
                    answer_in_time(stream, &request_read, &guard.shared).await
                }
                Connection::Unix(stream) => {
                    answer_in_time(stream, &request_read, &guard.shared).await
                }
            };
            if let Err(e) = answered {
                log::debug!("metrics connection: {e}");
            }
            drop(guard);
        });
        shared
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_task(id, task.abort_handle());
        // Lets the new connection read the request that is usually already
        // there before the next accept, so that a burst of connections
        // cannot evict it while it waits for its first turn.
        tokio::task::yield_now().await;
    }
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

enum Connection {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Listener {
    fn from_std(listener: MetricsListener) -> std::io::Result<Self> {
        Ok(match listener {
            MetricsListener::Tcp(l) => Listener::Tcp(tokio::net::TcpListener::from_std(l)?),
            MetricsListener::Unix(l) => Listener::Unix(tokio::net::UnixListener::from_std(l)?),
        })
    }

    async fn accept(&self) -> std::io::Result<Connection> {
        Ok(match self {
            Listener::Tcp(l) => Connection::Tcp(l.accept().await?.0),
            Listener::Unix(l) => Connection::Unix(l.accept().await?.0),
        })
    }
}

/// [`answer`], the request head within [`REQUEST_HEAD_TIME`] and the
/// whole exchange within [`CONNECTION_TIME`].
async fn answer_in_time<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    request_read: &AtomicBool,
    shared: &Shared,
) -> std::io::Result<()> {
    tokio::time::timeout(CONNECTION_TIME, answer(stream, request_read, shared))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// Reads one request head, writes one response, and closes.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request_read: &AtomicBool,
    shared: &Shared,
) -> std::io::Result<()> {
    let head = tokio::time::timeout(REQUEST_HEAD_TIME, read_head(&mut stream))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))?;
    request_read.store(true, Ordering::Relaxed);
    let response = match head {
        Some(head) => respond(&head, || shared.metrics_answer()),
        None => Response::error(431, "Request Header Fields Too Large").into_bytes(),
    };
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// The request head, up to and without its blank line; `None` if it is
/// longer than [`MAX_REQUEST_HEAD`]. An end of stream first is an error.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        if let Some(end) = find_blank_line(&head) {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() >= MAX_REQUEST_HEAD {
            return Ok(None);
        }
        let room = (MAX_REQUEST_HEAD + 4 - head.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

/// A complete HTTP/1.1 response; every one closes the connection.
struct Response(String);

impl Response {
    fn new(status: u16, reason: &str, content_type: &str, body: &str) -> Self {
        Self(format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        ))
    }

    fn error(status: u16, reason: &str) -> Self {
        Self::new(
            status,
            reason,
            "text/plain; charset=utf-8",
            &format!("{reason}: sceau serves only GET /metrics here\n"),
        )
    }

    fn into_bytes(self) -> Arc<[u8]> {
        self.0.into_bytes().into()
    }
}

/// The answer to a request head: only `GET /metrics` (a query string is
/// ignored) over HTTP/1.x gets the metrics, from `metrics_answer`. Nothing of
/// the request is echoed.
fn respond(head: &[u8], metrics_answer: impl FnOnce() -> Arc<[u8]>) -> Arc<[u8]> {
    respond_with(head).map_or_else(metrics_answer, Response::into_bytes)
}

/// The error answer to a request head, or `None` for `GET /metrics`.
fn respond_with(head: &[u8]) -> Option<Response> {
    let request_line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|b| *b == b' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version), None) = (method, target, version, parts.next())
    else {
        return Some(Response::error(400, "Bad Request"));
    };
    if !version.starts_with(b"HTTP/1.") {
        return Some(Response::error(505, "HTTP Version Not Supported"));
    }
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    if path != b"/metrics" {
        return Some(Response::error(404, "Not Found"));
    }
    if method != b"GET" {
        return Some(Response::error(405, "Method Not Allowed"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer_to(head: &str) -> String {
        let shared = Shared::new(AllowedScrapers::default());
        let bytes = respond(head.as_bytes(), || shared.metrics_answer());
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn status_line(head: &str) -> String {
        answer_to(head).lines().next().unwrap().to_string()
    }

    #[test]
    fn answers_get_metrics_and_nothing_else() {
        let ok = answer_to("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(ok.contains("# TYPE sceau_calls_total counter\n"));
        assert_eq!(status_line("GET /metrics?x=1 HTTP/1.0"), "HTTP/1.1 200 OK");
        assert_eq!(status_line("GET / HTTP/1.1"), "HTTP/1.1 404 Not Found");
        assert_eq!(
            status_line("POST /metrics HTTP/1.1"),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(status_line("GET /metrics"), "HTTP/1.1 400 Bad Request");
        // The HTTP/2 preface a gRPC client opens with.
        assert_eq!(
            status_line("PRI * HTTP/2.0"),
            "HTTP/1.1 505 HTTP Version Not Supported"
        );
    }

    #[test]
    fn content_length_matches_the_body() {
        let response = answer_to("GET /metrics HTTP/1.1");
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
    }

    /// Within the cache time a scrape gets the very same rendering; a
    /// counter that moved meanwhile shows only after it.
    #[test]
    fn the_rendering_is_reused_within_the_cache_time() {
        let shared = Shared::new(AllowedScrapers::default());
        let first = shared.metrics_answer();
        let second = shared.metrics_answer();
        assert!(Arc::ptr_eq(&first, &second));
        let stale = Instant::now().checked_sub(RENDER_CACHE_TIME).unwrap();
        shared.cache.lock().unwrap().as_mut().unwrap().0 = stale;
        assert!(!Arc::ptr_eq(&first, &shared.metrics_answer()));
    }

    #[test]
    fn at_the_cap_the_oldest_unfinished_connection_makes_room() {
        let mut slots = Slots::default();
        let taken: Vec<_> = (0..MAX_CONNECTIONS).map(|_| slots.take()).collect();
        // The first two have sent their requests; the third is the oldest
        // still sending.
        taken[0].1.store(true, Ordering::Relaxed);
        taken[1].1.store(true, Ordering::Relaxed);
        assert_eq!(slots.admit(), Admission::Evicted);
        let ids: Vec<u64> = slots.open.iter().map(|s| s.id).collect();
        assert!(!ids.contains(&taken[2].0) && ids.contains(&taken[0].0));
        slots.take();
        // Once every connection has sent its request, a new one waits its
        // turn by being closed.
        for slot in &slots.open {
            slot.request_read.store(true, Ordering::Relaxed);
        }
        assert_eq!(slots.admit(), Admission::Full);
        slots.release(taken[0].0);
        assert_eq!(slots.admit(), Admission::Free);
    }

    #[test]
    fn only_root_and_the_listed_uids_may_scrape_a_restricted_socket() {
        let open = AllowedScrapers::root_and(&[]);
        assert!(open.admits(0) && open.admits(1000));
        let restricted = AllowedScrapers::root_and(&[998]);
        assert!(restricted.admits(0) && restricted.admits(998));
        assert!(!restricted.admits(1000));
    }

    async fn exchange(request: Vec<u8>) -> std::io::Result<String> {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let shared = Shared::new(AllowedScrapers::default());
        let read = AtomicBool::new(false);
        let serving = async { answer(server, &read, &shared).await };
        let client_side = async {
            client.write_all(&request).await.unwrap();
            let mut response = String::new();
            let _ = client.read_to_string(&mut response).await;
            response
        };
        let (served, response) = tokio::join!(serving, client_side);
        served.map(|()| response)
    }

    #[tokio::test]
    async fn a_request_head_is_bounded() {
        let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(8192));
        let response = exchange(long.into_bytes()).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 431 "), "{}", &response[..40]);
    }

    /// A connection that sends part of a request and then idles is dropped
    /// once REQUEST_HEAD_TIME has passed, not after the whole connection
    /// time.
    #[tokio::test]
    async fn a_connection_that_idles_before_its_request_ends_is_dropped() {
        let (mut client, server) = tokio::io::duplex(1024);
        let shared = Shared::new(AllowedScrapers::default());
        let read = AtomicBool::new(false);
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let result = answer(server, &read, &shared).await;
        assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(
            took >= REQUEST_HEAD_TIME && took < CONNECTION_TIME,
            "{took:?}"
        );
        assert!(!read.load(Ordering::Relaxed));
    }
}
