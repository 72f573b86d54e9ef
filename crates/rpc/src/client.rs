//! The client transport: one HTTP/2 connection on a unix socket, on which
//! a generated tonic client sends its calls.
#![forbid(unsafe_code)]

use std::future::{Future, poll_fn};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http_body::Frame;
use tokio::net::UnixStream;
use tonic::body::Body;
use tonic::codegen::http::{self, HeaderMap};
use tonic::codegen::{Body as _, Bytes, StdError};

/// One HTTP/2 connection, as a generated client's transport. Clones share
/// the connection; calls beyond the server's stream limit wait for a free
/// stream. The connection closes once every clone and every response body
/// is dropped.
///
/// It speaks h2 directly: each call sends its request head, then the body's
/// frames as they come (h2 holds them until the server's flow-control window
/// lets them out).
#[derive(Clone, Debug)]
pub struct Connection {
    requests: SendRequest<Bytes>,
    bodies: Bodies,
}

/// When a call's request body goes out, relative to its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bodies {
    /// The whole body, then the answer: unary calls (the KMS API), whose
    /// server may answer early and reset the stream, and whose answer then
    /// says more than the failed send.
    BeforeTheAnswer,
    /// On a task of its own while the answer comes in, as grpc-go sends:
    /// streams whose request side stays open while the call runs (the
    /// go-plugin broker).
    AlongsideTheAnswer,
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
        let bodies = self.bodies;
        Box::pin(async move {
            let (response, stream) = sent?;
            let (head, stream) = match bodies {
                Bodies::BeforeTheAnswer => {
                    // A server may answer before reading the whole request
                    // (an oversized message, a refused caller) and reset
                    // the stream: its answer then says more than the failed
                    // send.
                    let body_sent = send_body(body, stream).await;
                    match (response.await, body_sent) {
                        (Ok(response), _) => response.into_parts(),
                        (Err(_), Err(send_error)) => return Err(send_error),
                        (Err(e), Ok(())) => return Err(e.into()),
                    }
                }
                Bodies::AlongsideTheAnswer => {
                    tokio::spawn(async move {
                        let _ = send_body(body, stream).await;
                    });
                    response.await?.into_parts()
                }
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
    #[error(transparent)]
    Socket(#[from] std::io::Error),
    #[error("HTTP/2 handshake: {0}")]
    Handshake(#[from] h2::Error),
}

/// Opens an HTTP/2 connection to the unix socket at `path`.
pub async fn open(path: &Path, bodies: Bodies) -> Result<Connection, ConnectError> {
    let stream = UnixStream::connect(path).await?;
    let (requests, connection) = h2::client::handshake(stream).await?;
    // The connection's frames are read and written by this task; it ends
    // when the server closes the connection or nothing uses it any more.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            log::debug!("HTTP/2 connection ended: {e}");
        }
    });
    Ok(Connection { requests, bodies })
}
