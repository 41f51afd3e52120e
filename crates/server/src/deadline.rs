//! The call's deadline: read from `grpc-timeout` when a request enters,
//! and kept by answering DEADLINE_EXCEEDED ourselves before anyone else
//! gives up on the call.
//!
//! # Why the server answers its own timeouts
//!
//! tonic's transport enforces `grpc-timeout` too, from outside every layer
//! of ours: when its timer fires it drops the call and answers CANCELLED
//! "Timeout expired". For a write that is the worst answer there is: the
//! write may well be applied (it was queued to the writer before the call
//! was dropped), but CANCELLED reads as "the client gave up". So
//! [`DeadlineLayer`], the outermost layer but metrics, answers
//! DEADLINE_EXCEEDED at [`CallDeadline::answer_by`], which is before
//! tonic's timer (that timer started earlier, but our margin of 10 % of
//! the timeout is far longer than the time between the two starts). Should
//! both fall into the same timer tick, tonic's timeout polls our future
//! first, and ours is ready. The message of a write says that the write may
//! or may not have been applied, and how to find out.
//!
//! # Cost
//!
//! A call without `grpc-timeout` pays one header lookup. A call with one
//! is stamped ([`CallDeadline`] in the request's extensions, read by
//! admission and by the waits of `min_lsn` and `WaitFor`), and arms a timer
//! only if its handler does not finish on the first poll: a plain `Get`
//! never touches the timer wheel. No allocation: the timer lives inline in
//! the call's future.
//!
//! Only the future that produces the response headers is timed: a stream
//! (`Scan`, `Watch`, reflection) runs as long as its client reads it. The
//! requests of a `Lookup` stream carry deadlines of their own
//! (`timeout_us`), each kept as a [`CallDeadline`] from when it is read
//! ([`request_wait`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::errors::WaitBound;
use super::grpc_status;
use super::methods::{self, AdmitAs, Class};

/// The call's deadline (`grpc-timeout`), counted from when the request
/// entered the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallDeadline {
    /// When the request entered.
    pub arrived: Instant,
    /// The caller's timeout.
    pub timeout: Duration,
}

impl CallDeadline {
    /// When a wait must give up so that the caller gets the server's
    /// DEADLINE_EXCEEDED: the deadline less a margin of 10 % (at most
    /// 20 ms).
    ///
    /// Why the margin: the header is enforced twice more, by timers that
    /// started earlier than this one: by the client (tonic's client answers
    /// its caller a bare CANCELLED "Timeout expired"; other stacks
    /// DEADLINE_EXCEEDED without the server's message) and by tonic's server
    /// (CANCELLED). The answer must leave the server and cross the network
    /// before they fire.
    pub fn answer_by(&self) -> Instant {
        let margin = (self.timeout / 10).min(Duration::from_millis(20));
        self.arrived + self.timeout.saturating_sub(margin)
    }
}

/// When a wait of this call must give up, and why then: the call's
/// deadline (as stamped by [`DeadlineLayer`], else read from the header
/// now) less its margin, capped at `max_wait` from now.
pub fn wait_deadline<T>(request: &tonic::Request<T>, max_wait: Duration) -> (Instant, WaitBound) {
    wait_from_now(call_deadline(request), max_wait)
}

/// The call's deadline, as stamped by [`DeadlineLayer`], else read from
/// the header now; `None`: the call has none.
pub fn call_deadline<T>(request: &tonic::Request<T>) -> Option<CallDeadline> {
    request
        .extensions()
        .get::<CallDeadline>()
        .copied()
        .or_else(|| {
            grpc_timeout(request.metadata()).map(|timeout| CallDeadline {
                arrived: Instant::now(),
                timeout,
            })
        })
}

/// When a wait that starts now must give up, and why then: `call`'s
/// deadline less its margin, capped at `max_wait` from now. A stream
/// (`Lookup`) bounds each of its waits so, with the deadline it read once.
pub fn wait_from_now(call: Option<CallDeadline>, max_wait: Duration) -> (Instant, WaitBound) {
    bound_wait(call, Instant::now(), max_wait)
}

/// [`wait_from_now`] for one request of a stream that carries a deadline
/// of its own (`Lookup`'s `timeout_us`, as `request`): the earliest of
/// the stream's deadline, the request's (each less its margin) and
/// `max_wait`, all from `now`.
pub fn request_wait(
    stream: Option<CallDeadline>,
    request: Option<CallDeadline>,
    now: Instant,
    max_wait: Duration,
) -> (Instant, WaitBound) {
    let (by, bound) = bound_wait(stream, now, max_wait);
    match request.map(|r| r.answer_by()) {
        Some(own) if own < by => (own, WaitBound::RequestDeadline),
        _ => (by, bound),
    }
}

/// [`wait_deadline`] for a layer below [`DeadlineLayer`], which sees the
/// HTTP request: the stamp is there whenever the call has a deadline.
pub(crate) fn http_wait_deadline(
    extensions: &http::Extensions,
    max_wait: Duration,
) -> (Instant, WaitBound) {
    let call = extensions.get::<CallDeadline>().copied();
    bound_wait(call, Instant::now(), max_wait)
}

/// The earlier of the call's deadline (less its margin) and `max_wait`
/// from `now`.
fn bound_wait(
    call: Option<CallDeadline>,
    now: Instant,
    max_wait: Duration,
) -> (Instant, WaitBound) {
    // A configured maximum too large to add to now: a year is as good.
    let cap = now
        .checked_add(max_wait)
        .unwrap_or(now + Duration::from_secs(365 * 86_400));
    match call.map(|c| c.answer_by()) {
        Some(by) if by <= cap => (by, WaitBound::CallDeadline),
        _ => (cap, WaitBound::ServerMaximum),
    }
}

/// The `grpc-timeout` header of a call.
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// A `grpc-timeout` value (gRPC over HTTP/2: at most 8 digits and a unit,
/// H M S m u n). An unreadable value counts as absent, as in tonic.
fn parse_grpc_timeout(s: &str) -> Option<Duration> {
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    let n: u64 = digits.parse().ok()?;
    let t = match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Some(t)
}

/// The layer: stamps [`CallDeadline`] on every request that carries
/// `grpc-timeout`, and answers DEADLINE_EXCEEDED at its
/// [`answer_by`](CallDeadline::answer_by) if the call has not answered by
/// then. As a server layer it runs synchronously when the request enters,
/// before the handler is first polled (which may be later, once the body
/// has arrived), so the deadline counts from arrival.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineLayer;

impl<S> tower_layer::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// The service [`DeadlineLayer`] wraps.
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Deadline<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = DeadlineFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let Some(timeout) = header_timeout(request.headers()) else {
            return DeadlineFuture::Untimed {
                inner: self.inner.call(request),
            };
        };
        let call = CallDeadline {
            arrived: Instant::now(),
            timeout,
        };
        request.extensions_mut().insert(call);
        let writes = methods::of_request(&request).admission == AdmitAs::Permit(Class::Write);
        DeadlineFuture::Timed {
            inner: self.inner.call(request),
            timer: None,
            call,
            writes,
        }
    }
}

pin_project_lite::pin_project! {
    /// The call's future; with a deadline, raced against its timer.
    #[project = DeadlineFutureProj]
    // pin-project-lite takes no doc comments on enum fields; the
    // variants' docs say what each field is.
    #[allow(missing_docs)]
    pub enum DeadlineFuture<F> {
        /// A call without a deadline: the inner future alone.
        Untimed {
            #[pin]
            inner: F,
        },
        /// A call with a deadline: the inner future, the server's answer
        /// timer (armed on the first poll that finds the call not
        /// finished), the deadline, and whether the call writes (its
        /// timeout then says a write may be applied).
        Timed {
            #[pin]
            inner: F,
            #[pin]
            timer: Option<Sleep>,
            call: CallDeadline,
            writes: bool,
        },
    }
}

impl<F, RB, E> Future for DeadlineFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    RB: Default,
{
    type Output = Result<http::Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            DeadlineFutureProj::Untimed { inner } => inner.poll(cx),
            DeadlineFutureProj::Timed {
                inner,
                mut timer,
                call,
                writes,
            } => {
                // The call first: an answer ready in the same tick wins.
                if let Poll::Ready(out) = inner.poll(cx) {
                    return Poll::Ready(out);
                }
                if timer.is_none() {
                    timer.set(Some(tokio::time::sleep_until(call.answer_by())));
                }
                let sleep = timer.as_pin_mut().expect("armed just above");
                match sleep.poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Ok(
                            grpc_status::call_deadline_passed(call.timeout, *writes).into_http()
                        ))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

/// The `grpc-timeout` header of an HTTP request.
fn header_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    parse_grpc_timeout(headers.get("grpc-timeout")?.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_before_the_call_deadline_and_never_after_the_server_maximum() {
        let mut r = tonic::Request::new(());
        r.metadata_mut()
            .insert("grpc-timeout", "100m".parse().unwrap());
        let now = Instant::now();
        let (by, bound) = wait_deadline(&r, Duration::from_secs(60));
        assert_eq!(bound, WaitBound::CallDeadline);
        assert!(by >= now + Duration::from_millis(85) && by <= now + Duration::from_millis(95));
        let (by, bound) = wait_deadline(&r, Duration::from_millis(50));
        assert_eq!(bound, WaitBound::ServerMaximum);
        assert!(by <= Instant::now() + Duration::from_millis(50));
        let (_, bound) = wait_deadline(&tonic::Request::new(()), Duration::from_secs(1));
        assert_eq!(bound, WaitBound::ServerMaximum);
    }

    #[test]
    fn grpc_timeout_units_parse_and_garbage_is_ignored() {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(250)));
        m.insert("grpc-timeout", "3S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(3)));
        m.insert("grpc-timeout", "123456789m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
        m.insert("grpc-timeout", "5x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }
}
