//! A gRPC client transport over one HTTP/2 connection on a unix socket, for
//! the tests that play SPIRE's host. Unlike `sceau::client` (made for unary
//! KMS calls, which sends the whole request before it awaits the answer),
//! it sends a request's body while the response comes in, as grpc-go does:
//! the broker stream's request side never ends while the host runs.

use std::future::{Future, poll_fn};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use hyper::body::Frame;
use tokio::net::UnixStream;
use tonic::body::Body;
use tonic::codegen::http::{self, HeaderMap};
use tonic::codegen::{Body as _, Bytes, StdError};

/// One HTTP/2 connection; clones share it.
#[derive(Clone, Debug)]
pub struct Connection {
    requests: SendRequest<Bytes>,
}

/// Opens a connection to the plugin socket at `path`.
pub async fn open(path: &Path) -> std::io::Result<Connection> {
    let stream = UnixStream::connect(path).await?;
    let (requests, connection) = h2::client::handshake(stream)
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(Connection { requests })
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
            // The body goes out on its own task while the answer comes in.
            tokio::spawn(async move {
                let _ = send_body(body, stream).await;
            });
            let (head, stream) = response.await?.into_parts();
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

/// A response's data frames, then its trailers (the gRPC status).
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
