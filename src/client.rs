//! A KMS v2 client over a unix socket: `sceau check`, the examples, the
//! benchmark and the integration tests use it.
#![forbid(unsafe_code)]

use std::future::{Future, poll_fn};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http_body::Frame;
use tokio::net::UnixStream;
use tonic::body::Body;
use tonic::codegen::http::{self, HeaderMap, Uri};
use tonic::codegen::{Body as _, Bytes, StdError};

use crate::pb::key_management_service_client::KeyManagementServiceClient;
use crate::pb::{DecryptRequest, EncryptRequest, StatusRequest, StatusResponse};

pub type KmsClient = KeyManagementServiceClient<Connection>;

/// One HTTP/2 connection to a KMS plugin, as the generated client's
/// transport. Clones share the connection; calls beyond the server's stream
/// limit wait for a free stream. The connection closes once every clone and
/// every response body is dropped.
///
/// It speaks h2 directly: each call sends its request head, then the body's
/// frames as they come (h2 holds them until the server's flow-control window
/// lets them out; KMS requests are small and are the caller's own), then
/// waits for the response.
#[derive(Clone, Debug)]
pub struct Connection {
    requests: SendRequest<Bytes>,
}

impl tower::Service<http::Request<Body>> for Connection {
    type Response = http::Response<ResponseBody>;
    type Error = StdError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, StdError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StdError>> {
        self.requests.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (head, body) = request.into_parts();
        let sent = self
            .requests
            .send_request(http::Request::from_parts(head, ()), false);
        Box::pin(async move {
            let (response, stream) = sent?;
            // A server may answer before reading the whole request (an
            // oversized message, a refused caller) and reset the stream:
            // its answer then says more than the failed send.
            let body_sent = send_body(body, stream).await;
            let (head, stream) = match (response.await, body_sent) {
                (Ok(response), _) => response.into_parts(),
                (Err(_), Err(send_error)) => return Err(send_error),
                (Err(e), Ok(())) => return Err(e.into()),
            };
            Ok(http::Response::from_parts(
                head,
                ResponseBody {
                    stream,
                    data_done: false,
                    finished: false,
                },
            ))
        })
    }
}

/// Sends a request body's data and trailers on its stream, then ends the
/// stream.
async fn send_body(mut body: Body, mut stream: SendStream<Bytes>) -> Result<(), StdError> {
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        match frame?.into_data() {
            Ok(data) => stream.send_data(data, false)?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    stream.send_trailers(trailers)?;
                    return Ok(());
                }
            }
        }
    }
    stream.send_data(Bytes::new(), true)?;
    Ok(())
}

/// A response's body: its data frames, then its trailers (where gRPC puts
/// the call's status). Data read is handed back to the connection's
/// flow-control window at once.
pub struct ResponseBody {
    stream: RecvStream,
    data_done: bool,
    finished: bool,
}

impl tonic::codegen::Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        if !this.data_done {
            match ready!(this.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    let released = this.stream.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(released.map(|()| Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        let trailers: Result<Option<HeaderMap>, h2::Error> = ready!(this.stream.poll_trailers(cx));
        this.finished = true;
        Poll::Ready(trailers.transpose().map(|t| t.map(Frame::trailers)))
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Socket(#[from] std::io::Error),
    #[error("HTTP/2 handshake: {0}")]
    Handshake(#[from] h2::Error),
}

/// Connects to a KMS plugin at `path`. The authority is `localhost`, as the
/// kube-apiserver sends it.
pub async fn connect(path: &Path) -> Result<KmsClient, ConnectError> {
    Ok(KeyManagementServiceClient::with_origin(
        open(path).await?,
        Uri::from_static(ORIGIN),
    ))
}

/// The scheme and authority of every call, as the kube-apiserver sends them.
pub const ORIGIN: &str = "http://localhost";

/// Opens an HTTP/2 connection to `path`, for callers that need more than
/// the generated client's methods (a test calling a method sceau lacks).
pub async fn open(path: &Path) -> Result<Connection, ConnectError> {
    let stream = UnixStream::connect(path).await?;
    let (requests, connection) = h2::client::handshake(stream).await?;
    // The connection's frames are read and written by this task; it ends
    // when the server closes the connection or nothing uses it any more.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            log::debug!("KMS connection ended: {e}");
        }
    });
    Ok(Connection { requests })
}

/// What `sceau check` reports.
#[derive(Debug)]
pub struct CheckReport {
    pub status: StatusResponse,
    pub ciphertext_len: usize,
    pub encrypt: Duration,
    pub decrypt: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot connect: {0}")]
    Connect(#[from] ConnectError),
    #[error("{call} failed: {status}")]
    Call {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("reading a random DEK: {0}")]
    Random(std::io::Error),
    #[error("Decrypt returned different bytes than were encrypted")]
    Mismatch,
}

/// Status, then Encrypt and Decrypt of a fresh random 32-byte DEK.
pub async fn check(path: &Path) -> Result<CheckReport, CheckError> {
    let mut client = connect(path).await?;
    let failed = |call| move |status| CheckError::Call { call, status };
    let status = client
        .status(StatusRequest {})
        .await
        .map_err(failed("Status"))?
        .into_inner();
    let dek = zeroize::Zeroizing::new(random_dek().map_err(CheckError::Random)?);

    let started = Instant::now();
    let sealed = client
        .encrypt(EncryptRequest {
            plaintext: dek.to_vec(),
            uid: "sceau-check".into(),
        })
        .await
        .map_err(failed("Encrypt"))?
        .into_inner();
    let encrypt = started.elapsed();

    let started = Instant::now();
    let ciphertext_len = sealed.ciphertext.len();
    let opened = client
        .decrypt(DecryptRequest {
            ciphertext: sealed.ciphertext,
            uid: "sceau-check".into(),
            key_id: sealed.key_id,
            annotations: sealed.annotations,
        })
        .await
        .map_err(failed("Decrypt"))?
        .into_inner();
    let decrypt = started.elapsed();
    if zeroize::Zeroizing::new(opened.plaintext).as_slice() != dek.as_slice() {
        return Err(CheckError::Mismatch);
    }
    Ok(CheckReport {
        status,
        ciphertext_len,
        encrypt,
        decrypt,
    })
}

fn random_dek() -> std::io::Result<[u8; 32]> {
    use std::io::Read;
    let mut dek = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut dek)?;
    Ok(dek)
}
