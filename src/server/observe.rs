//! Every completed call, counted and logged in one place: the outermost
//! layer of the KMS stack, so that calls refused before the service (a uid
//! the interceptor refuses, a request tonic cannot decode, a call past its
//! limit) count like the others.
//!
//! The log line is one line of `key=value` fields (logfmt), INFO for a
//! success; a failure is a `call-refused` event (`events`: WARNING, and
//! native journal fields under systemd) whose message is the same line:
//!
//! ```text
//! call method=Decrypt uid="4f9e…" key_id="sceau-2.7-…" envelope=3a1f…c2 code=OK duration_ms=12.408 tpm_ms=11.927
//! call method=Decrypt uid="x" key_id="other" envelope=91d0…7b code=InvalidArgument duration_ms=0.210 tpm_ms=0.000 message="unknown key_id …"
//! ```
//!
//! `method` and `code` come from fixed lists (`metrics::Method`,
//! `metrics::GRPC_CODES`); `uid` is the request's, escaped and cut by
//! `sceau_format::text::printable` (quotes and line feeds cannot end the
//! field or the line), and absent when the call carries none (Status) or
//! was refused before it was decoded; `key_id` (escaped the same way) and
//! `envelope`, the envelope's fingerprint (the first 8 bytes of SHA-256 of
//! the ciphertext, as `sceau-recover inventory --list-values` prints it for each
//! stored value), are Encrypt's answer or Decrypt's request, refused or not; `message`, on failures only, is
//! sceau's own status message, escaped the same way. Why `key=value` on
//! stderr and not journald's native fields: see `logging`.
#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tonic::body::Body;
use tonic::codegen::http;

use crate::events::{self, Event, Kind};
use crate::metrics::call::CallRecord;
use crate::metrics::{GRPC_CODES, METRICS, Method};

/// The layer: wraps the KMS service stack.
#[derive(Clone, Debug)]
pub struct Observed<S> {
    inner: S,
}

impl<S> Observed<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B> tower::Service<http::Request<B>> for Observed<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = Method::from_path(request.uri().path());
        let started = Instant::now();
        let record = CallRecord::new();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = record.clone().scope(response).await;
            if let Ok(response) = &response {
                completed(method, &record, started.elapsed(), response);
            }
            response
        })
    }
}

/// Counts and logs a call whose answer is ready.
fn completed(
    method: Method,
    record: &CallRecord,
    elapsed: Duration,
    response: &http::Response<Body>,
) {
    let (code, message) = outcome(response);
    METRICS.call(method, code, elapsed);
    let line = log_line(method, record, code, message.as_deref(), elapsed);
    if code == 0 {
        log::info!("{line}");
        return;
    }
    let code_name = usize::try_from(code)
        .ok()
        .and_then(|c| GRPC_CODES.get(c))
        .unwrap_or(&"Unknown");
    let mut event = Event::new(Kind::CallRefused, line)
        .facts_in_message()
        .field("METHOD", method.name())
        .field("CODE", code_name);
    if let Some(uid) = record.uid() {
        event = event.field("UID", uid);
    }
    if let Some((key_id, fingerprint)) = record.envelope() {
        event = event.field("KEY_ID", key_id).field("ENVELOPE", fingerprint);
    }
    if let Some(message) = message {
        event = event.field("REASON", message);
    }
    events::emit(event);
}

/// The gRPC code of an answer and, for a failure, its message. A failure
/// is answered in the headers alone (tonic's "trailers-only" answer); a
/// success carries its status in the trailers, after the body, and its
/// headers are a plain HTTP 200.
fn outcome(response: &http::Response<Body>) -> (i32, Option<String>) {
    match tonic::Status::from_header_map(response.headers()) {
        Some(status) if status.code() != tonic::Code::Ok => {
            (status.code() as i32, Some(status.message().to_string()))
        }
        Some(_) => (0, None),
        None if response.status() == http::StatusCode::OK => (0, None),
        None => (tonic::Code::Unknown as i32, None),
    }
}

/// The call's line; public for the benchmark of its cost
/// (`benches/call_record.rs`).
pub fn log_line(
    method: Method,
    record: &CallRecord,
    code: i32,
    message: Option<&str>,
    elapsed: Duration,
) -> String {
    let code_name = usize::try_from(code)
        .ok()
        .and_then(|c| GRPC_CODES.get(c))
        .unwrap_or(&"Unknown");
    let uid = record
        .uid()
        .map(|uid| format!(" uid=\"{uid}\""))
        .unwrap_or_default();
    let envelope = record
        .envelope()
        .map(|(key_id, fingerprint)| format!(" key_id=\"{key_id}\" envelope={fingerprint}"))
        .unwrap_or_default();
    let message = message
        .map(|m| format!(" message=\"{}\"", m.escape_debug()))
        .unwrap_or_default();
    format!(
        "call method={}{uid}{envelope} code={code_name} duration_ms={:.3} tpm_ms={:.3}{message}",
        method.name(),
        millis(elapsed),
        millis(record.tpm_time()),
    )
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_log_line_is_one_line_of_fixed_fields() {
        let record = CallRecord::new();
        record
            .clone()
            .scope(async {
                crate::metrics::call::note_uid("u\n\"1\" code=OK");
                crate::metrics::call::note_envelope("k\"1", b"envelope");
                crate::metrics::call::add_tpm_time(Duration::from_micros(1500));
            })
            .await;
        let line = log_line(
            Method::Decrypt,
            &record,
            3,
            Some("bad \"thing\"\nhere"),
            Duration::from_millis(2),
        );
        assert_eq!(
            line,
            format!(
                "call method=Decrypt uid=\"u\\n\\\"1\\\" code=OK\" key_id=\"k\\\"1\" envelope={} \
                 code=InvalidArgument duration_ms=2.000 tpm_ms=1.500 \
                 message=\"bad \\\"thing\\\"\\nhere\"",
                sceau_format::envelope::fingerprint(b"envelope")
            )
        );
        let status = log_line(Method::Status, &CallRecord::new(), 0, None, Duration::ZERO);
        assert_eq!(
            status,
            "call method=Status code=OK duration_ms=0.000 tpm_ms=0.000"
        );
    }

    #[test]
    fn reads_the_code_from_a_trailers_only_answer() {
        let refused = tonic::Status::permission_denied("no").into_http::<Body>();
        assert_eq!(outcome(&refused), (7, Some("no".to_string())));
        let ok = http::Response::new(Body::empty());
        assert_eq!(outcome(&ok), (0, None));
        let mut broken = http::Response::new(Body::empty());
        *broken.status_mut() = http::StatusCode::BAD_REQUEST;
        assert_eq!(outcome(&broken).0, 2);
    }
}
