//! Admission control: a tower layer that decides, per call, whether it runs
//! now, waits for capacity, or is refused.
//!
//! # Classes
//!
//! Each call is classified by its gRPC path:
//!
//! | class | methods | limit |
//! | --- | --- | --- |
//! | read | Get, BatchGet, Stats, Ping | `--read-permits`, `--read-queue` |
//! | write | Put, Delete, CompareAndSet, Write, admin Snapshot (and any other `uuidmap.*` method) | `--write-permits`, `--write-queue` |
//! | scan | Scan | `--scan-permits`, `--scan-queue` |
//! | long poll | WaitFor, Watch, Lookup (the stream) | `--max-long-polls` |
//! | none | health, reflection | passes |
//!
//! Ping is a read on purpose: benchmarks compare Get with Ping as the
//! framework's own limit, so both must pay the same admission.
//!
//! Read, write and scan each have a [`LifoSemaphore`]. A call that finds a
//! free permit runs at once. Otherwise it waits, newest first, until a
//! permit is free or its deadline passes: then it is answered
//! DEADLINE_EXCEEDED and the service never sees it (no work is done for a
//! caller that has given up). The deadline is the call's own (stamped on
//! arrival by `deadline::DeadlineLayer`, less the margin that lets our answer
//! reach the client first), or `--max-wait-ms` for a call without one. When
//! the class's queue is full, the call is answered RESOURCE_EXHAUSTED at
//! once. Statuses are built in `grpc_status.rs`.
//!
//! Long polls wait for an LSN or stream changes for as long as their caller
//! likes, using no CPU meanwhile; holding a read permit that long would let
//! a few thousand of them shut out every read. So they only count against
//! `--max-long-polls` (an atomic counter): over it, RESOURCE_EXHAUSTED at
//! once. A `Lookup` stream is admitted the same way, and its work is
//! admitted per request instead ([`Admission::read_permit`], one read
//! permit per 1024 keys: see `lookup`), so that a stream costs admission
//! what the BatchGets it replaces would. A read with `min_lsn` is still a read and holds its permit while
//! it waits (its wait is bounded by the call's deadline).
//!
//! # How long a permit is held
//!
//! A unary call holds it until its handler has produced the response. A
//! streaming call (Scan, Watch) holds it in the response body, until the
//! stream ends or the client goes away: a scan's work happens while its
//! stream is read, not in the handler.
//!
//! # Invariants
//!
//! - No lock anywhere: the semaphores are lock-free, the long-poll count is
//!   one atomic, metric handles are registered once when the server starts.
//! - No allocation of our own per call: the future and the body wrapper are
//!   named types held inline by the transport; a permit holds one `Arc`
//!   clone. A call that has to wait also clones the inner service (tower's
//!   rule: the service made ready is the one called) and arms a timer;
//!   refusals format their message.
//! - Metrics (through the `metrics` facade; the recorder must be installed
//!   before the server starts, as handles are registered then):
//!   `uuidmap_admission_queued{class}` (a gauge, set whenever a call of the
//!   class starts or stops waiting), `uuidmap_admission_long_polls` (open
//!   long polls), and `uuidmap_admission_rejected_total{class, reason}`
//!   with reason `queue_full`, `deadline` or `long_polls`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use metrics::{Counter, Gauge};

use super::config::AdmissionLimits;
use super::deadline;
pub use super::errors::AdmissionError;
use super::errors::WaitBound;
use super::methods::{self, AdmitAs, Class};
use uuidmap_index::sync::{AcquireError, AcquireOwned, LifoSemaphore, OwnedPermit};

/// What admission does with a call to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// No admission (health, reflection, anything not ours).
    Free,
    /// A permit of this class; `streaming`: held by the response body.
    Permit {
        /// The class whose permit the call takes.
        class: Class,
        /// Whether the response body holds the permit until it ends.
        streaming: bool,
    },
    /// A long-poll slot; `streaming`: held by the response body.
    LongPoll {
        /// Whether the response body holds the slot until it ends.
        streaming: bool,
    },
}

/// The route of a call to `path` (`/package.Service/Method`): the method
/// table's admission class and streaming (`methods`).
pub fn route(path: &str) -> Route {
    route_of(methods::method(path).1)
}

/// The route of a call to `method`.
fn route_of(method: &methods::Method) -> Route {
    let streaming = method.streaming;
    match method.admission {
        AdmitAs::Free => Route::Free,
        AdmitAs::Permit(class) => Route::Permit { class, streaming },
        AdmitAs::LongPoll => Route::LongPoll { streaming },
    }
}

/// One class's semaphore and metric handles.
struct Gate {
    class: Class,
    sem: Arc<LifoSemaphore>,
    permits: usize,
    queue: usize,
    /// `uuidmap_admission_queued{class}`.
    queued: Gauge,
    /// `uuidmap_admission_rejected_total{class, reason="queue_full"}`.
    rejected_full: Counter,
    /// `uuidmap_admission_rejected_total{class, reason="deadline"}`.
    rejected_deadline: Counter,
}

impl Gate {
    fn new(class: Class, permits: usize, queue: usize) -> Gate {
        let label = class.name();
        Gate {
            class,
            sem: Arc::new(LifoSemaphore::new(permits, queue)),
            permits,
            queue,
            queued: metrics::gauge!("uuidmap_admission_queued", "class" => label),
            rejected_full: metrics::counter!(
                "uuidmap_admission_rejected_total", "class" => label, "reason" => "queue_full"
            ),
            rejected_deadline: metrics::counter!(
                "uuidmap_admission_rejected_total", "class" => label, "reason" => "deadline"
            ),
        }
    }

    /// Samples the queue depth into the gauge.
    fn update_gauge(&self) {
        self.queued.set(self.sem.queued() as f64);
    }

    /// Counts a refusal and says why, in the caller's words.
    fn refusal(&self, e: AcquireError, bound: WaitBound) -> AdmissionError {
        match e {
            AcquireError::QueueFull => {
                self.rejected_full.increment(1);
                AdmissionError::QueueFull {
                    class: self.class,
                    permits: self.permits,
                    queue: self.queue,
                }
            }
            AcquireError::DeadlineExceeded => {
                self.rejected_deadline.increment(1);
                AdmissionError::Deadline {
                    class: self.class,
                    permits: self.permits,
                    why: match bound {
                        WaitBound::CallDeadline => "the call's deadline was near",
                        WaitBound::RequestDeadline => {
                            "the request's deadline (`timeout_us`) was near"
                        }
                        WaitBound::ServerMaximum => {
                            "the server's maximum wait passed (`max_wait_ms`; set a deadline \
                             on the call to choose your own)"
                        }
                    },
                }
            }
        }
    }
}

/// The admission state shared by every connection.
pub struct Admission {
    /// Indexed by `Class as usize`.
    gates: [Gate; 3],
    /// Long polls open now: incremented on entry (and undone when over the
    /// cap), decremented when the call or its stream ends.
    long_polls: CachePadded<AtomicUsize>,
    max_long_polls: usize,
    /// `uuidmap_admission_long_polls`.
    long_polls_open: Gauge,
    /// `uuidmap_admission_rejected_total{class="long_poll", reason="long_polls"}`.
    rejected_long_polls: Counter,
    /// The bound of a wait for a call without a deadline.
    max_wait: Duration,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Admission");
        for g in &self.gates {
            d.field(g.class.name(), &g.sem);
        }
        d.field("long_polls", &self.long_polls.load(Ordering::Relaxed))
            .finish()
    }
}

impl Admission {
    /// The semaphores for `limits`; waits without a call deadline end after
    /// `max_wait`. Registers the metric handles with the recorder installed
    /// now.
    pub fn new(limits: &AdmissionLimits, max_wait: Duration) -> Admission {
        Admission {
            gates: [
                Gate::new(Class::Read, limits.read_permits, limits.read_queue),
                Gate::new(Class::Write, limits.write_permits, limits.write_queue),
                Gate::new(Class::Scan, limits.scan_permits, limits.scan_queue),
            ],
            long_polls: CachePadded::new(AtomicUsize::new(0)),
            max_long_polls: limits.max_long_polls,
            long_polls_open: metrics::gauge!("uuidmap_admission_long_polls"),
            rejected_long_polls: metrics::counter!(
                "uuidmap_admission_rejected_total", "class" => "long_poll", "reason" => "long_polls"
            ),
            max_wait,
        }
    }

    fn gate(&self, class: Class) -> &Gate {
        &self.gates[class as usize]
    }

    /// Opens a long poll, or refuses it when `max_long_polls` are open.
    fn open_long_poll(self: &Arc<Self>) -> Result<LongPollSlot, AdmissionError> {
        let before = self.long_polls.fetch_add(1, Ordering::Relaxed);
        if before >= self.max_long_polls {
            self.long_polls.fetch_sub(1, Ordering::Relaxed);
            self.rejected_long_polls.increment(1);
            return Err(AdmissionError::LongPolls {
                max: self.max_long_polls,
            });
        }
        self.long_polls_open.set((before + 1) as f64);
        Ok(LongPollSlot(Arc::clone(self)))
    }
}

impl Admission {
    /// A read permit for work inside an admitted stream (each request of a
    /// `Lookup`): at once if one is free, else after waiting in the read
    /// queue (newest first) until `wait` (its end, and which bound that is),
    /// counted and refused as a read call would be.
    pub async fn read_permit(
        &self,
        wait: (tokio::time::Instant, WaitBound),
    ) -> Result<OwnedPermit, AdmissionError> {
        self.permit(Class::Read, wait).await
    }

    /// A permit of `class` for a call that reaches the server by another
    /// protocol than gRPC (a RESP command: `front_end`), taken and refused
    /// exactly as [`Admission::read_permit`] takes a read permit.
    pub async fn permit(
        &self,
        class: Class,
        wait: (tokio::time::Instant, WaitBound),
    ) -> Result<OwnedPermit, AdmissionError> {
        let gate = self.gate(class);
        if let Some(permit) = gate.sem.try_acquire_owned() {
            return Ok(permit);
        }
        let mut acquire = std::pin::pin!(gate.sem.acquire_owned(Some(wait.0)));
        let outcome = std::future::poll_fn(|cx| {
            let poll = acquire.as_mut().poll(cx);
            gate.update_gauge();
            poll
        })
        .await;
        outcome.map_err(|e| gate.refusal(e, wait.1))
    }
}

/// An open long poll; closes it when dropped.
struct LongPollSlot(Arc<Admission>);

impl Drop for LongPollSlot {
    fn drop(&mut self) {
        let now = self.0.long_polls.fetch_sub(1, Ordering::Relaxed) - 1;
        self.0.long_polls_open.set(now as f64);
    }
}

/// What an admitted call holds until it is done.
enum Ticket {
    /// A permit of its class.
    Permit(#[allow(dead_code, reason = "held for its Drop")] OwnedPermit),
    /// A long-poll slot.
    LongPoll(#[allow(dead_code, reason = "held for its Drop")] LongPollSlot),
}

/// The layer; put it inside the deadline stamp (it reads the stamp) and
/// outside auth, so that an overloaded server sheds calls before it hashes
/// their tokens. The price: a call without a valid token takes a queue
/// slot while it waits, and its permit for the instant auth needs to
/// refuse it.
#[derive(Clone, Debug)]
pub struct AdmissionLayer {
    admission: Arc<Admission>,
}

impl AdmissionLayer {
    /// A layer over `admission`.
    pub fn new(admission: Arc<Admission>) -> Self {
        AdmissionLayer { admission }
    }
}

impl<S> tower_layer::Layer<S> for AdmissionLayer {
    type Service = Admit<S>;
    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            inner,
            admission: Arc::clone(&self.admission),
        }
    }
}

/// The service [`AdmissionLayer`] wraps around the inner stack.
#[derive(Clone, Debug)]
pub struct Admit<S> {
    inner: S,
    admission: Arc<Admission>,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Admit<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>> + Clone,
    RB: Default,
{
    type Response = http::Response<AdmittedBody<RB>>;
    type Error = S::Error;
    type Future = AdmitFuture<S, B, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (ticket, streaming) = match route_of(methods::of_request(&request)) {
            Route::Free => (None, false),
            Route::LongPoll { streaming } => match self.admission.open_long_poll() {
                Ok(slot) => (Some(Ticket::LongPoll(slot)), streaming),
                Err(e) => return AdmitFuture::refused(e),
            },
            Route::Permit { class, streaming } => {
                let gate = self.admission.gate(class);
                match gate.sem.try_acquire_owned() {
                    Some(permit) => (Some(Ticket::Permit(permit)), streaming),
                    None => return self.wait(class, streaming, request),
                }
            }
        };
        AdmitFuture {
            waiting: None,
            acquire: None,
            inner: Some(self.inner.call(request)),
            ticket,
            streaming,
            refused: None,
        }
    }
}

impl<S> Admit<S> {
    /// The future of a call that must wait for a permit of `class`.
    fn wait<B>(
        &mut self,
        class: Class,
        streaming: bool,
        request: http::Request<B>,
    ) -> AdmitFuture<S, B, S::Future>
    where
        S: tower_service::Service<http::Request<B>> + Clone,
    {
        let (deadline, bound) =
            deadline::http_wait_deadline(request.extensions(), self.admission.max_wait);
        let acquire = self.admission.gate(class).sem.acquire_owned(Some(deadline));
        // Tower's rule: the service that was made ready is the one called.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        AdmitFuture {
            acquire: Some(acquire),
            waiting: Some(Waiting {
                admission: Arc::clone(&self.admission),
                class,
                bound,
                call: Some((ready, request)),
            }),
            inner: None,
            ticket: None,
            streaming,
            refused: None,
        }
    }
}

/// A call waiting for its permit. Declared after the acquire future in
/// [`AdmitFuture`], so it drops after it: its `Drop` then samples a queue
/// the wait has already left (a client that goes away while queued).
struct Waiting<S, B> {
    admission: Arc<Admission>,
    class: Class,
    bound: WaitBound,
    /// The ready inner service and the request, until the permit comes.
    call: Option<(S, http::Request<B>)>,
}

impl<S, B> Drop for Waiting<S, B> {
    fn drop(&mut self) {
        self.admission.gate(self.class).update_gauge();
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Admit`]: waits for the permit if needed, then runs
    /// the inner call, then moves the ticket into the body (streams) or
    /// drops it (unary).
    pub struct AdmitFuture<S, B, F> {
        #[pin]
        acquire: Option<AcquireOwned>,
        waiting: Option<Waiting<S, B>>,
        #[pin]
        inner: Option<F>,
        ticket: Option<Ticket>,
        streaming: bool,
        refused: Option<AdmissionError>,
    }
}

impl<S, B, F> AdmitFuture<S, B, F> {
    fn refused(e: AdmissionError) -> Self {
        AdmitFuture {
            acquire: None,
            waiting: None,
            inner: None,
            ticket: None,
            streaming: false,
            refused: Some(e),
        }
    }
}

impl<S, B, F, RB, E> Future for AdmitFuture<S, B, F>
where
    S: tower_service::Service<http::Request<B>, Future = F>,
    F: Future<Output = Result<http::Response<RB>, E>>,
    RB: Default,
{
    type Output = Result<http::Response<AdmittedBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(e) = this.refused.take() {
            return Poll::Ready(Ok(tonic::Status::from(&e).into_http()));
        }
        if let Some(acquire) = this.acquire.as_mut().as_pin_mut() {
            let waiting = this.waiting.as_mut().expect("set with acquire");
            let outcome = match acquire.poll(cx) {
                Poll::Pending => {
                    waiting.admission.gate(waiting.class).update_gauge();
                    return Poll::Pending;
                }
                Poll::Ready(outcome) => outcome,
            };
            this.acquire.set(None);
            let mut waiting = this.waiting.take().expect("set with acquire");
            let gate = waiting.admission.gate(waiting.class);
            match outcome {
                Ok(permit) => {
                    *this.ticket = Some(Ticket::Permit(permit));
                    let (mut ready, request) = waiting.call.take().expect("called once");
                    this.inner.set(Some(ready.call(request)));
                }
                Err(e) => {
                    let e = gate.refusal(e, waiting.bound);
                    return Poll::Ready(Ok(tonic::Status::from(&e).into_http()));
                }
            }
        }
        let inner = this
            .inner
            .as_pin_mut()
            .expect("an AdmitFuture is not polled after it completed");
        let response = ready!(inner.poll(cx))?;
        // A unary handler's work is done: release now, not when the answer
        // has crossed the network. A stream's work happens as it is read.
        let ticket = if *this.streaming {
            this.ticket.take()
        } else {
            None
        };
        *this.ticket = None;
        Poll::Ready(Ok(response.map(|inner| AdmittedBody { inner, ticket })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds the call's ticket until the stream ends
    /// or the body is dropped (the client went away).
    pub struct AdmittedBody<B> {
        #[pin]
        inner: B,
        ticket: Option<Ticket>,
    }
}

impl<B: Default> Default for AdmittedBody<B> {
    fn default() -> Self {
        AdmittedBody {
            inner: B::default(),
            ticket: None,
        }
    }
}

impl<B: http_body::Body> http_body::Body for AdmittedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            *this.ticket = None; // the stream is over: release at once
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
