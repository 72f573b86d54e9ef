//! The metrics endpoint: `GET /metrics` over HTTP/1.1 on the socket systemd
//! passes as `metrics` (docs/metrics.md), answered with the registry in the
//! Prometheus text format.
//!
//! It shares nothing with the KMS server but the runtime: its own listener,
//! its own accept loop, its own connection cap. It never reaches the KMS
//! service, so no request on it can cause a TPM command, and the KMS socket
//! speaks HTTP/2 only, so it never answers a scrape
//! (`metrics::the_sockets_serve_only_their_own_protocol` in
//! tests/integration).
//!
//! The responder is written by hand rather than with hyper's HTTP/1 server:
//! it needs one request line and one answer, then closes, and everything it
//! holds is bounded here: [`MAX_REQUEST_HEAD`] bytes read,
//! [`CONNECTION_TIME`] per connection, [`MAX_CONNECTIONS`] at once.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::log_budget::LogBudget;
use crate::activation::MetricsListener;
use crate::metrics;

/// The most a client may send before its request head ends (`\r\n\r\n`).
/// Prometheus sends about 300 bytes, curl about 100.
pub const MAX_REQUEST_HEAD: usize = 4096;
/// How long one connection may take, from accept to close; a client that
/// sends too slowly or reads too slowly is dropped.
pub const CONNECTION_TIME: Duration = Duration::from_secs(5);
/// Connections answered at once; more are closed at accept. One Prometheus
/// and a `curl` or a textfile-collector job need no more.
pub const MAX_CONNECTIONS: usize = 4;
/// The pause after a failed accept (EMFILE and the like), so that a pending
/// connection cannot make the loop spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);

static OVER_CAP_LOG: LogBudget = LogBudget::new();
static ACCEPT_ERROR_LOG: LogBudget = LogBudget::new();

/// Starts serving scrapes on a task of the current runtime, until the
/// runtime is dropped at exit. Call it inside the runtime.
pub fn spawn(listener: MetricsListener) -> std::io::Result<()> {
    let listener = Listener::from_std(listener)?;
    tokio::spawn(serve(listener));
    Ok(())
}

async fn serve(listener: Listener) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(suppressed) = OVER_CAP_LOG.allow() {
                log::warn!(
                    "metrics: closed a connection past the cap of {MAX_CONNECTIONS}{suppressed}"
                );
            }
            continue;
        };
        tokio::spawn(async move {
            let answered = match connection {
                Connection::Tcp(stream) => answer_in_time(stream).await,
                Connection::Unix(stream) => answer_in_time(stream).await,
            };
            if let Err(e) = answered {
                log::debug!("metrics connection: {e}");
            }
            drop(slot);
        });
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

/// [`answer`], ended after [`CONNECTION_TIME`].
async fn answer_in_time<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> std::io::Result<()> {
    tokio::time::timeout(CONNECTION_TIME, answer(stream))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// Reads one request head, writes one response, and closes.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> std::io::Result<()> {
    let response = match read_head(&mut stream).await? {
        Some(head) => respond(&head),
        None => Response::error(431, "Request Header Fields Too Large"),
    };
    stream.write_all(response.as_bytes()).await?;
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

    fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The answer to a request head: only `GET /metrics` (a query string is
/// ignored) over HTTP/1.x gets the metrics. Nothing of the request is echoed.
fn respond(head: &[u8]) -> Response {
    let request_line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|b| *b == b' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version), None) = (method, target, version, parts.next())
    else {
        return Response::error(400, "Bad Request");
    };
    if !version.starts_with(b"HTTP/1.") {
        return Response::error(505, "HTTP Version Not Supported");
    }
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    if path != b"/metrics" {
        return Response::error(404, "Not Found");
    }
    if method != b"GET" {
        return Response::error(405, "Method Not Allowed");
    }
    Response::new(200, "OK", metrics::CONTENT_TYPE, &metrics::render())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_line(head: &str) -> String {
        let response = respond(head.as_bytes());
        response.0.lines().next().unwrap().to_string()
    }

    #[test]
    fn answers_get_metrics_and_nothing_else() {
        let ok = respond(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*");
        assert!(ok.0.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(ok.0.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(ok.0.contains("# TYPE sceau_calls_total counter\n"));
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
        let response = respond(b"GET /metrics HTTP/1.1");
        let (head, body) = response.0.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
    }

    #[tokio::test]
    async fn a_request_head_is_bounded() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(answer(server));
        let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(8192));
        client.write_all(long.as_bytes()).await.unwrap();
        let mut response = String::new();
        client.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 431 "), "{}", &response[..40]);
        serving.await.unwrap().unwrap();
    }
}
