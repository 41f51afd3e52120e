//! Ends a service's open response streams when the server starts stopping.
//!
//! A graceful stop waits for every call in flight, and a bidirectional
//! reflection stream lasts as long as its client keeps it open. Wrapped in
//! [`EndOnStop`], such a call ends once the stop begins: its response with
//! trailers UNAVAILABLE ("the server is shutting down"), and its request
//! stream as if the client had half-closed it, so the handler's task lets
//! go of the HTTP/2 stream (with the response alone ended, the stream
//! stayed open and still held the stop).
//! Our own streams (`Scan`, `Watch`) watch the same signal themselves, and
//! health `Watch` streams end when their statuses are cleared (see
//! `server::run`).
//!
//! Not for hot paths: each call's body is boxed (`tonic::body::Body`).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::wrappers::WatchStream;
use tonic::body::Body;
use tonic::server::NamedService;

use super::grpc_status;

/// `inner`, whose response bodies end when `stopping` becomes true.
#[derive(Clone)]
pub struct EndOnStop<S> {
    inner: S,
    stopping: watch::Receiver<bool>,
}

impl<S> EndOnStop<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, stopping: watch::Receiver<bool>) -> Self {
        EndOnStop { inner, stopping }
    }
}

impl<S: NamedService> NamedService for EndOnStop<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<Body>> for EndOnStop<S>
where
    S: tower_service::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
        >,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = EndOnStopFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let stopping = self.stopping.clone();
        let request = request.map(|inner| Body::new(StopBody::new(inner, stopping, false)));
        EndOnStopFuture {
            inner: self.inner.call(request),
            stopping: Some(self.stopping.clone()),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner call's future; wraps the body of its response.
    pub struct EndOnStopFuture<F> {
        #[pin]
        inner: F,
        stopping: Option<watch::Receiver<bool>>,
    }
}

impl<F> std::future::Future for EndOnStopFuture<F>
where
    F: std::future::Future<Output = Result<http::Response<Body>, Infallible>>,
{
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let stopping = this.stopping.take().expect("polled after completion");
        Poll::Ready(Ok(
            response.map(|inner| Body::new(StopBody::new(inner, stopping, true)))
        ))
    }
}

/// Where a [`StopBody`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Passing the inner body's frames on.
    Open,
    /// The stop began: the UNAVAILABLE trailers are next (a response), or
    /// the end (a request).
    Stopping,
    /// Ended (by the inner body, or by the stop's trailers).
    Done,
}

struct StopBody {
    inner: Body,
    /// Yields the current value first, then each change.
    stopping: WatchStream<bool>,
    state: State,
    /// A response (ends with UNAVAILABLE trailers) or a request (just ends).
    trailers: bool,
}

impl StopBody {
    fn new(inner: Body, stopping: watch::Receiver<bool>, trailers: bool) -> Self {
        StopBody {
            inner,
            stopping: WatchStream::new(stopping),
            state: State::Open,
            trailers,
        }
    }
}

impl http_body::Body for StopBody {
    type Data = prost::bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if this.state == State::Open {
            // Drain the signal's changes (this also registers the waker).
            while let Poll::Ready(changed) = Pin::new(&mut this.stopping).poll_next(cx) {
                // `None`: the server is gone, which is stopping too.
                if changed.unwrap_or(true) {
                    this.state = State::Stopping;
                    break;
                }
            }
        }
        match this.state {
            State::Done => Poll::Ready(None),
            State::Stopping if !this.trailers => {
                this.state = State::Done;
                Poll::Ready(None)
            }
            State::Stopping => {
                this.state = State::Done;
                let mut trailers = http::HeaderMap::new();
                // Only fails for a message that cannot be a header value.
                let _ = grpc_status::stopping_stream().add_header(&mut trailers);
                Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
            }
            State::Open => {
                let polled = Pin::new(&mut this.inner).poll_frame(cx);
                if let Poll::Ready(None) = polled {
                    this.state = State::Done;
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done || (self.state == State::Open && self.inner.is_end_stream())
    }
}
